"""The holder of the cluster lock dies (it stops renewing): until the Lease's TTL passes, a new
run refuses, naming the holder; once it has passed, a run waiting for the lock takes it over
and says whose lock it took and why."""

import os

from kubernetes import client

import reliability
import runs

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
LOCK = "kvops-fault-ttl"
DEAD = "crashed-run@ci pid 4242"


def test_lock_of_a_dead_holder_expires_and_is_taken_over(k8s, lab, pair, tmp_path):
    a, _b = pair
    figure = reliability.fault("the lock holder dies; its lock expires after the TTL", group="lock")
    # Alive first, with a TTL no loaded machine outlasts before the first run asks for the lock; its
    # last renewal then gives it 15 s, and the holder dies.
    taken = runs.module(lab.kubeconfig, "cluster_lock",
                        {"name": LOCK, "holder": DEAD, "ttl": 600, "purpose": "a run that will die"}).result()
    assert taken.get("acquired"), taken
    extra = {
        "rolling_maintenance_nodes": [a],
        "rolling_maintenance_lock_name": LOCK,
        "rolling_maintenance_lock_ttl": 900,
        "rolling_maintenance_drain_timeout": 300,
        "rolling_maintenance_ready_timeout": 120,
        "rolling_maintenance_verify_timeout": 120,
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
    }
    try:
        refused = runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
        failures = refused.failures()
        assert refused.returncode != 0 and failures, refused.output[-3000:]
        assert DEAD in failures[0][1].get("msg", ""), failures[0][1].get("msg")
        last = runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "holder": DEAD, "ttl": 15}).result()
        assert last.get("action") == "renewed", last

        waited = runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=dict(
            extra, rolling_maintenance_lock_wait=True, rolling_maintenance_lock_wait_timeout=300))
        assert waited.returncode == 0, waited.output[-4000:]
        lock_results = [r for name, r in waited.results() if name == "Take the cluster lock"]
        assert lock_results and lock_results[0]["action"] == "taken_over", lock_results
        assert lock_results[0]["previous_holder"] == DEAD and lock_results[0]["previous_expired"]
        assert "Took over the cluster lock kube-system/%s from '%s'" % (LOCK, DEAD) in waited.output
        assert "stopped renewing" in waited.output
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease(LOCK, "kube-system")
        assert not lease.spec.holder_identity
        figure.passed()
    finally:
        runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
