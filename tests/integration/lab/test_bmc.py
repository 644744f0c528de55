"""The lab's Redfish BMCs (lab/machines): one per worker, the sushy-tools emulator over HTTPS with
basic auth on the lab's own veth address, power actions that take effect after a delay, a firmware
inventory (BIOS and BMC firmware of every machine), firmware updates followed as Redfish tasks, and
firmware and BIOS changes that take effect at the next power on."""

import json
import socket
import stat

import pytest
import requests
from kubernetes import client

from lab import metal3, nodes, settings
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

pytest_plugins = ["lab.pytest_plugin"]

POWER_WAIT = 60
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
# The Lease holder of a node whose machine is off (lab/standins/handler_nodes.py).
MACHINE_OFF = "lab-machine-off"


@pytest.fixture(scope="module")
def bmcs(lab):
    return lab_bmc.load(LabPaths(lab.state_dir))


@pytest.fixture
def machine(lab, bmcs):
    """The BMC of the last worker, without faults and powered on again at the end whatever the test did.
    Its BareMetalHost (``lab up`` makes one) is detached and deleted first, as an administrator does before
    driving a Metal3 host's BMC (else the operator would power the machine back as ``spec.online`` says),
    and made again at the end."""
    name = sorted(bmcs)[-1]
    paths = LabPaths(lab.state_dir)
    api = nodes.api_client(lab.kubeconfig)
    metal3.release_host(api, name)
    yield name, lab_bmc.Bmc(bmcs[name])
    lab_bmc.set_faults(paths, name)
    again = lab_bmc.Bmc(bmcs[name])
    if again.power_state() != "On":
        again.reset("On")
        wait_for(lambda: again.power_state() == "On", POWER_WAIT, f"{name} to power on")
    # The machine's power reaches its node (lab/standins/machines.py): the next test finds the node
    # booted, its Lease back with kwok and Ready.
    api = nodes.api_client(lab.kubeconfig)
    leases = client.CoordinationV1Api(api)

    def booted():
        try:
            lease = leases.read_namespaced_lease(name, nodes.NODE_LEASE_NAMESPACE)
        except client.exceptions.ApiException as e:
            if e.status == 404:  # given back at boot; kwok creates it again
                return False
            raise
        return lease.spec.holder_identity != MACHINE_OFF and nodes._all(api, [name], nodes.is_recovered)

    wait_for(booted, 300, f"node {name} to be back after its machine's power cycles")
    metal3.restore_host(api, bmcs, name)


def _get(url, entry, **kwargs):
    session = requests.Session()
    session.trust_env = False
    return session.get(url, verify=entry["ca_file"], timeout=10, **kwargs)


def test_every_worker_has_a_bmc_that_answers_over_https_with_basic_auth(lab, bmcs):
    workers = sorted(n.metadata.name for n in nodes.list_nodes(nodes.api_client(lab.kubeconfig))
                     if n.metadata.name.startswith("lab-worker-"))
    assert sorted(bmcs) == workers
    lab_settings = settings.load(LabPaths(lab.state_dir))
    for name, entry in bmcs.items():
        assert entry["address"].startswith("https://%s:%d/redfish/v1/Systems/" % (
            lab_settings.service_address, lab_settings.ports["redfish"])), entry["address"]
        system = _get(entry["address"], entry, auth=(entry["username"], entry["password"]))
        assert system.status_code == 200, system.text
        assert system.json()["Name"] == name and system.json()["Id"] == lab_bmc.system_id(name)
        assert system.json()["PowerState"] == "On"
        assert _get(entry["address"], entry, auth=(entry["username"], "wrong")).status_code == 401
        assert _get(entry["address"], entry).status_code == 401
    entry = bmcs[workers[0]]
    root = entry["address"].split("/Systems/")[0] + "/"
    assert _get(root, entry).json()["Systems"]["@odata.id"] == "/redfish/v1/Systems"
    # bmc.json holds passwords: its owner's only.
    assert stat.S_IMODE(LabPaths(lab.state_dir).bmc_file.stat().st_mode) == 0o600


def test_the_bmc_inventory_joins_the_nodes_inventory_under_the_node_names(lab, bmcs, tmp_path):
    """``bmc-inventory.yml`` is an inventory beside the collection's nodes inventory plugin: one host per
    worker, named as its node, with host var ``bmc`` as the modules' option takes it; its owner's only."""
    import os

    import runs

    paths = LabPaths(lab.state_dir)
    assert stat.S_IMODE(paths.bmc_inventory.stat().st_mode) == 0o600
    plugin = tmp_path / "lab.nodes.yml"
    plugin.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    listed = runs._run([os.path.join(runs.BIN, "ansible-inventory"), "-i", str(plugin), "-i", str(paths.bmc_inventory),
                        "--list"], lab.kubeconfig, None, 300)
    assert listed.returncode == 0, listed.output[-3000:]
    inventory = json.loads(listed.stdout)
    assert sorted(inventory[lab_bmc.INVENTORY_GROUP]["hosts"]) == sorted(bmcs)
    for name, entry in bmcs.items():
        host = inventory["_meta"]["hostvars"][name]
        assert host["node_simulated"] is True  # the nodes plugin's host...
        assert host["bmc"] == {"address": entry["address"], "username": entry["username"],  # ...is the machine's
                               "password": entry["password"], "ca_path": entry["ca_file"]}


def test_the_bmcs_listen_only_on_the_labs_own_address(lab, bmcs):
    port = settings.load(LabPaths(lab.state_dir)).ports["redfish"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    plain = next(iter(bmcs.values()))["address"].replace("https://", "http://")
    session = requests.Session()
    session.trust_env = False
    with pytest.raises(requests.ConnectionError):
        session.get(plain, timeout=10)


def test_power_off_and_on_take_effect_after_the_bmc_took_them(machine):
    name, bmc = machine
    assert bmc.power_state() == "On"
    bmc.reset("ForceOff")
    wait_for(lambda: bmc.power_state() == "Off", POWER_WAIT, f"{name} to power off")
    bmc.reset("On")
    wait_for(lambda: bmc.power_state() == "On", POWER_WAIT, f"{name} to power on")


def test_a_power_action_the_bmc_does_not_know_is_refused_and_changes_nothing(machine):
    name, bmc = machine
    with pytest.raises(Exception) as refused:
        bmc.reset("Hibernate")
    assert "answered 4" in str(refused.value) or "answered 5" in str(refused.value), refused.value
    assert bmc.power_state() == "On"


def _manager(bmc):
    """The Manager (the BMC itself) of the machine, as its System links it."""
    return bmc.get(bmc.get()["Links"]["ManagedBy"][0]["@odata.id"])


def test_the_firmware_inventory_lists_the_bios_and_bmc_firmware_of_every_machine(bmcs):
    entry = next(iter(bmcs.values()))
    root = entry["address"].split("/redfish/")[0]
    collection = _get(root + INVENTORY, entry, auth=(entry["username"], entry["password"]))
    assert collection.status_code == 200, collection.text
    assert sorted(m["@odata.id"] for m in collection.json()["Members"]) == sorted(
        "%s/%s.%s" % (INVENTORY, name, part) for name in bmcs for part in ("BIOS", "BMC"))
    assert collection.json()["Members@odata.count"] == 2 * len(bmcs)
    assert _get(root + INVENTORY, entry).status_code == 401
    for name, entry in bmcs.items():
        bmc = lab_bmc.Bmc(entry)
        system, manager = bmc.get(), _manager(bmc)
        bios, firmware = bmc.get("%s/%s.BIOS" % (INVENTORY, name)), bmc.get("%s/%s.BMC" % (INVENTORY, name))
        # What the machine runs, as its System (BiosVersion) and its Manager (FirmwareVersion) report it.
        assert (bios["Id"], bios["Version"]) == ("%s.BIOS" % name, system["BiosVersion"])
        assert (firmware["Id"], firmware["Version"]) == ("%s.BMC" % name, manager["FirmwareVersion"])
        assert bios["Updateable"] is True and firmware["Updateable"] is True
        assert bios["RelatedItem"] == [{"@odata.id": bmc.system_path}]
        assert firmware["RelatedItem"] == [{"@odata.id": bmc.system_path}, {"@odata.id": manager["@odata.id"]}]
    # The lab's reading of one machine (python -m lab bmc show prints it).
    shown = bmc.show()
    assert shown["bios_version"] == bios["Version"]
    assert shown["firmware"] == {"bios": {"version": bios["Version"], "staged": None},
                                 "bmc": {"version": firmware["Version"], "staged": None}}
    # The emulator's refusals stay, and stage nothing.
    for targets, status, message in (
            ([manager["@odata.id"]], 400, "Manager is not currently a supported Target."),
            (["%s/%s.NIC" % (INVENTORY, name)], 404, "Firmware inventory item %s.NIC was not found" % name),
            ([], 400, "Missing ImageURI and/or Targets.")):
        with pytest.raises(Exception) as refused:
            bmc.send("POST", SIMPLE_UPDATE, {"ImageURI": "https://firmware.example/x.bin", "Targets": targets})
        assert "answered %d" % status in str(refused.value) and message in str(refused.value), refused.value
    assert bmc.firmware() == {
        "bios": {"id": bios["Id"], "path": bios["@odata.id"], "version": bios["Version"], "staged": None},
        "bmc": {"id": firmware["Id"], "path": firmware["@odata.id"], "version": firmware["Version"], "staged": None}}


def test_bios_and_bmc_firmware_updates_take_effect_at_the_next_power_cycle_only(machine):
    name, bmc = machine
    before = bmc.firmware()
    bios, firmware = before["bios"]["version"], before["bmc"]["version"]
    assert bmc.get()["BiosVersion"] == bios and _manager(bmc)["FirmwareVersion"] == firmware
    # The BIOS through its System (as the emulator takes it), the BMC through its inventory member: each an
    # asynchronous operation, 202 and the Location of a Task that runs, then completes.
    started = bmc.send("POST", SIMPLE_UPDATE, {"ImageURI": "https://firmware.example/%s-bios.bin" % name,
                                               "Targets": [bmc.system_path]})
    assert started.status_code == 202 and started.json()["TaskState"] == "Running", started.text
    bios_task = started.headers["Location"]
    assert bios_task.startswith("/redfish/v1/TaskService/Tasks/") and started.json()["@odata.id"] == bios_task
    bmc_task = bmc.simple_update("https://firmware.example/%s-bmc.bin" % name, before["bmc"]["path"])
    assert bmc_task != bios_task
    for task, member in ((bios_task, before["bios"]["path"]), (bmc_task, before["bmc"]["path"])):
        ended = bmc.follow_task(task)
        assert (ended["TaskState"], ended["TaskStatus"], ended["PercentComplete"]) == ("Completed", "OK", 100), ended
        assert [m["MessageId"] for m in ended["Messages"]] == ["Update.1.0.AwaitToActivate"], ended
        assert member in ended["Messages"][0]["Message"]
    staged = {"bios": dict(before["bios"], staged=lab_bmc.flashed_version(bios)),
              "bmc": dict(before["bmc"], staged=lab_bmc.flashed_version(firmware))}
    assert bmc.firmware() == staged
    assert bmc.get()["BiosVersion"] == bios and _manager(bmc)["FirmwareVersion"] == firmware
    bmc.reset("ForceOff")
    wait_for(lambda: bmc.power_state() == "Off", POWER_WAIT, f"{name} to power off")
    # Off is not a boot: the flash runs when the machine powers on.
    assert bmc.firmware() == staged and bmc.get()["BiosVersion"] == bios
    bmc.reset("On")
    wait_for(lambda: bmc.power_state() == "On", POWER_WAIT, f"{name} to power on")
    after = bmc.firmware()
    assert after == {"bios": dict(before["bios"], version=lab_bmc.flashed_version(bios)),
                     "bmc": dict(before["bmc"], version=lab_bmc.flashed_version(firmware))}
    assert bmc.get()["BiosVersion"] == after["bios"]["version"]
    assert _manager(bmc)["FirmwareVersion"] == after["bmc"]["version"]


def test_bios_settings_are_pending_until_the_machine_restarts(machine):
    name, bmc = machine
    current = bmc.get("/BIOS")["Attributes"]
    wanted = "Disabled" if current["ProcTurboMode"] == "Enabled" else "Enabled"
    bmc._request("PATCH", "/BIOS/Settings", {"Attributes": {"ProcTurboMode": wanted}})
    assert bmc.get("/BIOS/Settings")["Attributes"]["ProcTurboMode"] == wanted
    assert bmc.get("/BIOS")["Attributes"] == current
    with pytest.raises(Exception) as refused:
        bmc._request("PATCH", "/BIOS/Settings", {"Attributes": {"NoSuchSetting": "1"}})
    assert "answered 400" in str(refused.value) and "NoSuchSetting" in str(refused.value)
    bmc.reset("ForceRestart")
    wait_for(lambda: bmc.get("/BIOS")["Attributes"]["ProcTurboMode"] == wanted, POWER_WAIT,
             f"{name} to restart with the new setting")
    assert bmc.power_state() == "On"
    assert json.dumps(bmc.get("/BIOS")["Attributes"], sort_keys=True) == json.dumps(
        dict(current, ProcTurboMode=wanted), sort_keys=True)


def test_a_bmc_that_refuses_power_actions_or_fails_updates_changes_nothing(lab, machine):
    name, bmc = machine
    paths = LabPaths(lab.state_dir)
    before = bmc.firmware()
    lab_bmc.set_faults(paths, name, refuse_power=True, fail_update=True)
    with pytest.raises(Exception) as refused:
        bmc.reset("ForceOff")
    assert "answered 409" in str(refused.value) and "refuses the power action ForceOff" in str(refused.value)
    # The BMC takes the update (202) and its task fails, as a flash that fails does.
    members = [before["bios"]["path"], before["bmc"]["path"]]
    started = bmc.send("POST", SIMPLE_UPDATE, {"ImageURI": "https://firmware.example/%s.bin" % name, "Targets": members})
    assert started.status_code == 202 and started.json()["TaskState"] == "Running", started.text
    failed = bmc.follow_task(started.headers["Location"])
    assert (failed["TaskState"], failed["TaskStatus"]) == ("Exception", "Critical"), failed
    assert [m["MessageId"] for m in failed["Messages"]] == ["Update.1.0.ApplyFailed"] * 2, failed
    assert [m["Message"] for m in failed["Messages"]] == [
        "Installation of image 'https://firmware.example/%s.bin' to '%s' failed." % (name, member) for member in members]
    assert bmc.firmware() == before
    lab_bmc.set_faults(paths, name)
    bmc.reset("PowerCycle")
    wait_for(lambda: bmc.power_state() == "On", POWER_WAIT, f"{name} to power on again")
    # Only the cycle after the faults happened: no staged version was left by the failed update.
    assert bmc.firmware() == before and bmc.get()["BiosVersion"] == before["bios"]["version"]


def test_an_unreachable_bmc_does_not_answer_until_it_is_back_and_a_slow_one_answers_late(lab, machine):
    name, bmc = machine
    paths = LabPaths(lab.state_dir)
    lab_bmc.set_faults(paths, name, unreachable=True)
    with pytest.raises(requests.Timeout):
        lab_bmc.Bmc(bmc.entry, timeout=2).power_state()
    # Another machine's BMC still answers.
    other = sorted(lab_bmc.load(paths))[0]
    assert lab_bmc.Bmc(lab_bmc.load(paths)[other]).power_state() == "On"
    lab_bmc.set_faults(paths, name, slow=3)
    with pytest.raises(requests.Timeout):
        lab_bmc.Bmc(bmc.entry, timeout=1).power_state()
    assert lab_bmc.Bmc(bmc.entry, timeout=60).power_state() == "On"
    lab_bmc.set_faults(paths, name)
    assert bmc.power_state() == "On"
