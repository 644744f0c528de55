"""The lab's Metal3: a BareMetalHost per worker (``lab up``), its CRDs generated from baremetal-operator's API
module (lab/metal3.py), and the operator's stand-in (lab/standins/baremetal.py, lab/standins/firmware.py) acting
through the machine's Redfish BMC (lab/machines), whose power reaches the node (lab/standins/machines.py): power,
reboots, errors, and firmware and BIOS settings applied while the host is serviced on a reboot."""

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from lab import metal3
from lab.errors import LabError
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

WAIT = 120
V1 = ("metal3.io", "v1alpha1")


class Host:
    def __init__(self, lab, k8s, node):
        self.paths = LabPaths(lab.state_dir)
        self.k8s, self.node = k8s, node
        self.bmcs = lab_bmc.load(self.paths)
        found = metal3.restore_host(k8s, self.bmcs, node)
        self.namespace, self.name = found["metadata"]["namespace"], found["metadata"]["name"]
        self.custom = client.CustomObjectsApi(k8s)

    def get(self):
        return self.custom.get_namespaced_custom_object(*V1, self.namespace, "baremetalhosts", self.name)

    def status(self):
        return self.get().get("status") or {}

    def patch(self, body):
        return self.custom.patch_namespaced_custom_object(*V1, self.namespace, "baremetalhosts", self.name, body)

    def annotate(self, **annotations):
        self.patch({"metadata": {"annotations": {k.replace("__", "/"): v for k, v in annotations.items()}}})

    def wait(self, what, check, timeout=WAIT):
        wait_for(lambda: check(self.get()), timeout, "BareMetalHost %s/%s: %s" % (self.namespace, self.name, what))

    def power_states(self):
        log = self.paths.machines / lab_bmc.POWER_LOG
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line)["power_state"] for line in lines if json.loads(line)["name"] == self.node]

    def boot_id(self):
        return client.CoreV1Api(self.k8s).read_node(self.node).status.node_info.boot_id

    # -- its HostFirmwareSettings, HostFirmwareComponents, HostUpdatePolicy (same name and namespace) --------------

    def firmware(self, plural):
        """The host's HFS or HFC, once the operator made it and wrote its status."""
        def read():
            try:
                found = self.custom.get_namespaced_custom_object(*V1, self.namespace, plural, self.name)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            return found if (found.get("status") or {}).get("conditions") else None

        return wait_for(read, WAIT, "%s %s/%s with a status" % (plural, self.namespace, self.name))

    def ask(self, plural, spec):
        """A new spec for the host's HFS or HFC; returns once the operator judged it (its conditions name the new
        generation), as judged."""
        generation = self.custom.patch_namespaced_custom_object(*V1, self.namespace, plural, self.name, {
            "spec": spec})["metadata"]["generation"]
        wait_for(lambda: condition(self.firmware(plural), "ChangeDetected").get("observedGeneration") == generation,
                 WAIT, "%s %s/%s judged" % (plural, self.namespace, self.name))
        return self.firmware(plural)

    def policy(self, **spec):
        """The host's HostUpdatePolicy with ``spec``."""
        body = {"apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy", "spec": spec,
                "metadata": {"name": self.name, "namespace": self.namespace}}
        try:
            self.custom.create_namespaced_custom_object(*V1, self.namespace, "hostupdatepolicies", body)
        except ApiException as e:
            if e.status != 409:
                raise
            self.custom.patch_namespaced_custom_object(*V1, self.namespace, "hostupdatepolicies", self.name,
                                                       {"spec": spec})

    def reboot_and_follow(self, done, timeout=WAIT):
        """Annotate ``reboot.metal3.io`` and return every ``operationalStatus`` the host reports from then (a watch
        from the version before the annotation, so that none is missed) until ``done(host)``."""
        version = self.get()["metadata"]["resourceVersion"]
        self.annotate(**{"reboot.metal3.io": ""})
        seen = []
        stream = watch.Watch().stream(self.custom.list_namespaced_custom_object, *V1, self.namespace,
                                      "baremetalhosts", field_selector="metadata.name=%s" % self.name,
                                      resource_version=version, timeout_seconds=timeout)
        for event in stream:
            status = event["object"].get("status") or {}
            if not seen or seen[-1] != status.get("operationalStatus"):
                seen.append(status.get("operationalStatus"))
            if done(event["object"]):
                return seen
        raise AssertionError("BareMetalHost %s/%s: only %s after %s s" % (self.namespace, self.name, seen, timeout))


def condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


@pytest.fixture
def host(lab, k8s):
    """The first worker's BareMetalHost, as ``lab up`` made it; afterwards as it was, its machine on."""
    node = sorted(lab_bmc.load(LabPaths(lab.state_dir)))[0]
    made = Host(lab, k8s, node)
    yield made
    lab_bmc.set_faults(made.paths, node)
    made.patch({"metadata": {"annotations": {a: None for a in made.get()["metadata"].get("annotations") or {}
                                             if a.startswith("reboot.metal3.io") or a.startswith("baremetalhost.")}},
                "spec": {"disablePowerOff": False}})
    metal3.restore_host(k8s, made.bmcs, node, timeout=300)


@pytest.fixture
def serviced(host):
    """The host, whose HostUpdatePolicy the test makes; afterwards without one, and with nothing pending in its
    HostFirmwareComponents and -Settings (a servicing that failed is aborted: the host is OK and on again)."""
    yield host
    try:
        host.custom.delete_namespaced_custom_object(*V1, host.namespace, "hostupdatepolicies", host.name)
    except ApiException as e:
        if e.status != 404:
            raise
    hfc = host.firmware("hostfirmwarecomponents")
    host.custom.patch_namespaced_custom_object(*V1, host.namespace, "hostfirmwarecomponents", host.name, {
        "spec": {"updates": hfc["status"].get("updates") or []}})
    hfs = host.firmware("hostfirmwaresettings")
    host.custom.patch_namespaced_custom_object(*V1, host.namespace, "hostfirmwaresettings", host.name, {
        "spec": {"settings": {name: None for name in hfs["spec"].get("settings") or {}}}})


def test_the_workers_have_hosts_on_their_bmcs_with_crds_from_the_api_module(lab, k8s, host):
    crd = client.ApiextensionsV1Api(k8s).read_custom_resource_definition("baremetalhosts.metal3.io")
    assert crd.metadata.annotations["controller-gen.kubebuilder.io/version"] == metal3.CONTROLLER_TOOLS_VERSION
    assert crd.metadata.labels[metal3.VERSION_LABEL] == metal3.VERSION
    for kind in ("hostfirmwaresettings", "hostfirmwarecomponents", "hostupdatepolicies", "firmwareschemas"):
        client.ApiextensionsV1Api(k8s).read_custom_resource_definition("%s.metal3.io" % kind)
    got = host.get()
    assert got["spec"]["bmc"] == {"address": "redfish+" + host.bmcs[host.node]["address"],
                                  "credentialsName": "%s-bmc-secret" % host.node}
    assert got["metadata"]["annotations"][metal3.NODE_ANNOTATION] == host.node
    assert "baremetalhost.metal3.io" in got["metadata"]["finalizers"]
    status = got["status"]
    assert status["provisioning"]["state"] == "provisioned" and status["operationalStatus"] == "OK"
    assert status["poweredOn"] is True and status["errorCount"] == 0
    assert status["goodCredentials"]["credentials"] == {"name": "%s-bmc-secret" % host.node,
                                                        "namespace": metal3.NAMESPACE}


def test_reboot_annotation_power_cycles_the_machine_through_its_bmc(host):
    before, boot_id = len(host.power_states()), host.boot_id()
    host.annotate(**{"reboot.metal3.io": ""})
    # The one-off reboot: off, the annotation dropped once off, on again as spec.online says.
    host.wait("powered off and on again with the annotation gone", lambda h: h["status"]["poweredOn"] is True
              and "reboot.metal3.io" not in h["metadata"]["annotations"] and len(host.power_states()) >= before + 2)
    assert host.power_states()[before:] == ["Off", "On"]
    wait_for(lambda: host.boot_id() != boot_id, WAIT, "node %s to boot with a new boot ID" % host.node)
    assert host.status()["operationalStatus"] == "OK"


def test_a_paused_host_is_left_alone(host):
    host.annotate(**{"baremetalhost.metal3.io__paused": ""})
    before = len(host.power_states())
    host.annotate(**{"reboot.metal3.io__lab-test": json.dumps({"mode": "hard"})})
    with pytest.raises(LabError):
        # Nothing may happen: wait a while for a power change that must not come.
        wait_for(lambda: len(host.power_states()) > before or host.status().get("poweredOn") is False, 8,
                 "the paused host to stay as it is")
    assert host.get()["spec"]["online"] is True
    host.annotate(**{"baremetalhost.metal3.io__paused": None})
    host.wait("powered off once no longer paused", lambda h: h["status"]["poweredOn"] is False)
    assert host.power_states()[before:] == ["Off"]


def test_a_bmc_that_refuses_power_is_an_error_until_it_is_back(host):
    lab_bmc.set_faults(host.paths, host.node, refuse_power=True)
    host.annotate(**{"reboot.metal3.io__lab-test": json.dumps({"mode": "hard"})})
    host.wait("in error", lambda h: h["status"]["operationalStatus"] == "error")
    status = host.status()
    assert status["errorType"] == "power management error" and status["errorCount"] >= 1
    assert "ForceOff" in status["errorMessage"] and "409" in status["errorMessage"], status["errorMessage"]
    assert host.bmcs[host.node]["password"] not in json.dumps(host.get())
    lab_bmc.set_faults(host.paths, host.node)
    # Retried with backoff (at most 30 s here): the power-off goes through and the error is gone.
    host.wait("off and OK", lambda h: h["status"]["poweredOn"] is False
              and h["status"]["operationalStatus"] == "OK" and not h["status"].get("errorType"))
    host.annotate(**{"reboot.metal3.io__lab-test": None})
    host.wait("on again", lambda h: h["status"]["poweredOn"] is True and h["status"]["errorCount"] == 0)


def test_power_off_disabled_refuses_online_false_and_reboots_instead(host):
    host.patch({"spec": {"disablePowerOff": True}})
    with pytest.raises(ApiException) as refused:
        host.patch({"spec": {"online": False}})
    assert refused.value.status == 403
    assert "node can't simultaneously have online set to false and have power off disabled" in refused.value.body
    before = len(host.power_states())
    host.annotate(**{"reboot.metal3.io": ""})
    # A reboot instead of a power-off (Ironic's ``Rebooting``): the machine restarts and the host stays on.
    host.wait("rebooted with the annotation gone", lambda h: "reboot.metal3.io" not in h["metadata"]["annotations"]
              and len(host.power_states()) >= before + 2)
    assert host.power_states()[before:] == ["Off", "On"]
    host.wait("on", lambda h: h["status"]["poweredOn"] is True)


def test_a_detached_host_leaves_the_machine_alone(host):
    host.annotate(**{"baremetalhost.metal3.io__detached": ""})
    host.wait("detached", lambda h: h["status"]["operationalStatus"] == "detached")
    machine = lab_bmc.Bmc(host.bmcs[host.node])
    machine.reset("ForceOff")
    wait_for(lambda: machine.power_state() == "Off", 60, "the machine of %s to be Off" % host.node)
    assert host.status()["poweredOn"] is True  # not managed: nothing reads the BMC
    host.annotate(**{"baremetalhost.metal3.io__detached": None})
    # Managed again: the operator sees the machine off, and powers it on as spec.online says.
    host.wait("OK and on again", lambda h: h["status"]["operationalStatus"] == "OK" and h["status"]["poweredOn"]
              is True and machine.power_state() == "On", timeout=WAIT + 60)


def test_a_reboot_services_the_host_with_its_firmware_update_and_bios_setting(serviced):
    host = serviced
    machine = lab_bmc.Bmc(host.bmcs[host.node])
    running = machine.firmware()["bios"]["version"]
    version = lab_bmc.flashed_version(running)
    turbo = "Disabled" if machine.get("/BIOS")["Attributes"]["ProcTurboMode"] == "Enabled" else "Enabled"
    url = "https://firmware.example/bios-%s.bin" % version
    # As the operator made them at registration: the BMC's firmware and BIOS settings, described by a
    # FirmwareSchema made from the BMC's BIOS attribute registry.
    hfs = host.firmware("hostfirmwaresettings")
    assert [c["currentVersion"] for c in host.firmware("hostfirmwarecomponents")["status"]["components"]
            if c["component"] == "bios"] == [running]
    schema = host.custom.get_namespaced_custom_object(*V1, hfs["status"]["schema"]["namespace"], "firmwareschemas",
                                                      hfs["status"]["schema"]["name"])
    assert schema["spec"]["schema"]["ProcTurboMode"] == {"attribute_type": "Enumeration", "read_only": False,
                                                         "allowable_values": ["Enabled", "Disabled"]}

    host.policy(firmwareSettings="onReboot", firmwareUpdates="onReboot")
    hfc = host.ask("hostfirmwarecomponents", {"updates": [{"component": "bios", "url": url}]})
    hfs = host.ask("hostfirmwaresettings", {"settings": {"ProcTurboMode": turbo}})
    assert [condition(o, t)["status"] for o in (hfc, hfs) for t in ("ChangeDetected", "Valid")] == ["True"] * 4
    before, powered = host.boot_id(), len(host.power_states())

    seen = host.reboot_and_follow(lambda h: h["status"].get("operationalStatus") == "OK" and h["status"]["poweredOn"]
                                  and "reboot.metal3.io" not in h["metadata"]["annotations"]
                                  and len(host.power_states()) >= powered + 2)
    # Off for the reboot, serviced (the update flashed, the setting written, the machine powered on to run
    # them), then OK.
    assert seen[-2:] == ["servicing", "OK"] and "error" not in seen, seen
    assert host.power_states()[powered:] == ["Off", "On"]
    hfc, hfs = host.firmware("hostfirmwarecomponents"), host.firmware("hostfirmwaresettings")
    bios = [c for c in hfc["status"]["components"] if c["component"] == "bios"][0]
    assert bios["currentVersion"] == version and bios["lastVersionFlashed"] == version and bios["updatedAt"]
    assert hfc["status"]["updates"] == [{"component": "bios", "url": url}]
    assert hfs["status"]["settings"]["ProcTurboMode"] == turbo
    for obj in (hfc, hfs):
        assert condition(obj, "ChangeDetected")["status"] == "False" and condition(obj, "Valid")["status"] == "True"
        assert condition(obj, "ChangeDetected")["observedGeneration"] == obj["metadata"]["generation"]
    assert machine.firmware()["bios"]["version"] == version and machine.firmware()["bios"]["staged"] is None
    assert machine.get("/BIOS")["Attributes"]["ProcTurboMode"] == turbo
    wait_for(lambda: host.boot_id() != before, WAIT, "node %s to boot with a new boot ID" % host.node)


def test_a_firmware_update_that_fails_is_a_servicing_error_with_ironics_message(serviced):
    host = serviced
    machine = lab_bmc.Bmc(host.bmcs[host.node])
    running = machine.firmware()["bios"]["version"]
    url = "https://firmware.example/bios-broken.bin"
    lab_bmc.set_faults(host.paths, host.node, fail_update=True)
    host.policy(firmwareUpdates="onReboot")
    host.ask("hostfirmwarecomponents", {"updates": [{"component": "bios", "url": url}]})

    seen = host.reboot_and_follow(lambda h: h["status"].get("operationalStatus") == "error")
    assert seen[-2:] == ["servicing", "error"], seen
    status = host.status()
    assert status["errorType"] == "servicing error" and status["errorCount"] >= 1
    assert status["errorMessage"] == (
        "Firmware update failed for node %s, firmware %s. Error: Installation of image '%s' to "
        "'/redfish/v1/UpdateService/FirmwareInventory/%s.BIOS' failed." % (
            status["provisioning"]["ID"], url, url, host.node)), status["errorMessage"]
    # Nothing staged, the machine left off, and the update pending again (retried while the spec asks for it).
    bios = machine.firmware()["bios"]
    assert (bios["version"], bios["staged"]) == (running, None)
    assert status["poweredOn"] is False and machine.power_state() == "Off"
    assert not host.firmware("hostfirmwarecomponents")["status"].get("updates")


def test_a_bios_value_outside_the_schema_is_reported_invalid_and_left_out_of_servicing(serviced):
    host = serviced
    machine = lab_bmc.Bmc(host.bmcs[host.node])
    attributes = machine.get("/BIOS")["Attributes"]
    host.policy(firmwareSettings="onReboot")
    # No webhook judges HostFirmwareSettings in v0.13.2: the API takes the value, the controller's Valid condition
    # refuses it.
    hfs = host.ask("hostfirmwaresettings", {"settings": {"ProcTurboMode": "Fast"}})
    assert condition(hfs, "ChangeDetected")["status"] == "True"
    assert {k: condition(hfs, "Valid")[k] for k in ("status", "reason", "message")} == {
        "status": "False", "reason": "ConfigurationError", "message": "Invalid BIOS setting"}

    powered = len(host.power_states())
    seen = host.reboot_and_follow(lambda h: h["status"].get("operationalStatus") == "OK" and h["status"]["poweredOn"]
                                  and len(host.power_states()) >= powered + 2)
    assert "servicing" not in seen, seen
    assert machine.get("/BIOS")["Attributes"] == attributes
    assert machine.get("/BIOS/Settings")["Attributes"] == attributes
