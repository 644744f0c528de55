"""The Redfish road of module_utils/machine/redfish.py: the System URL it accepts, power on and off with the
reset types a BMC allows, and one sentence naming the BMC for whatever sushy raises (never the password)."""

import pytest
from sushy import exceptions as sushy_errors

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import redfish
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    InvalidInputError,
    MachineError,
    WaitTimeoutError,
)

ADDRESS = "https://10.0.0.9:8443/redfish/v1/Systems/437XR1138R2"
SECRET = "s3cr3t-Pa55"


class Value:
    def __init__(self, value):
        self.value = value


class FakeSystem:
    """A sushy System: PowerState follows the resets after ``lag`` refreshes (a BMC applies them late)."""

    def __init__(self, state="On", allowed=("On", "ForceOff", "GracefulShutdown", "ForceRestart"), lag=1,
                 ignores=()):
        self.state = state
        self.allowed = allowed
        self.lag = lag
        self.ignores = ignores
        self.resets = []
        self._pending = None

    @property
    def power_state(self):
        return Value(self.state)

    def refresh(self, force=False):
        if self._pending is not None:
            self._pending[1] -= 1
            if self._pending[1] <= 0:
                self.state, self._pending = self._pending[0], None

    def get_allowed_reset_system_values(self):
        return set(Value(v) for v in self.allowed)

    def reset_system(self, value):
        self.resets.append(value.value)
        if value.value in self.ignores:
            return
        self._pending = ["Off" if value.value in ("ForceOff", "GracefulShutdown") else "On", self.lag]


class FakeBios:
    def __init__(self, attributes):
        self.attributes = dict(attributes)
        self.pending_attributes = dict(attributes)
        self.writes = []

    def refresh(self, force=False):
        pass

    def set_attributes(self, value):
        self.writes.append(dict(value))
        self.pending_attributes.update(value)


class FakeTask:
    def __init__(self, state="Completed", status="OK", message=None):
        self.task_state = Value(state)
        self.task_status = Value(status)
        self.messages = [type("Message", (), {"message": message})()] if message else []


class FakeMonitor:
    """A task monitor that answers 202 ``polls`` times, then the task."""

    def __init__(self, task, polls=1):
        self.polls = polls
        self.task_monitor_uri = "/redfish/v1/TaskService/Tasks/7"
        self._task = task

    @property
    def check_is_processing(self):
        self.polls -= 1
        return self.polls >= 0

    def get_task(self):
        return self._task


class FakeInventoryItem:
    def __init__(self, identity, version, related=()):
        self.identity = identity
        self.version = version
        self.path = "/redfish/v1/UpdateService/FirmwareInventory/" + identity
        self.related_item = [{"@odata.id": path} for path in related]


class FakeUpdateService:
    def __init__(self, inventory=(), task=None):
        self.inventory = list(inventory)
        self.updates = []
        self.task = task or FakeTask()

    @property
    def firmware_inventory(self):
        if self.inventory is None:
            raise sushy_errors.MissingAttributeError(attribute="FirmwareInventory/@odata.id", resource="/redfish/v1/UpdateService")
        return type("Collection", (), {"get_members": lambda _self: self.inventory})()

    def simple_update(self, image_uri, targets=None):
        self.updates.append((image_uri, targets))
        return FakeMonitor(self.task)


class FakeRoot:
    """A sushy connection: the System at the machine's path, and the UpdateService."""

    def __init__(self, system, update_service=None):
        self.system = system
        self.update_service = update_service or FakeUpdateService()
        self.paths = []

    def get_system(self, path):
        self.paths.append(path)
        return self.system

    def get_update_service(self):
        return self.update_service


def machine(system=None, root=None, **bmc):
    fields = dict(address=ADDRESS, username="admin", password=SECRET, ca_path=None, validate_certs=True)
    fields.update(bmc)
    root = root or FakeRoot(system)
    return redfish.RedfishMachine(fields, connect=lambda m: root)


@pytest.mark.parametrize("address, base, path", [
    (ADDRESS, "https://10.0.0.9:8443", "/redfish/v1/Systems/437XR1138R2"),
    ("redfish+https://bmc.example.com/redfish/v1/Systems/1/", "https://bmc.example.com", "/redfish/v1/Systems/1"),
])
def test_parse_address_takes_a_system_url(address, base, path):
    assert redfish.parse_address(address) == (base, path)


@pytest.mark.parametrize("address", ["bmc.example.com", "https://bmc.example.com/redfish/v1/Systems",
                                     "ipmi://10.0.0.9", "https://bmc/redfish/v1/Managers/1", ""])
def test_parse_address_refuses_anything_else_in_one_sentence(address):
    with pytest.raises(InvalidInputError) as caught:
        redfish.parse_address(address)
    assert caught.value.msg.startswith("Option bmc.address must be the URL of a Redfish System")
    assert repr(address) in caught.value.msg and caught.value.details["option"] == "bmc.address"


def test_verify_follows_ca_path_and_validate_certs():
    assert machine().verify is True
    assert machine(ca_path="/etc/pki/bmc.pem").verify == "/etc/pki/bmc.pem"
    assert machine(ca_path="/etc/pki/bmc.pem", validate_certs=False).verify is False
    assert SECRET not in repr(machine().as_dict())


def test_graceful_power_off_waits_for_the_bmc_to_report_off():
    system = FakeSystem(lag=2)
    assert machine(system).power_off(timeout=10) == ["GracefulShutdown"]
    assert system.resets == ["GracefulShutdown"] and system.state == "Off"


def test_a_graceful_shutdown_that_does_not_end_is_forced(monkeypatch):
    monkeypatch.setattr(redfish, "POLL_SECONDS", 0.01)
    system = FakeSystem(ignores=("GracefulShutdown",))
    assert machine(system).power_off(timeout=0.2) == ["GracefulShutdown", "ForceOff"]
    assert system.state == "Off"


def test_force_off_at_once_when_not_graceful_or_not_allowed():
    system = FakeSystem()
    assert machine(system).power_off(timeout=10, graceful=False) == ["ForceOff"]
    system = FakeSystem(allowed=("On", "ForceOff"))
    assert machine(system).power_off(timeout=10) == ["ForceOff"]


def test_nothing_is_sent_to_a_machine_in_the_state_asked_for():
    off = FakeSystem(state="Off")
    assert machine(off).power_off(timeout=10) == [] and off.resets == []
    on = FakeSystem()
    assert machine(on).power_on(timeout=10) == [] and on.resets == []
    assert machine(off).power_on(timeout=10) == ["On"] and off.state == "On"


def test_a_reset_type_the_bmc_does_not_allow_is_refused_before_it_is_sent():
    system = FakeSystem(allowed=("On", "GracefulShutdown"))
    with pytest.raises(MachineError) as caught:
        machine(system).power_off(timeout=10, graceful=False)
    assert caught.value.msg == ("The BMC at %s does not accept the reset type ForceOff (it accepts GracefulShutdown, "
                                "On)." % ADDRESS)
    assert system.resets == []


def test_a_machine_that_never_reports_off_times_out_naming_the_reading(monkeypatch):
    monkeypatch.setattr(redfish, "POLL_SECONDS", 0.01)
    system = FakeSystem(ignores=("ForceOff",))
    with pytest.raises(WaitTimeoutError) as caught:
        machine(system).power_off(timeout=0.1, graceful=False)
    assert "it still reports PowerState On" in caught.value.msg


class Response:
    def __init__(self, status):
        self.status_code = status
        self.headers = {}

    def json(self):
        return {"error": {"message": "the BMC says no"}}


@pytest.mark.parametrize("error, cause", [
    (sushy_errors.AccessError("GET", ADDRESS, Response(401)), "it refused the credentials of user admin (HTTP 401)"),
    (sushy_errors.ResourceNotFoundError("GET", ADDRESS, Response(404)),
     "it has no System at /redfish/v1/Systems/437XR1138R2 (HTTP 404)"),
    (sushy_errors.ConnectionError(url=ADDRESS, error="Connection refused"), "it cannot be reached ("),
    (sushy_errors.ServerSideError("GET", ADDRESS, Response(500)), "it answered HTTP 500"),
])
def test_sushy_errors_become_one_sentence_naming_the_bmc(error, cause):
    def connect(m):
        raise error

    target = redfish.RedfishMachine(dict(address=ADDRESS, username="admin", password=SECRET), connect=connect)
    with pytest.raises(MachineError) as caught:
        target.power_state()
    assert caught.value.msg.startswith("The BMC at %s could not read the machine 437XR1138R2: %s" % (ADDRESS, cause))
    assert caught.value.msg.endswith(".") and SECRET not in caught.value.msg
    assert caught.value.details["bmc"] == {"road": "redfish", "address": ADDRESS}


# -- restart, firmware, BIOS ---------------------------------------------------------------------

def test_the_system_is_read_at_the_path_of_the_address():
    root = FakeRoot(FakeSystem())
    machine(root=root).power_state()
    assert root.paths == ["/redfish/v1/Systems/437XR1138R2"]


def test_restart_is_graceful_when_allowed_else_forced_else_a_power_cycle():
    system = FakeSystem(allowed=("On", "ForceOff", "GracefulRestart", "ForceRestart"))
    assert machine(system).restart(graceful=True) == "GracefulRestart"
    assert machine(system).restart(graceful=False) == "ForceRestart"
    system = FakeSystem(allowed=("On", "ForceOff", "ForceRestart"))
    assert machine(system).restart(graceful=True) == "ForceRestart"
    system = FakeSystem(allowed=("On", "ForceOff", "PowerCycle"))
    assert machine(system).restart() == "PowerCycle"
    assert system.resets == ["PowerCycle"]


def test_a_bmc_without_any_restart_is_refused_in_one_sentence():
    system = FakeSystem(allowed=("On", "ForceOff"))
    with pytest.raises(MachineError) as caught:
        machine(system).restart()
    assert caught.value.msg == "The BMC at %s accepts no restart (it accepts ForceOff, On)." % ADDRESS
    assert system.resets == []


def test_firmware_versions_are_the_bios_version_and_the_inventory():
    system = FakeSystem()
    system.bios_version = "1.0.0"
    service = FakeUpdateService(inventory=[FakeInventoryItem("BMC", "5.10.0"), FakeInventoryItem("NIC.1", "22.5")])
    versions = machine(root=FakeRoot(system, service)).firmware_versions()
    assert versions == {"bios": "1.0.0", "BMC": "5.10.0", "NIC.1": "22.5"}
    service.inventory = None
    assert machine(root=FakeRoot(system, service)).firmware_versions() == {"bios": "1.0.0"}


def test_a_service_of_several_systems_gives_each_machine_its_own_inventory_entries():
    """Entries whose RelatedItem names other Systems only are another machine's: not reported (so node_machine refuses
    them as components before anything changes)."""
    system = FakeSystem()
    system.bios_version = "1.0.0"
    other = "/redfish/v1/Systems/OTHER"
    service = FakeUpdateService(inventory=[
        FakeInventoryItem("Node0.BMC", "5.10.0", ["/redfish/v1/Systems/437XR1138R2", "/redfish/v1/Managers/BMC0"]),
        FakeInventoryItem("Node0.CPU", "3.1", ["/redfish/v1/Systems/437XR1138R2/Processors/CPU0"]),
        FakeInventoryItem("Node1.BMC", "5.11.0", [other, "/redfish/v1/Managers/BMC1"]),
        FakeInventoryItem("Node1.BIOS", "1.2.0", [other + "/"]),
        FakeInventoryItem("PSU.1", "2.0", ["/redfish/v1/Chassis/1/Power"])])
    target = machine(root=FakeRoot(system, service))
    assert target.firmware_versions() == {"bios": "1.0.0", "Node0.BMC": "5.10.0", "Node0.CPU": "3.1", "PSU.1": "2.0"}
    target.update_firmware("Node0.BMC", "https://fw.example.com/bmc.bin", timeout=10)
    assert service.updates == [("https://fw.example.com/bmc.bin", ["/redfish/v1/UpdateService/FirmwareInventory/Node0.BMC"])]


def test_a_bios_update_targets_the_system_and_follows_its_task():
    system = FakeSystem()
    service = FakeUpdateService(inventory=[FakeInventoryItem("NIC.1", "22.5")])
    target = machine(root=FakeRoot(system, service))
    target.update_firmware("bios", "https://fw.example.com/bios-1.1.0.bin", timeout=10)
    target.update_firmware("NIC.1", "https://fw.example.com/nic-22.6.bin", timeout=10)
    assert service.updates == [
        ("https://fw.example.com/bios-1.1.0.bin", ["/redfish/v1/Systems/437XR1138R2"]),
        ("https://fw.example.com/nic-22.6.bin", ["/redfish/v1/UpdateService/FirmwareInventory/NIC.1"])]


def test_a_failed_update_task_is_one_sentence_with_the_bmc_messages():
    service = FakeUpdateService(task=FakeTask("Exception", "Critical", "Image signature invalid"))
    with pytest.raises(MachineError) as caught:
        machine(root=FakeRoot(FakeSystem(), service)).update_firmware("bios", "https://fw/b.bin", timeout=10)
    assert caught.value.msg == ("The BMC at %s did not finish the firmware update (bios): its task ended Exception "
                                "(Critical): Image signature invalid." % ADDRESS)
    assert SECRET not in caught.value.msg


def test_bios_settings_are_written_pending_and_read_back():
    system = FakeSystem()
    system.bios = FakeBios({"SriovGlobalEnable": "Disabled", "ProcTurboMode": "Enabled"})
    target = machine(system)
    target.set_bios({"SriovGlobalEnable": "Enabled"})
    assert system.bios.writes == [{"SriovGlobalEnable": "Enabled"}]
    assert target.bios_attributes() == {"SriovGlobalEnable": "Disabled", "ProcTurboMode": "Enabled"}
    assert target.bios_attributes(pending=True)["SriovGlobalEnable"] == "Enabled"
