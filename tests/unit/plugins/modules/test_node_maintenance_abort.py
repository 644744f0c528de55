"""node_maintenance: remediation paused and restored, and state=absent cancelling the
evacuations of an aborted maintenance, against the in-memory API server."""

import json

import pytest

from drain_cluster import module_cluster, node, pdb, pod, vmi
from fake_apiserver import FakeResponse
from module_runner import assert_documented, record_warnings, run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import identity
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import node_decommission, node_maintenance

SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"


@pytest.fixture
def api(monkeypatch):
    return module_cluster(monkeypatch)


def versions(server):
    return dict((key, obj["metadata"]["resourceVersion"]) for key, obj in server.objects.items())


def nhc(name, selector, pause_requests=None):
    spec = {"selector": selector}
    if pause_requests is not None:
        spec["pauseRequests"] = pause_requests
    return {"apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": name}, "spec": spec}


def machine(name, node_name, labels, namespace="openshift-machine-api"):
    return {"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "status": {"nodeRef": {"kind": "Node", "name": node_name}}}


def mhc(name, selector, annotations=None, namespace="openshift-machine-api"):
    return {"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"selector": selector}}


def marked(name, node_name="worker-1"):
    obj = vmi(name, node_name=node_name)
    obj["status"]["evacuationNodeName"] = node_name
    return obj


def migration(name, node_name="worker-1", phase="Scheduling", vmi_name="a"):
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "ns1", "annotations": {"kubevirt.io/evacuationMigration": node_name}},
            "spec": {"vmiName": vmi_name}, "status": {"phase": phase}}


def cordon(server, name="worker-1"):
    current = server.get("Node", name)
    current["spec"]["unschedulable"] = True


def test_checks_covering_the_node_are_paused_shared_and_restored(api, capsys):
    api.add("NodeHealthCheck", nhc("workers", {"matchLabels": {"node-role.kubernetes.io/worker": ""}}, ["upgrade"]))
    api.add("NodeHealthCheck", nhc("other", {"matchLabels": {"kubernetes.io/hostname": "worker-9"}}))
    for n in ("worker-1", "worker-2"):
        api.add("Machine", machine("m-" + n, n, {"role": "worker"}))
    api.add("MachineHealthCheck", mhc("workers", {"matchLabels": {"role": "worker"}}))
    api.add("MachineHealthCheck", mhc("by-user", {"matchLabels": {"role": "worker"}},
                                      annotations={remediation.PAUSED_ANNOTATION: "ticket-42"}))
    before = versions(api)
    checked = run(node_maintenance, {"name": "worker-1"}, capsys, check=True)
    assert versions(api) == before
    assert sorted((e["kind"], e["name"], e["how"]) for e in checked["remediation_paused"]) == [
        ("MachineHealthCheck", "workers", "annotation"), ("Node", "worker-1", "label"),
        ("NodeHealthCheck", "workers", "pauseRequests")]
    assert_documented(checked, node_maintenance)

    for n in ("worker-1", "worker-2"):
        result = run(node_maintenance, {"name": n}, capsys)
        assert result["phase"] == "Succeeded", result
    assert_documented(result, node_maintenance)
    requests = api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"]
    assert requests == ["upgrade", remediation.pause_request("worker-1"), remediation.pause_request("worker-2")]
    shared = api.get("MachineHealthCheck", "workers", "openshift-machine-api")["metadata"]["annotations"]
    assert shared[remediation.PAUSED_ANNOTATION] == remediation.pause_request("worker-1")
    assert json.loads(shared[identity.PAUSED_FOR_ANNOTATION]) == ["worker-1", "worker-2"]
    assert api.get("NodeHealthCheck", "other")["metadata"]["resourceVersion"] == before[("NodeHealthCheck", "", "other")]
    assert api.get("MachineHealthCheck", "by-user", "openshift-machine-api")["metadata"]["resourceVersion"] == \
        before[("MachineHealthCheck", "openshift-machine-api", "by-user")]

    # The first node leaves: the check stays paused for the second one.
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert sorted((e["kind"], e["name"]) for e in left["remediation_restored"]) == [
        ("MachineHealthCheck", "workers"), ("NodeHealthCheck", "workers")]
    assert_documented(left, node_maintenance)
    assert api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"] == [
        "upgrade", remediation.pause_request("worker-2")]
    shared = api.get("MachineHealthCheck", "workers", "openshift-machine-api")["metadata"]["annotations"]
    assert json.loads(shared[identity.PAUSED_FOR_ANNOTATION]) == ["worker-2"]
    assert remediation.PAUSED_ANNOTATION in shared
    assert identity.REMEDIATION_RECORD_ANNOTATION not in api.get("Node", "worker-1")["metadata"].get("annotations", {})

    run(node_maintenance, {"name": "worker-2", "state": "absent"}, capsys)
    assert api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"] == ["upgrade"]
    shared = api.get("MachineHealthCheck", "workers", "openshift-machine-api")["metadata"].get("annotations") or {}
    assert remediation.PAUSED_ANNOTATION not in shared and identity.PAUSED_FOR_ANNOTATION not in shared
    assert run(node_maintenance, {"name": "worker-2", "state": "absent"}, capsys)["changed"] is False


def test_a_drain_that_times_out_restores_the_pause_and_says_so(api, capsys):
    api.add("NodeHealthCheck", nhc("workers", {}, ["upgrade"]))
    api.add("Pod", pod("web-a"))
    api.add("PodDisruptionBudget", pdb("web", allowed=0, expected=4, desired=3))
    failed = run(node_maintenance, {"name": "worker-1", "wait_timeout": 2}, capsys)
    assert failed["failed"] and failed["phase"] == "Failed" and failed["msg"].startswith("Timed out after 2s"), failed
    assert [(e["kind"], e["name"]) for e in failed["remediation_restored"]] == [("NodeHealthCheck", "workers")]
    assert api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"] == ["upgrade"]
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True  # left cordoned, as every failed drain


def test_a_recorded_pause_is_restored_after_an_interrupted_run(api, capsys):
    """The run died after pausing: only the node's record and our entry are left; state=absent
    restores them even though the node itself was never cordoned."""
    api.add("NodeHealthCheck", nhc("workers", {}, [remediation.pause_request("worker-1")]))
    worker = api.get("Node", "worker-1")
    worker["metadata"].setdefault("annotations", {})[identity.REMEDIATION_RECORD_ANNOTATION] = json.dumps(
        [{"kind": "NodeHealthCheck", "namespace": None, "name": "workers"}])
    result = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert result["changed"] is True and [e["name"] for e in result["remediation_restored"]] == ["workers"]
    assert "pauseRequests" not in api.get("NodeHealthCheck", "workers")["spec"]
    assert identity.REMEDIATION_RECORD_ANNOTATION not in api.get("Node", "worker-1")["metadata"]["annotations"]


def test_pause_remediation_false_leaves_the_checks_alone(api, capsys):
    api.add("NodeHealthCheck", nhc("workers", {}))
    before = api.get("NodeHealthCheck", "workers")["metadata"]["resourceVersion"]
    result = run(node_maintenance, {"name": "worker-1", "pause_remediation": False}, capsys)
    assert result["phase"] == "Succeeded"
    assert [e["kind"] for e in result["remediation_paused"]] == ["Node"]
    assert api.get("NodeHealthCheck", "workers")["metadata"]["resourceVersion"] == before


def test_a_failed_drain_restores_the_pause(api, capsys, monkeypatch):
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import enter as engine
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError

    api.add("NodeHealthCheck", nhc("workers", {}))
    seen = []

    class Broken:
        def __init__(self, *args, **kwargs):
            seen.append(api.get("NodeHealthCheck", "workers")["spec"].get("pauseRequests"))

        def run(self, wait=True):
            raise ApiError("Cannot list pods: the API server answered 500.", status=500)

    monkeypatch.setattr(engine, "Drainer", Broken)
    failed = run(node_maintenance, {"name": "worker-1", "method": "drain"}, capsys)
    assert failed.get("failed") and failed["msg"].startswith("Cannot list pods"), failed
    assert seen == [[remediation.pause_request("worker-1")]]  # paused while the drain ran
    assert "pauseRequests" not in api.get("NodeHealthCheck", "workers")["spec"]
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True  # the node stays cordoned


def test_absent_clears_evacuations_through_the_vmi_without_the_cancel_action(api, capsys):
    """KubeVirt before 1.7: no evacuate/cancel; the mark is removed from the VMI's status."""
    cordon(api)
    api.add("VirtualMachineInstance", marked("a"))
    api.add("VirtualMachineInstance", marked("elsewhere", node_name="worker-2"))
    api.add("VirtualMachineInstanceMigration", migration("kubevirt-evacuation-1"))
    api.add("VirtualMachineInstanceMigration", migration("kubevirt-evacuation-2", phase="Running"))
    api.add("VirtualMachineInstanceMigration", migration("kubevirt-evacuation-3", node_name="worker-2"))
    before = versions(api)
    checked = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys, check=True)
    assert versions(api) == before
    assert checked["evacuations_cancelled"] == [{"namespace": "ns1", "name": "a", "node": "worker-1", "how": "status"}]
    assert checked["migrations_deleted"] == ["ns1/kubevirt-evacuation-1"]

    result = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert result["evacuations_cancelled"] == checked["evacuations_cancelled"]
    assert result["migrations_deleted"] == ["ns1/kubevirt-evacuation-1"]
    assert_documented(result, node_maintenance)
    assert "evacuationNodeName" not in api.get("VirtualMachineInstance", "a", "ns1")["status"]
    assert api.get("VirtualMachineInstance", "elsewhere", "ns1")["status"]["evacuationNodeName"] == "worker-2"
    left = sorted(name for (kind, _ns, name) in api.objects if kind == "VirtualMachineInstanceMigration")
    assert left == ["kubevirt-evacuation-2", "kubevirt-evacuation-3"]
    assert not api.get("Node", "worker-1")["spec"].get("unschedulable")
    assert run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)["changed"] is False


def test_absent_uses_the_cancel_action_when_virt_api_serves_it(api, capsys):
    cordon(api)
    api.add("VirtualMachineInstance", marked("a"))
    calls = []

    def subresources(method, path, body):
        if method == "GET" and path == SUBRESOURCES:
            return FakeResponse(200, {"resources": [{"name": "virtualmachineinstances/evacuate/cancel"},
                                                    {"name": "virtualmachines/start"}]})
        calls.append((method, path, body))
        obj = api.get("VirtualMachineInstance", "a", "ns1")
        obj["status"].pop("evacuationNodeName", None)
        return FakeResponse(200)

    api.handlers[SUBRESOURCES] = subresources
    result = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert result["evacuations_cancelled"] == [{"namespace": "ns1", "name": "a", "node": "worker-1",
                                                "how": "evacuate/cancel"}]
    assert calls == [("PUT", SUBRESOURCES + "/namespaces/ns1/virtualmachineinstances/a/evacuate/cancel",
                      {"evacuationNodeName": "worker-1"})]


def test_absent_leaves_evacuations_of_a_node_not_in_maintenance(api, capsys):
    api.add("VirtualMachineInstance", marked("a"))
    api.add("VirtualMachineInstanceMigration", migration("kubevirt-evacuation-1"))
    before = versions(api)
    result = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert result["changed"] is False and result["evacuations_cancelled"] == [] and result["migrations_deleted"] == []
    assert versions(api) == before


def test_a_label_already_set_is_not_reported_as_paused():
    assert remediation.label_entry(node("worker-1", labels={"remediation.medik8s.io/exclude-from-remediation": "true"})) == []


def test_decommission_pauses_remediation_until_the_node_is_deleted(api, capsys, monkeypatch):
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import runner as decommission

    api.add("NodeHealthCheck", nhc("workers", {"matchLabels": {"node-role.kubernetes.io/worker": ""}}, ["upgrade"]))
    api.add("Machine", machine("m-worker-1", "worker-1", {"role": "worker"}))
    api.add("MachineHealthCheck", mhc("workers", {"matchLabels": {"role": "worker"}}))
    args = {"name": "worker-1", "assume_powered_off": True, "reregistration_watch": 1}
    before = versions(api)
    checked = run(node_decommission, args, capsys, check=True)
    assert versions(api) == before
    assert sorted((e["kind"], e["name"], e["how"]) for e in checked["remediation_paused"]) == [
        ("MachineHealthCheck", "workers", "annotation"), ("Node", "worker-1", "label"),
        ("NodeHealthCheck", "workers", "pauseRequests")]
    assert_documented(checked, node_decommission)

    seen = []
    delete_node = decommission.Drainer.run

    def drain_and_look(self, wait=True):
        annotations = api.get("MachineHealthCheck", "workers", "openshift-machine-api")["metadata"]["annotations"]
        seen.append((api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"],
                     annotations.get(remediation.PAUSED_ANNOTATION)))
        return delete_node(self, wait)

    monkeypatch.setattr(decommission.Drainer, "run", drain_and_look)
    warned = record_warnings(monkeypatch)
    result = run(node_decommission, args, capsys)
    assert result["deleted"] and api.get("Node", "worker-1") is None, result
    node_writes = [r for r in api.writes("Node") if r[2] == "worker-1"]
    assert node_writes[-1][0] == "DELETE", "the deleted node was written to afterwards: %s" % node_writes
    assert seen == [(["upgrade", remediation.pause_request("worker-1")], remediation.pause_request("worker-1"))]
    assert sorted((e["kind"], e["name"]) for e in result["remediation_restored"]) == [
        ("MachineHealthCheck", "workers"), ("NodeHealthCheck", "workers")]
    assert api.get("NodeHealthCheck", "workers")["spec"]["pauseRequests"] == ["upgrade"]
    shared = api.get("MachineHealthCheck", "workers", "openshift-machine-api")["metadata"].get("annotations") or {}
    assert remediation.PAUSED_ANNOTATION not in shared and identity.PAUSED_FOR_ANNOTATION not in shared
    assert any("its Machine is not" in w and "MachineHealthCheck openshift-machine-api/workers" in w
               for w in warned), warned
    assert_documented(result, node_decommission)


def test_a_failed_decommission_restores_the_pause_and_keeps_the_node(api, capsys, monkeypatch):
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import runner as decommission
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError

    api.add("NodeHealthCheck", nhc("workers", {}))

    def broken(self, wait=True):
        raise ApiError("Cannot list pods: the API server answered 500.", status=500)

    monkeypatch.setattr(decommission.Drainer, "run", broken)
    failed = run(node_decommission, {"name": "worker-1", "assume_powered_off": True}, capsys)
    assert failed.get("failed") and failed["msg"].startswith("Cannot list pods"), failed
    assert "pauseRequests" not in api.get("NodeHealthCheck", "workers")["spec"]
    assert [(e["kind"], e["name"]) for e in failed["remediation_restored"]] == [("NodeHealthCheck", "workers")]
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True  # drained no further, not deleted


def test_decommission_without_pausing_leaves_the_checks_alone(api, capsys):
    api.add("NodeHealthCheck", nhc("workers", {}))
    before = api.get("NodeHealthCheck", "workers")["metadata"]["resourceVersion"]
    result = run(node_decommission, {"name": "worker-1", "assume_powered_off": True, "reregistration_watch": 1,
                                     "pause_remediation": False}, capsys)
    assert result["deleted"] and [e["kind"] for e in result["remediation_paused"]] == ["Node"], result
    assert result["remediation_restored"] == []
    assert api.get("NodeHealthCheck", "workers")["metadata"]["resourceVersion"] == before
