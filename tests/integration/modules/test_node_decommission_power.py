"""node_decommission deletes a node only once its machine is off, and sees it not come back.

Each test decommissions a KWOK node that exists only for it. A KWOK node heartbeats like a kubelet
(its Lease in kube-node-lease is renewed); when its machine dies (``lab node-fail``, which kills a node
without a BMC as a power-off kills a worker: lab/standins/machines.py) the heartbeat stops for good.
"""

import itertools
import json
import threading
import uuid

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

METAL3 = ("metal3.io", "v1alpha1", "baremetalhosts")
_ORDINALS = itertools.count(1)


def core(k8s):
    return client.CoreV1Api(k8s)


def read_node(k8s, name):
    try:
        return core(k8s).read_node(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def create_node(k8s, name, provider_id=None):
    """A KWOK worker named ``name`` (providerID ``provider_id`` instead of kwok://<name>); returns its uid."""
    ordinal = next(_ORDINALS)
    plan = lab_nodes.NodePlan(name, False, "10.97.0.%d" % ordinal, "10.247.%d.0/24" % ordinal)
    body = lab_nodes.manifest(plan, core(k8s).list_node().items[0].status.node_info.kubelet_version)
    if provider_id:
        body["spec"]["providerID"] = provider_id
    created = core(k8s).create_node(body)
    wait_for(lambda: lab_nodes.is_ready(core(k8s).read_node(name)), 180, "node %s to be Ready" % name)
    return created.metadata.uid


@pytest.fixture
def spare(k8s):
    """The name of a heartbeating KWOK worker made for this test; whatever is left of it is deleted afterwards."""
    made = []

    def make(provider_id=None):
        name = "lab-decom-%s" % uuid.uuid4().hex[:6]
        made.append(name)
        create_node(k8s, name, provider_id)
        return name

    yield make
    for name in made:
        workloads.remove_node(k8s, name)


def get_bmh(k8s, namespace, name):
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(*METAL3[:2], namespace, METAL3[2], name)


def in_background(run_module, args):
    """Run node_decommission in a thread; returns (thread, outcome list)."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(run_module("node_decommission", args)), daemon=True)
    thread.start()
    return thread, outcome


def test_heartbeating_node_is_refused_and_nothing_changes(k8s, run_module, spare):
    node = spare()
    wait_stable()
    versions = ResourceVersions(k8s)
    for check in (True, False):
        refused = run_module("node_decommission", {"name": node}, check=check)
        assert refused.get("failed"), refused
        assert refused["msg"].startswith("Node %s still heartbeats (its node Lease was renewed" % node), refused["msg"]
        assert "power_off=bmh" in refused["msg"] and "assume_powered_off=true" in refused["msg"]
    assert versions.changes() == []
    assert read_node(k8s, node) is not None and not read_node(k8s, node).spec.unschedulable


def test_power_off_through_the_bare_metal_host_the_provider_id_names(lab, k8s, run_module, host_worker):
    node, host = host_worker
    namespace, name = host["metadata"]["namespace"], host["metadata"]["name"]
    wait_stable()
    versions = ResourceVersions(k8s)
    bmh_version = get_bmh(k8s, namespace, name)["metadata"]["resourceVersion"]

    checked = run_module("node_decommission", {"name": node, "power_off": "bmh"}, check=True)
    assert checked["changed"] and checked["deleted"] and checked["powered_off_by"] == "bmh", checked
    assert checked["power_off"]["bmh"] == "%s/%s" % (namespace, name)
    assert versions.changes() == [] and get_bmh(k8s, namespace, name)["metadata"]["resourceVersion"] == bmh_version

    result = run_module("node_decommission", {"name": node, "power_off": "bmh", "reregistration_watch": 5})
    assert not result.get("failed"), result
    assert result["deleted"] and result["powered_off_by"] == "bmh", result
    assert result["power_off"]["method"] == "bmh" and result["power_off"]["bmh"] == "%s/%s" % (namespace, name)
    assert result["power_off"]["heartbeat"]["alive"] is False
    assert result["reregistration"] == {"watch_seconds": 5, "reregistered": False}
    bmh = get_bmh(k8s, namespace, name)
    assert bmh["spec"]["online"] is False and bmh["status"]["poweredOn"] is False
    # The operator powered the machine off through its BMC.
    assert lab_bmc.Bmc(lab_bmc.load(LabPaths(lab.state_dir))[node]).power_state() == "Off"
    assert read_node(k8s, node) is None
    again = run_module("node_decommission", {"name": node, "power_off": "bmh"})
    assert again["changed"] is False and again["deleted"] is False


def test_power_off_bmh_without_a_host_is_refused(k8s, run_module, spare):
    node = spare()  # providerID kwok://<name>: it names no BareMetalHost
    refused = run_module("node_decommission", {"name": node, "power_off": "bmh"})
    assert refused.get("failed") and refused["msg"].startswith("Node %s names no BareMetalHost" % node), refused
    assert not read_node(k8s, node).spec.unschedulable


def test_assume_powered_off_deletes_a_heartbeating_node(k8s, run_module, spare):
    node = spare()
    result = run_module("node_decommission", {"name": node, "assume_powered_off": True, "reregistration_watch": 3})
    assert not result.get("failed"), result
    assert result["deleted"] and result["powered_off_by"] == "assumed", result
    assert result["power_off"]["heartbeat"]["alive"] is True  # the user's word, not the heartbeat's
    assert result["reregistration"] == {"watch_seconds": 3, "reregistered": False}
    assert read_node(k8s, node) is None


def test_user_powers_the_node_off_while_the_module_waits(lab, k8s, run_module, spare, tmp_path):
    node = spare()
    progress = tmp_path / "progress.log"
    thread, outcome = in_background(run_module, {"name": node, "power_off": "manual", "wait_timeout": 600,
                                                 "reregistration_watch": 3, "progress_file": str(progress)})
    # The drain is over and the module waits for the heartbeat to stop: the user powers the machine off.
    wait_for(lambda: "to stop heartbeating" in (progress.read_text() if progress.exists() else ""), 300,
             "node_decommission to wait for node %s's heartbeat to stop" % node)
    assert read_node(k8s, node).spec.unschedulable  # drained and cordoned, not deleted
    lab.node_fail(node, wait=False)
    thread.join(900)
    assert outcome, "node_decommission did not return"
    result = outcome[0]
    assert not result.get("failed"), result
    assert result["deleted"] and result["powered_off_by"] == "heartbeat_stopped", result
    assert result["power_off"]["heartbeat"]["alive"] is False
    assert read_node(k8s, node) is None
    assert "power the machine off now" in progress.read_text()


def test_node_that_registers_again_fails_the_task(k8s, run_module, spare):
    node = spare()
    first_uid = read_node(k8s, node).metadata.uid
    thread, outcome = in_background(run_module, {"name": node, "assume_powered_off": True,
                                                 "reregistration_watch": 600})
    wait_for(lambda: read_node(k8s, node) is None or bool(outcome), 300, "node %s to be deleted" % node)
    assert not outcome, outcome  # still watching
    # Its kubelet still runs: the node registers again under the same name.
    create_node(k8s, node)
    thread.join(300)
    assert outcome, "node_decommission did not return"
    result = outcome[0]
    assert result.get("failed"), result
    assert result["msg"].startswith("Node %s registered again after this run deleted it" % node), result["msg"]
    assert result["deleted"] is True and result["reregistration"]["reregistered"] is True
    assert read_node(k8s, node).metadata.uid != first_uid


def test_remediation_is_paused_until_the_node_is_deleted(lab, k8s, namespace, run_module, spare, tmp_path):
    """The health checks that cover the node stay paused while its machine is powered off, and are
    restored once the node is gone; the Machine left behind is named in a warning."""
    from test_node_maintenance_remediation import OPENSHIFT, PAUSED, PAUSED_FOR, Checks, annotations, ours

    node = spare()
    checks = Checks(k8s, namespace)
    try:
        covering = checks.nhc("decom", {"matchLabels": {"kubernetes.io/hostname": node}}, pause_requests=["upgrade"])
        role = {"machine.openshift.io/cluster-api-machine-role": "decom-" + checks.suffix}
        checks.machine(OPENSHIFT, "m-" + node, node, role)
        checks.mhc(OPENSHIFT, "mhc-decom", {"matchLabels": role})
        progress = tmp_path / "progress.log"
        thread, outcome = in_background(run_module, {"name": node, "power_off": "manual", "wait_timeout": 600,
                                                     "reregistration_watch": 2, "progress_file": str(progress)})
        wait_for(lambda: "to stop heartbeating" in (progress.read_text() if progress.exists() else "") or outcome,
                 300, "node_decommission to wait for node %s's heartbeat to stop" % node)
        assert not outcome, outcome
        # Drained, waiting for the machine to go off: nothing may remediate it meanwhile.
        assert checks.get_nhc(covering)["spec"]["pauseRequests"] == ["upgrade", ours(node)]
        mhc = annotations(checks.get_mhc(OPENSHIFT, "mhc-decom"))
        assert mhc[PAUSED] == ours(node) and json.loads(mhc[PAUSED_FOR]) == [node]
        lab.node_fail(node, wait=False)
        thread.join(900)
        assert outcome, "node_decommission did not return"
        result = outcome[0]
        assert not result.get("failed") and result["deleted"], result
        assert sorted((e["kind"], e["name"], e["how"]) for e in result["remediation_paused"]) == [
            ("MachineHealthCheck", "mhc-decom", "annotation"), ("Node", node, "label"),
            ("NodeHealthCheck", covering, "pauseRequests")]
        assert sorted((e["kind"], e["name"]) for e in result["remediation_restored"]) == [
            ("MachineHealthCheck", "mhc-decom"), ("NodeHealthCheck", covering)]
        assert checks.get_nhc(covering)["spec"]["pauseRequests"] == ["upgrade"]
        mhc = annotations(checks.get_mhc(OPENSHIFT, "mhc-decom"))
        assert PAUSED not in mhc and PAUSED_FOR not in mhc
        assert "its Machine is not" in str(result.get("warnings")), result.get("warnings")
        assert read_node(k8s, node) is None
    finally:
        checks.delete_all()


def back_as_kubevirt_node(lab, k8s, node):
    """``lab up`` registers a deleted worker anew; wait until it is a Ready KubeVirt node with its pods."""
    lab.cli("up")

    def back():
        current = read_node(k8s, node)
        return (current is not None and lab_nodes.is_ready(current)
                and (current.metadata.labels or {}).get("kubevirt.io/schedulable") == "true")

    wait_for(back, 600, "node %s to be a Ready KubeVirt node again" % node)
    workloads.wait_node_pods_ready(k8s, node, 600)


@pytest.fixture
def host_worker(lab, k8s):
    """(node, its BareMetalHost) of the last worker, its Node registered again with the providerID a machine
    controller writes (``metal3://<namespace>/<host>/<machine>``: a lab node's kwok:// one cannot change). Afterwards
    the host is online again (its machine on) and the node back as ``lab up`` registers it."""
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    node = sorted(bmcs)[-1]
    host = metal3.restore_host(k8s, bmcs, node)
    current = core(k8s).read_node(node)
    ip = next(a.address for a in current.status.addresses if a.type == "InternalIP")
    body = lab_nodes.manifest(lab_nodes.NodePlan(node, False, ip, current.spec.pod_cidr),
                              current.status.node_info.kubelet_version)
    body["spec"]["providerID"] = "metal3://%s/%s/m3m-%s" % (host["metadata"]["namespace"], host["metadata"]["name"], node)
    core(k8s).delete_node(node)
    wait_for(lambda: read_node(k8s, node) is None, 120, "node %s to be deleted" % node)
    core(k8s).create_node(body)
    wait_for(lambda: lab_nodes.is_ready(core(k8s).read_node(node)), 180, "node %s to be Ready" % node)
    yield node, host
    metal3.restore_host(k8s, bmcs, node, timeout=300)
    left = read_node(k8s, node)
    if left is not None and (left.spec.provider_id or "").startswith("metal3://"):
        workloads.remove_node(k8s, node)
    back_as_kubevirt_node(lab, k8s, node)


# -- power_off=redfish: the machine's own BMC (lab/machines: a Redfish System per worker) -----------------------

@pytest.fixture
def bmc_worker(lab, k8s):
    """(node, its bmc.json entry) of the last worker, its machine reached through its BMC alone: its BareMetalHost
    (``lab up`` makes one) is detached and deleted first, as an administrator does before driving a Metal3 host's
    BMC (else the operator would power the machine back as ``spec.online`` says). Afterwards its machine is on, its
    node back (Ready and a KubeVirt node again: ``lab up`` registers a deleted one anew) and its host made again."""
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    node = sorted(bmcs)[-1]
    metal3.release_host(k8s, node)
    yield node, dict(bmcs[node])
    machine = lab_bmc.Bmc(bmcs[node])
    if machine.power_state() != "On":
        machine.reset("On")
        wait_for(lambda: machine.power_state() == "On", 60, "the machine of %s to be On" % node)
    back_as_kubevirt_node(lab, k8s, node)
    metal3.restore_host(k8s, bmcs, node)


def test_power_off_through_the_bmc_then_the_node_is_deleted(lab, k8s, run_module, bmc_worker, tmp_path):
    node, entry = bmc_worker
    machine = lab_bmc.Bmc(entry)
    wait_stable()
    versions = ResourceVersions(k8s)
    checked = run_module("node_decommission", {"name": node, "power_off": "redfish", "bmc": lab_bmc.module_option(entry)},
                         check=True)
    assert checked["changed"] and checked["powered_off_by"] == "redfish", checked
    assert checked["power_off"]["bmc"] == {"road": "redfish", "address": entry["address"], "power_state": "On"}
    assert versions.changes() == [] and machine.power_state() == "On"

    progress = tmp_path / "progress.log"
    result = run_module("node_decommission", {"name": node, "power_off": "redfish", "bmc": lab_bmc.module_option(entry),
                                              "reregistration_watch": 5, "progress_file": str(progress)})
    assert not result.get("failed"), result
    assert result["deleted"] and result["powered_off_by"] == "redfish", result
    assert result["power_off"]["bmc"] == {"road": "redfish", "address": entry["address"], "power_state": "Off",
                                          "resets": ["GracefulShutdown"]}
    assert result["power_off"]["heartbeat"]["alive"] is False
    assert machine.power_state() == "Off" and read_node(k8s, node) is None
    events = core(k8s).list_event_for_all_namespaces(field_selector="involvedObject.name=%s" % node).items
    assert any("ComputerSystem.Reset GracefulShutdown" in (e.message or "") for e in events), events
    shown = json.dumps(result) + progress.read_text() + " ".join((e.message or "") for e in events)
    assert "through the BMC at %s" % entry["address"] in progress.read_text()
    assert entry["password"] not in shown


def test_a_bmc_that_refuses_the_credentials_fails_the_task_and_nothing_changes(k8s, run_module, bmc_worker):
    node, entry = bmc_worker
    wrong = "not-the-password-%s" % uuid.uuid4().hex[:6]
    wait_stable()
    versions = ResourceVersions(k8s)
    for check in (True, False):
        refused = run_module("node_decommission", {"name": node, "power_off": "redfish",
                                                   "bmc": lab_bmc.module_option(entry, password=wrong)}, check=check)
        assert refused.get("failed"), refused
        assert refused["msg"] == ("The BMC at %s could not read the machine %s: it refused the credentials of user "
                                  "%s (HTTP 401)." % (entry["address"], entry["address"].rsplit("/", 1)[-1],
                                                      entry["username"])), refused["msg"]
        assert wrong not in json.dumps(refused)
    assert versions.changes() == []
    assert lab_bmc.Bmc(entry).power_state() == "On" and not read_node(k8s, node).spec.unschedulable
