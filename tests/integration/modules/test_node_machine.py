"""node_machine on the lab's machines (lab/machines: each worker's Redfish BMC, a sushy-tools emulator whose
firmware and BIOS changes take effect at the next boot, and whose power reaches the node: a restart takes the
kubelet down and brings it back with a new boot ID). A drained node's machine gets a BIOS image, a BIOS setting
and a restart through its BMC, and the module verifies both after the node is back; everything asked is checked
before anything changes; a machine is never restarted under a VM."""

import json

import pytest
from kubernetes import client

import workloads
from safety import ResourceVersions, wait_stable

from lab import nodes as lab_nodes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

WAIT = 300


@pytest.fixture
def machine(lab, k8s):
    """(node, bmc.json entry, power log path) of the last worker, cordoned; afterwards uncordoned, its machine on
    and its node Ready with its pods."""
    paths = LabPaths(lab.state_dir)
    bmcs = lab_bmc.load(paths)
    node = sorted(bmcs)[-1]
    core = client.CoreV1Api(k8s)
    core.patch_node(node, {"spec": {"unschedulable": True}})
    yield node, dict(bmcs[node]), paths.machines / lab_bmc.POWER_LOG
    bmc = lab_bmc.Bmc(bmcs[node])
    if bmc.power_state() != "On":
        bmc.reset("On")
        wait_for(lambda: bmc.power_state() == "On", 60, "the machine of %s to be On" % node)
    core.patch_node(node, {"spec": {"unschedulable": None}})
    wait_for(lambda: lab_nodes._all(k8s, [node], lab_nodes.is_recovered), WAIT, "node %s Ready again" % node)
    workloads.wait_node_pods_ready(k8s, node, WAIT)


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
    assert unknown["msg"] == (
        "Option firmware[0].component nic-7 names no firmware of node %s's machine (it reports bios); option bios names "
        "attribute NoSuchSetting, which node %s's machine does not have; nothing was changed." % (node, node))

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


def test_through_a_bare_metal_host_a_restart_is_a_reboot_annotation_and_firmware_is_refused(
        k8s, namespace, run_module, machine):
    node, _entry, _log = machine
    host = "host-%s" % node
    custom = client.CustomObjectsApi(k8s)
    # A lab node's providerID (kwok://) cannot name its host: the stand-in finds the node by annotation.
    custom.create_namespaced_custom_object(*METAL3[:2], namespace, METAL3[2], {
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": host, "namespace": namespace, "annotations": {"kubevirt-ops.lab/node": node}},
        "spec": {"online": True}})

    def bmh():
        return custom.get_namespaced_custom_object(*METAL3[:2], namespace, METAL3[2], host)

    wait_for(lambda: (bmh().get("status") or {}).get("poweredOn") is True, 60, "BareMetalHost %s powered on" % host)
    wait_stable()
    versions = ResourceVersions(k8s)
    refused = run_module("node_machine", {"name": node, "bmh": {"name": host, "namespace": namespace},
                                          "firmware": [{"component": "bios", "url": "https://firmware.example/b.bin",
                                                        "version": "2.0.0"}]})
    assert refused.get("failed"), refused
    assert refused["msg"] == (
        "Option firmware: firmware updates through a BareMetalHost (HostFirmwareComponents) are not supported by this "
        "version of the collection, and this machine is reached through the BareMetalHost %s/%s; nothing was changed."
        % (namespace, host))
    assert versions.changes() == []

    before = boot_id(k8s, node)
    done = run_module("node_machine", {"name": node, "bmh": {"name": host, "namespace": namespace}, "reboot": True})
    assert not done.get("failed"), done
    summary = done["machine"]
    assert summary["road"] == "metal3" and summary["bmh"] == "%s/%s" % (namespace, host)
    assert summary["boot_id_before"] == before and summary["boot_id_after"] not in (None, before)
    # Rebooted with the collection's own reboot annotation (the host's spec.online, its owner's, left alone),
    # which is gone afterwards.
    assert [a["action"] for a in summary["actions"]] == [
        "restart (reboot.metal3.io/kubevirt-ops.maintenance soft, removed once off)"], summary
    assert bmh()["spec"]["online"] is True and bmh()["status"]["poweredOn"] is True
    assert not [a for a in bmh()["metadata"].get("annotations") or {} if a.startswith("reboot.metal3.io")]
    assert lab_nodes.is_ready(client.CoreV1Api(k8s).read_node(node))
