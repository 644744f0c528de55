"""The node-maintenance-operator restarts in the middle of a NodeMaintenance drain (method cr).

The operator's drain runs in its reconcile loop (controllers/nodemaintenance_controller.go of
node-maintenance-operator v0.17.0): a new operator process takes the lease, reconciles the CR
again and drains what is left. node_maintenance keeps waiting on the CR and ends Succeeded; no
VM is restarted (each migration keeps its VMI) and no PodDisruptionBudget is broken.
"""

import threading

from kubernetes import client

import reliability
import runs
import safety
import workloads
from lab.wait import wait_for

OPERATOR = "node-maintenance-operator"


def _migrations(k8s, namespace):
    return client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstancemigrations")["items"]


def test_operator_restarted_mid_cr_drain(k8s, lab, pair, fault_namespace, restore_nodes):
    a, b = pair
    figure = reliability.fault("node-maintenance-operator restarted during a NodeMaintenance drain",
                               group="operator")
    names = ["nmo-0", "nmo-1"]
    core = client.CoreV1Api(k8s)
    core.patch_node(b, {"spec": {"unschedulable": True}})  # everything starts on A
    try:
        for name in names:
            workloads.create_vm(k8s, fault_namespace, name, memory="5Gi", nodes=[a, b])
        workloads.create_guarded_deployment(k8s, fault_namespace, "guarded", replicas=3, min_available=2, nodes=[a, b])
        workloads.wait_vms_running(k8s, fault_namespace, names)
    finally:
        core.patch_node(b, {"spec": {"unschedulable": None}})
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
                (m.get("status") or {}).get("phase") == "Running" for m in _migrations(k8s, fault_namespace)),
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
