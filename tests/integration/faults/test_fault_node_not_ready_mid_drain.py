"""The node being drained goes NotReady (cut off the network: its heartbeat stops, its guests run on)
while a VM's live migration is under way: the drain stops within its grace instead of waiting out its
timeout, with one sentence naming the node, its state and the pods left; the node stays cordoned and
in maintenance (the record says Failed). Once the node is back, the same VM finishes moving and
maintenance ends cleanly. No PodDisruptionBudget is broken, no VM is lost."""

import threading
import time

from kubernetes import client

import reliability
import runs
import safety
import workloads

HOLD_MIGRATION = "kubevirt-ops.lab/hold-migration"
RECORD = "maintenance.kubevirt-ops.io/node-maintenance"


def test_node_not_ready_mid_drain_stops_it_with_a_sentence(k8s, lab, pair, fault_namespace, restore_nodes):
    a, b = pair
    figure = reliability.fault("the node being drained goes NotReady during a live migration", group="nodes")
    core = client.CoreV1Api(k8s)
    # Held: its migration stays Running until the annotation goes, so the drain is under way.
    workloads.vms_start_on(k8s, fault_namespace, (a, b), ["held"], "1Gi",
                           annotations={"held": {HOLD_MIGRATION: "true"}})
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    outcome = {}

    def drain():
        outcome["run"] = runs.module(lab.kubeconfig, "node_maintenance",
                                     {"name": a, "method": "drain", "wait_timeout": 900})

    with safety.PdbWatcher(k8s) as watcher:
        worker = threading.Thread(target=drain)
        worker.start()
        deadline = time.monotonic() + 180
        while worker.is_alive() and time.monotonic() < deadline:
            if any((m.get("status") or {}).get("phase") == "Running"
                   for m in workloads.migrations(k8s, fault_namespace)):
                break
            time.sleep(0.2)
        assert worker.is_alive(), "the drain ended before the migration ran: %s" % outcome["run"].output[-3000:]
        lab.node_partition(a)  # returns once A is NotReady and tainted
        failed_at = time.monotonic()
        worker.join(600)
        stopped_after = time.monotonic() - failed_at
        run = outcome["run"]
        result = run.result()
        node = core.read_node(a)
        lab.node_heal(a)  # back with its guests: the held migration is still under way
        workloads.annotate_vm(k8s, fault_namespace, "held", {HOLD_MIGRATION: None})
        left = runs.module(lab.kubeconfig, "node_maintenance",
                           {"name": a, "state": "absent", "method": "drain"}).result()
    report = vm_check.verify(timeout=180)
    figure.note(pdb_violations=len(watcher.violations_excluding([a])), vms_lost=len(report.lost),
                seconds_to_stop=round(stopped_after))
    assert "Traceback" not in run.output, run.output[-3000:]
    assert result.get("failed") and result["phase"] == "Failed", result
    msg = result["msg"]
    assert msg.startswith("Node %s went NotReady during the drain (its Ready condition is Unknown" % a), msg
    assert "still on it" in msg and "node_decommission with assume_powered_off=true" in msg, msg
    assert reliability.clean_error_problems(result, rc=run.returncode) == [], msg
    # Within the grace (60 s) and a few looks, far before the 900 s wait_timeout.
    assert stopped_after < 180, stopped_after
    assert node.spec.unschedulable and RECORD in (node.metadata.annotations or {}), "the node left maintenance"
    assert not left.get("failed"), left.get("msg")
    assert watcher.violations_excluding([a]) == []
    assert report.problems == [], report
    figure.passed()
