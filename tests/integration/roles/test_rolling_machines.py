"""rolling_maintenance servicing the lab's machines through their Redfish BMCs (lab/machines), the BMCs given as
the lab's ``bmc-inventory.yml`` gives them (host var ``bmc`` of a host named after its node), or through their
BareMetalHosts (host var ``bmh``): each node is drained, its machine gets a BIOS image and a BIOS setting and
restarts, the node comes back with a new boot ID and virt-handler beating again, and the report says what was
done to each machine. A machine that cannot be serviced is found by the preflight, before anything changes."""

import json
import uuid

import pytest
import yaml
from kubernetes import client

import runs
import workloads
from test_rolling_maintenance import PLAYBOOK, base_vars, failure_messages, node_marks, report_of

from lab import metal3
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

NODES = ["lab-worker-2", "lab-worker-3"]


@pytest.fixture
def lock_name(k8s):
    name = "test-machines-%s" % uuid.uuid4().hex[:8]
    yield name
    try:
        client.CoordinationV1Api(k8s).delete_namespaced_lease(name, "kube-system")
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def machines(lab, k8s):
    """bmc.json of the lab, the machines of NODES reached through their BMCs alone (their BareMetalHosts,
    which ``lab up`` makes, detached and deleted first, as an administrator does before driving a Metal3
    host's BMC), and afterwards the nodes put back in service and their hosts made again."""
    paths = LabPaths(lab.state_dir)
    bmcs = lab_bmc.load(paths)
    for name in NODES:
        metal3.release_host(k8s, name)
    yield paths, bmcs
    for name in NODES:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": name, "state": "absent"})
    lab.restore_nodes()
    for name in NODES:
        metal3.restore_host(k8s, bmcs, name)


@pytest.fixture
def mixed_roads(lab, k8s, tmp_path):
    """An inventory of two roads: the machine of NODES[0] through its BMC (its BareMetalHost detached and deleted
    first, made again afterwards), that of NODES[1] through its BareMetalHost, named by the host variable ``bmh``
    (a lab node's providerID names none). Afterwards the nodes are put back in service."""
    paths = LabPaths(lab.state_dir)
    bmcs = lab_bmc.load(paths)
    host = metal3.restore_host(k8s, bmcs, NODES[1])  # as ``lab up`` made it, reporting its machine on
    bmh = {"name": host["metadata"]["name"], "namespace": host["metadata"]["namespace"]}
    custom = client.CustomObjectsApi(k8s)

    def firmware_known():
        # The operator makes the host's firmware objects once it registered it (the host may be new).
        objects = [custom.get_namespaced_custom_object("metal3.io", "v1alpha1", bmh["namespace"], plural, bmh["name"])
                   for plural in ("hostfirmwarecomponents", "hostfirmwaresettings")]
        return all((o.get("status") or {}).get(key) for o, key in zip(objects, ("components", "settings")))

    wait_for(lambda: _present(firmware_known), 120, "the firmware objects of BareMetalHost %s" % bmh["name"])
    inventory = tmp_path / "machines.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"machines": {"hosts": {
        NODES[0]: {"bmc": lab_bmc.module_option(bmcs[NODES[0]])}, NODES[1]: {"bmh": bmh}}}}}}))
    with metal3.hosts_released(k8s, bmcs, [NODES[0]]):
        yield bmcs, inventory, bmh
        for name in NODES:
            runs.module(lab.kubeconfig, "node_maintenance", {"name": name, "state": "absent"})
        lab.restore_nodes()


def _present(read):
    try:
        return read()
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def boot_ids(k8s):
    return dict((name, client.CoreV1Api(k8s).read_node(name).status.node_info.boot_id) for name in NODES)


def test_each_node_is_drained_its_machine_serviced_by_its_road_and_the_report_says_what_was_done(
        lab, k8s, namespace, tmp_path, lock_name, mixed_roads):
    bmcs, inventory, bmh = mixed_roads
    shown = dict((name, lab_bmc.Bmc(bmcs[name]).show()) for name in NODES)
    running = set(s["bios_version"] for s in shown.values())
    assert len(running) == 1, "the machines run different BIOS versions: %s" % shown
    version = lab_bmc.flashed_version(running.pop())
    # The VMs start on worker-2 and may only go to worker-1 (cordoned meanwhile), a node outside the run.
    vms = ["vm-%d" % i for i in range(1, 4)]
    core = client.CoreV1Api(k8s)
    core.patch_node("lab-worker-1", {"spec": {"unschedulable": True}})
    try:
        for name in vms:
            workloads.create_vm(k8s, namespace, name, memory="256Mi", nodes=[NODES[0], "lab-worker-1"])
        workloads.wait_vms_running(k8s, namespace, vms)
    finally:
        core.patch_node("lab-worker-1", {"spec": {"unschedulable": None}})
    assert set(workloads.vm_nodes(k8s, namespace).values()) == {NODES[0]}
    before = boot_ids(k8s)

    extra = base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=NODES, rolling_maintenance_method="drain",
        rolling_maintenance_reboot="bmc", rolling_maintenance_bios={"SriovGlobalEnable": "Enabled"},
        rolling_maintenance_machine_timeout=600,
        rolling_maintenance_firmware=[{"component": "bios", "url": "https://firmware.example/bios-%s.bin" % version,
                                       "version": version}])
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra, inventory=["localhost,", str(inventory)])
    assert run.returncode == 0, run.output[-4000:]

    report = report_of(tmp_path)
    assert [n["node"] for n in report["nodes"]] == NODES and all(n["status"] == "done" for n in report["nodes"])
    after = boot_ids(k8s)
    roads = {NODES[0]: {"road": "redfish", "address": bmcs[NODES[0]]["address"]},
             NODES[1]: {"road": "metal3", "bmh": "%s/%s" % (bmh["namespace"], bmh["name"])}}
    for entry in report["nodes"]:
        name, machine = entry["node"], entry["machine"]
        assert dict((key, machine.get(key)) for key in roads[name]) == roads[name], machine
        assert machine["boot_id_before"] == before[name] and machine["boot_id_after"] == after[name] != before[name]
        assert machine["firmware_before"] == {"bios": shown[name]["bios_version"]}
        assert machine["firmware_after"] == {"bios": version}
        restart = [a["action"] for a in machine["actions"]][-1]
        assert restart == "restart (GracefulRestart)" if name == NODES[0] else restart.startswith(
            "restart (reboot.metal3.io/kubevirt-ops.maintenance soft"), machine
        now = lab_bmc.Bmc(bmcs[name]).show()
        assert now["bios_version"] == version and now["bios"]["SriovGlobalEnable"] == "Enabled"
        # Back with virt-handler beating on the node again, taking VMs.
        assert client.CoreV1Api(k8s).read_node(name).metadata.labels.get("kubevirt.io/schedulable") == "true"
    # The VMs left worker-2 before its machine restarted, and all run.
    assert len(report["nodes"][0]["vms"]["migrated"]) == len(vms)
    assert workloads.vm_nodes(k8s, namespace) == dict((name, "lab-worker-1") for name in vms)
    assert "machine: bios %s -> %s" % (shown[NODES[0]]["bios_version"], version) in run.output
    reports = sorted((tmp_path / "reports").glob("rolling-maintenance-*/*"))
    written = run.output + "".join(p.read_text() for p in reports if p.suffix in (".json", ".md", ".svg"))
    assert all(bmcs[name]["password"] not in written for name in NODES)


def test_a_machine_that_cannot_be_serviced_stops_the_run_before_anything_changes(
        lab, k8s, tmp_path, lock_name, machines):
    paths, bmcs = machines
    inventory = yaml.safe_load(paths.bmc_inventory.read_text())
    hosts = inventory["all"]["children"][lab_bmc.INVENTORY_GROUP]["hosts"]
    hosts[NODES[1]]["bmc"]["password"] = "not-" + bmcs[NODES[1]]["password"]
    wrong = tmp_path / "bmc-inventory.yml"
    wrong.write_text(yaml.safe_dump(inventory))
    marks = node_marks(k8s)
    shown = dict((name, lab_bmc.Bmc(bmcs[name]).show()) for name in NODES)

    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=NODES, rolling_maintenance_reboot="bmc",
                      rolling_maintenance_machine_timeout=600,
                      rolling_maintenance_bios={"SriovGlobalEnable": "Enabled", "NoSuchSetting": "1"})
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra, inventory=["localhost,", str(wrong)])
    assert run.returncode != 0
    # The preflight reads every machine (one task for all of them) and names each problem beside the others.
    (message,) = set(m for m in failure_messages(run) if m.startswith("Preflight found"))
    assert message.startswith("Preflight found 2 problems, so nothing was changed: "), message
    assert ("(1) %s: Option bios names attribute NoSuchSetting, which node %s's machine does not have; nothing was "
            "changed." % (NODES[0], NODES[0])) in message
    assert "(2) %s: The BMC at %s could not read the machine" % (NODES[1], bmcs[NODES[1]]["address"]) in message
    assert "refused the credentials of user %s (HTTP 401)" % bmcs[NODES[1]]["username"] in message
    assert node_marks(k8s) == marks
    assert dict((name, lab_bmc.Bmc(bmcs[name]).show()) for name in NODES) == shown
    assert all(bmcs[name]["password"] not in run.output for name in NODES)
    assert "not-" + bmcs[NODES[1]]["password"] not in run.output
    assert json.dumps(client.CoordinationV1Api(k8s).list_namespaced_lease("kube-system").to_dict(), default=str).count(
        lock_name) == 0


def test_a_machine_that_did_not_take_its_firmware_fails_its_node_which_stays_cordoned(
        lab, k8s, tmp_path, lock_name, machines):
    paths, bmcs = machines
    running = lab_bmc.Bmc(bmcs[NODES[0]]).show()["bios_version"]
    untouched = lab_bmc.Bmc(bmcs[NODES[1]]).show()
    # The image claims 9.9.9; the machine will report the next minor version (the emulator's flash).
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=NODES, rolling_maintenance_method="drain",
                      rolling_maintenance_machine_timeout=600, rolling_maintenance_firmware=[
                          {"component": "bios", "url": "https://firmware.example/bios-9.9.9.bin", "version": "9.9.9"}])
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra, inventory=["localhost,", str(paths.bmc_inventory)])
    assert run.returncode != 0
    final = failure_messages(run)[-1]
    assert "Failed and left cordoned (in maintenance): %s." % NODES[0] in final, final
    assert "Not started: %s." % NODES[1] in final
    assert '"rolling_maintenance_nodes": ["%s", "%s"]' % tuple(NODES) in final
    assert client.CoreV1Api(k8s).read_node(NODES[0]).spec.unschedulable
    assert not client.CoreV1Api(k8s).read_node(NODES[1]).spec.unschedulable
    report = report_of(tmp_path)
    (failed,) = report["nodes"]
    assert failed["status"] == "failed" and failed["phases"]["tasks"]["failed"], failed
    assert failed["error"].startswith("Service the node's machine: Node %s's machine booted again but did not take "
                                      "what was asked: firmware bios reports version %s, not 9.9.9" % (
                                          NODES[0], lab_bmc.flashed_version(running))), failed["error"]
    machine = failed["machine"]
    assert machine["firmware_before"] == {"bios": running} and machine["firmware_after"] == {"bios": lab_bmc.flashed_version(running)}
    assert machine["boot_id_after"] not in (None, machine["boot_id_before"])
    assert lab_bmc.Bmc(bmcs[NODES[1]]).show() == untouched
