"""node_maintenance, node_maintenance_info and node_decommission end to end (argument spec,
wrapper, plan, drain engine) against the in-memory API server; what they return must be
what their RETURN documentation says."""

import copy
import threading

import pytest

from drain_cluster import ReplicaSetSimulator, launcher, module_cluster, node, pdb, pod, vm, vmi
from module_runner import assert_documented, run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import (
    node_decommission,
    node_maintenance,
    node_maintenance_info,
)


@pytest.fixture
def api(monkeypatch):
    return module_cluster(monkeypatch)  # no node-maintenance operator unless a test says


def add_vm(server, name, node_name="worker-1", run_strategy="Always", **vmi_args):
    instance = vmi(name, node_name=node_name, **vmi_args)
    server.add("VirtualMachine", vm(name, run_strategy=run_strategy))
    server.add("VirtualMachineInstance", instance)
    server.add("Pod", launcher(instance))
    return instance


def shut_down_on_eviction(server):
    """A launcher pod granted eviction ends its VMI (KubeVirt shuts the VM down)."""
    then = server.on_evicted

    def evicted(evicted_pod):
        uid = (evicted_pod["metadata"].get("labels") or {}).get("kubevirt.io/created-by")
        if uid:
            for (kind, ns, name), obj in list(server.objects.items()):
                if kind == "VirtualMachineInstance" and obj["metadata"]["uid"] == uid:
                    server.objects.pop((kind, ns, name))
        elif then:
            then(evicted_pod)

    server.on_evicted = evicted


def versions(server):
    return dict((key, obj["metadata"]["resourceVersion"]) for key, obj in server.objects.items())


def recorded(server):
    """(regarding kind, regarding name, reason, type, series count) of every Event, in the order written."""
    events = sorted((obj for (kind, _ns, _name), obj in server.objects.items() if kind == "Event.events.k8s.io"),
                    key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [(e["regarding"]["kind"], e["regarding"]["name"], e["reason"], e["type"],
             (e.get("series") or {}).get("count", 1)) for e in events]


def test_check_mode_diff_run_rerun_and_absent(api, capsys):
    for i in range(4):
        api.add("Pod", pod("web-%d" % i))
    api.add("PodDisruptionBudget", pdb("web", allowed=1, expected=4, desired=3))
    ReplicaSetSimulator(api)
    shut_down_on_eviction(api)
    add_vm(api, "batch", eviction="None", run_strategy="Manual")
    before = versions(api)

    checked = run(node_maintenance, {"name": "worker-1"}, capsys, check=True, diff=True)
    assert versions(api) == before and [r for r in api.requests if r[0] != "GET"] == []
    assert checked["changed"] is True and checked["phase"] == "Succeeded"
    assert checked["plan"]["evict"][:1] == ["ns1/virt-launcher-batch-abcde"]
    assert checked["vms"]["shut_down"] == [{"namespace": "ns1", "name": "batch", "source": "worker-1",
                                            "run_strategy": "Manual", "outcome": "stay_stopped"}]
    assert checked["diff"]["after"]["unschedulable"] is True
    assert_documented(checked, node_maintenance)

    result = run(node_maintenance, {"name": "worker-1", "reason": "bios"}, capsys, diff=True)
    assert result["changed"] is True and result["phase"] == "Succeeded", result
    assert result["eviction_pods"] == 5 and result["pending_pods"] == [] and result["drain_progress"] == 100
    assert result["vms"]["shut_down"][0]["name"] == "batch"
    assert_documented(result, node_maintenance)
    worker = api.get("Node", "worker-1")
    assert worker["spec"]["unschedulable"] is True
    assert node_marks.maintenance_record(worker)["phase"] == "Succeeded"

    # The node's story and each VM's, on the objects (kubectl describe finds them by uid).
    assert recorded(api) == [("Node", "worker-1", "BeginMaintenance", "Normal", 1),
                             ("Node", "worker-1", "SucceedMaintenance", "Normal", 1),
                             ("VirtualMachine", "batch", "ShutDownForMaintenance", "Normal", 1),
                             ("VirtualMachine", "batch", "LeftStopped", "Normal", 1)]
    vm_event = [e for (k, _ns, _n), e in api.objects.items()
                if k == "Event.events.k8s.io" and e["reason"] == "ShutDownForMaintenance"][0]
    assert vm_event["regarding"]["uid"] == api.get("VirtualMachine", "batch", "ns1")["metadata"]["uid"]
    assert vm_event["metadata"]["namespace"] == "ns1" and vm_event["related"]["name"] == "worker-1"
    assert "maintenance of node worker-1 (bios)" in vm_event["note"]

    again = run(node_maintenance, {"name": "worker-1", "reason": "bios"}, capsys)
    assert again["changed"] is False and again["phase"] == "Succeeded"
    assert len(recorded(api)) == 4  # nothing done, nothing told

    info = run(node_maintenance_info, {"name": "worker-1"}, capsys)
    assert info["nodes"][0]["in_maintenance"] is True and info["nodes"][0]["maintenance_phase"] == "Succeeded"
    assert_documented(info, node_maintenance_info)

    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys, diff=True)
    assert left["changed"] is True and "do not move back by themselves" in left["msg"]
    assert_documented(left, node_maintenance)
    worker = api.get("Node", "worker-1")
    assert not worker["spec"].get("unschedulable") and not worker["spec"].get("taints")
    assert run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)["changed"] is False
    assert recorded(api)[4:] == [("Node", "worker-1", "RemovedMaintenance", "Normal", 1)]


def test_drain_false_enters_maintenance_and_evicts_nothing_then_a_drain_finishes_it(api, capsys):
    for i in range(2):
        api.add("Pod", pod("web-%d" % i))
    ReplicaSetSimulator(api)
    add_vm(api, "web-vm")
    pods_before = sorted(key for key in api.objects if key[0] == "Pod")
    before = versions(api)

    checked = run(node_maintenance, {"name": "worker-1", "drain": False}, capsys, check=True, diff=True)
    assert versions(api) == before
    assert checked["changed"] is True and checked["phase"] == "Running"
    assert checked["diff"]["after"]["unschedulable"] is True
    assert [vm["name"] for vm in checked["vms"]["pending"]] == ["web-vm"] and checked["vms"]["migrated"] == []
    assert_documented(checked, node_maintenance)

    cordoned = run(node_maintenance, {"name": "worker-1", "drain": False, "reason": "batch"}, capsys, diff=True)
    assert cordoned["changed"] is True and cordoned["phase"] == "Running" and cordoned["method"] == "drain"
    assert cordoned["eviction_pods"] == 3 and len(cordoned["pending_pods"]) == 3 and cordoned["drain_progress"] == 0
    assert [vm["name"] for vm in cordoned["vms"]["pending"]] == ["web-vm"]
    assert cordoned["diff"]["before"]["unschedulable"] is False and cordoned["diff"]["after"]["unschedulable"] is True
    assert_documented(cordoned, node_maintenance)
    assert sorted(key for key in api.objects if key[0] == "Pod") == pods_before
    assert not [r for r in api.requests if r[0] == "POST" and "eviction" in r[1]]
    worker = api.get("Node", "worker-1")
    assert worker["spec"]["unschedulable"] is True
    assert node_marks.maintenance_record(worker)["phase"] == "Running"
    assert run(node_maintenance, {"name": "worker-1", "drain": False, "reason": "batch"}, capsys)["changed"] is False

    # The drain that follows finds the maintenance its own: ending it later takes the cordon off.
    drained = run(node_maintenance, {"name": "worker-1", "reason": "batch"}, capsys)
    assert drained["changed"] is True and drained["phase"] == "Succeeded" and drained["pending_pods"] == []
    assert drained["method_reason"] == ("method auto kept drain: node worker-1 is already in maintenance through a "
                                        "drain by this collection.")
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True
    assert not api.get("Node", "worker-1")["spec"].get("unschedulable")


def test_blockers_fail_before_any_write_and_match_info(api, capsys):
    add_vm(api, "db", migratable=False)
    info = run(node_maintenance_info, {"label_selector": "node-role.kubernetes.io/worker"}, capsys)
    assert [n["name"] for n in info["nodes"]] == ["worker-1", "worker-2", "worker-3"]
    blockers = info["nodes"][0]["plan"]["blockers"]
    assert len(blockers) == 1 and blockers[0].startswith("VM ns1/db cannot leave node worker-1")
    before = versions(api)
    failed = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert failed["failed"] and failed["blockers"] == blockers
    assert failed["msg"] == "Node worker-1 cannot enter maintenance (non_migratable=fail): %s" % blockers[0]
    assert versions(api) == before


def test_shutdown_policy_deletes_exactly_the_blocking_vmis(api, capsys):
    blocking = add_vm(api, "db", migratable=False)
    add_vm(api, "web", eviction="LiveMigrateIfPossible", migratable=False)

    def vmi_deleted(method, kind, name):
        if method == "DELETE" and kind == "VirtualMachineInstance":
            api.objects.pop(("Pod", "ns1", "virt-launcher-%s-abcde" % name), None)
            api.rv += 1
            api.events.append((api.rv, "Pod", "DELETED", launcher(blocking)))

    api.before_write = vmi_deleted
    shut_down_on_eviction(api)
    result = run(node_maintenance, {"name": "worker-1", "non_migratable": "shutdown", "wait_timeout": 30}, capsys)
    assert result["phase"] == "Succeeded", result
    deletes = [r for r in api.requests if r[0] == "DELETE"]
    assert deletes == [("DELETE", "VirtualMachineInstance", "db")]
    assert sorted(v["name"] for v in result["vms"]["shut_down"]) == ["db", "web"]


def test_bad_input_is_one_sentence_and_changes_nothing(api, capsys):
    before = versions(api)
    for args, message in [
        ({"name": "worker-9"}, "Node worker-9 does not exist."),
        ({"name": "worker-1", "pod_selector": "app in (web"},
         "Option pod_selector has an invalid label selector term 'app in (web': "),
        ({"name": "worker-1", "method": "cr"}, "method=cr needs the NodeMaintenance CRD"),
    ]:
        failed = run(node_maintenance, args, capsys)
        assert failed["failed"] and failed["msg"].startswith(message), failed["msg"]
    failed = run(node_maintenance_info, {"label_selector": "node-role.kubernetes.io/wroker"}, capsys)
    assert failed["msg"] == "No node matches label_selector 'node-role.kubernetes.io/wroker'."
    api.add("Pod", pod("web-a"))
    before = versions(api)
    api.denied.add(("create", "pods/eviction"))
    failed = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert failed["msg"] == ("Cannot drain node worker-1: permission denied: the current user may not create "
                             "pods/eviction in namespace ns1.")
    assert versions(api) == before


def test_timeout_leaves_the_node_cordoned_and_explains(api, capsys):
    api.add("Pod", pod("web-a"))
    api.add("PodDisruptionBudget", pdb("web", allowed=0, expected=4, desired=3))
    failed = run(node_maintenance, {"name": "worker-1", "wait_timeout": 2}, capsys)
    assert failed["failed"] and failed["phase"] == "Failed"
    assert failed["msg"] == failed["last_error"] == (
        "Timed out after 2s draining node worker-1: 1 pod left: pod ns1/web-a: PodDisruptionBudget ns1/web allows "
        "0 disruptions (4 of 4 pods healthy, 3 required).")
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True
    assert node_marks.maintenance_record(api.get("Node", "worker-1"))["phase"] == "Failed"


def test_method_cr_creates_ours_and_reports_its_status(api, capsys):
    api.served.add("NodeMaintenance")
    api.add("Pod", pod("web-a"))
    result = run(node_maintenance, {"name": "worker-1", "method": "cr", "wait": False, "reason": "fw"}, capsys)
    assert result["method"] == "cr" and result["changed"] is True
    assert_documented(result, node_maintenance)
    cr = api.get("NodeMaintenance", "kubevirt-ops-worker-1")
    assert cr["spec"] == {"nodeName": "worker-1", "reason": "fw"}
    cr["status"] = {"phase": "Succeeded", "drainProgress": 100, "totalpods": 1, "evictionPods": 1, "pendingPods": []}
    again = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert again["changed"] is False and again["method"] == "cr" and again["phase"] == "Succeeded"
    assert again["total_pods"] == 1 and again["drain_progress"] == 100
    left = run(node_maintenance, {"name": "worker-1", "state": "absent", "wait": False}, capsys)
    assert left["changed"] is True and api.get("NodeMaintenance", "kubevirt-ops-worker-1") is None


PENDING = {"key": "kubevirt-ops.io/maintenance-pending", "value": "run-1", "effect": "PreferNoSchedule"}
KEPT = {"key": "dedicated", "value": "vms", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize("method", ["drain", "cr"])
def test_entering_maintenance_takes_a_rolling_runs_pending_taint_off_and_leaving_keeps_it_off(api, capsys, method):
    if method == "cr":
        api.served.add("NodeMaintenance")
    api.get("Node", "worker-1")["spec"]["taints"] = [dict(PENDING), dict(KEPT)]
    checked = run(node_maintenance, {"name": "worker-1", "method": method}, capsys, check=True, diff=True)
    assert PENDING not in checked["diff"]["after"]["taints"] and KEPT in checked["diff"]["after"]["taints"]
    assert PENDING in api.get("Node", "worker-1")["spec"]["taints"]
    entered = run(node_maintenance, {"name": "worker-1", "method": method, "wait": False}, capsys)
    assert entered["changed"] is True, entered
    taints = api.get("Node", "worker-1")["spec"]["taints"]
    assert PENDING not in taints and KEPT in taints
    run(node_maintenance, {"name": "worker-1", "state": "absent", "wait": False}, capsys)
    assert api.get("Node", "worker-1")["spec"]["taints"] == [KEPT]


def test_a_pending_taint_put_back_on_a_drained_node_goes_without_resetting_its_phase(api, capsys):
    """A resumed run marks every node still to do, a node an earlier run left drained included."""
    assert run(node_maintenance, {"name": "worker-1"}, capsys)["phase"] == "Succeeded"
    worker = api.get("Node", "worker-1")
    worker["spec"]["taints"] = worker["spec"]["taints"] + [dict(PENDING)]
    again = run(node_maintenance, {"name": "worker-1", "drain": False}, capsys)
    assert again["changed"] is True and again["phase"] == "Succeeded", again
    worker = api.get("Node", "worker-1")
    assert PENDING not in worker["spec"]["taints"] and node_marks.maintenance_record(worker)["phase"] == "Succeeded"


def test_someone_elses_node_maintenance_is_left_alone(api, capsys):
    api.served.add("NodeMaintenance")
    api.add("NodeMaintenance", {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
                                "metadata": {"name": "by-hand"}, "spec": {"nodeName": "worker-2"}})
    failed = run(node_maintenance, {"name": "worker-2", "state": "absent"}, capsys)
    assert failed["msg"].startswith("Node worker-2 is held by NodeMaintenance by-hand")
    failed = run(node_maintenance, {"name": "worker-2"}, capsys)
    assert "already held by NodeMaintenance by-hand" in failed["msg"]


def test_decommission(api, capsys):
    api.add("Pod", pod("web-a"))
    add_vm(api, "batch", eviction="None", run_strategy="Manual")
    before = versions(api)
    # worker-1 is Ready: nothing says its kubelet stopped, nor how its machine is powered off.
    refused = run(node_decommission, {"name": "worker-1"}, capsys)
    assert refused["msg"].startswith("Node worker-1 still heartbeats"), refused["msg"]
    assert "power_off=bmh" in refused["msg"] and "assume_powered_off=true" in refused["msg"]
    assert versions(api) == before
    args = {"name": "worker-1", "assume_powered_off": True, "reregistration_watch": 1}
    checked = run(node_decommission, args, capsys, check=True)
    assert checked["changed"] and checked["deleted"] and api.get("Node", "worker-1") is not None
    assert checked["powered_off_by"] == "assumed" and checked["power_off"]["method"] == "assumed"
    assert_documented(checked, node_decommission)
    result = run(node_decommission, args, capsys)
    assert result["deleted"] is True and result["evicted_pods"] == 2, result
    assert result["powered_off_by"] == "assumed"
    assert result["reregistration"] == {"watch_seconds": 1, "reregistered": False}
    assert result["vms"]["not_restarted"] == [{"namespace": "ns1", "name": "batch", "run_strategy": "Manual"}]
    assert api.get("Node", "worker-1") is None
    assert_documented(result, node_decommission)
    # The deleted node's story stays in its Events; the refused and checked runs told nothing.
    assert [(kind, name, reason) for kind, name, reason, _t, _c in recorded(api)] == [
        ("Node", "worker-1", "BeginDecommission"), ("Node", "worker-1", "Decommissioned")]
    again = run(node_decommission, {"name": "worker-1"}, capsys)
    assert again["changed"] is False and again["deleted"] is False and again["powered_off_by"] is None


def test_decommission_of_an_unreachable_node(api, capsys):
    api.add("Node", node("worker-9", ready=False))
    api.add("Pod", pod("web-z", node_name="worker-9"))
    failed = run(node_decommission, {"name": "worker-9"}, capsys)
    assert failed["msg"].startswith("Node worker-9 is not Ready (its Ready condition is Unknown (NodeStatusUnknown)")
    assert api.get("Pod", "web-z", "ns1") is not None
    result = run(node_decommission, {"name": "worker-9", "assume_powered_off": True, "reregistration_watch": 1}, capsys)
    assert result["deleted"] and result["evicted_pods"] == 1
    assert ("DELETE", "Pod", "web-z") in api.requests


def test_legacy_node_maintenance_group_when_only_it_is_served(api, capsys):
    api.served.add("LegacyNodeMaintenance")
    result = run(node_maintenance, {"name": "worker-2", "wait": False}, capsys)
    assert result["method"] == "cr" and result["changed"] is True
    cr = api.get("LegacyNodeMaintenance", "kubevirt-ops-worker-2")
    assert cr["apiVersion"] == "nodemaintenance.kubevirt.io/v1beta1" and cr["spec"] == {"nodeName": "worker-2"}
    assert api.get("NodeMaintenance", "kubevirt-ops-worker-2") is None


def _later(action, delay=0.2):
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()


def _machine_off(server, name):
    """What the node lifecycle controller does once the machine is off: Ready becomes Unknown."""
    with server.lock:
        current = copy.deepcopy(server.get("Node", name))
        current["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
        server._store("Node", "", name, current, "MODIFIED")


def test_decommission_powers_the_node_off_through_its_bare_metal_host(api, capsys):
    api.objects.pop(("Node", "", "worker-1"))
    api.add("Node", dict(node("worker-1"), spec={"providerID": "metal3://metal/host-1/m3m-1"}))
    api.add("BareMetalHost", {"metadata": {"name": "host-1", "namespace": "metal"}, "spec": {"online": True},
                              "status": {"poweredOn": True}})
    before = versions(api)
    checked = run(node_decommission, {"name": "worker-1", "power_off": "bmh"}, capsys, check=True)
    assert checked["powered_off_by"] == "bmh" and checked["power_off"]["bmh"] == "metal/host-1", checked
    assert versions(api) == before

    def power_off(method, kind, name):
        if (method, kind) == ("PATCH", "BareMetalHost"):
            def report():
                with api.lock:
                    host = copy.deepcopy(api.get("BareMetalHost", "host-1", "metal"))
                    host["status"]["poweredOn"] = False
                    api._store("BareMetalHost", "metal", "host-1", host, "MODIFIED")
                _machine_off(api, "worker-1")
            _later(report)

    api.before_write = power_off
    result = run(node_decommission, {"name": "worker-1", "power_off": "bmh", "reregistration_watch": 1}, capsys)
    assert result["deleted"] and result["powered_off_by"] == "bmh", result
    assert api.get("BareMetalHost", "host-1", "metal")["spec"]["online"] is False
    assert result["power_off"]["heartbeat"]["alive"] is False
    assert api.get("Node", "worker-1") is None
    assert_documented(result, node_decommission)
    assert [reason for _k, _n, reason, _t, _c in recorded(api)] == ["BeginDecommission", "PoweredOff", "Decommissioned"]


def test_decommission_waits_for_the_user_to_power_the_node_off(api, capsys):
    def cordoned(method, kind, name):
        if (method, kind, name) == ("PATCH", "Node", "worker-1"):
            _later(lambda: _machine_off(api, "worker-1"), 0.5)

    api.before_write = cordoned
    result = run(node_decommission, {"name": "worker-1", "power_off": "manual", "reregistration_watch": 1}, capsys)
    assert result["deleted"] and result["powered_off_by"] == "heartbeat_stopped", result
    assert api.get("Node", "worker-1") is None


def test_decommission_fails_when_the_node_registers_again(api, capsys):
    def registers_again(method, kind, name):
        if (method, kind, name) == ("DELETE", "Node", "worker-1"):
            _later(lambda: api.add("Node", node("worker-1")))

    api.before_write = registers_again
    failed = run(node_decommission, {"name": "worker-1", "assume_powered_off": True, "reregistration_watch": 30},
                 capsys)
    assert failed["msg"].startswith("Node worker-1 registered again after this run deleted it"), failed
    assert failed["deleted"] is True and failed["reregistration"] == {"watch_seconds": 30, "reregistered": True}


def test_decommission_keeps_a_node_that_never_stops_heartbeating(api, capsys):
    failed = run(node_decommission, {"name": "worker-1", "power_off": "manual", "wait_timeout": 2}, capsys)
    assert failed["msg"].startswith("Node worker-1 still heartbeats after 2s"), failed
    assert "it stays drained and cordoned" in failed["msg"]
    assert failed["deleted"] is False and failed["powered_off_by"] is None
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True
    assert not [r for r in api.writes("Node") if r[0] == "DELETE"]
    # The node was cordoned, so its failure is told on it, with the reason.
    assert [(reason, kind) for _k, _n, reason, kind, _c in recorded(api)] == [
        ("BeginDecommission", "Normal"), ("FailedDecommission", "Warning")]
