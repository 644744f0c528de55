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


def machine(system=None, **bmc):
    fields = dict(address=ADDRESS, username="admin", password=SECRET, ca_path=None, validate_certs=True)
    fields.update(bmc)
    return redfish.RedfishMachine(fields, connect=lambda m: system)


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
