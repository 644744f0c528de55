"""A VM is deleted by its owner while maintenance runs (a namespace cleaned up, a VM retired).

maintenance_verify, which both roles use to check that every VM that ran before runs again,
must not wait until its timeout for a VM that no longer exists, nor fail the run over it:
the VM was not lost, it was deleted. It may say so.
"""

import reliability
import runs
import workloads


def test_verify_does_not_wait_for_a_deleted_vm(k8s, lab, fault_namespace):
    figure = reliability.fault("a VM is deleted by its owner during the run", group="kubevirt")
    workloads.create_vm(k8s, fault_namespace, "kept")
    workloads.wait_vms_running(k8s, fault_namespace, ["kept"])
    node = workloads.vm_nodes(k8s, fault_namespace)["kept"]
    run = runs.module(lab.kubeconfig, "maintenance_verify", {
        "name": node, "timeout": 20,
        "running_vms": ["%s/kept" % fault_namespace, "%s/retired-meanwhile" % fault_namespace]})
    result = run.result()
    assert not result.get("failed"), result.get("msg")
    figure.passed()
