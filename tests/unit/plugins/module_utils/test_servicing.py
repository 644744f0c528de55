"""The checks of module_utils/servicing/runner.py that decide before anything changes: the firmware option's
entries, what the machine has, and whether the node is drained (cordoned, no VM, no migration from or to it)."""

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.servicing import runner

NODE = "worker-3"


def vmi(name, node, phase="Running", target=None, namespace="vms"):
    status = {"phase": phase, "nodeName": node}
    if target:
        status["migrationState"] = {"sourceNode": node, "targetNode": target}
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"kubevirt.io/nodeName": node}},
            "status": status}


def migration(name, vmi_name, phase="Running", namespace="vms"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"vmiName": vmi_name},
            "status": {"phase": phase}}


class Client:
    """VMIs (listed by the node label) and migrations, as the API would answer."""

    def __init__(self, vmis=(), migrations=()):
        self.vmis = list(vmis)
        self.migrations = list(migrations)

    def list(self, kind, namespace=None, label_selector=None):
        if kind == "VirtualMachineInstance":
            node = label_selector.split("=", 1)[1]
            return [v for v in self.vmis if v["metadata"]["labels"]["kubevirt.io/nodeName"] == node], "1"
        return self.migrations, "1"

    def get_or_none(self, kind, name, namespace=None):
        return next((v for v in self.vmis if v["metadata"]["name"] == name), None)


def node(cordoned=True):
    return {"metadata": {"name": NODE}, "spec": {"unschedulable": True} if cordoned else {}}


def test_firmware_entries_are_trimmed_and_checked_before_anything_is_read():
    assert runner.check_firmware([{"component": " bios ", "url": " https://fw/b.bin ", "version": 2}]) == [
        {"component": "bios", "url": "https://fw/b.bin", "version": "2"}]
    with pytest.raises(InvalidInputError) as caught:
        runner.check_firmware([{"component": "bios", "url": "https://fw/b.bin", "version": "2"},
                               {"component": "nic", "url": "", "version": "1"}])
    assert caught.value.msg.startswith("Option firmware[1].url is missing")


def test_bios_values_compare_as_a_bmc_reports_them():
    assert runner.same_value("Enabled", "enabled") and runner.same_value(3, "3") and not runner.same_value("On", "Off")


def test_what_the_machine_lacks_is_named_all_at_once():
    firmware = [{"component": "nic-7", "url": "https://fw/n.bin", "version": "1"}]
    with pytest.raises(InvalidInputError) as caught:
        runner._refuse_unknown(NODE, firmware, {"bios": "1.0.0"}, {"A": 1, "B": 2}, {"A": 0})
    assert caught.value.msg == ("Option firmware[0].component nic-7 names no firmware of node worker-3's machine (it "
                                "reports bios); option bios names attribute B, which node worker-3's machine does not "
                                "have; nothing was changed.")


def test_a_drained_node_passes_and_check_mode_only_reports_the_vms():
    assert runner._refuse_unless_drained(Client([vmi("done", NODE, phase="Succeeded")]), NODE, node(), False) == []
    assert runner._refuse_unless_drained(Client([vmi("db", NODE)]), NODE, node(cordoned=False), True) == ["vms/db"]


def test_a_node_not_cordoned_is_refused():
    with pytest.raises(BlockedError) as caught:
        runner._refuse_unless_drained(Client(), NODE, node(cordoned=False), False)
    assert caught.value.msg.startswith("Node worker-3 is not cordoned") and caught.value.msg.endswith(
        "nothing was changed.")


@pytest.mark.parametrize("vmis, migrations, words", [
    ([vmi("db", NODE)], [], "VMs still run there: vms/db"),
    # Its VMI is on another node and goes to this one: the VMI's migration state names the target.
    ([vmi("web", "worker-1", target=NODE)], [migration("m1", "web")],
     "migrations from or to it are in flight: vms/m1"),
    # A migration that ended counts no more; one from another node to a third neither.
    ([vmi("web", "worker-1", target="worker-2")], [migration("m1", "web"), migration("m0", "db", "Succeeded")], None),
])
def test_a_vm_or_a_migration_from_or_to_the_node_refuses_the_restart(vmis, migrations, words):
    client = Client(vmis, migrations)
    if words is None:
        assert runner._refuse_unless_drained(client, NODE, node(), False) == []
        return
    with pytest.raises(BlockedError) as caught:
        runner._refuse_unless_drained(client, NODE, node(), False)
    assert caught.value.msg.startswith("Node worker-3's machine was not restarted: ") and words in caught.value.msg
    assert caught.value.msg.endswith("drain the node first (node_maintenance); nothing was changed.")
    with pytest.raises(BlockedError) as staged:
        runner._refuse_unless_drained(client, NODE, node(), False, staged=True)
    assert staged.value.msg.endswith("the firmware and BIOS changes handed to the BMC wait for the machine's next "
                                     "restart.")


def booted_node(boot, ready="True", schedulable="true", heartbeat="2026-11-29T10:00:00Z"):
    labels = {} if schedulable is None else {"kubevirt.io/schedulable": schedulable}
    annotations = {} if heartbeat is None else {"kubevirt.io/heartbeat": heartbeat}
    return {"metadata": {"name": NODE, "labels": labels, "annotations": annotations},
            "status": {"nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize("current, handler, back", [
    # A new boot, Ready, virt-handler beat since and takes VMs.
    (booted_node("b2", heartbeat="2026-11-29T10:05:00Z"), "2026-11-29T10:00:00Z", True),
    # The label a handler that died with its machine left "true", its last beat: not back.
    (booted_node("b2"), "2026-11-29T10:00:00Z", False),
    # The new handler's first beat: its device plugins have not registered yet.
    (booted_node("b2", schedulable="false", heartbeat="2026-11-29T10:05:00Z"), "2026-11-29T10:00:00Z", False),
    # Not Ready, or the old boot.
    (booted_node("b2", ready="Unknown", heartbeat="2026-11-29T10:05:00Z"), "2026-11-29T10:00:00Z", False),
    (booted_node("b1", heartbeat="2026-11-29T10:05:00Z"), "2026-11-29T10:00:00Z", False),
    # A node without KubeVirt: the kubelet's Ready with a new boot is enough.
    (booted_node("b2", schedulable=None, heartbeat=None), False, True),
])
def test_a_restarted_machine_is_back_once_virt_handler_beat_again(monkeypatch, current, handler, back):
    seen = {}

    def wait_for_object(client, kind, name, predicate, timeout, what, describe_pending=None):
        seen["what"] = what
        return predicate(current)

    monkeypatch.setattr(runner, "wait_for_object", wait_for_object)
    assert runner._wait_boot(object(), NODE, "b1", handler, 60) is back
    assert seen["what"].endswith("virt-handler with it") is (handler is not False)
