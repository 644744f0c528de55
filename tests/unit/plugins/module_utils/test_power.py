"""The decisions of module_utils/decommission/power.py (when a kubelet still heartbeats, how a node's power-off is
established, or why it is refused) and of machine/metal3.py (which BareMetalHost a node's providerID names)."""

import time

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import power
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import metal3
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import timeutil
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import BlockedError, InvalidInputError

NOW = time.mktime((2026, 11, 25, 12, 0, 0, 0, 0, 0)) - time.timezone


def stamp(seconds_ago, micro=False):
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(NOW - seconds_ago))
    return text + (".123456Z" if micro else "Z")


def node(status="True", heartbeat_ago=None, provider_id=None):
    ready = {"type": "Ready", "status": status}
    if heartbeat_ago is not None:
        ready["lastHeartbeatTime"] = stamp(heartbeat_ago)
    spec = {"providerID": provider_id} if provider_id else {}
    return {"metadata": {"name": "worker-1"}, "spec": spec, "status": {"conditions": [ready]}}


def lease(renewed_ago):
    return {"metadata": {"name": "worker-1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "worker-1", "renewTime": stamp(renewed_ago, micro=True)}}


def test_parse_time_reads_time_and_micro_time():
    assert timeutil.parse_epoch(stamp(0)) == NOW
    assert timeutil.parse_epoch(stamp(0, micro=True)) == pytest.approx(NOW + 0.123456)
    assert timeutil.parse_epoch("yesterday") is None and timeutil.parse_epoch(None) is None


@pytest.mark.parametrize("ready_status, heartbeat_ago, renewed_ago, alive, source", [
    # A kubelet renews its Lease every 10 s and posts status only every 5 minutes: the Lease decides.
    ("True", 290, 5, True, "node Lease"),
    # The node lifecycle controller's grace period (40 s) without either: stopped.
    ("True", 300, 45, False, "node Lease"),
    ("True", 10, None, True, "Ready condition heartbeat"),
    ("True", 41, None, False, "Ready condition heartbeat"),
    # The controller already judged it: Unknown is dead, however recent the stamps look to this clock.
    ("Unknown", 1, 1, False, "node Lease"),
    # A kubelet that reports NotReady (e.g. its network plugin) still heartbeats.
    ("False", 300, 3, True, "node Lease"),
])
def test_heartbeat_follows_the_node_lifecycle_controller(ready_status, heartbeat_ago, renewed_ago, alive, source):
    beat = power.heartbeat(node(ready_status, heartbeat_ago), lease(renewed_ago) if renewed_ago is not None else None,
                           now=NOW)
    assert beat.alive is alive and beat.source == source


def test_heartbeat_without_any_stamp_takes_the_ready_condition_at_its_word():
    assert power.heartbeat(node("True"), None, now=NOW).alive is True
    assert power.heartbeat(node("False"), None, now=NOW).alive is False


def test_heartbeat_describes_its_age():
    beat = power.heartbeat(node("True", 300), lease(7), now=NOW)
    assert beat.describe() == "its node Lease was renewed 7s ago"
    assert beat.as_dict() == {"alive": True, "last": stamp(7), "source": "node Lease"}


ALIVE = power.Heartbeat(True, NOW - 3, "node Lease", age=3)
SILENT = power.Heartbeat(False, NOW - 60, "node Lease", age=60)


@pytest.mark.parametrize("ready, beat, power_off, assume, method, before_drain, by", [
    # A Ready node is drained first; how its power-off is established decides the rest.
    (True, ALIVE, "bmh", False, "bmh", False, "bmh"),
    (True, ALIVE, "manual", False, "manual", False, "heartbeat_stopped"),
    (True, ALIVE, None, True, "assumed", False, "assumed"),
    (True, ALIVE, "bmh", True, "bmh", False, "bmh"),  # a BareMetalHost's word beats the user's
    (True, ALIVE, "redfish", False, "redfish", False, "redfish"),
    (True, SILENT, None, False, "manual", False, "heartbeat_stopped"),  # already silent: nothing to wait for
    # A NotReady node cannot be drained: powered off first, its pods then force-deleted.
    (False, SILENT, "bmh", False, "bmh", True, "bmh"),
    (False, SILENT, "redfish", False, "redfish", True, "redfish"),
    (False, SILENT, None, True, "assumed", True, "assumed"),
    (False, ALIVE, "manual", True, "manual", True, "heartbeat_stopped"),
])
def test_decide(ready, beat, power_off, assume, method, before_drain, by):
    decision = power.decide("worker-1", node("True" if ready else "Unknown"), beat, power_off, assume)
    assert (decision.method, decision.before_drain, decision.force_delete, decision.powered_off_by) == (
        method, before_drain, not ready, by)
    assert decision.waits_for_heartbeat is (method in ("bmh", "redfish", "manual"))


def test_decide_refuses_a_heartbeating_node_nobody_powers_off():
    with pytest.raises(BlockedError) as caught:
        power.decide("worker-1", node("True"), ALIVE)
    assert caught.value.msg.startswith("Node worker-1 still heartbeats (its node Lease was renewed 3s ago)")
    for choice in ("power_off=bmh", "power_off=redfish", "power_off=manual", "assume_powered_off=true"):
        assert choice in caught.value.msg


@pytest.mark.parametrize("power_off", [None, "manual"])
def test_decide_refuses_a_not_ready_node_without_proof_it_is_off(power_off):
    # Silence alone does not prove the machine is off (a network partition is silent too).
    with pytest.raises(BlockedError) as caught:
        power.decide("worker-1", node("Unknown"), SILENT, power_off)
    assert caught.value.msg.startswith("Node worker-1 is not Ready (its Ready condition is Unknown")
    assert "assume_powered_off=true" in caught.value.msg and "power_off=bmh" in caught.value.msg


@pytest.mark.parametrize("provider_id, expected", [
    ("metal3://openshift-machine-api/host-7/m3m-abc", ("openshift-machine-api", "host-7")),
    ("baremetalhost:///openshift-machine-api/host-7/5d1a8b3c", ("openshift-machine-api", "host-7")),
    ("baremetalhost:///openshift-machine-api/host-7", ("openshift-machine-api", "host-7")),
    ("metal3://6f1c2a1e-0000-4000-8000-000000000001", (None, "6f1c2a1e-0000-4000-8000-000000000001")),
    ("kwok://worker-1", None),
    ("aws:///eu-west-1a/i-0123456789abcdef0", None),
    (None, None),
])
def test_bmh_reference_from_the_provider_id(provider_id, expected):
    found = metal3.bmh_reference(node(provider_id=provider_id))
    assert (found[:2] if found else None) == expected


def test_bmh_option_wins_over_the_provider_id():
    given = {"name": "rack2-host9", "namespace": "metal"}
    assert metal3.bmh_reference(node(provider_id="metal3://a/b/c"), given) == ("metal", "rack2-host9", "the bmh option")


class _Client:
    def __init__(self, hosts, served=True):
        self.hosts = hosts
        self.served = served

    def kind_served(self, kind):
        return self.served

    def list(self, kind, namespace=None):
        return list(self.hosts), "1"

    def get_or_none(self, kind, name, namespace=None):
        return next((h for h in self.hosts if h["metadata"]["name"] == name
                     and h["metadata"]["namespace"] == namespace), None)


def host(name, namespace="metal", uid="uid-1", online=True, powered=True):
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {"online": online},
            "status": {"poweredOn": powered}}


def test_find_bmh_by_name_and_by_legacy_uid():
    client = _Client([host("h1", uid="u-1"), host("h2", uid="u-2")])
    assert metal3.find_bmh(client, "worker-1", node(provider_id="metal3://metal/h2/m"))["metadata"]["name"] == "h2"
    assert metal3.find_bmh(client, "worker-1", node(provider_id="metal3://u-1"))["metadata"]["name"] == "h1"


@pytest.mark.parametrize("client, provider_id, start", [
    (_Client([], served=False), "metal3://metal/h1/m", "Option power_off=bmh needs Metal3's BareMetalHost API"),
    (_Client([host("h1")]), "kwok://worker-1", "Node worker-1 names no BareMetalHost"),
    (_Client([host("h1")]), "metal3://metal/h9/m", "BareMetalHost metal/h9, named by its providerID"),
    (_Client([host("h1")]), "metal3://u-404", "Node worker-1 names BareMetalHost uid u-404"),
])
def test_find_bmh_refuses_with_one_sentence(client, provider_id, start):
    with pytest.raises(InvalidInputError) as caught:
        metal3.find_bmh(client, "worker-1", node(provider_id=provider_id))
    assert caught.value.msg.startswith(start), caught.value.msg


BMC = {"address": "https://bmc-1/redfish/v1/Systems/1", "username": "admin", "password": "hunter22"}


def test_a_machine_its_bare_metal_host_manages_is_not_powered_through_its_bmc():
    """baremetal-operator powers an online host back on behind the BMC: such a machine goes through its host."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import redfish, road

    machine = redfish.RedfishMachine(BMC)
    with pytest.raises(InvalidInputError) as caught:
        road.resolve(_Client([host("h1")]), "worker-1", node(provider_id="metal3://metal/h1/m"), {}, machine)
    assert caught.value.msg == (
        "Node worker-1's machine is managed by BareMetalHost metal/h1 (named by its providerID metal3://metal/h1/m), "
        "whose operator would power it back on behind the BMC; leave out bmc to go through the host.")
    # No host to fear: the BMC is the road.
    for client, provider_id in ((_Client([host("h1")]), "kwok://worker-1"), (_Client([]), "metal3://metal/h1/m"),
                                (_Client([host("h1")], served=False), "metal3://metal/h1/m")):
        assert road.resolve(client, "worker-1", node(provider_id=provider_id), {}, machine) is machine
