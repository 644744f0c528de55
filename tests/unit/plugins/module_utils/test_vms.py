"""VM selection (one error sentence per bad input) and the bounded parallel runner."""

import threading
import time

import pytest

from kubevirt_objects import cluster, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import vms
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    InvalidInputError,
    MaintenanceError,
)


def selection(**params):
    return vms.Selection(params)


@pytest.mark.parametrize("params, message", [
    ({"name": "a"}, "Option name=a needs namespace: a VirtualMachine name is only unique within its namespace."),
    ({"name": "a", "all_namespaces": True}, "Options name=a and all_namespaces=true exclude each other"),
    ({"name": "a", "namespace": "ns1", "label_selector": "x=y"}, "Options name=a and label_selector exclude"),
    ({"namespace": "ns1", "all_namespaces": True}, "Options namespace=ns1 and all_namespaces=true exclude"),
    ({}, "No VirtualMachines selected: give name and namespace"),
    ({"label_selector": "x=y"}, "No VirtualMachines selected"),
])
def test_invalid_selections_are_one_sentence(params, message):
    with pytest.raises(InvalidInputError) as info:
        selection(**params).validate()
    assert info.value.msg.startswith(message)


def test_named_vm_in_missing_namespace():
    client, _server = cluster(namespaces=())
    with pytest.raises(InvalidInputError) as info:
        vms.select(client, selection(name="a", namespace="nope").validate(), print)
    assert info.value.msg == "Namespace nope does not exist."


def test_missing_named_vm():
    client, _server = cluster()
    with pytest.raises(InvalidInputError) as info:
        vms.select(client, selection(name="a", namespace="ns1").validate(), print)
    assert info.value.msg == "VirtualMachine ns1/a does not exist."


def test_kubevirt_not_installed():
    client, _server = cluster(served={"Namespace"})
    with pytest.raises(InvalidInputError) as info:
        vms.select(client, selection(namespace="ns1").validate(), print)
    assert "KubeVirt (or OpenShift Virtualization) is not installed" in info.value.msg


def test_namespace_must_exist_even_with_selector():
    client, _server = cluster()
    with pytest.raises(InvalidInputError) as info:
        vms.select(client, selection(namespace="other", label_selector="a=b").validate(), print)
    assert info.value.msg == "Namespace other does not exist."


def test_selector_matching_nothing_warns_and_returns_nothing():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", labels={"tier": "web"}))
    warnings = []
    found = vms.select(client, selection(all_namespaces=True, label_selector="tier=db").validate(), warnings.append)
    assert found == []
    assert warnings == ["No VirtualMachine matched (VirtualMachines in all namespaces matching 'tier=db'); "
                        "nothing to do."]


def test_selection_lists_once_and_sorts():
    client, server = cluster(namespaces=("ns1", "ns2"))
    for ns, name in (("ns2", "b"), ("ns1", "z"), ("ns1", "a"), ("ns2", "a")):
        server.add("VirtualMachine", vm(name, ns, labels={"tier": "db"}))
    server.add("VirtualMachine", vm("other", "ns1", labels={"tier": "web"}))
    server.requests.clear()
    found = vms.select(client, selection(all_namespaces=True, label_selector="tier=db").validate(), print)
    assert [object_name(v) for v in found] == ["ns1/a", "ns1/z", "ns2/a", "ns2/b"]
    assert server.requests == [("GET", "VirtualMachine", None)]


def test_vmis_of_the_selection_in_one_list():
    client, server = cluster(namespaces=("ns1", "ns2"))
    machines = [server.add("VirtualMachine", vm(n, ns)) for ns, n in (("ns1", "a"), ("ns2", "b"))]
    server.add("VirtualMachineInstance", vmi("a", "ns1"))
    server.add("VirtualMachineInstance", vmi("unrelated", "ns2"))
    server.requests.clear()
    found = vms.list_vmis(client, selection(all_namespaces=True), machines)
    assert set(found) == {("ns1", "a")}
    assert len(server.requests) == 1


def test_run_parallel_keeps_order_bounds_concurrency_and_collects_errors():
    active = []
    peak = [0]
    lock = threading.Lock()

    def work(item):
        with lock:
            active.append(item)
            peak[0] = max(peak[0], len(active))
        time.sleep(0.01)
        with lock:
            active.remove(item)
        if item % 7 == 0:
            raise MaintenanceError("VirtualMachine ns/%d refused." % item)
        return item * 2

    items = list(range(1, 41))
    outcomes = vms.run_parallel(work, items, workers=4)
    assert [o.item for o in outcomes] == items
    assert [o.result for o in outcomes if o.error is None] == [i * 2 for i in items if i % 7]
    assert 1 < peak[0] <= 4


def test_raise_failures_names_the_failed_items():
    outcomes = [vms.Outcome({"metadata": {"namespace": "ns", "name": "a"}}, result=1),
                vms.Outcome({"metadata": {"namespace": "ns", "name": "b"}},
                            error=MaintenanceError("Cannot patch VirtualMachine ns/b: permission denied."))]
    with pytest.raises(MaintenanceError) as info:
        vms.raise_failures(outcomes, "Setting the eviction strategy", vms=["partial"])
    assert info.value.msg == ("Setting the eviction strategy failed for 1 of 2 VirtualMachines: "
                              "Cannot patch VirtualMachine ns/b: permission denied.")
    assert info.value.details["failed"] == [{"namespace": "ns", "name": "b",
                                             "error": "Cannot patch VirtualMachine ns/b: permission denied."}]
    assert info.value.details["vms"] == ["partial"]
