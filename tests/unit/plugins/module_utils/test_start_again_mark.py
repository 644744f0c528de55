"""The start-again mark of a RerunOnFailure VM a drain shuts down: set before, read by the next call for the node
(entering maintenance again or leaving it), removed once the VM was started."""

import json
import threading

from kubevirt_objects import VmController, cluster, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    START_AGAIN_ANNOTATION,
    START_AGAIN_LABEL,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline

NODE = "worker-9"  # the node drained; the stand-in VM controller starts VMIs on worker-1


def entry(name, uid, restart_by):
    return {"namespace": "ns1", "name": name, "_vmi": {"metadata": {"uid": uid}}, "_pod": None,
            "run_strategy": "RerunOnFailure",
            "_fate": fates.Fate("restart_elsewhere", "", run_strategy="RerunOnFailure", restart_by=restart_by)}


def marked_vm(server, name, mark, run_strategy="RerunOnFailure"):
    obj = vm(name, run_strategy=run_strategy, labels={START_AGAIN_LABEL: "true"})
    obj["metadata"]["annotations"] = {START_AGAIN_ANNOTATION: json.dumps(mark)}
    return server.add("VirtualMachine", obj)


def mark_of(server, name):
    meta = server.get("VirtualMachine", name, "ns1")["metadata"]
    raw = (meta.get("annotations") or {}).get(START_AGAIN_ANNOTATION)
    return (meta.get("labels") or {}).get(START_AGAIN_LABEL), json.loads(raw) if raw else None


def controller(server):
    """The stand-in VM controller, knowing the marked VMs as RerunOnFailure VMs it has seen before: it starts
    one only when asked (it would start a VM that comes to RerunOnFailure from another strategy)."""
    stand_in = VmController(server)
    for (kind, namespace, name), obj in list(server.objects.items()):
        if kind == "VirtualMachine":
            stand_in.strategies[(namespace, name)] = obj["spec"].get("runStrategy")
    return stand_in


def test_only_the_vms_the_collection_starts_are_marked_with_their_node_and_vmi():
    client, server = cluster()
    server.add("VirtualMachine", vm("rerun", run_strategy="RerunOnFailure"))
    server.add("VirtualMachine", vm("always"))
    restart_elsewhere.mark_for_start(client, [entry("rerun", "old-uid", fates.BY_US),
                                              entry("always", "uid-a", fates.BY_KUBEVIRT)], NODE)
    assert mark_of(server, "rerun") == ("true", {"node": NODE, "vmi": "old-uid"})
    assert mark_of(server, "always") == (None, None)
    assert restart_elsewhere.marked_for_start(client, NODE) == {("ns1", "rerun"): "old-uid"}
    assert restart_elsewhere.marked_for_start(client, "worker-2") == {}


def test_a_mark_the_vm_no_longer_fits_is_removed_and_check_mode_reads_only():
    client, server = cluster()
    marked_vm(server, "halted-since", {"node": NODE, "vmi": "u1"}, run_strategy="Halted")
    marked_vm(server, "elsewhere", {"node": "worker-2", "vmi": "u2"})
    before = len(server.writes())
    assert restart_elsewhere.marked_for_start(client, NODE, tidy=False) == {}
    assert len(server.writes()) == before
    assert restart_elsewhere.marked_for_start(client, NODE) == {}
    assert mark_of(server, "halted-since") == (None, None)
    assert mark_of(server, "elsewhere")[1] == {"node": "worker-2", "vmi": "u2"}  # another node's, kept


def test_leaving_starts_the_vms_whose_old_vmi_ended_and_unmarks_them_all():
    client, server = cluster()
    marked_vm(server, "ended", {"node": NODE, "vmi": "old-1"})
    server.add("VirtualMachineInstance", dict(vmi("ended", phase="Succeeded", node=NODE),
                                              metadata={"name": "ended", "namespace": "ns1", "uid": "old-1"}))
    marked_vm(server, "gone", {"node": NODE, "vmi": "old-2"})
    marked_vm(server, "never-evicted", {"node": NODE, "vmi": "old-3"})
    server.add("VirtualMachineInstance", dict(vmi("never-evicted", node=NODE),
                                              metadata={"name": "never-evicted", "namespace": "ns1", "uid": "old-3"}))
    with controller(server):
        started = restart_elsewhere.start_marked(client, restart_elsewhere.marked_for_start(client, NODE),
                                                 Deadline(10))
    assert started == ["ns1/ended", "ns1/gone"]
    for name in ("ended", "gone", "never-evicted"):
        assert mark_of(server, name) == (None, None)
    assert server.get("VirtualMachineInstance", "never-evicted", "ns1")["metadata"]["uid"] == "old-3"


def test_a_resumed_drain_starts_a_vm_an_earlier_run_shut_down_and_never_started():
    """The playbook was killed after the eviction of ``batch`` (its VMI Succeeded) and before its start: the
    resumed drain's plan no longer holds it, the mark does."""
    client, server = cluster()
    marked_vm(server, "batch", {"node": NODE, "vmi": "old-uid"})
    server.add("VirtualMachineInstance", dict(vmi("batch", phase="Succeeded", node=NODE),
                                              metadata={"name": "batch", "namespace": "ns1", "uid": "old-uid"}))
    with controller(server):
        running = restart_elsewhere.start_again(client, [], NODE, Deadline(10))
    assert running == {("ns1", "batch"): "worker-1"}
    assert server.get("VirtualMachineInstance", "batch", "ns1")["metadata"]["uid"] != "old-uid"
    assert mark_of(server, "batch") == (None, None)


def test_leaving_right_after_the_eviction_waits_for_the_guest_to_end_then_starts_it():
    """The run stopped while the evicted guest was still shutting down (its launcher pod terminating)."""
    client, server = cluster()
    marked_vm(server, "ending", {"node": NODE, "vmi": "old-1"})
    server.add("VirtualMachineInstance", dict(vmi("ending", node=NODE),
                                              metadata={"name": "ending", "namespace": "ns1", "uid": "old-1"}))
    server.add("Pod", {"metadata": {"name": "virt-launcher-ending-x", "namespace": "ns1",
                                    "labels": {"kubevirt.io/created-by": "old-1"},
                                    "deletionTimestamp": "2026-11-30T05:00:00Z"},
                       "spec": {"nodeName": NODE}, "status": {"phase": "Running"}})
    marked = restart_elsewhere.marked_for_start(client, NODE)
    ended = dict(server.get("VirtualMachineInstance", "ending", "ns1"))
    ended["status"] = dict(ended["status"], phase="Succeeded")

    def guest_ends_once_watched():
        # start_marked has looked at the VMI (still Running) and now lists VMIs to watch them: the guest ends.
        with server.lock:
            while ("GET", "VirtualMachineInstance", None) not in server.requests:
                server.lock.wait(0.05)
        server.add("VirtualMachineInstance", ended)

    ending = threading.Thread(target=guest_ends_once_watched, daemon=True)
    with controller(server):
        ending.start()
        started = restart_elsewhere.start_marked(client, marked, Deadline(10))
        assert started == ["ns1/ending"]
        with server.lock:  # the start request, carried out by the stand-in controller: a new VMI
            server.lock.wait_for(lambda: (server.get("VirtualMachineInstance", "ending", "ns1") or {}).get(
                "metadata", {}).get("uid") not in (None, "old-1"), 10)
    ending.join(5)
    assert server.get("VirtualMachineInstance", "ending", "ns1")["metadata"]["uid"] != "old-1"
    assert mark_of(server, "ending") == (None, None)
