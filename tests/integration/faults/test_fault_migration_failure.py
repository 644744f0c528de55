"""A live migration fails (the lab's kubevirt-ops.lab/fail-migration annotation): the rolling
run stops at that node, names the VM and why its migration failed, leaves the node in
maintenance (policy non_migratable=fail: nothing is shut down) and says what is left to do.
The VM keeps running on its node, the other VM migrated, the lock is released."""

import os

from kubernetes import client

import reliability
import runs
import safety
import workloads
from workloads import FAIL_MIGRATION

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
LOCK = "kvops-fault-migration"


def test_failed_migration_stops_the_run_naming_vm_and_reason(k8s, lab, pair, fault_namespace, tmp_path,
                                                             restore_nodes):
    a, b = pair
    figure = reliability.fault("a live migration fails during the rolling run", group="kubevirt")
    core = client.CoreV1Api(k8s)
    # Both VMs start on A.
    workloads.vms_start_on(k8s, fault_namespace, (a, b), ["stubborn", "willing"], "1Gi",
                           annotations={"stubborn": {FAIL_MIGRATION: "true"}})
    workloads.annotate_vm(k8s, fault_namespace, "stubborn", {FAIL_MIGRATION: "true"})
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    extra = {
        "rolling_maintenance_nodes": [a],
        "rolling_maintenance_method": "drain",
        "rolling_maintenance_lock_name": LOCK,
        "rolling_maintenance_drain_timeout": 30,
        "rolling_maintenance_ready_timeout": 30,
        "rolling_maintenance_verify_timeout": 30,
        "rolling_maintenance_lock_ttl": 120,
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
    }
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
        report = vm_check.verify(timeout=60)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        failures = run.failures()
        assert run.returncode != 0 and failures, run.output[-3000:]
        msg = failures[0][1].get("msg") or ""
        assert "Traceback" not in run.output
        assert "stubborn" in msg, msg
        assert "fail" in msg.lower() and FAIL_MIGRATION in msg, \
            "the message does not say why the migration failed: %s" % msg
        # Policy fail: nothing shut down; the VM runs where it ran; the node waits in maintenance.
        assert report.problems == [] and report.restarted == [], report
        assert workloads.vm_nodes(k8s, fault_namespace)["stubborn"] == a
        assert workloads.vm_nodes(k8s, fault_namespace)["willing"] != a
        assert core.read_node(a).spec.unschedulable, "the failed node should stay in maintenance"
        final = failures[-1][1].get("msg") or ""
        assert a in final, "the run's last word does not name the node left in maintenance: %s" % final
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease(LOCK, "kube-system")
        assert not lease.spec.holder_identity, "the lock was not released"
        assert watcher.violations == []
        figure.passed()
    finally:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent"})


def test_failing_migrations_with_real_backoff_end_in_the_shutdown_policy(k8s, lab, pair, fault_namespace,
                                                                         tmp_path, restore_nodes):
    """Every migration of one VM fails on the real virt-controller, which holds each new
    evacuation migration back (20 s, then 40 s: handleMigrationBackoff in
    pkg/virt-controller/watch/migration/migration.go). The drain rides the backoff out, gives the
    VM up after the third failure and applies non_migratable=shutdown: the VM is restarted on
    the other node, nothing is lost, no PodDisruptionBudget is broken."""
    a, b = pair
    figure = reliability.fault("live migrations keep failing with KubeVirt's retry backoff during a drain",
                               group="kubevirt")
    workloads.vms_start_on(k8s, fault_namespace, (a, b), ["stubborn", "willing"], "1Gi", guarded=True,
                           annotations={"stubborn": {FAIL_MIGRATION: "true"}})
    workloads.annotate_vm(k8s, fault_namespace, "stubborn", {FAIL_MIGRATION: "true"})
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    progress = tmp_path / "progress"
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.module(lab.kubeconfig, "node_maintenance", {
                "name": a, "method": "drain", "non_migratable": "shutdown", "wait_timeout": 600,
                "progress_file": str(progress)})
        result = run.result()
        report = vm_check.verify(shut_down=safety.shut_down_vms(result), timeout=180)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not result.get("failed") and result["phase"] == "Succeeded", result
        assert [v["name"] for v in result["vms"]["migrated"]] == ["willing"], result["vms"]
        assert [v["name"] for v in result["vms"]["shut_down"]] == ["stubborn"], result["vms"]
        # The drain said why it gave the VM up, and only after the failures (not on the backoff).
        lines = progress.read_text()
        assert "VM %s/stubborn cannot leave the node" % fault_namespace in lines, lines[-3000:]
        assert report.problems == [] and report.lost == [], report
        assert workloads.vm_nodes(k8s, fault_namespace)["stubborn"] == b
        assert workloads.vm_nodes(k8s, fault_namespace)["willing"] == b
        assert watcher.violations == []
        figure.passed()
    finally:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent"})
