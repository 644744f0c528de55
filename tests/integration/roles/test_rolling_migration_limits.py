"""KubeVirt's live-migration limits raised for a rolling run (rolling_maintenance_migration_limits) on the lab's
HyperConverged stand-in and the real virt-controller: raised in the HyperConverged resource once the run holds
its lock and copied by HCO into the KubeVirt resource while the nodes drain, then put back to the cluster's own
values after a run that succeeded, after one that failed, and by the resumed run after a kill mid-drain.
(The refusal of a user who may not change them is in tests/integration/security.)"""

import json
import os
import threading
import uuid

import pytest
from kubernetes import client

import runs
import workloads
from lab.wait import wait_for

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
RECORD = "kubevirt-ops.io/migration-limits"
RAISED = {"parallel_migrations_per_cluster": 8, "parallel_outbound_migrations_per_node": 4}
PAIR = ("lab-worker-1", "lab-worker-2")


def kubevirt_migrations(k8s):
    items = client.CustomObjectsApi(k8s).list_cluster_custom_object("kubevirt.io", "v1", "kubevirts")["items"]
    return ((items[0].get("spec") or {}).get("configuration") or {}).get("migrations") or {}


def limits_of(config):
    return (config.get("parallelMigrationsPerCluster"), config.get("parallelOutboundMigrationsPerNode"),
            config.get("bandwidthPerMigration"))


class KubeVirtLimits(threading.Thread):
    """Every (per cluster, outbound per node, bandwidth) the KubeVirt resource showed while the test ran: what
    virt-controller was given, read on its own, not through the collection."""

    def __init__(self, k8s):
        super().__init__(daemon=True)
        self.k8s = k8s
        self.seen = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            value = limits_of(kubevirt_migrations(self.k8s))
            if not self.seen or self.seen[-1] != value:
                self.seen.append(value)
            self.done.wait(0.2)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(10)


@pytest.fixture
def own_limits(lab, k8s):
    """The cluster's own limits before the test (put back afterwards should the test fail halfway)."""
    yield limits_of(workloads.hyperconverged(k8s)["spec"]["liveMigrationConfig"])
    runs.module(lab.kubeconfig, "migration_limits", {"state": "restored"})


@pytest.fixture
def drained_pair(lab, k8s, namespace):
    """Two VMs on the first node of the pair, free to go to the second; both nodes back in service after."""
    workloads.vms_start_on(k8s, namespace, PAIR, ["limits-a", "limits-b"], "256Mi")
    workloads.wait_vms_running(k8s, namespace, ["limits-a", "limits-b"])
    yield PAIR
    for node in PAIR:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": node, "state": "absent"})


def lock():
    return "test-limits-%s" % uuid.uuid4().hex[:8]


def assert_put_back(k8s, own):
    """The HyperConverged resource has the cluster's own values and no record; HCO copies them to KubeVirt."""
    now = workloads.hyperconverged(k8s)
    assert limits_of(now["spec"]["liveMigrationConfig"]) == own
    assert RECORD not in (now["metadata"].get("annotations") or {}), now["metadata"]["annotations"]
    wait_for(lambda: limits_of(kubevirt_migrations(k8s)) == own, 60, "HCO to copy the cluster's own limits back")


def test_limits_are_raised_for_the_run_and_put_back_after_success_and_after_a_failure(
        lab, k8s, tmp_path, drained_pair, own_limits):
    assert own_limits[:2] == (5, 2), own_limits
    extra = runs.rolling_vars([drained_pair[0]], lock(), tmp_path, rolling_maintenance_migration_limits=RAISED)
    with KubeVirtLimits(k8s) as seen:
        run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra)
        assert run.returncode == 0, run.output[-4000:]
        assert_put_back(k8s, own_limits)
    # virt-controller was given the raised limits during the run, and the cluster's own again after it.
    assert (8, 4, None) in seen.seen and seen.seen[-1] == own_limits, seen.seen
    assert ("Raised the live-migration limits in HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged: "
            "parallel_migrations_per_cluster 5 -> 8, parallel_outbound_migrations_per_node 2 -> 4.") in run.output
    # The report says what the run did to them.
    reports = sorted((tmp_path / "reports").glob("rolling-maintenance-*/report.json"))
    with open(str(reports[-1])) as handle:
        policy = json.load(handle)["policy"]["migration_limits"]
    assert "parallel_outbound_migrations_per_node 2 -> 4" in policy and "Put back the live-migration limits" in policy, \
        policy

    # A run that fails (its node task fails after the drain) puts them back as well.
    failing = tmp_path / "failing.yml"
    failing.write_text("- name: Update the firmware\n  ansible.builtin.fail:\n    msg: firmware update exited 1\n")
    failed = runs.playbook(lab.kubeconfig, PLAYBOOK, dict(extra, rolling_maintenance_lock_name=lock(),
                                                          rolling_maintenance_node_tasks=str(failing),
                                                          rolling_maintenance_node_tasks_timeout=60))
    assert failed.returncode != 0 and "firmware update exited 1" in failed.output, failed.output[-4000:]
    assert_put_back(k8s, own_limits)


def test_a_run_killed_mid_drain_leaves_its_record_and_the_resumed_run_puts_the_limits_back(
        lab, k8s, tmp_path, drained_pair, own_limits):
    extra = runs.rolling_vars(list(drained_pair), lock(), tmp_path, rolling_maintenance_migration_limits=RAISED)
    started = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra)
    try:
        wait_for(lambda: not started.running() or (
            "TASK [kubevirt_ops.maintenance.rolling_maintenance : Enter maintenance (drain)]" in started.output()
            and client.CoreV1Api(k8s).read_node(drained_pair[0]).spec.unschedulable), 300, "the first drain")
        assert started.running(), started.output()[-4000:]
        started.kill()
    finally:
        started.close()
    left = workloads.hyperconverged(k8s)
    record = json.loads(left["metadata"]["annotations"][RECORD])
    assert limits_of(left["spec"]["liveMigrationConfig"])[:2] == (8, 4)
    assert (record["original"]["parallelMigrationsPerCluster"], record["original"]["parallelOutboundMigrationsPerNode"]) \
        == own_limits[:2], record

    # The same command again: it takes the dead run's lock over, keeps the record's values as the cluster's own,
    # finishes both nodes and puts those values back.
    resumed = runs.playbook(lab.kubeconfig, PLAYBOOK, extra)
    assert resumed.returncode == 0, resumed.output[-4000:]
    assert_put_back(k8s, own_limits)


def test_a_run_without_limits_of_its_own_puts_back_what_a_killed_run_left(lab, k8s, tmp_path, own_limits):
    # What a killed run leaves: raised values and the record of the cluster's own.
    raised = runs.module(lab.kubeconfig, "migration_limits", dict(RAISED, run="a run that was killed"))
    assert raised.result()["changed"], raised.output[-3000:]
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, runs.rolling_vars(["lab-worker-3"], lock(), tmp_path))
    assert run.returncode == 0, run.output[-4000:]
    assert "Put back the live-migration limits in HyperConverged" in run.output
    assert_put_back(k8s, own_limits)
