"""node_maintenance with method auto and the node-maintenance operator: the VMs leave the node first,
paced to KubeVirt's migration lanes by the drain engine, and only then is the NodeMaintenance created;
resumed, failed and ended from every state the node can be left in. Against the in-memory API server,
with KubeVirt's evacuations and the operator played by the test."""

import copy
import threading
import time

import pytest

from drain_cluster import EvacuatingKubeVirt, launcher, module_cluster, pod, vm, vmi
from module_runner import assert_documented, run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import runner as nm
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import node_maintenance

CR = "kubevirt-ops-worker-1"
CHOSE = ("method auto chose cr: the NodeMaintenance operator is installed (nodemaintenance.medik8s.io is served) "
         "and no option it ignores is set.")
KEPT = "method auto kept cr: node worker-1 is already in maintenance by this collection, its NodeMaintenance not " \
    "created yet."


class Operator:
    """The node-maintenance operator: once a NodeMaintenance is created it cordons and taints the node (no
    change when it is already), removes every pod left on it and reports Succeeded; once it is deleted it
    removes its taints, the cordon and the label. Records the pods it found on the node."""

    def __init__(self, server):
        self.server = server
        self.found = []  # the node's pods when the NodeMaintenance came
        self.created = 0
        # Pods to report pending in a Running status first, and a callable the reconcile waits on after it (as
        # the operator lists the finished virt-launcher pods of migrated VMs until its drain deleted them).
        self.pending_first = []
        self.after_pending = None
        server.before_write = self.before_write

    def before_write(self, method, kind, _name):
        if kind != "NodeMaintenance" or method not in ("POST", "DELETE"):
            return
        if method == "POST":
            self.created += 1
        timer = threading.Timer(0.05, self.reconcile if method == "POST" else self.release)
        timer.daemon = True
        timer.start()

    def _node(self, change):
        with self.server.lock:
            node = copy.deepcopy(self.server.get("Node", "worker-1"))
            change(node)
            self.server._store("Node", "", "worker-1", node, "MODIFIED")

    def reconcile(self):
        def mark(node):
            node["spec"]["unschedulable"] = True
            taints = node["spec"].setdefault("taints", [])
            for taint in node_marks.MAINTENANCE_TAINTS:
                if not any(t["key"] == taint["key"] for t in taints):
                    taints.append(dict(taint))
            node["metadata"]["labels"][node_marks.EXCLUDE_LABEL] = "true"

        self._node(mark)
        if self.pending_first:
            with self.server.lock:
                cr = copy.deepcopy(self.server.get("NodeMaintenance", CR))
                cr["status"] = {"phase": "Running", "drainProgress": 0, "totalpods": len(self.pending_first),
                                "evictionPods": len(self.pending_first), "pendingPods": list(self.pending_first)}
                self.server._store("NodeMaintenance", "", CR, cr, "MODIFIED")
            self.after_pending()
        with self.server.lock:
            pods = [key for key, obj in self.server.objects.items()
                    if key[0] == "Pod" and obj["spec"].get("nodeName") == "worker-1"]
            self.found = sorted(name for _kind, _ns, name in pods)
            for key in pods:
                gone = self.server.objects.pop(key)
                self.server.rv += 1
                self.server.events.append((self.server.rv, "Pod", "DELETED", gone))
            cr = copy.deepcopy(self.server.get("NodeMaintenance", CR))
            cr["status"] = {"phase": "Succeeded", "drainProgress": 100, "totalpods": len(pods),
                            "evictionPods": len(pods), "pendingPods": []}
            self.server._store("NodeMaintenance", "", CR, cr, "MODIFIED")

    def release(self):
        def unmark(node):
            node["spec"].pop("unschedulable", None)
            keys = [t["key"] for t in node_marks.MAINTENANCE_TAINTS]
            node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] not in keys]
            node["metadata"]["labels"].pop(node_marks.EXCLUDE_LABEL, None)

        self._node(unmark)


@pytest.fixture
def api(monkeypatch):
    """Three workers, KubeVirt (2 migration lanes by default), the operator's API; five VMs and two other pods
    on worker-1."""
    server = module_cluster(monkeypatch, operator=True)
    for i in range(5):
        instance = vmi("vm%d" % i, eviction="LiveMigrate", migratable=True)
        server.add("VirtualMachine", vm("vm%d" % i))
        server.add("VirtualMachineInstance", instance)
        server.add("Pod", launcher(instance))
    for name in ("web-a", "web-b"):
        server.add("Pod", pod(name))
    return server


def versions(server):
    return dict((key, obj["metadata"]["resourceVersion"]) for key, obj in server.objects.items())


def node_maintenances(server):
    return [key for key in server.objects if key[0] in ("NodeMaintenance", "LegacyNodeMaintenance")]


def record(server):
    return node_marks.maintenance_record(server.get("Node", "worker-1"))


def clean(server):
    node = server.get("Node", "worker-1")
    return not node["spec"].get("unschedulable") and not node["spec"].get("taints") and \
        node_marks.EXCLUDE_LABEL not in node["metadata"]["labels"] and node_marks.maintenance_record(node) is None


def reasons(server):
    events = sorted((obj for (kind, _ns, _name), obj in server.objects.items() if kind == "Event.events.k8s.io"),
                    key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [e["reason"] for e in events if e["regarding"]["kind"] == "Node"]


def test_check_mode_predicts_the_paced_way_and_changes_nothing(api, capsys):
    before = versions(api)
    checked = run(node_maintenance, {"name": "worker-1"}, capsys, check=True, diff=True)
    assert versions(api) == before and api.writes() == []
    assert checked["changed"] is True and checked["method"] == "cr" and checked["phase"] == "Succeeded"
    assert checked["method_reason"] == "%s %s" % (CHOSE, nm.PACED_NOTE)
    assert sorted(v["name"] for v in checked["vms"]["migrated"]) == ["vm%d" % i for i in range(5)]
    assert checked["diff"]["after"]["unschedulable"] is True and checked["diff"]["before"]["unschedulable"] is False
    assert_documented(checked, node_maintenance)


def test_auto_evacuates_the_vms_at_kubevirts_pace_then_the_cr_drains_the_rest(api, capsys):
    kubevirt = EvacuatingKubeVirt(api, seconds=0.15)
    operator = Operator(api)
    result = run(node_maintenance, {"name": "worker-1", "reason": "bios", "wait_timeout": 60}, capsys, diff=True)
    assert result["phase"] == "Succeeded" and result["changed"] is True, result
    assert result["method"] == "cr" and result["method_reason"] == "%s %s" % (CHOSE, nm.PACED_NOTE)
    # Every VM asked to leave once, never more at once than KubeVirt's two lanes off the node.
    assert sorted(kubevirt.asked) == ["vm%d" % i for i in range(5)] and kubevirt.most == 2
    # The NodeMaintenance came once the VMs were gone: the operator found only the other pods.
    assert operator.created == 1 and operator.found == ["web-a", "web-b"]
    assert node_maintenances(api) == [("NodeMaintenance", "", CR)]
    assert api.get("NodeMaintenance", CR)["spec"] == {"nodeName": "worker-1", "reason": "bios"}
    assert result["total_pods"] == 7 and result["eviction_pods"] == 7
    assert result["pending_pods"] == [] and result["drain_progress"] == 100
    assert sorted((v["name"], v["target"]) for v in result["vms"]["migrated"]) == [
        ("vm%d" % i, "worker-2") for i in range(5)]
    assert result["diff"]["after"]["unschedulable"] is True
    assert_documented(result, node_maintenance)
    assert record(api)["method"] == "cr" and record(api)["phase"] == "Succeeded"
    assert reasons(api) == ["BeginMaintenance", "SucceedMaintenance"]

    # Run again: the NodeMaintenance is followed, nothing is done twice.
    again = run(node_maintenance, {"name": "worker-1", "reason": "bios"}, capsys)
    assert again["changed"] is False and again["phase"] == "Succeeded" and again["method"] == "cr", again
    assert again["method_reason"] == ("method auto kept cr: node worker-1 is already in maintenance through "
                                      "NodeMaintenance %s." % CR)
    assert operator.created == 1

    # Ending it deletes the NodeMaintenance; the operator takes its marks off (the same taints as ours), and
    # this collection's record goes too.
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True and left["method"] == "cr", left
    assert node_maintenances(api) == [] and clean(api)
    assert run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)["changed"] is False


def test_the_finished_launcher_pods_of_migrated_vms_go_before_the_cr_comes(api, capsys):
    """KubeVirt leaves each migrated VM's old virt-launcher pod Succeeded on the node; they are evicted, and gone,
    before the NodeMaintenance is created, so the operator's drain finds only the other pods."""
    EvacuatingKubeVirt(api, seconds=0.05, source_pod_stays=True)
    operator = Operator(api)
    result = run(node_maintenance, {"name": "worker-1", "wait_timeout": 60}, capsys)
    assert result["phase"] == "Succeeded" and result["method"] == "cr", result
    assert operator.created == 1 and operator.found == ["web-a", "web-b"]
    finished = [key for key, status in api.evictions if status == 201]
    assert sorted(finished) == ["ns1/virt-launcher-vm%d-abcde" % i for i in range(5)]
    assert result["total_pods"] == 7 and result["pending_pods"] == []
    assert sorted(v["name"] for v in result["vms"]["migrated"]) == ["vm%d" % i for i in range(5)]


def test_finished_launcher_pods_refused_eviction_are_left_to_the_operator(api, capsys):
    """Removing them first is only a speed-up: a refusal (no right to evict in their namespace, say) leaves them to
    the operator's drain, and the maintenance goes on."""
    EvacuatingKubeVirt(api, seconds=0.05, source_pod_stays=True,
                       finished_refusal=(403, 'pods "x" is forbidden: cannot create resource "pods/eviction"'))
    operator = Operator(api)
    result = run(node_maintenance, {"name": "worker-1", "wait_timeout": 60}, capsys)
    assert result["phase"] == "Succeeded" and result["method"] == "cr", result
    assert operator.found == ["virt-launcher-vm%d-abcde" % i for i in range(5)] + ["web-a", "web-b"]
    assert not [key for key, status in api.evictions if status == 201]


def test_the_launcher_pods_of_evacuated_vms_the_operator_lists_are_no_vms_left(api, capsys, tmp_path):
    """The operator's first status lists the finished virt-launcher pods of the VMs that migrated before it came:
    the progress says they are pods to remove, but names no VM as still to leave the node."""
    EvacuatingKubeVirt(api, seconds=0.05)
    operator = Operator(api)
    progress = tmp_path / "progress.log"
    operator.pending_first = ["virt-launcher-vm%d-abcde" % i for i in range(5)]

    def reported():
        text = progress.read_text() if progress.exists() else ""
        return "pods_left=5/5" in text.partition("created NodeMaintenance")[2]

    def after_pending():
        # The operator goes on once the module reported its Running status (bounded: the assertions below fail the
        # test if it never does).
        end = time.monotonic() + 30
        while time.monotonic() < end and not reported():
            time.sleep(0.02)

    operator.after_pending = after_pending
    result = run(node_maintenance, {"name": "worker-1", "progress_file": str(progress), "wait_timeout": 60}, capsys)
    assert result["phase"] == "Succeeded", result
    lines = progress.read_text().splitlines()
    after = lines[next(i for i, line in enumerate(lines) if "VMs evacuated, created NodeMaintenance" in line):]
    assert any("pods_left=5/5 vms_left=0" in line for line in after), after
    assert not any("vms=" in line or "vms_left=0" not in line for line in after if "pods_left=" in line), after


def test_a_failed_evacuation_creates_no_cr_and_a_rerun_resumes_it(api, capsys):
    kubevirt = EvacuatingKubeVirt(api, seconds=0.15, stuck=["vm3"])
    operator = Operator(api)
    failed = run(node_maintenance, {"name": "worker-1", "wait_timeout": 3}, capsys)
    assert failed.get("failed") and failed["phase"] == "Failed" and failed["method"] == "cr", failed
    assert failed["msg"] == failed["last_error"]
    assert failed["last_error"].startswith("Timed out after 3s draining node worker-1: 1 pod left: ")
    assert "VM ns1/vm3 has no migration running" in failed["last_error"]
    assert failed["pending_pods"] == ["ns1/virt-launcher-vm3-abcde"]
    assert [v["name"] for v in failed["vms"]["blocked"]] == ["vm3"]
    # As a failed drain leaves it: cordoned with this collection's marks, no NodeMaintenance.
    assert operator.created == 0 and node_maintenances(api) == []
    node = api.get("Node", "worker-1")
    assert node["spec"]["unschedulable"] is True and node_marks.DRAIN_TAINT["key"] in [
        t["key"] for t in node["spec"]["taints"]]
    assert record(api)["method"] == "cr" and record(api)["phase"] == "Failed"
    assert sorted(api.pods_on("worker-1")) == ["ns1/virt-launcher-vm3-abcde", "ns1/web-a", "ns1/web-b"]
    assert reasons(api) == ["BeginMaintenance", "FailedMaintenance"]

    # Check mode on the node left so: the NodeMaintenance would be created, nothing is written.
    before = versions(api)
    checked = run(node_maintenance, {"name": "worker-1"}, capsys, check=True)
    assert checked["changed"] is True and checked["method_reason"] == "%s %s" % (KEPT, nm.PACED_NOTE)
    assert versions(api) == before

    # The VM can leave now: a re-run evacuates it, then creates the NodeMaintenance.
    kubevirt.release("vm3")
    done = run(node_maintenance, {"name": "worker-1", "wait_timeout": 60}, capsys)
    assert done["phase"] == "Succeeded" and done["changed"] is True, done
    assert done["method"] == "cr" and done["method_reason"] == "%s %s" % (KEPT, nm.PACED_NOTE)
    assert operator.created == 1 and operator.found == ["web-a", "web-b"]
    assert [v["name"] for v in done["vms"]["migrated"]] == ["vm3"]
    assert reasons(api) == ["BeginMaintenance", "FailedMaintenance", "SucceedMaintenance"]
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True and node_maintenances(api) == [] and clean(api)


def test_absent_after_a_failed_evacuation_ends_it_as_a_drain(api, capsys):
    EvacuatingKubeVirt(api, seconds=0.15, stuck=["vm0"])
    Operator(api)
    assert run(node_maintenance, {"name": "worker-1", "wait_timeout": 2}, capsys)["phase"] == "Failed"
    before = versions(api)
    checked = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys, check=True)
    assert checked["changed"] is True and versions(api) == before
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True and left["method"] == "drain", left
    assert node_maintenances(api) == [] and clean(api)


def test_method_drain_takes_over_a_node_left_before_its_cr(api, capsys):
    kubevirt = EvacuatingKubeVirt(api, seconds=0.15, stuck=["vm1"])
    operator = Operator(api)
    assert run(node_maintenance, {"name": "worker-1", "wait_timeout": 2}, capsys)["phase"] == "Failed"
    kubevirt.release("vm1")
    drained = run(node_maintenance, {"name": "worker-1", "method": "drain", "wait_timeout": 60}, capsys)
    assert drained["phase"] == "Succeeded" and record(api)["method"] == "drain", drained
    # The maintenance is a drain's now: auto keeps it so, and no NodeMaintenance ever comes.
    again = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert again["method"] == "drain" and again["changed"] is False
    assert operator.created == 0
    run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert clean(api)


def test_method_cr_on_a_node_left_before_its_cr_creates_it(api, capsys):
    EvacuatingKubeVirt(api, seconds=0.15, stuck=["vm4"])
    operator = Operator(api)
    assert run(node_maintenance, {"name": "worker-1", "wait_timeout": 2}, capsys)["phase"] == "Failed"
    done = run(node_maintenance, {"name": "worker-1", "method": "cr"}, capsys)
    assert done["phase"] == "Succeeded" and done["method_reason"] == "method cr as requested.", done
    assert operator.created == 1 and operator.found == ["virt-launcher-vm4-abcde", "web-a", "web-b"]
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True and node_maintenances(api) == [] and clean(api)


def test_explicit_method_cr_leaves_the_whole_drain_to_the_operator(api, capsys):
    EvacuatingKubeVirt(api, seconds=0.15)
    operator = Operator(api)
    result = run(node_maintenance, {"name": "worker-1", "method": "cr"}, capsys)
    assert result["phase"] == "Succeeded" and result["method_reason"] == "method cr as requested.", result
    assert not [r for r in api.requests if r[1] == "eviction"]
    assert len(operator.found) == 7 and record(api) is None


def test_permissions_of_both_parts_are_checked_before_anything_changes(api, capsys):
    EvacuatingKubeVirt(api, seconds=0.15)
    Operator(api)
    before = versions(api)
    api.denied.add(("create", "nodemaintenances"))
    failed = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert failed["msg"] == ("Cannot put node worker-1 into maintenance: permission denied: the current user may "
                             "not create nodemaintenances.nodemaintenance.medik8s.io."), failed
    api.denied = {("create", "pods/eviction")}
    failed = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert failed["msg"] == ("Cannot put node worker-1 into maintenance: permission denied: the current user may "
                             "not create pods/eviction in namespace ns1."), failed
    assert versions(api) == before and node_maintenances(api) == []


def test_without_wait_the_operator_drains_everything(api, capsys):
    EvacuatingKubeVirt(api, seconds=0.15)
    operator = Operator(api)
    result = run(node_maintenance, {"name": "worker-1", "wait": False}, capsys)
    assert result["method_reason"] == CHOSE and result["changed"] is True, result
    assert not [r for r in api.requests if r[1] == "eviction"]
    assert operator.created == 1
