"""node_machine on the lab's machines (lab/machines: each worker's Redfish BMC, a sushy-tools emulator whose
firmware and BIOS changes take effect at the next boot, and whose power reaches the node: a restart takes the
kubelet down and brings it back with a new boot ID). A drained node's machine gets a BIOS image, a BIOS setting
and a restart through its BMC, and the module verifies both after the node is back; everything asked is checked
before anything changes; a machine is never restarted under a VM."""

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import workloads
from safety import ResourceVersions, wait_stable

from lab import metal3
from lab import nodes as lab_nodes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

WAIT = 300


def take_worker(lab, k8s):
    """(node, bmc.json entry, power log path) of the last worker, cordoned."""
    paths = LabPaths(lab.state_dir)
    bmcs = lab_bmc.load(paths)
    node = sorted(bmcs)[-1]
    client.CoreV1Api(k8s).patch_node(node, {"spec": {"unschedulable": True}})
    return node, dict(bmcs[node]), paths.machines / lab_bmc.POWER_LOG


def give_back(k8s, node, entry):
    """The worker's machine on, its node uncordoned, Ready and with its pods."""
    bmc = lab_bmc.Bmc(entry)
    if bmc.power_state() != "On":
        bmc.reset("On")
        wait_for(lambda: bmc.power_state() == "On", 60, "the machine of %s to be On" % node)
    client.CoreV1Api(k8s).patch_node(node, {"spec": {"unschedulable": None}})
    wait_for(lambda: lab_nodes._all(k8s, [node], lab_nodes.is_recovered), WAIT, "node %s Ready again" % node)
    workloads.wait_node_pods_ready(k8s, node, WAIT)


@pytest.fixture
def machine(lab, k8s):
    """The last worker's machine reached through its BMC alone: its BareMetalHost (``lab up`` makes one) is
    detached and deleted first, as an administrator does before driving a Metal3 host's BMC (else the operator
    would power it back as ``spec.online`` says), and made again afterwards."""
    node, entry, log = take_worker(lab, k8s)
    metal3.release_host(k8s, node)
    yield node, entry, log
    give_back(k8s, node, entry)
    metal3.restore_host(k8s, lab_bmc.load(LabPaths(lab.state_dir)), node)


@pytest.fixture
def host_machine(lab, k8s):
    """The last worker with the BareMetalHost ``lab up`` made for it (in ``openshift-machine-api``, linked to the
    node by the annotation ``kubevirt-ops.lab/node``); afterwards as it was."""
    node, entry, log = take_worker(lab, k8s)
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    host = metal3.restore_host(k8s, bmcs, node)
    yield node, host, log
    give_back(k8s, node, entry)
    metal3.restore_host(k8s, bmcs, node)


def power_lines(path, node):
    """The power states the machine of ``node`` went through so far (lab/machines/redfish.py LAB_POWER_LOG)."""
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if json.loads(line)["name"] == node]


def boot_id(k8s, node):
    return client.CoreV1Api(k8s).read_node(node).status.node_info.boot_id


def test_a_drained_node_gets_firmware_and_a_bios_setting_through_its_bmc_and_comes_back(
        k8s, run_module, machine, tmp_path):
    node, entry, log = machine
    bmc = lab_bmc.Bmc(entry)
    shown = bmc.show()
    version = lab_bmc.flashed_version(shown["bios_version"])
    turbo = "Disabled" if shown["bios"]["ProcTurboMode"] == "Enabled" else "Enabled"
    args = {"name": node, "bmc": lab_bmc.module_option(entry), "bios": {"ProcTurboMode": turbo},
            "firmware": [{"component": "bios", "url": "https://firmware.example/bios-%s.bin" % version,
                          "version": version}]}
    before = boot_id(k8s, node)
    powered = len(power_lines(log, node))

    checked = run_module("node_machine", args, check=True)
    assert not checked.get("failed") and checked["changed"], checked
    assert checked["machine"]["firmware_before"] == {"bios": shown["bios_version"]}
    assert checked["machine"]["firmware_after"] == {"bios": version}
    assert checked["machine"]["bios_changed"] == {"ProcTurboMode": {"before": shown["bios"]["ProcTurboMode"],
                                                                    "after": turbo}}
    assert checked["machine"]["actions"] == [] and checked["running_vms"] == []
    assert bmc.show() == shown and len(power_lines(log, node)) == powered and boot_id(k8s, node) == before
    assert checked["machine"]["power_state"] == "On"

    progress = tmp_path / "progress.log"
    done = run_module("node_machine", dict(args, progress_file=str(progress)))
    assert not done.get("failed"), done
    summary = done["machine"]
    assert done["changed"] and summary["road"] == "redfish" and summary["address"] == entry["address"]
    assert summary["boot_id_before"] == before and summary["boot_id_after"] not in (None, before)
    assert summary["boot_id_after"] == boot_id(k8s, node)
    assert summary["firmware_before"] == {"bios": shown["bios_version"]} and summary["firmware_after"] == {"bios": version}
    assert [a["action"] for a in summary["actions"]] == [
        "firmware bios %s" % version, "bios ProcTurboMode", "restart (GracefulRestart)"], summary["actions"]
    assert all(a["seconds"] >= 0 and a["started"] for a in summary["actions"])
    now = bmc.show()
    assert now["bios_version"] == version and now["bios"]["ProcTurboMode"] == turbo and now["power_state"] == "On"
    assert lab_nodes.is_ready(client.CoreV1Api(k8s).read_node(node))
    assert "phase=Succeeded machine serviced" in progress.read_text()
    assert entry["password"] not in json.dumps(done) + progress.read_text()

    # Asked again: the machine runs what was asked, so nothing is sent to it.
    powered = len(power_lines(log, node))
    again = run_module("node_machine", args)
    assert not again.get("failed") and again["changed"] is False and again["machine"]["actions"] == [], again
    assert len(power_lines(log, node)) == powered and boot_id(k8s, node) == summary["boot_id_after"]


def test_a_version_the_machine_does_not_report_after_the_restart_fails_the_task(k8s, run_module, machine):
    node, entry, _log = machine
    bmc = lab_bmc.Bmc(entry)
    running = bmc.show()["bios_version"]
    claimed = "9.9.9"
    failed = run_module("node_machine", {"name": node, "bmc": lab_bmc.module_option(entry), "firmware": [
        {"component": "bios", "url": "https://firmware.example/bios-9.bin", "version": claimed}]})
    assert failed.get("failed"), failed
    # The emulator's flash raises the minor version, whatever the image says (sushy-tools update_service.py).
    assert failed["msg"] == ("Node %s's machine booted again but did not take what was asked: firmware bios reports "
                             "version %s, not %s (firmware[0].version)." % (node, lab_bmc.flashed_version(running), claimed))
    assert failed["machine"]["boot_id_after"] not in (None, failed["machine"]["boot_id_before"])


def test_what_the_machine_does_not_have_and_bad_credentials_are_refused_and_nothing_changes(
        k8s, run_module, machine):
    node, entry, log = machine
    bmc = lab_bmc.Bmc(entry)
    wait_stable()
    versions = ResourceVersions(k8s)
    shown, pending, powered = bmc.show(), bmc.get("/BIOS/Settings")["Attributes"], len(power_lines(log, node))

    unknown = run_module("node_machine", {"name": node, "bmc": lab_bmc.module_option(entry), "bios": {"NoSuchSetting": "On"},
                                          "firmware": [{"component": "nic-7", "url": "https://firmware.example/n.bin",
                                                        "version": "1.0"}]})
    assert unknown.get("failed"), unknown
    # The machine's firmware: its System's BIOS version and its own entries of the BMC's inventory.
    assert unknown["msg"] == (
        "Option firmware[0].component nic-7 names no firmware of node %s's machine (it reports bios, %s.BIOS, %s.BMC); "
        "option bios names attribute NoSuchSetting, which node %s's machine does not have; nothing was changed."
        % (node, node, node, node))

    wrong = run_module("node_machine", {"name": node, "reboot": True,
                                        "bmc": lab_bmc.module_option(entry, password="not-" + entry["password"])})
    assert wrong.get("failed"), wrong
    assert wrong["msg"].startswith("The BMC at %s could not read the machine" % entry["address"]), wrong["msg"]
    assert "refused the credentials of user %s (HTTP 401)" % entry["username"] in wrong["msg"]
    assert entry["password"] not in json.dumps(wrong)

    assert versions.changes() == []
    assert bmc.show() == shown and bmc.get("/BIOS/Settings")["Attributes"] == pending
    assert len(power_lines(log, node)) == powered


def test_a_machine_is_never_restarted_under_a_vm(k8s, namespace, run_module, machine):
    node, entry, log = machine
    core = client.CoreV1Api(k8s)
    core.patch_node(node, {"spec": {"unschedulable": None}})
    workloads.create_vm(k8s, namespace, "guest", memory="256Mi", nodes=[node])
    workloads.wait_vms_running(k8s, namespace, ["guest"], timeout=WAIT)
    core.patch_node(node, {"spec": {"unschedulable": True}})
    wait_stable()
    versions = ResourceVersions(k8s)
    powered = len(power_lines(log, node))

    refused = run_module("node_machine", {"name": node, "bmc": lab_bmc.module_option(entry), "reboot": True})
    assert refused.get("failed"), refused
    assert refused["msg"] == ("Node %s's machine was not restarted: VMs still run there: %s/guest; drain the node first "
                              "(node_maintenance); nothing was changed." % (node, namespace))
    checked = run_module("node_machine", {"name": node, "bmc": lab_bmc.module_option(entry), "reboot": True}, check=True)
    assert not checked.get("failed") and checked["running_vms"] == ["%s/guest" % namespace], checked
    assert versions.changes() == [] and len(power_lines(log, node)) == powered
    assert workloads.vm_nodes(k8s, namespace) == {"guest": node}


METAL3 = ("metal3.io", "v1alpha1", "baremetalhosts")


def test_through_a_bare_metal_host_firmware_and_bios_are_applied_by_servicing_on_its_reboot(
        lab, k8s, run_module, host_machine):
    node, host, log = host_machine
    namespace, name = host["metadata"]["namespace"], host["metadata"]["name"]
    custom = client.CustomObjectsApi(k8s)
    bmc = lab_bmc.Bmc(lab_bmc.load(LabPaths(lab.state_dir))[node])

    def read(plural):
        try:
            return custom.get_namespaced_custom_object(*METAL3[:2], namespace, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def firmware_objects():
        return dict((plural, (read(plural) or {}).get("metadata", {}).get("resourceVersion"))
                    for plural in ("hostfirmwarecomponents", "hostfirmwaresettings", "hostupdatepolicies"))

    # The operator makes the host's firmware objects once it registered it (the fixture may have made the host anew).
    wait_for(lambda: ((read("hostfirmwarecomponents") or {}).get("status") or {}).get("components") and (
        (read("hostfirmwaresettings") or {}).get("status") or {}).get("settings"), WAIT,
        "the firmware objects of BareMetalHost %s/%s" % (namespace, name))
    shown = bmc.show()
    version = lab_bmc.flashed_version(shown["bios_version"])
    turbo = "Disabled" if shown["bios"]["ProcTurboMode"] == "Enabled" else "Enabled"
    road = {"name": node, "bmh": {"name": name, "namespace": namespace}}
    firmware = [{"component": "bios", "url": "https://firmware.example/bios-%s.bin" % version, "version": version}]

    # Bad input: one sentence, and nothing changed in the cluster (the host's firmware objects included) or on the BMC.
    wait_stable()
    versions, objects = ResourceVersions(k8s), firmware_objects()
    pending = bmc.get("/BIOS/Settings")["Attributes"]
    refused = run_module("node_machine", dict(road, firmware=firmware, bios={"NoSuchSetting": "On"}))
    assert refused.get("failed"), refused
    assert refused["msg"] == ("Option bios names attribute NoSuchSetting, which node %s's machine does not have; "
                              "nothing was changed." % node)
    assert versions.changes() == [] and firmware_objects() == objects
    assert bmc.show() == shown and bmc.get("/BIOS/Settings")["Attributes"] == pending

    before = boot_id(k8s, node)
    powered = len(power_lines(log, node))
    done = run_module("node_machine", dict(road, firmware=firmware, bios={"ProcTurboMode": turbo}))
    assert not done.get("failed"), done
    summary = done["machine"]
    assert summary["road"] == "metal3" and summary["bmh"] == "%s/%s" % (namespace, name)
    assert summary["firmware_before"] == {"bios": shown["bios_version"]} and summary["firmware_after"] == {"bios": version}
    assert summary["bios_changed"] == {"ProcTurboMode": {"before": shown["bios"]["ProcTurboMode"], "after": turbo}}
    assert summary["boot_id_before"] == before and summary["boot_id_after"] not in (None, before)
    # Asked in the host's HostFirmwareComponents and -Settings, applied while the operator serviced the host on the
    # reboot of the collection's own annotation (the host's spec.online, its owner's, left alone).
    assert [a["action"] for a in summary["actions"]] == [
        "firmware bios %s" % version, "bios ProcTurboMode",
        "restart (reboot.metal3.io/kubevirt-ops.maintenance soft, removed once off, serviced by baremetal-operator)"], \
        summary["actions"]
    assert read("hostupdatepolicies")["spec"] == {"firmwareSettings": "onReboot", "firmwareUpdates": "onReboot"}
    assert [c["currentVersion"] for c in read("hostfirmwarecomponents")["status"]["components"]
            if c["component"] == "bios"] == [version]
    assert read("hostfirmwaresettings")["status"]["settings"]["ProcTurboMode"] == turbo
    now = bmc.show()
    assert now["bios_version"] == version and now["firmware"]["bios"] == {"version": version, "staged": None}
    assert now["bios"]["ProcTurboMode"] == turbo and now["power_state"] == "On"
    after = read("baremetalhosts")
    assert after["spec"]["online"] is True and after["status"]["poweredOn"] is True
    assert after["status"]["operationalStatus"] == "OK"
    assert not [a for a in after["metadata"].get("annotations") or {} if a.startswith("reboot.metal3.io")]
    # The operator powered the machine off for the reboot; servicing powered it on to run the new firmware.
    assert [json.loads(line)["power_state"] for line in power_lines(log, node)[powered:]] == ["Off", "On"]
    assert lab_nodes.is_ready(client.CoreV1Api(k8s).read_node(node))

    # Asked again: the host reports what was asked, so nothing is written and the machine is left alone.
    objects, powered = firmware_objects(), len(power_lines(log, node))
    again = run_module("node_machine", dict(road, firmware=firmware, bios={"ProcTurboMode": turbo}))
    assert not again.get("failed") and again["changed"] is False and again["machine"]["actions"] == [], again
    assert firmware_objects() == objects and len(power_lines(log, node)) == powered
