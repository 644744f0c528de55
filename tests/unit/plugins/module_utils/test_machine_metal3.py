"""The Metal3 road's restart against the in-memory API server, with a stand-in for baremetal-operator's
manageHostPower: a provisioned host is rebooted with our own reboot annotation (off while it is there, on once
it is removed; spec.online untouched), any other host with spec.online; a host that forbids power-off or is
asked to stay off is refused with nothing changed."""

import json
import threading

import pytest

from kubevirt_objects import cluster

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import BlockedError
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
