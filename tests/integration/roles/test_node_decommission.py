"""The node_decommission role (playbooks/decommission_node.yml) on the lab, run as an operator runs it.

Each test decommissions a KWOK node that exists only for it, so the lab's workers stay as they were.
"""

import json
import os
import uuid

import pytest
from kubernetes import client

import runs
import workloads
from lab import metal3
from lab import nodes as lab_nodes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PLAYBOOK = os.path.join(REPO, "playbooks", "decommission_node.yml")
LOCK_NAMESPACE = "kube-system"


def core(k8s):
    return client.CoreV1Api(k8s)


def lease(k8s, name):
    try:
        return client.CoordinationV1Api(k8s).read_namespaced_lease(name, LOCK_NAMESPACE)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def node_exists(k8s, name):
    try:
        core(k8s).read_node(name)
        return True
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return False
        raise


@pytest.fixture
def lock_name(k8s):
    name = "test-decommission-%s" % uuid.uuid4().hex[:8]
    yield name
    try:
        client.CoordinationV1Api(k8s).delete_namespaced_lease(name, LOCK_NAMESPACE)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def doomed_node(k8s):
    """A KWOK worker that exists only for this test; whatever is left of it is deleted afterwards."""
    suffix = uuid.uuid4().hex[:5]
    version = core(k8s).list_node().items[0].status.node_info.kubelet_version
    plan = lab_nodes.NodePlan("lab-doomed-%s" % suffix, False, "10.98.0.1", "10.246.0.0/24")
    lab_nodes.ensure(k8s, [plan], version)

    def ready_for_vms():
        node = core(k8s).read_node(plan.name)
        return lab_nodes.is_ready(node) and (node.metadata.labels or {}).get("kubevirt.io/schedulable") == "true"

    wait_for(ready_for_vms, 180, "node %s to be Ready for VMs" % plan.name)
    yield plan.name
    # Deleting it ends its machine's death too (the dead machines' record of it goes, and its Lease).
    try:
        core(k8s).delete_node(plan.name)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


def vms_on(k8s, namespace, node, names):
    """Start ``names`` with every other node cordoned, so they all run on ``node``."""
    others = [n.metadata.name for n in core(k8s).list_node().items
              if n.metadata.name != node and not n.spec.unschedulable]
    for name in others:
        core(k8s).patch_node(name, {"spec": {"unschedulable": True}})
    try:
        for name in names:
            workloads.create_vm(k8s, namespace, name, memory="512Mi")
        workloads.wait_vms_running(k8s, namespace, names)
        assert set(workloads.vm_nodes(k8s, namespace).values()) == {node}
    finally:
        for name in others:
            core(k8s).patch_node(name, {"spec": {"unschedulable": None}})


def decommission(lab, tmp_path, lock, node, **extra):
    values = {"node_decommission_node": node, "node_decommission_lock_name": lock,
              "node_decommission_report_dir": str(tmp_path / "reports"),
              "node_decommission_timeout": 300, "node_decommission_verify_timeout": 180}
    values.update(extra)
    return runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=values)


def test_dead_node_is_decommissioned_and_its_vms_run_elsewhere(lab, k8s, namespace, tmp_path, lock_name,
                                                               doomed_node):
    names = ["dc-1", "dc-2"]
    vms_on(k8s, namespace, doomed_node, names)
    uids = dict((v["metadata"]["name"], v["metadata"]["uid"]) for v in workloads.vmis(k8s, namespace))
    lab.node_fail(doomed_node)

    refused = decommission(lab, tmp_path, lock_name, doomed_node)
    assert refused.returncode != 0
    messages = [result.get("msg", "") for _task, result in refused.failures()]
    assert any("assume_powered_off" in m and doomed_node in m for m in messages), messages
    assert node_exists(k8s, doomed_node) and lease(k8s, lock_name) is None  # refused before the lock

    run = decommission(lab, tmp_path, lock_name, doomed_node, node_decommission_assume_powered_off=True)
    assert run.returncode == 0, (run.failures()[:1], run.output[-3000:])
    assert not node_exists(k8s, doomed_node)
    workloads.wait_vms_running(k8s, namespace, names)
    where = workloads.vm_nodes(k8s, namespace)
    assert sorted(where) == names and doomed_node not in where.values()
    # A powered-off node's VMs cannot migrate: they start again elsewhere, as new VMIs.
    assert all(v["metadata"]["uid"] != uids[v["metadata"]["name"]] for v in workloads.vmis(k8s, namespace))
    held = lease(k8s, lock_name)
    assert held is None or not held.spec.holder_identity
    reports = sorted((tmp_path / "reports").glob("decommission-%s-*/report.json" % doomed_node))
    assert reports, "no report was written"
    report = json.loads(reports[-1].read_text())
    assert report["status"] == "succeeded" and [n["node"] for n in report["nodes"]] == [doomed_node]


def test_control_plane_node_is_refused_and_nothing_changes(lab, k8s, tmp_path, lock_name):
    control_plane = [n.metadata.name for n in core(k8s).list_node().items
                     if "node-role.kubernetes.io/control-plane" in (n.metadata.labels or {})]
    assert control_plane
    before = core(k8s).read_node(control_plane[0])
    run = decommission(lab, tmp_path, lock_name, control_plane[0])
    assert run.returncode != 0
    messages = [result.get("msg", "") for _task, result in run.failures()]
    assert any(control_plane[0] in m and "etcd" in m for m in messages), messages
    after = core(k8s).read_node(control_plane[0])
    assert not after.spec.unschedulable and after.spec.taints == before.spec.taints
    assert (after.metadata.annotations or {}) == (before.metadata.annotations or {})
    assert lease(k8s, lock_name) is None


@pytest.fixture
def hosted_worker(lab, k8s):
    """The last worker, whose machine has the BareMetalHost ``lab up`` made for it; afterwards the host is online
    again (its machine on) and the node back as ``lab up`` registers it."""
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    node = sorted(bmcs)[-1]
    host = metal3.restore_host(k8s, bmcs, node)
    yield node, host
    metal3.restore_host(k8s, bmcs, node, timeout=300)
    lab.cli("up")

    def back():
        current = core(k8s).read_node(node) if node_exists(k8s, node) else None
        return (current is not None and lab_nodes.is_ready(current)
                and (current.metadata.labels or {}).get("kubevirt.io/schedulable") == "true")

    wait_for(back, 600, "node %s to be a Ready KubeVirt node again" % node)
    workloads.wait_node_pods_ready(k8s, node, 600)


def test_heartbeating_node_is_refused_then_powered_off_through_its_bare_metal_host(
        lab, k8s, tmp_path, lock_name, hosted_worker):
    doomed_node, host = hosted_worker
    refused = decommission(lab, tmp_path, lock_name, doomed_node)
    assert refused.returncode != 0
    messages = [result.get("msg", "") for _task, result in refused.failures()]
    assert any(m.startswith("Node %s still heartbeats" % doomed_node) for m in messages), messages
    assert node_exists(k8s, doomed_node) and lease(k8s, lock_name) is None  # refused before the lock
    assert not core(k8s).read_node(doomed_node).spec.unschedulable

    # A lab node's providerID is kwok://<name>: the host is named explicitly.
    name, namespace = host["metadata"]["name"], host["metadata"]["namespace"]
    run = decommission(lab, tmp_path, lock_name, doomed_node, node_decommission_power_off="bmh",
                       node_decommission_bmh={"name": name, "namespace": namespace},
                       node_decommission_reregistration_watch=5)
    assert run.returncode == 0, (run.failures()[:1], run.output[-3000:])
    assert not node_exists(k8s, doomed_node)
    after = client.CustomObjectsApi(k8s).get_namespaced_custom_object("metal3.io", "v1alpha1", namespace,
                                                                      "baremetalhosts", name)
    assert after["spec"]["online"] is False and after["status"]["poweredOn"] is False
    # The operator powered the machine off through its BMC.
    assert lab_bmc.Bmc(lab_bmc.load(LabPaths(lab.state_dir))[doomed_node]).power_state() == "Off"
    results = dict(run.results())
    assert results["Drain and delete the node"]["powered_off_by"] == "bmh"
    reports = sorted((tmp_path / "reports").glob("decommission-%s-*/report.json" % doomed_node))
    report = json.loads(reports[-1].read_text())
    assert report["status"] == "succeeded" and "machine off: bmh" in report["message"], report
