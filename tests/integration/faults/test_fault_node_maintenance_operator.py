"""The node-maintenance-operator restarts in the middle of a NodeMaintenance drain (method cr).

The operator's drain runs in its reconcile loop (controllers/nodemaintenance_controller.go of
node-maintenance-operator v0.17.0): a new operator process takes the lease, reconciles the CR
again and drains what is left. node_maintenance keeps waiting on the CR and ends Succeeded; no
VM is restarted (each migration keeps its VMI) and no PodDisruptionBudget is broken.
"""

import threading

import reliability
import runs
import safety
import workloads
from lab.wait import wait_for

OPERATOR = "node-maintenance-operator"


def test_operator_restarted_mid_cr_drain(k8s, lab, pair, fault_namespace, restore_nodes):
    a, b = pair
    figure = reliability.fault("node-maintenance-operator restarted during a NodeMaintenance drain",
                               group="operator")
    names = ["nmo-0", "nmo-1"]
    workloads.vms_start_on(k8s, fault_namespace, (a, b), names, "5Gi", guarded=True)
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    outcome = {}

    def maintain():
        outcome["run"] = runs.module(lab.kubeconfig, "node_maintenance",
                                     {"name": a, "method": "cr", "wait_timeout": 600})

    try:
        with safety.PdbWatcher(k8s) as watcher:
            worker = threading.Thread(target=maintain)
            worker.start()
            wait_for(lambda: not worker.is_alive() or any(
                (m.get("status") or {}).get("phase") == "Running" for m in workloads.migrations(k8s, fault_namespace)),
                300, "the operator's drain to start a live migration")
            assert worker.is_alive(), "maintenance ended before a migration ran: %s" % outcome["run"].output[-3000:]
            lab.cli("restart", OPERATOR, timeout=300)
            worker.join(900)
            assert not worker.is_alive(), "maintenance did not end"
        run = outcome["run"]
        result = run.result()
        report = vm_check.verify(shut_down=safety.shut_down_vms(result), timeout=120)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not result.get("failed"), result.get("msg")
        assert result["phase"] == "Succeeded" and result["method"] == "cr", result
        assert report.problems == [] and report.restarted == [], report
        assert sorted(report.migrated) == sorted("%s/%s" % (fault_namespace, n) for n in names), report
        assert watcher.violations == []
        figure.passed()
    finally:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent", "method": "cr"})
