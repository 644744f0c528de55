"""node_fence on the lab's machines: a dead node's machine (crashed, still powered on) is powered off through its
Redfish BMC (lab/machines), confirmed off from the BMC, and only then is the node tainted out-of-service, so that
KubeVirt starts its VMs elsewhere at once; state=absent powers it on and lifts the fence. A node whose
kubelet still heartbeats is refused with nothing changed."""

import json

import pytest
from kubernetes import client

import workloads
from safety import ResourceVersions, wait_stable

from lab import metal3
from lab import nodes as lab_nodes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
WAIT = 300


@pytest.fixture
def machine(lab, k8s):
    """(node, other worker, bmc.json entry) of the last worker, its machine out of Metal3's hands (its
    BareMetalHost would power it on again behind the fence); afterwards its machine is on and booted, its host
    back, its node Ready and untainted, its heartbeat back."""
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    workers = sorted(bmcs)
    node, other = workers[-1], workers[-2]
    metal3.release_host(k8s, node)
    yield node, other, dict(bmcs[node])
    lab.node_recover(node, wait=False)  # a dead machine is reset (powered on when off) and boots
    metal3.restore_host(k8s, bmcs, node)
    core = client.CoreV1Api(k8s)
    taints = [t for t in core.read_node(node).spec.taints or [] if t.key != OUT_OF_SERVICE]
    core.patch_node(node, {"spec": {"taints": [t.to_dict() for t in taints] or None}})
    wait_for(lambda: lab_nodes._all(k8s, [node], lab_nodes.is_recovered), WAIT, "node %s Ready again" % node)
    workloads.wait_node_pods_ready(k8s, node, WAIT)


def taints(k8s, node):
    return [t.key for t in client.CoreV1Api(k8s).read_node(node).spec.taints or []]


def test_a_node_that_still_heartbeats_is_refused_and_nothing_changes(k8s, run_module, machine):
    node, _other, entry = machine
    wait_stable()
    versions = ResourceVersions(k8s)
    for check in (True, False):
        refused = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry)}, check=check)
        assert refused.get("failed"), refused
        assert refused["msg"].startswith("Node %s still heartbeats (its node Lease was renewed" % node), refused["msg"]
        assert refused["msg"].endswith("never fenced; nothing was changed."), refused["msg"]
    assert versions.changes() == []
    assert lab_bmc.Bmc(entry).power_state() == "On" and OUT_OF_SERVICE not in taints(k8s, node)


def test_a_dead_node_is_fenced_through_its_bmc_its_vms_restart_elsewhere_and_it_comes_back(
        lab, k8s, namespace, run_module, machine, tmp_path):
    node, other, entry = machine
    bmc = lab_bmc.Bmc(entry)
    core = client.CoreV1Api(k8s)
    # Both VMs start on the node: the other worker they may also run on is cordoned meanwhile.
    core.patch_node(other, {"spec": {"unschedulable": True}})
    try:
        workloads.create_vm(k8s, namespace, "always", memory="256Mi", nodes=[node, other])
        workloads.create_vm(k8s, namespace, "once", run_strategy="Once", memory="256Mi", nodes=[node, other])
        workloads.wait_vms_running(k8s, namespace, ["always", "once"], timeout=WAIT)
    finally:
        core.patch_node(other, {"spec": {"unschedulable": None}})
    assert workloads.vm_nodes(k8s, namespace) == {"always": node, "once": node}
    first = workloads.get_vmi(k8s, namespace, "always")["metadata"]["uid"]

    lab.node_fail(node)  # the machine crashed, powered on: the node turns NotReady, its VMIs stay Running in the API
    assert workloads.vm_nodes(k8s, namespace) == {"always": node, "once": node}
    checked = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry)}, check=True)
    assert checked["changed"] and checked["fenced"], checked
    assert bmc.power_state() == "On" and OUT_OF_SERVICE not in taints(k8s, node)

    progress = tmp_path / "progress.log"
    fenced = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry), "progress_file": str(progress)})
    assert not fenced.get("failed"), fenced
    assert fenced["changed"] and fenced["fenced"], fenced
    assert fenced["machine"] == {"road": "redfish", "address": entry["address"], "power_state": "Off",
                                 "actions": ["ForceOff"]}
    assert bmc.power_state() == "Off" and OUT_OF_SERVICE in taints(k8s, node)
    assert fenced["vms"]["restarted"] == [{"namespace": namespace, "name": "always", "node": other}], fenced["vms"]
    assert fenced["vms"]["not_restarted"] == [{
        "namespace": namespace, "name": "once", "run_strategy": "Once",
        "reason": "run strategy Once: a VMI that failed is not started again"}]
    assert workloads.get_vmi(k8s, namespace, "always")["metadata"]["uid"] != first
    assert entry["password"] not in json.dumps(fenced) + progress.read_text()
    again = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry)})
    assert not again.get("failed") and again["changed"] is False and again["machine"]["actions"] == [], again

    boot_before = core.read_node(node).status.node_info.boot_id
    back = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry), "state": "absent"})
    assert not back.get("failed"), back
    assert back["changed"] and back["fenced"] is False and back["machine"]["actions"] == ["On"], back
    assert back["boot_id"]["before"] == boot_before and back["boot_id"]["after"] not in (None, boot_before)
    assert bmc.power_state() == "On" and OUT_OF_SERVICE not in taints(k8s, node)
    assert lab_nodes.is_ready(core.read_node(node))
    unchanged = run_module("node_fence", {"name": node, "bmc": lab_bmc.module_option(entry), "state": "absent"})
    assert unchanged["changed"] is False, unchanged
