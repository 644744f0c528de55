"""The Metal3 road's restart against the in-memory API server, with a stand-in for baremetal-operator's
manageHostPower: a provisioned host is rebooted with our own reboot annotation (off while it is there, on once
it is removed; spec.online untouched), any other host with spec.online; a host that forbids power-off or is
asked to stay off is refused with nothing changed."""

import json
import threading

import pytest

from kubevirt_objects import cluster

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MachineError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import metal3


def host(provisioned=True, **spec):
    obj = {"metadata": {"name": "host-1", "namespace": "metal"}, "spec": dict({"online": True}, **spec),
           "status": {"poweredOn": True}}
    if provisioned:
        obj["status"]["provisioning"] = {"state": "externally provisioned"}
    return obj


class Operator(threading.Thread):
    """Level-triggered, as the operator is: after every change of the store, the host is reported with the power
    it should have (off while a reboot annotation exists or spec.online is false)."""

    def __init__(self, api):
        super().__init__(daemon=True)
        self.api = api
        self.powered = []
        self.stopped = False

    def run(self):
        while not self.stopped:
            with self.api.lock:
                self.api.lock.wait(0.05)
                current = self.api.get("BareMetalHost", "host-1", "metal")
                if current is None:
                    continue
                annotations = current["metadata"].get("annotations") or {}
                held = any(key == "reboot.metal3.io" or key.startswith("reboot.metal3.io/") for key in annotations)
                wanted = bool(current["spec"].get("online")) and not held
                if current["status"].get("poweredOn") != wanted:
                    current = json.loads(json.dumps(current))
                    current["status"]["poweredOn"] = wanted
                    self.api._store("BareMetalHost", "metal", "host-1", current, "MODIFIED")  # pylint: disable=protected-access
                    self.powered.append(wanted)


@pytest.fixture
def api():
    client, server = cluster(namespaces=("metal",))
    server.client = client
    server.operator = Operator(server)
    server.operator.start()
    yield server
    server.operator.stopped = True
    server.operator.join(5)


def test_a_provisioned_host_is_rebooted_with_our_annotation(api):
    api.add("BareMetalHost", host())
    machine = metal3.Metal3Machine(api.client, api.get("BareMetalHost", "host-1", "metal"))
    sent = machine.restart(10, graceful=False)
    assert sent == 'reboot.metal3.io/kubevirt-ops.maintenance hard, removed once off'
    assert api.operator.powered == [False, True]
    after = api.get("BareMetalHost", "host-1", "metal")
    assert after["spec"]["online"] is True and after["status"]["poweredOn"] is True
    assert metal3.REBOOT_ANNOTATION not in (after["metadata"].get("annotations") or {})
    annotated = [r for r in api.requests if r[0] == "PATCH"]
    assert len(annotated) == 2, annotated


def test_a_host_that_is_not_provisioned_is_cycled_through_spec_online(api):
    api.add("BareMetalHost", host(provisioned=False))
    machine = metal3.Metal3Machine(api.client, api.get("BareMetalHost", "host-1", "metal"))
    assert machine.restart(10) == "spec.online=false, spec.online=true"
    assert api.operator.powered == [False, True]


@pytest.mark.parametrize("spec, words", [
    ({"disablePowerOff": True}, "forbids powering the machine off (spec.disablePowerOff=true)"),
    ({"online": False}, "is asked to be powered off (spec.online=false)"),
])
def test_a_host_that_must_not_be_cycled_is_refused_with_nothing_changed(api, spec, words):
    api.add("BareMetalHost", host(**spec))
    machine = metal3.Metal3Machine(api.client, api.get("BareMetalHost", "host-1", "metal"))
    with pytest.raises(BlockedError) as refused:
        machine.restart(10)
    assert words in refused.value.msg and "nothing was changed" in refused.value.msg
    assert api.writes() == []


# -- firmware and BIOS settings: HostFirmwareComponents, HostFirmwareSettings, servicing on the reboot ----------------

SCHEMA = {"ProcTurboMode": {"attribute_type": "Enumeration", "allowable_values": ["Enabled", "Disabled"],
                            "read_only": False},
          "SriovGlobalEnable": {}}


def firmware_objects(api, updates=None, applied=None, settings=None, policy=None):
    """The objects baremetal-operator keeps for host-1 (a bios at 1.0.0, two BIOS settings, a FirmwareSchema),
    judged for their generation 1, and the HostUpdatePolicy ``policy`` (none when None)."""
    judged = [{"type": "ChangeDetected", "status": "False", "observedGeneration": 1},
              {"type": "Valid", "status": "True", "observedGeneration": 1}]
    meta = {"name": "host-1", "namespace": "metal", "generation": 1}
    api.add("HostFirmwareComponents", {"metadata": dict(meta), "spec": {"updates": updates or []}, "status": {
        "updates": applied, "conditions": judged,
        "components": [{"component": "bios", "initialVersion": "1.0.0", "currentVersion": "1.0.0"},
                       {"component": "bmc", "initialVersion": "5.10.0", "currentVersion": "5.10.0"}]}})
    api.add("HostFirmwareSettings", {"metadata": dict(meta), "spec": {"settings": settings or {}}, "status": {
        "settings": {"ProcTurboMode": "Enabled", "SriovGlobalEnable": "Disabled"}, "conditions": judged,
        "schema": {"name": "schema-1", "namespace": "metal"}}})
    api.add("FirmwareSchema", {"metadata": {"name": "schema-1", "namespace": "metal"}, "spec": {"schema": SCHEMA}})
    if policy is not None:
        api.add("HostUpdatePolicy", {"metadata": {"name": "host-1", "namespace": "metal"}, "spec": policy})


class Servicing(threading.Thread):
    """baremetal-operator in short: its HFS and HFC controllers judge every new spec (a generation of their own,
    which the in-memory server does not count), and a provisioned host that is off while spec.online, with a
    HostUpdatePolicy ``onReboot``, is serviced: ``servicing``, then the update flashed (the version is the url's
    file name) and the settings applied, then ``OK`` and on; with ``fail``, ``error`` and its message instead."""

    def __init__(self, api, fail=None):
        super().__init__(daemon=True)
        self.api, self.fail = api, fail
        self.specs = {}
        self.operational = []
        self.stopped = False

    def run(self):
        while not self.stopped:
            with self.api.lock:
                self.api.lock.wait(0.05)
                for kind in ("HostFirmwareComponents", "HostFirmwareSettings"):
                    self.judge(kind)
                self.host()

    def store(self, kind, obj):
        self.api._store(kind, "metal", "host-1", obj, "MODIFIED")  # pylint: disable=protected-access

    def judge(self, kind):
        obj = self.api.get(kind, "host-1", "metal")
        spec = json.dumps(obj["spec"], sort_keys=True)
        if self.specs.get(kind, spec) == spec and kind in self.specs:
            return
        self.specs[kind] = spec
        obj = json.loads(json.dumps(obj))
        if kind == "HostFirmwareComponents":
            changed = obj["spec"]["updates"] != (obj["status"].get("updates") or [])
        else:
            changed = any(obj["status"]["settings"].get(k) != str(v) for k, v in obj["spec"]["settings"].items())
        generation = obj["metadata"]["generation"] + 1
        obj["metadata"]["generation"] = generation
        obj["status"]["conditions"] = [
            {"type": "ChangeDetected", "status": str(changed), "observedGeneration": generation},
            {"type": "Valid", "status": "True", "observedGeneration": generation}]
        self.store(kind, obj)

    def host(self):
        current = json.loads(json.dumps(self.api.get("BareMetalHost", "host-1", "metal")))
        status = current["status"]
        held = any(key.startswith("reboot.metal3.io") for key in current["metadata"].get("annotations") or {})
        policy = (self.api.get("HostUpdatePolicy", "host-1", "metal") or {}).get("spec") or {}
        if status.get("operationalStatus") == "servicing":
            if self.fail:
                status.update(operationalStatus="error", errorType="servicing error", errorMessage=self.fail,
                              errorCount=status.get("errorCount", 0) + 1)
            else:
                self.apply()
                status.update(operationalStatus="OK", poweredOn=True)
        elif not status["poweredOn"] and current["spec"]["online"] and status.get("operationalStatus") != "error" \
                and policy.get("firmwareUpdates") == policy.get("firmwareSettings") == "onReboot" and self.pending():
            status["operationalStatus"] = "servicing"
        elif status["poweredOn"] != (current["spec"]["online"] and not held) and status.get("operationalStatus") != "error":
            status["poweredOn"] = not status["poweredOn"]
        else:
            return
        self.operational.append(status.get("operationalStatus"))
        self.store("BareMetalHost", current)

    def pending(self):
        return any(c["type"] == "ChangeDetected" and c["status"] == "True"
                   for kind in ("HostFirmwareComponents", "HostFirmwareSettings")
                   for c in self.api.get(kind, "host-1", "metal")["status"]["conditions"])

    def apply(self):
        hfc = json.loads(json.dumps(self.api.get("HostFirmwareComponents", "host-1", "metal")))
        for update in hfc["spec"]["updates"]:
            for component in hfc["status"]["components"]:
                if component["component"] == update["component"]:
                    version = update["url"].rsplit("/", 1)[-1]
                    component.update(currentVersion=version, lastVersionFlashed=version, updatedAt="2026-11-29T10:00:00Z")
        hfc["status"]["updates"] = hfc["spec"]["updates"]
        hfc["status"]["conditions"][0]["status"] = "False"
        self.store("HostFirmwareComponents", hfc)
        hfs = json.loads(json.dumps(self.api.get("HostFirmwareSettings", "host-1", "metal")))
        hfs["status"]["settings"].update((k, str(v)) for k, v in hfs["spec"]["settings"].items())
        hfs["status"]["conditions"][0]["status"] = "False"
        self.store("HostFirmwareSettings", hfs)


@pytest.fixture
def metal3_api():
    client, server = cluster(namespaces=("metal",))
    server.client = client
    server.servicing = None
    yield server
    if server.servicing is not None:
        server.servicing.stopped = True
        server.servicing.join(5)


def serve(api, fail=None):
    api.servicing = Servicing(api, fail)
    api.servicing.start()
    return api.servicing


def read_machine(api):
    """The machine as the servicing runner reads it first: the versions and settings it reports."""
    machine = metal3.Metal3Machine(api.client, api.get("BareMetalHost", "host-1", "metal"))
    return machine, machine.firmware_versions(), machine.bios_attributes()


def test_firmware_and_bios_are_asked_in_the_hosts_objects_and_applied_by_servicing_on_the_reboot(metal3_api):
    api = metal3_api
    api.add("BareMetalHost", host())
    firmware_objects(api)
    operator = serve(api)
    machine, versions, attributes = read_machine(api)
    assert versions == {"bios": "1.0.0", "bmc": "5.10.0"}
    assert attributes == {"ProcTurboMode": "Enabled", "SriovGlobalEnable": "Disabled"}
    updates = [{"component": "bios", "url": "https://fw.example/2.0.0", "version": "2.0.0"}]
    machine.check_changes(updates, {"ProcTurboMode": "Disabled"})
    assert set((p.verb, p.resource) for p in machine.permissions()) >= {
        ("patch", "hostfirmwarecomponents"), ("patch", "hostfirmwaresettings"), ("get", "firmwareschemas"),
        ("create", "hostupdatepolicies"), ("watch", "hostfirmwarecomponents")}

    machine.update_firmware("bios", "https://fw.example/2.0.0", 10)
    machine.set_bios({"ProcTurboMode": "Disabled"})
    # The policy is opt-in: with none, the reboot would apply nothing, so one is made saying onReboot for both.
    assert api.get("HostUpdatePolicy", "host-1", "metal")["spec"] == {"firmwareUpdates": "onReboot",
                                                                      "firmwareSettings": "onReboot"}
    assert api.get("HostFirmwareComponents", "host-1", "metal")["spec"]["updates"] == [
        {"component": "bios", "url": "https://fw.example/2.0.0"}]
    assert api.get("HostFirmwareSettings", "host-1", "metal")["spec"]["settings"] == {"ProcTurboMode": "Disabled"}

    sent = machine.restart(10)
    assert sent == "reboot.metal3.io/kubevirt-ops.maintenance soft, removed once off, serviced by baremetal-operator"
    assert operator.operational[-2:] == ["servicing", "OK"]
    assert machine.firmware_versions()["bios"] == "2.0.0" and machine.bios_attributes()["ProcTurboMode"] == "Disabled"
    assert metal3.REBOOT_ANNOTATION not in (api.get("BareMetalHost", "host-1", "metal")["metadata"].get(
        "annotations") or {})


def test_servicing_that_fails_is_a_machine_error_with_the_hosts_error_message(metal3_api):
    api = metal3_api
    api.add("BareMetalHost", host())
    firmware_objects(api, policy={"firmwareUpdates": "onReboot", "firmwareSettings": "onReboot"})
    serve(api, fail="Firmware update failed for node n-1, firmware https://fw.example/2.0.0. Error: it broke.")
    machine, _versions, _attributes = read_machine(api)
    machine.update_firmware("bios", "https://fw.example/2.0.0", 10)
    with pytest.raises(MachineError) as failed:
        machine.restart(10)
    assert failed.value.msg == (
        "The BareMetalHost metal/host-1 failed to service the machine (operationalStatus error, errorType servicing "
        "error): Firmware update failed for node n-1, firmware https://fw.example/2.0.0. Error: it broke; "
        "baremetal-operator retries while the host's HostFirmwareComponents and HostFirmwareSettings ask for the "
        "change, with the machine off: correct or remove it.")


BIOS_UPDATE = [{"component": "bios", "url": "https://fw.example/2.0.0", "version": "2.0.0"}]


@pytest.mark.parametrize("objects, provisioned, updates, settings, error, words", [
    ({"policy": {"firmwareUpdates": "onPreparing"}}, True, BIOS_UPDATE, {}, BlockedError,
     "HostUpdatePolicy metal/host-1 says firmwareUpdates: onPreparing, so baremetal-operator applies firmware updates "
     "to the machine only while it prepares the host for provisioning, never on a reboot; nothing was changed"),
    ({}, False, BIOS_UPDATE, {}, BlockedError, "is not registered, not provisioned"),
    ({"updates": [{"component": "bmc", "url": "https://fw.example/6.0.0"}]}, True, BIOS_UPDATE, {}, BlockedError,
     "HostFirmwareComponents metal/host-1 asks for updates not applied yet (bmc https://fw.example/6.0.0)"),
    ({"applied": [{"component": "bios", "url": "https://fw.example/2.0.0"}],
      "updates": [{"component": "bios", "url": "https://fw.example/2.0.0"}]}, True, BIOS_UPDATE, {}, InvalidInputError,
     "Option firmware: the image https://fw.example/2.0.0 of component bios was applied before"),
    ({"settings": {"SriovGlobalEnable": "Enabled"}}, True, [], {"ProcTurboMode": "Disabled"}, BlockedError,
     "HostFirmwareSettings metal/host-1 asks for settings not applied yet (SriovGlobalEnable=Enabled)"),
    ({}, True, [], {"ProcTurboMode": "Fast"}, InvalidInputError,
     "Option bios: ProcTurboMode=Fast is refused by the FirmwareSchema metal/schema-1 of the BareMetalHost "
     "metal/host-1: Setting ProcTurboMode is invalid, unknown enumeration value - Fast (it allows Enabled, Disabled); "
     "nothing was changed."),
])
def test_what_the_operator_would_not_apply_on_a_reboot_is_refused_before_anything_changes(
        metal3_api, objects, provisioned, updates, settings, error, words):
    api = metal3_api
    api.add("BareMetalHost", host(provisioned=provisioned))
    firmware_objects(api, **objects)
    machine, _versions, _attributes = read_machine(api)
    with pytest.raises(error) as refused:
        machine.check_changes(updates, settings)
    assert words in refused.value.msg, refused.value.msg
    assert api.writes() == []


@pytest.mark.parametrize("name, value, problem", [
    ("ProcTurboMode", "Disabled", None),
    ("SriovGlobalEnable", "Whatever", None),  # no registry entry: upstream lets any value through
    ("NumCores", "9", "Setting NumCores is invalid, integer 9 is below minimum value 10"),
    ("NumCores", "x", "Setting NumCores is invalid, String x entered while integer expected"),
    ("SerialNumber", "S" * 17, "Setting SerialNumber is invalid, string %s length is above maximum length 16" % ("S" * 17)),
    ("QuietBoot", "yes", "Setting QuietBoot is invalid, yes is not a boolean"),
    ("SecureBootStatus", "Enabled", "Setting SecureBootStatus is invalid, it is ReadOnly"),
    ("AdminPassword", "x", "Setting AdminPassword is invalid, Password fields can't be set"),
    ("Missing", "x", "Setting Missing is invalid, it is not in the associated schema"),
])
def test_bios_values_are_judged_as_upstreams_firmware_schema_does(name, value, problem):
    schema = dict(SCHEMA, NumCores={"attribute_type": "Integer", "lower_bound": 10, "upper_bound": 20},
                  SerialNumber={"attribute_type": "String", "max_length": 16}, QuietBoot={"attribute_type": "Boolean"},
                  SecureBootStatus={"attribute_type": "Enumeration", "read_only": True}, AdminPassword={})
    assert metal3.invalid_setting(name, value, schema) == problem
