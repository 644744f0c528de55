"""Preflight of a rolling maintenance and the check after a node, against an in-memory API server."""

import json
import threading

import pytest

from drain_cluster import cluster, launcher, node, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import identity
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import lock
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import preflight as rolling
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import verification
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MaintenanceError,
)

WORKERS = ["worker-1", "worker-2", "worker-3", "worker-4"]


def add_vm(server, name, node_name, **vmi_args):
    server.add("VirtualMachine", vm(name))
    obj = server.add("VirtualMachineInstance", vmi(name, node_name=node_name, eviction="LiveMigrate", **vmi_args))
    server.add("Pod", launcher(obj, cpu="100m", memory="256Mi"))
    return obj


@pytest.fixture
def lab():
    client, server = cluster(workers=4)
    add_vm(server, "a", "worker-1")
    add_vm(server, "b", "worker-1")
    add_vm(server, "c", "worker-3")
    return client, server


def params(**extra):
    values = {"nodes": list(WORKERS), "order": "given", "non_migratable": "fail", "fail_on_problems": True}
    values.update(extra)
    return values


def test_selection_order_and_running_vms(lab):
    client, _server = lab
    result = rolling.preflight(client, params(order="fewest_vms_first"))
    assert result["nodes"] == ["worker-2", "worker-4", "worker-3", "worker-1"]
    assert result["problems"] == []
    assert [v["name"] for v in result["running_vms"]] == ["a", "b", "c"]
    assert result["running_vms"][0] == {"namespace": "ns1", "name": "a", "node": "worker-1", "vm": True}
    details = dict((d["name"], d) for d in result["details"])
    assert details["worker-1"]["vms"] == 2 and details["worker-1"]["vms_migrating"] == 2


def test_label_selector_selects_by_name(lab):
    client, _server = lab
    result = rolling.preflight(client, {"label_selector": "node-role.kubernetes.io/worker", "order": "given"})
    assert result["nodes"] == WORKERS
    assert "label selector" in result["selection"]


def test_every_problem_is_listed_at_once(lab):
    client, server = lab
    add_vm(server, "stuck", "worker-3", migratable=False)
    server.add("Node", node("worker-5", ready=False))
    server.add("VirtualMachineInstanceMigration", {
        "metadata": {"name": "mig-1", "namespace": "ns1"}, "spec": {"vmiName": "a"}, "status": {"phase": "Running"}})
    with pytest.raises(BlockedError) as err:
        rolling.preflight(client, params(nodes=WORKERS + ["worker-5", "worker-9"], settle_timeout=0))
    problems = err.value.details["blockers"]
    text = " ".join(problems)
    assert "Node worker-9 does not exist." in problems
    assert "VM ns1/stuck cannot leave node worker-3" in text
    assert "Node worker-5 is not Ready" in text
    assert "Migration ns1/mig-1 of VMI ns1/a is in flight (phase Running)" in text
    assert err.value.msg.startswith("Preflight found %d problems, so nothing was changed: (1) " % len(problems))
    assert not server.writes()


def test_shutdown_policy_accepts_the_vm_that_would_block(lab):
    client, server = lab
    add_vm(server, "stuck", "worker-3", migratable=False)
    result = rolling.preflight(client, params(non_migratable="shutdown"))
    assert result["problems"] == []


def test_node_in_someone_elses_maintenance_is_a_problem(lab):
    client, server = lab
    current = server.get("Node", "worker-2")
    current["spec"]["unschedulable"] = True
    server.add("Node", current)
    result = rolling.preflight(client, params(fail_on_problems=False))
    assert any("worker-2 is cordoned by someone else" in p for p in result["problems"])


def test_node_left_by_an_earlier_run_is_resumed_first(lab):
    client, server = lab
    current = server.get("Node", "worker-3")
    current["spec"]["unschedulable"] = True
    current["spec"]["taints"] = [{"key": "medik8s.io/drain", "effect": "NoSchedule"}]
    current["metadata"]["annotations"]["maintenance.kubevirt-ops.io/node-maintenance"] = json.dumps(
        {"method": "drain", "phase": "Failed", "reason": "rolling_maintenance 20240504T220000Z",
         "added": ["unschedulable", "taint:medik8s.io/drain"]})
    server.add("Node", current)
    result = rolling.preflight(client, params())
    assert result["nodes"][0] == "worker-3" and result["resumed"] == ["worker-3"]
    assert any("left in maintenance by an earlier run" in n for n in result["notices"])
    current["metadata"]["annotations"]["maintenance.kubevirt-ops.io/node-maintenance"] = json.dumps(
        {"method": "drain", "phase": "Succeeded", "reason": "BIOS swap"})
    server.add("Node", current)
    result = rolling.preflight(client, params(fail_on_problems=False))
    assert any("worker-3 is already in maintenance" in p and "BIOS swap" in p for p in result["problems"])


def test_lock_held_by_another_run_is_a_problem(lab):
    client, _server = lab
    lock.ClusterLock(client).acquire("alice@bastion", 600)
    result = rolling.preflight(client, params(fail_on_problems=False, lock={"name": identity.DEFAULT_LOCK_NAME}))
    assert any("the cluster lock kube-system/kubevirt-ops-maintenance is held by 'alice@bastion'" in p
               for p in result["problems"])


@pytest.mark.parametrize("bad, words", [
    ({"nodes": None, "label_selector": None}, "Give the nodes"),
    ({"label_selector": "a=b"}, "not both"),
    ({"order": "random"}, "Order 'random'"),
])
def test_bad_selection(lab, bad, words):
    client, _server = lab
    with pytest.raises(InvalidInputError, match=words):
        rolling.preflight(client, params(**bad))


def test_verify_waits_for_vms_and_reports_migrations(lab):
    client, server = lab
    moved = server.get("VirtualMachineInstance", "a", "ns1")
    moved["status"]["nodeName"] = "worker-2"
    moved["status"]["migrationState"] = {"sourceNode": "worker-1", "targetNode": "worker-2", "completed": True,
                                         "startTimestamp": "2024-05-04T22:00:10Z", "endTimestamp": "2024-05-04T22:00:40Z"}
    server.add("VirtualMachineInstance", moved)
    result = verification.verify(client, {"name": "worker-1", "running_vms": ["ns1/a", {"namespace": "ns1", "name": "b"}],
                                          "migrations_since": "2024-05-04T22:00:10.500Z", "timeout": 5})
    assert result["node"] == {"name": "worker-1", "ready": True, "schedulable": True, "in_maintenance": False}
    assert result["vms"]["running"] == 2 and result["vms"]["where"]["ns1/a"] == "worker-2"
    assert result["migrations"] == [{"namespace": "ns1", "name": "a", "source": "worker-1", "target": "worker-2",
                                     "start": "2024-05-04T22:00:10Z", "end": "2024-05-04T22:00:40Z"}]


def test_verify_names_the_lost_vm(lab):
    client, server = lab
    server.add("VirtualMachine", vm("halted"))  # its VMI is gone: lost
    with pytest.raises(BlockedError) as err:
        verification.verify(client, {"name": "worker-1", "running_vms": ["ns1/a", "ns1/halted"], "timeout": 1})
    assert "1 VM that ran before is not running: ns1/halted" in err.value.msg
    assert err.value.details["not_running"] == ["ns1/halted"]
    result = verification.verify(client, {"running_vms": ["ns1/a", "ns1/halted"], "expected_stopped": ["ns1/halted"],
                                          "timeout": 1})
    assert result["node"] is None and result["vms"]["stopped_as_expected"] == ["ns1/halted"]


def test_verify_counts_a_vm_back_in_service_only_when_its_vmi_is_ready(lab):
    client, server = lab
    server.add("VirtualMachine", vm("booting"))
    server.add("VirtualMachineInstance", vmi("booting", node_name="worker-2", eviction="LiveMigrate", ready=False))
    with pytest.raises(BlockedError) as err:
        verification.verify(client, {"running_vms": ["ns1/a", "ns1/booting"], "timeout": 1})
    assert "1 VM that ran before is not running: ns1/booting (Running on node worker-2, not Ready)" in err.value.msg
    assert err.value.details["not_running"] == ["ns1/booting"]
    server.add("VirtualMachineInstance", vmi("booting", node_name="worker-2", eviction="LiveMigrate"))
    result = verification.verify(client, {"running_vms": ["ns1/a", "ns1/booting"], "timeout": 30})
    assert result["vms"]["running"] == 2 and result["vms"]["where"]["ns1/booting"] == "worker-2"


def test_verify_does_not_wait_for_a_vm_its_owner_deleted(lab):
    client, _server = lab
    result = verification.verify(client, {"running_vms": ["ns1/a", "ns1/retired"], "timeout": 30})
    assert result["vms"]["deleted"] == ["ns1/retired"] and result["vms"]["running"] == 1


def test_a_stand_alone_vmi_that_stopped_is_lost(lab):
    client, _server = lab
    with pytest.raises(BlockedError, match="ns1/scratch"):
        verification.verify(client, {"running_vms": [{"namespace": "ns1", "name": "scratch", "vm": False}], "timeout": 1})


def test_resumed_node_counts_as_room_for_the_others():
    """Only worker-1 can take worker-2's VM, and worker-1 is still cordoned by the earlier run: the
    preflight must count it as back in service, since the run finishes it first."""
    client, server = cluster(workers=2)
    add_vm(server, "big", "worker-2")
    current = server.get("Node", "worker-1")
    current["spec"]["unschedulable"] = True
    current["spec"]["taints"] = [{"key": "medik8s.io/drain", "effect": "NoSchedule"},
                                 {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    current["metadata"]["annotations"]["maintenance.kubevirt-ops.io/node-maintenance"] = json.dumps(
        {"method": "drain", "phase": "Succeeded", "reason": "rolling_maintenance 20240504T220000Z",
         "added": ["unschedulable", "taint:medik8s.io/drain"]})
    server.add("Node", current)
    result = rolling.preflight(client, params(nodes=["worker-1", "worker-2"]))
    assert result["problems"] == [] and result["resumed"] == ["worker-1"]
    assert result["nodes"] == ["worker-1", "worker-2"]


def test_verify_waits_until_the_node_is_uncordoned(lab):
    client, server = lab
    current = server.get("Node", "worker-4")
    current["spec"]["unschedulable"] = True
    server.add("Node", current)
    with pytest.raises(BlockedError, match="node worker-4 is still cordoned"):
        verification.verify(client, {"name": "worker-4", "timeout": 1})
    assert verification.verify(client, {"name": "worker-4", "schedulable": False, "timeout": 1})["node"]["ready"]


# -- live migrations in flight: waited for, then planned -------------------------------------------

def migration(name, vmi_name, phase):
    return {"metadata": {"name": name, "namespace": "ns1"}, "spec": {"vmiName": vmi_name}, "status": {"phase": phase}}


def when_migrations_are_watched(server, then):
    """Run ``then()`` once the preflight watches the migrations: it is then provably waiting."""
    watched = threading.Event()
    answer = server.request

    def request(method, url, **kwargs):
        if "watch=true" in url and "virtualmachineinstancemigrations" in url:
            watched.set()
        return answer(method, url, **kwargs)

    server.request = request
    worker = threading.Thread(target=lambda: watched.wait(30) and then())
    worker.daemon = True
    worker.start()
    return worker


def test_preflight_waits_for_migrations_in_flight_then_plans(lab):
    client, server = lab
    server.add("VirtualMachineInstanceMigration", migration("kubevirt-evacuation-1", "a", "Running"))
    server.add("VirtualMachineInstanceMigration", migration("old", "b", "Succeeded"))
    worker = when_migrations_are_watched(server, lambda: server.add(
        "VirtualMachineInstanceMigration", migration("kubevirt-evacuation-1", "a", "Succeeded")))
    result = rolling.preflight(client, params(settle_timeout=60))
    worker.join(5)
    assert result["problems"] == []
    assert result["migrations_settled"] == [
        {"namespace": "ns1", "name": "kubevirt-evacuation-1", "vmi": "a", "phase": "Succeeded"}]
    notice = [n for n in result["notices"] if n.startswith("Waited ")]
    assert len(notice) == 1, result["notices"]
    assert "for 1 live migration in flight to end before planning: ns1/kubevirt-evacuation-1 (VMI a, Succeeded)." \
        in notice[0]
    assert not server.writes()


def test_nothing_in_flight_means_no_wait_and_no_watch(lab):
    client, server = lab
    server.add("VirtualMachineInstanceMigration", migration("old", "a", "Succeeded"))
    watches = []
    answer = server.request

    def request(method, url, **kwargs):
        if "watch=true" in url:
            watches.append(url)
        return answer(method, url, **kwargs)

    server.request = request
    result = rolling.preflight(client, params())
    assert result["migrations_settled"] == [] and result["settle_seconds"] == 0.0
    assert watches == []


def test_a_migration_still_in_flight_at_the_timeout_is_the_problem(lab):
    """Also one that started while the preflight waited (the next evacuation of a killed run)."""
    client, server = lab
    server.add("VirtualMachineInstanceMigration", migration("quick", "c", "Running"))

    def next_evacuation():
        server.add("VirtualMachineInstanceMigration", migration("late", "a", "Scheduling"))
        server.add("VirtualMachineInstanceMigration", migration("quick", "c", "Succeeded"))

    worker = when_migrations_are_watched(server, next_evacuation)
    with pytest.raises(BlockedError) as err:
        rolling.preflight(client, params(settle_timeout=1))
    worker.join(5)
    problems = err.value.details["blockers"]
    assert problems == ["Migration ns1/late of VMI ns1/a is in flight (phase Scheduling) after waiting 1s "
                        "(settle_timeout); wait until it ends, so that capacity and VM placement are settled before "
                        "maintenance starts."]
    assert not server.writes()


class _Bios:
    def __init__(self, attributes):
        self.attributes = dict(attributes)
        self.pending_attributes = dict(attributes)

    def refresh(self, force=False):
        pass


class _System:
    """A sushy System as a BMC answers: its power state and BIOS."""

    def __init__(self, attributes):
        self.power_state = "On"
        self.bios = _Bios(attributes)

    def refresh(self, force=False):
        pass


def _bmcs(monkeypatch, answering):
    """The BMCs of the preflight's machine checks: those of ``answering`` (address -> BIOS attributes) answer,
    every other refuses the credentials as a BMC does."""
    from sushy import exceptions as sushy_errors

    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import redfish

    class Root:
        def __init__(self, machine):
            self.machine = machine

        def get_system(self, path):
            if self.machine.address not in answering:
                raise sushy_errors.AccessError("GET", self.machine.address, type("R", (), {
                    "status_code": 401, "json": lambda self: {}, "text": "", "reason": "Unauthorized"})())
            return _System(answering[self.machine.address])

    monkeypatch.setattr(redfish, "_sushy_root", Root)


def bmc(index, password="s3cr3t-Pa55"):
    return {"address": "https://10.0.0.%d/redfish/v1/Systems/1" % index, "username": "admin", "password": password,
            "validate_certs": False}


def test_preflight_reads_every_machine_to_service_and_names_each_one_that_cannot_be(lab, monkeypatch):
    client, server = lab
    _bmcs(monkeypatch, {bmc(1)["address"]: {"SriovGlobalEnable": "Disabled"},
                        bmc(3)["address"]: {"SriovGlobalEnable": "Enabled"}})
    machines = {"firmware": [], "bios": {"SriovGlobalEnable": "Enabled"}, "reboot": False, "roads": [
        {"name": "worker-1", "bmc": bmc(1)}, {"name": "worker-2", "bmc": bmc(2)},
        {"name": "worker-3", "bmc": bmc(3)}, {"name": "worker-4", "bmc": bmc(4), "bmh": {"name": "w4", "namespace": "m"}},
        {"name": "elsewhere", "bmc": bmc(9)}]}
    result = rolling.preflight(client, params(fail_on_problems=False, machines=machines))
    problems = [p for p in result["problems"] if p.startswith("worker-")]
    assert problems[0].startswith("worker-2: The BMC at %s could not read the machine" % bmc(2)["address"])
    assert problems[1] == ("worker-4: Options bmc and bmh both name the machine's road; give one: bmc (its BMC, "
                           "Redfish) or bmh (its Metal3 BareMetalHost).")
    assert len(problems) == 2 and not any("elsewhere" in p for p in result["problems"])
    details = dict((d["name"], d) for d in result["details"])
    changed = {"SriovGlobalEnable": {"before": "Disabled", "after": "Enabled"}}
    assert details["worker-1"]["machine"]["bios_changed"] == changed
    assert details["worker-1"]["machine"]["changes"] is True and details["worker-3"]["machine"]["changes"] is False
    assert details["worker-1"]["machine"]["road"] == "redfish" and details["worker-2"]["machine"] is None
    assert "s3cr3t-Pa55" not in json.dumps(result, default=str)
    assert server.writes() == []
    # Failing on problems, every one in one message, nothing changed.
    with pytest.raises(BlockedError) as caught:
        rolling.preflight(client, params(machines=machines))
    assert "worker-2: The BMC at" in caught.value.msg and "worker-4: Options bmc and bmh" in caught.value.msg


def test_preflight_reads_the_machines_side_by_side_and_keeps_their_order(lab, monkeypatch):
    """The machines of a run are read at once, not one after another (a barrier every read must reach before any
    returns: read in turn, the first would wait alone until the barrier breaks), and their problems come in the
    order of the nodes."""
    client, _server = lab
    arrived = threading.Barrier(4, timeout=10)

    class Reading:
        summary = {"road": "redfish"}

        def changes(self, _reboot):
            return True

    def read(_client, name, _node, _params, _firmware, _bios, _given):
        arrived.wait()
        if name in ("worker-2", "worker-4"):
            raise MaintenanceError("the BMC of %s does not answer" % name)
        return Reading()

    monkeypatch.setattr(rolling.servicing, "read", read)
    machines = {"firmware": [], "bios": {}, "reboot": True,
                "roads": [{"name": name, "bmc": bmc(index + 1)} for index, name in enumerate(WORKERS)]}
    result = rolling.preflight(client, params(fail_on_problems=False, machines=machines))
    assert [p for p in result["problems"] if p.startswith("worker-")] == [
        "worker-2: the BMC of worker-2 does not answer", "worker-4: the BMC of worker-4 does not answer"]
    assert [d["machine"] and d["machine"]["road"] for d in result["details"]] == ["redfish", None, "redfish", None]


def test_preflight_names_a_machine_without_a_road():
    client, server = cluster(workers=2)
    result = rolling.preflight(client, params(nodes=["worker-1"], fail_on_problems=False,
                                              machines={"firmware": [], "bios": {}, "reboot": True, "roads": []}))
    assert result["problems"] == [
        "worker-1: Node worker-1 has no road to its machine: give its BMC as bmc={address, username, password}, or "
        "its BareMetalHost as bmh={name, namespace} (it has no providerID)."]
    assert result["details"][0]["machine"] is None


def test_preflight_says_whether_a_stopped_run_left_the_migration_limits_raised(monkeypatch):
    from kubevirt_objects import hyperconverged

    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migration_limits as limits_mod

    client, server = cluster(workers=2)
    assert rolling.preflight(client, params(nodes=["worker-1"]))["migration_limits_left_raised"] is False
    hco = hyperconverged(spec={"liveMigrationConfig": {"parallelOutboundMigrationsPerNode": 4}})
    server.add("HyperConverged", hco)
    assert rolling.preflight(client, params(nodes=["worker-1"]))["migration_limits_left_raised"] is False
    hco["metadata"].setdefault("annotations", {})[limits_mod.ANNOTATION] = json.dumps(
        {"original": {"parallelOutboundMigrationsPerNode": 2}, "run": "run-a"})
    server.add("HyperConverged", hco)
    assert rolling.preflight(client, params(nodes=["worker-1"]))["migration_limits_left_raised"] is True
    # Unreadable (no right to read the resources): the run cannot tell, and says so with null.
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError

    def forbidden(_client):
        raise ApiError("hyperconvergeds is forbidden", status=403)

    monkeypatch.setattr(limits_mod, "find_home", forbidden)
    assert rolling.preflight(client, params(nodes=["worker-1"]))["migration_limits_left_raised"] is None
