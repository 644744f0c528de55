"""The drain engine against the in-memory API server: concurrency, 429 handling woken by
PodDisruptionBudget changes, 404, DELETE mode, deadlines and their explanations."""

import copy
import threading
import time

import pytest

from fake_apiserver import FakeResponse
from drain_cluster import (
    FAILED_REASON,
    EvacuatingKubeVirt,
    ReplicaSetSimulator,
    cluster,
    failed_migration,
    kubevirt_cr,
    launcher,
    pdb,
    pod,
    vm,
    vmi,
)

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import engine as drain
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.engine import Drainer
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import explain_pending
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions, classify_pod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import RunOwner
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(drain, "BACKOFF_START", 0.05)
    monkeypatch.setattr(drain, "BACKOFF_CAP", 0.4)
    monkeypatch.setattr(drain, "LAUNCHER_BACKOFF_CAP", 0.4)


def run_drain(client, seconds=20, wait=True, **options):
    lines = []
    progress = Progress("worker-1", log=lines.append)
    wait_only = options.pop("wait_only", ())
    engine = Drainer(client, "worker-1", DrainOptions(**options), Deadline(seconds), progress=progress,
                     wait_only=wait_only)
    return engine, engine.run(wait=wait), lines


@pytest.mark.parametrize("overrides,verdict", [
    ({}, "evict"),
    ({"owner": ("DaemonSet", "ds")}, "skip"),
    ({"mirror": True}, "skip"),
    ({"owner": None}, "evict"),
    ({"owner": None, "phase": "Failed"}, "evict"),
    ({"emptydir": True}, "evict"),
])
def test_classification_defaults(overrides, verdict):
    assert classify_pod(pod("p", **overrides), DrainOptions())[0] == verdict


def test_drain_evicts_everything_concurrently_and_reports_progress():
    client, server = cluster()
    for i in range(12):
        server.add("Pod", pod("web-%02d" % i))
    server.add("Pod", pod("exporter", owner=("DaemonSet", "node-exporter")))
    _engine, result, lines = run_drain(client)
    assert result.done and result.total == 13 and result.eviction == 12 and result.evicted == 12
    assert server.pods_on("worker-1") == ["ns1/exporter"]
    assert lines[0].endswith("pods_left=12/12 vms_left=0 progress=0%")
    assert lines[-1].endswith("pods_left=0/12 vms_left=0 progress=100%")
    # No per-pod polling: a list and a watch, one eviction per pod.
    gets = [r for r in server.requests if r[0] == "GET" and r[1] == "Pod" and r[2] is not None]
    assert gets == []


def test_pdb_gated_drain_never_exceeds_the_budget():
    client, server = cluster()
    for i in range(10):
        server.add("Pod", pod("web-%02d" % i))
    server.add("PodDisruptionBudget", pdb("web", allowed=1, expected=10, desired=9))
    simulator = ReplicaSetSimulator(server)
    _engine, result, _lines = run_drain(client)
    assert result.done and result.evicted == 10
    assert simulator.max_unavailable == 1
    refused = [e for e in server.evictions if e[1] == 429]
    # Pods wait for the budget to allow a disruption instead of collecting 429s.
    assert len(refused) <= 3, refused


def test_eviction_answered_404_counts_as_gone():
    client, server = cluster()
    server.add("Pod", pod("web-a"))

    def vanish(target):
        server.objects.pop(("Pod", "ns1", target["metadata"]["name"]), None)
        return 404, 'pods "web-a" not found'

    server.webhook = vanish
    _engine, result, _lines = run_drain(client, seconds=5)
    assert result.done and result.evicted == 0


def test_disable_eviction_deletes_with_the_grace_period():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("PodDisruptionBudget", pdb("web", allowed=0))
    _engine, result, _lines = run_drain(client, disable_eviction=True, grace_period=0)
    assert result.done
    assert ("DELETE", "Pod", "web-a") in server.requests and server.evictions == []


def test_timeout_explains_every_pending_pod():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("PodDisruptionBudget", pdb("web", allowed=0, expected=3, desired=3))
    engine, result, lines = run_drain(client, seconds=1.5)
    assert result.timed_out and result.pending_keys == ["ns1/web-a"]
    sentences = explain_pending(client, "worker-1", [t.pod for t in result.pending], engine.pdb_items())
    assert sentences == ["pod ns1/web-a: PodDisruptionBudget ns1/web allows 0 disruptions (3 of 3 pods healthy, "
                         "3 required)"]


def test_no_wait_asks_once_and_returns():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("Pod", pod("web-b"))
    server.add("PodDisruptionBudget", pdb("web", allowed=1))
    _engine, result, _lines = run_drain(client, wait=False)
    assert len(server.evictions) == 2 and result.evicted == 1 and "ns1/web-b" in result.pending_keys


def test_non_migratable_vm_is_denied_until_the_deadline_and_explained():
    client, server = cluster()
    instance = vmi("db", eviction="LiveMigrate", migratable=False)
    server.add("VirtualMachine", vm("db"))
    server.add("VirtualMachineInstance", instance)
    server.add("Pod", launcher(instance))
    server.webhook = lambda target: (429, 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" '
                                          'denied the request: VMI db is not live-migratable')
    engine, result, _lines = run_drain(client, seconds=1.5)
    assert result.timed_out and len(server.evictions) >= 2
    (sentence,) = explain_pending(client, "worker-1", [t.pod for t in result.pending], engine.pdb_items())
    assert sentence.startswith("VM ns1/db is not live-migratable (DisksNotLiveMigratable")
    assert sentence.endswith("its eviction strategy LiveMigrate keeps it on node worker-1")


def test_wait_only_pods_are_not_evicted():
    client, server = cluster()
    server.add("Pod", pod("virt-launcher-db-x", owner=None))

    def vmi_gone():
        with server.lock:
            server.objects.pop(("Pod", "ns1", "virt-launcher-db-x"))
            server.rv += 1
            server.events.append((server.rv, "Pod", "DELETED", pod("virt-launcher-db-x", owner=None)))
            server.lock.notify_all()

    threading.Timer(0.3, vmi_gone).start()
    _engine, result, _lines = run_drain(client, wait_only={"ns1/virt-launcher-db-x"})
    assert result.done and server.evictions == []


def test_refused_pods_stop_the_drain_before_any_eviction():
    client, server = cluster()
    server.add("Pod", pod("bare", owner=None))
    _engine, result, _lines = run_drain(client, force=False)
    assert result.refused == [("ns1/bare", "is not managed by a controller (set force=true to delete it for good)")]
    assert server.evictions == []


def test_explains_a_migration_stuck_without_a_target():
    client, server = cluster()
    instance = vmi("web", eviction="LiveMigrate", migratable=True)
    instance["status"]["migrationState"] = {"sourceNode": "worker-1"}
    server.add("VirtualMachine", vm("web"))
    server.add("VirtualMachineInstance", instance)
    source = server.add("Pod", launcher(instance))
    migration = server.add("VirtualMachineInstanceMigration", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "kubevirt-evacuation-abc", "namespace": "ns1", "uid": "mig-1"},
        "spec": {"vmiName": "web"}, "status": {"phase": "Scheduling"}})
    target = launcher(instance, suffix="tgt12")
    target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = migration["metadata"]["uid"]
    target["spec"]["nodeName"] = None
    target["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/4 nodes are available: 3 node(s) were unschedulable."}]}
    server.add("Pod", target)
    (sentence,) = explain_pending(client, "worker-1", [source], [])
    assert sentence == ("VM ns1/web: migration ns1/kubevirt-evacuation-abc is in phase Scheduling (from worker-1 to "
                        "no node yet); its target pod ns1/virt-launcher-web-tgt12 is Pending: 0/4 nodes are "
                        "available: 3 node(s) were unschedulable")


# -- live migrations that keep failing ------------------------------------------------------------

def migrating_vm(server, name="web"):
    """A migratable VM whose launcher pod is refused by its own budget (KubeVirt migrates it)."""
    instance = vmi(name, eviction="LiveMigrate", migratable=True)
    server.add("VirtualMachine", vm(name))
    server.add("VirtualMachineInstance", instance)
    server.add("Pod", launcher(instance))
    server.webhook = lambda target: (429, "Cannot evict pod as it would violate the pod's disruption budget.") \
        if target["metadata"]["name"].startswith("virt-launcher-") else None
    return instance


def failing_later(server, count, vmi_name="web"):
    """Migrations of the VM fail one after another once the drain asked KubeVirt to move it: at the
    first eviction of its launcher pod. The drain watches the migrations before it evicts anything,
    so they are this drain's, never counted as an earlier run's (drain/migrations.py FailingMigrations)."""
    answer, failed = server.webhook, threading.Event()

    def webhook(target):
        if target["metadata"]["name"].startswith("virt-launcher-%s-" % vmi_name) and not failed.is_set():
            failed.set()
            for i in range(count):
                server.add("VirtualMachineInstanceMigration", failed_migration("evacuation-%d" % (i + 1), vmi_name))
        return answer(target) if answer else None

    server.webhook = webhook


def drain_with_policy(client, policy, seconds=20):
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(seconds), non_migratable=policy)
    return engine, engine.run(wait=True)


def test_failed_migrations_fail_the_drain_naming_the_vm_and_the_reason():
    client, server = cluster()
    migrating_vm(server)
    server.add("Pod", pod("web-a"))
    server.add("VirtualMachineInstanceMigration", failed_migration("before-1"))  # an earlier run's: not counted
    failing_later(server, drain.MIGRATION_ATTEMPTS)
    _engine, result = drain_with_policy(client, "fail")
    assert not result.timed_out and result.fatal is not None
    assert result.fatal.msg == (
        "VM ns1/web cannot leave node worker-1: 3 live migrations failed, the last: %s (non_migratable=fail; "
        "shutdown would shut it down so that its run strategy restarts it elsewhere)." % FAILED_REASON)
    assert result.gave_up == {"ns1/virt-launcher-web-abcde": "3 live migrations failed, the last: %s" % FAILED_REASON}
    assert server.get("VirtualMachineInstance", "web", "ns1") is not None
    assert server.pods_on("worker-1") == ["ns1/virt-launcher-web-abcde"]


def test_fewer_failed_migrations_than_the_bound_keep_the_drain_waiting():
    client, server = cluster()
    migrating_vm(server)
    failing_later(server, drain.MIGRATION_ATTEMPTS - 1)
    _engine, result = drain_with_policy(client, "fail", seconds=1.5)
    assert result.timed_out and result.fatal is None and result.gave_up == {}


def test_failed_migrations_with_shutdown_delete_the_vmi_and_wait_for_its_pod():
    client, server = cluster()
    instance = migrating_vm(server)
    failing_later(server, drain.MIGRATION_ATTEMPTS)

    def vmi_controller():  # a deleted VMI takes its launcher pod with it
        with server.lock:
            while server.get("VirtualMachineInstance", "web", "ns1") is not None:
                server.lock.wait(0.1)
            key = ("Pod", "ns1", "virt-launcher-web-abcde")
            gone = server.objects.pop(key)
            server.rv += 1
            server.events.append((server.rv, "Pod", "DELETED", gone))
            server.lock.notify_all()

    threading.Thread(target=vmi_controller, daemon=True).start()
    _engine, result = drain_with_policy(client, "shutdown")
    assert result.done and result.shut_down == [("ns1", "web")]
    deletes = [r for r in server.requests if r[0] == "DELETE" and r[1] == "VirtualMachineInstance"]
    assert len(deletes) == 1 and instance["metadata"]["uid"]


def test_failed_migrations_with_wait_leave_kubevirt_retrying():
    client, server = cluster()
    migrating_vm(server)
    failing_later(server, drain.MIGRATION_ATTEMPTS)
    engine, result = drain_with_policy(client, "wait", seconds=1.5)
    # The migrations are watched (to pace the evacuations) but the VM is left to KubeVirt.
    assert result.timed_out and result.fatal is None and result.shut_down == [] and result.gave_up == {}
    (sentence,) = explain_pending(client, "worker-1", [t.pod for t in result.pending], engine.pdb_items())
    assert sentence.startswith("VM ns1/web has no migration running; 3 live migrations failed, the last: %s"
                               % FAILED_REASON), sentence


def test_explains_a_failed_migration_by_its_condition_when_no_state_says_why():
    client, server = cluster()
    instance = vmi("web", eviction="LiveMigrate", migratable=True)
    server.add("VirtualMachine", vm("web"))
    server.add("VirtualMachineInstance", instance)
    source = server.add("Pod", launcher(instance))
    server.add("VirtualMachineInstanceMigration",
               failed_migration("m-1", reason="target pod was unschedulable for 300s", in_state=False))
    (sentence,) = explain_pending(client, "worker-1", [source], [])
    assert sentence == ("VM ns1/web has no migration running; 1 live migration failed, the last: target pod was "
                        "unschedulable for 300s")


def test_source_pod_that_finished_after_its_migration_is_left_to_kubevirt():
    """After a live migration virt-launcher exits and its pod stays on the node, Succeeded: the
    VM has left the node, so the drain is done with it as soon as it sees it finish, and never
    deletes it (KubeVirt does, with its VMI; an early delete can make virt-controller fail the VMI)."""
    client, server = cluster()
    instance = vmi("web", eviction="LiveMigrate")
    server.add("VirtualMachine", vm("web"))
    server.add("VirtualMachineInstance", instance)
    source = server.add("Pod", launcher(instance))

    def webhook(target):
        if (target.get("status") or {}).get("phase") == "Succeeded":
            return None  # KubeVirt's webhook lets a completed virt-launcher pod go
        return (429, 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '
                     'Eviction triggered evacuation of VMI "ns1/web"')

    server.webhook = webhook

    def migrated():
        while not server.evictions:
            threading.Event().wait(0.01)
        done = dict(source, status=dict(source.get("status") or {}, phase="Succeeded"))
        with server.lock:
            server._store("Pod", "ns1", source["metadata"]["name"], done, "MODIFIED")

    threading.Thread(target=migrated, daemon=True).start()
    _engine, result, _lines = run_drain(client, seconds=10)
    assert result.done, [(t.key, t.state, t.reason) for t in result.pending]
    assert [status for _key, status in server.evictions] == [429]
    assert server.get("Pod", source["metadata"]["name"], "ns1")["status"]["phase"] == "Succeeded"


def failed_launcher(server, migration_started):
    """A VM running on worker-1 whose launcher pod failed (its guest died: a machine that lost power), with or
    without a live migration to worker-2 that had started and never ended."""
    instance = vmi("web", eviction="LiveMigrate")
    if migration_started:
        instance["status"]["migrationState"] = {"migrationUid": "m-1", "sourceNode": "worker-1",
                                                "targetNode": "worker-2", "startTimestamp": "2026-11-30T00:45:07Z"}
    server.add("VirtualMachine", vm("web"))
    server.add("VirtualMachineInstance", instance)
    dead = launcher(instance)
    dead["status"] = dict(dead.get("status") or {}, phase="Failed")
    server.add("Pod", dead)
    return instance, dead


def remove_pod_once_vmi_deleted(server, pod_obj):
    """virt-controller's part: a deleted VMI takes its launcher pod with it."""
    def run():
        with server.lock:
            while server.get("VirtualMachineInstance", "web", "ns1") is not None:
                server.lock.wait(0.1)
            gone = server.objects.pop(("Pod", "ns1", pod_obj["metadata"]["name"]))
            server.rv += 1
            server.events.append((server.rv, "Pod", "DELETED", gone))
            server.lock.notify_all()

    threading.Thread(target=run, daemon=True).start()


@pytest.mark.parametrize("policy", ["fail", "wait", "shutdown"])
def test_a_vm_stranded_by_a_guest_that_died_during_its_migration_is_restarted(policy):
    """KubeVirt 1.7 leaves the VMI of a guest that died during a started live migration claiming the node for
    good (migrations.stranded): the drain restarts it as its run strategy says, under every non_migratable
    policy (nothing alive is shut down), reports it shut down, and waits for its pod; a drain that counted the
    failed pod as gone would leave a VM "running" on a node about to be rebooted."""
    client, server = cluster()
    _instance, dead = failed_launcher(server, migration_started=True)
    remove_pod_once_vmi_deleted(server, dead)
    _engine, result = drain_with_policy(client, policy, seconds=10)
    assert result.done and result.fatal is None, [(t.key, t.state, t.reason) for t in result.pending]
    assert result.shut_down == [("ns1", "web")]
    assert result.gave_up == {} and result.stranded["ns1/virt-launcher-web-abcde"].startswith(
        "its virt-launcher pod failed during its live migration to worker-2 (the guest is gone")
    assert server.evictions == []


def test_an_old_failed_launcher_of_a_vm_that_came_back_to_the_node_is_not_its_guest():
    """Found by the chaos runs: a migration to this node failed when its machine lost power (its target pod here
    Failed); the VM came to the node later through another pod and is migrating off it now. The failed pod is not
    the VM's: nothing is restarted (its VMI's current pod is the newer one), and the drain waits for the VM."""
    client, server = cluster()
    instance = vmi("web", eviction="LiveMigrate")
    instance["status"]["migrationState"] = {"migrationUid": "m-2", "sourceNode": "worker-1", "targetNode": "worker-2",
                                            "sourcePod": "virt-launcher-web-newer", "startTimestamp": "2026-11-30T01:59:37Z"}
    server.add("VirtualMachine", vm("web"))
    server.add("VirtualMachineInstance", instance)
    old = launcher(instance, suffix="older")
    old["metadata"]["creationTimestamp"] = "2026-11-30T01:58:23Z"
    old["status"] = dict(old.get("status") or {}, phase="Failed")
    current = launcher(instance, suffix="newer")
    current["metadata"]["creationTimestamp"] = "2026-11-30T01:59:08Z"
    server.add("Pod", old)
    server.add("Pod", current)
    server.webhook = lambda target: (429, 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the '
                                          'request: Eviction triggered evacuation of VMI "ns1/web"')
    _engine, result = drain_with_policy(client, "fail", seconds=1.5)
    assert result.timed_out and result.shut_down == [] and result.stranded == {}
    assert [t.key for t in result.pending] == ["ns1/virt-launcher-web-newer"]
    writes = [r for r in server.requests if r[0] in ("DELETE", "PUT")]
    assert not [r for r in writes if r[1] in ("VirtualMachineInstance", "VirtualMachine")]


def test_a_failed_launcher_whose_vmi_still_runs_there_is_waited_for_not_restarted(monkeypatch):
    """A failed launcher pod without a migration under way: KubeVirt fails its VMI by itself; the drain waits
    until the VMI no longer says it runs on the node, and restarts nothing."""
    monkeypatch.setattr(drain, "ENDED_RECHECK", 0.05)
    client, server = cluster()
    instance, _dead = failed_launcher(server, migration_started=False)

    def fail_the_vmi():  # once the drain has looked at the VMI more than once (it waited)
        while len([r for r in server.requests if r[0] == "GET" and r[1] == "VirtualMachineInstance"]) < 3:
            time.sleep(0.01)
        with server.lock:
            server._store("VirtualMachineInstance", "ns1", "web",
                          dict(instance, status=dict(instance["status"], phase="Failed")), "MODIFIED")

    threading.Thread(target=fail_the_vmi, daemon=True).start()
    _engine, result = drain_with_policy(client, "fail", seconds=10)
    assert result.done and result.shut_down == [] and result.stranded == {}
    assert not [r for r in server.requests if r[0] in ("DELETE", "PUT") and r[1] == "VirtualMachineInstance"]


def test_a_failed_launcher_whose_vmi_ended_is_not_a_drain_target():
    client, server = cluster()
    instance, _dead = failed_launcher(server, migration_started=True)
    with server.lock:
        server._store("VirtualMachineInstance", "ns1", "web",
                      dict(instance, status=dict(instance["status"], phase="Failed")), "MODIFIED")
    _engine, result, _lines = run_drain(client, seconds=5)
    assert result.done and result.eviction == 0 and result.targets == []


def test_finished_launcher_pod_is_not_a_drain_target():
    """A virt-launcher pod that finished before the drain started is left where it is."""
    client, server = cluster()
    instance = vmi("web", eviction="LiveMigrate")
    server.add("VirtualMachineInstance", instance)
    done = launcher(instance)
    done["status"] = dict(done.get("status") or {}, phase="Succeeded")
    server.add("Pod", done)
    _engine, result, _lines = run_drain(client, seconds=5)
    assert result.done and result.eviction == 0 and result.total == 1
    assert server.evictions == []


def test_a_node_that_goes_not_ready_stops_the_drain_after_the_grace(monkeypatch):
    monkeypatch.setattr(drain, "NODE_CHECK_INTERVAL", 0.05)
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("PodDisruptionBudget", pdb("web", allowed=0))  # the pod stays: the drain waits

    def fail_node():
        node = server.objects[("Node", "", "worker-1")]
        node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                         "lastTransitionTime": "2026-11-25T06:00:00Z"}]
    threading.Timer(0.3, fail_node).start()
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(20), not_ready_grace=0.5)
    result = engine.run()
    assert not result.timed_out and result.fatal is not None
    assert result.fatal.msg == (
        "Node worker-1 went NotReady during the drain (its Ready condition is Unknown (NodeStatusUnknown since "
        "2026-11-25T06:00:00Z)) with 1 pod still on it (ns1/web-a): they cannot confirm that they stopped, so the "
        "drain cannot finish; the node stays cordoned and in maintenance. Bring it back and run again, or, if it is "
        "dead, use node_decommission with assume_powered_off=true.")


def test_a_node_not_ready_with_nothing_left_on_it_does_not_fail_the_drain():
    """The node has been NotReady longer than the grace when its last pod goes, in the very look
    at which the node check is due: nothing is left, so the drain is done, not failed."""
    client, server = cluster()
    server.objects[("Node", "", "worker-1")]["status"]["conditions"][0]["status"] = "Unknown"
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(10), not_ready_grace=0.2)
    engine._not_ready_since = 1.0  # pylint: disable=protected-access
    assert engine.result.pending == []
    assert engine._node_not_ready(100.0) is None  # pylint: disable=protected-access


def test_a_not_ready_blip_shorter_than_the_grace_does_not_stop_the_drain(monkeypatch):
    monkeypatch.setattr(drain, "NODE_CHECK_INTERVAL", 0.05)
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    node = server.objects[("Node", "", "worker-1")]
    node["status"]["conditions"][0]["status"] = "Unknown"
    # Without a grace the drain does not look (node_decommission drains dead nodes on purpose).
    result = Drainer(client, "worker-1", DrainOptions(), Deadline(5)).run()
    assert result.fatal is None and result.pending == []
    server.add("Pod", pod("web-b"))
    server.add("PodDisruptionBudget", pdb("web", allowed=0))
    looks = []

    def look(_method, _path, _body):  # the node is Ready again once the drain has seen it NotReady
        with server.lock:
            looks.append(node["status"]["conditions"][0]["status"])
            answer = FakeResponse(200, copy.deepcopy(node))
            node["status"]["conditions"][0]["status"] = "True"
        return answer

    server.handlers["/api/v1/nodes/worker-1"] = look
    result = Drainer(client, "worker-1", DrainOptions(), Deadline(1.5), not_ready_grace=1.0).run()
    assert result.fatal is None and result.timed_out
    assert looks[:2] == ["Unknown", "True"]


def test_explains_terminating_pods_last_answers_and_plain_pending_pods():
    terminating = pod("web-a")
    terminating["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    sentences = explain_pending(None, "worker-1", [terminating, pod("web-b"), pod("web-c")], [],
                                reasons={"ns1/web-b": "Cannot evict pod as it would violate the budget."})
    assert sentences == [
        "pod ns1/web-a is terminating since 2024-01-01T00:00:00Z (the node must confirm it stopped)",
        "pod ns1/web-b: Cannot evict pod as it would violate the budget",
        "pod ns1/web-c is still on the node",
    ]


# -- evacuations paced to KubeVirt's migration limits --------------------------------------------

def vms_on_the_node(server, count):
    for i in range(count):
        instance = vmi("vm%d" % i, eviction="LiveMigrate", migratable=True)
        server.add("VirtualMachine", vm("vm%d" % i))
        server.add("VirtualMachineInstance", instance)
        server.add("Pod", launcher(instance))


def test_vms_are_asked_to_evacuate_no_faster_than_kubevirt_migrates_them():
    client, server = cluster()
    vms_on_the_node(server, 5)
    server.add("Pod", pod("web-a"))
    kubevirt = EvacuatingKubeVirt(server)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(20), migration_lanes=2)
    result = engine.run(wait=True)
    assert result.done
    # Every VM asked once, never more than two evacuating at once; the other pod did not wait.
    assert len(kubevirt.asked) == 5 and kubevirt.most == 2
    assert ("ns1/web-a", 201) in server.evictions


def test_a_drain_that_does_not_wait_asks_every_vm_at_once():
    client, server = cluster()
    vms_on_the_node(server, 4)
    kubevirt = EvacuatingKubeVirt(server, seconds=5)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(3), migration_lanes=1)
    engine.run(wait=False)
    assert len(kubevirt.asked) == 4  # nobody would ask the others after the module returned


def test_the_lanes_come_from_the_kubevirt_cr():
    client, server = cluster()
    vms_on_the_node(server, 4)
    cr = kubevirt_cr()
    cr["spec"]["configuration"]["migrations"] = {"parallelOutboundMigrationsPerNode": 3,
                                                 "parallelMigrationsPerCluster": 5}
    server.add("KubeVirt", cr)
    kubevirt = EvacuatingKubeVirt(server)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(20))
    assert engine.run(wait=True).done
    assert engine.migration_lanes == 3 and kubevirt.most == 3


def test_a_vm_whose_migration_succeeded_frees_its_lane_before_its_pod_is_gone():
    client, server = cluster()
    vms_on_the_node(server, 3)
    kubevirt = EvacuatingKubeVirt(server, seconds=0.05, pod_lingers=0.5)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(20), migration_lanes=1)
    assert engine.run(wait=True).done
    # The next VM was asked while the previous one's old pod was still on the node.
    assert len(kubevirt.asked) == 3 and kubevirt.most == 1 and kubevirt.asked_while_lingering == 2


def test_a_vm_that_migrated_before_this_drain_holds_its_lane_until_it_leaves_again():
    """VMs that came to the node earlier in a rolling run have a Succeeded migration from then: it is not
    this drain's, so it does not free the lane of the VM asked now (before its new migration shows)."""
    client, server = cluster()
    vms_on_the_node(server, 3)
    for i in range(3):
        server.add("VirtualMachineInstanceMigration", {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "earlier-vm%d" % i, "namespace": "ns1", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"vmiName": "vm%d" % i}, "status": {"phase": "Succeeded"}})
    kubevirt = EvacuatingKubeVirt(server, seconds=0.3)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(20), migration_lanes=1)
    assert engine.run(wait=True).done
    assert len(kubevirt.asked) == 3 and kubevirt.most == 1


def test_a_vm_kubevirt_backs_off_from_holds_no_lane():
    client, server = cluster()
    vms_on_the_node(server, 4)
    kubevirt = EvacuatingKubeVirt(server, failing=("vm0",))
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(3), migration_lanes=1, non_migratable="wait")
    result = engine.run(wait=True)
    # vm0 cannot leave; with one lane the three others still leave one after another.
    assert result.timed_out and result.pending_keys == ["ns1/virt-launcher-vm0-abcde"]
    assert len(kubevirt.asked) == 4 and kubevirt.most == 1


class Owner(RunOwner):
    """A run_owner.RunOwner whose process ends when the test says."""

    def __init__(self, pid=4242, ends_after_looks=None):  # pylint: disable=super-init-not-called
        self.pid = pid
        self.looks = 0
        self.ends_after_looks = ends_after_looks

    def gone(self):
        self.looks += 1
        return self.ends_after_looks is not None and self.looks > self.ends_after_looks


def test_a_drain_stops_once_the_run_that_started_it_is_gone(monkeypatch):
    monkeypatch.setattr(drain, "OWNER_CHECK_INTERVAL", 0.05)
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("Pod", pod("web-b"))
    server.add("PodDisruptionBudget", pdb("web", allowed=0))  # the pods stay: the drain waits
    owner = Owner(ends_after_looks=1)  # the drain sees its run alive once, then gone
    started = time.monotonic()
    result = Drainer(client, "worker-1", DrainOptions(), Deadline(20), owner=owner).run()
    assert time.monotonic() - started < 10
    assert not result.timed_out and result.fatal is not None
    assert result.fatal.msg == (
        "The run that started the maintenance of node worker-1 (process 4242) has ended, so the drain stopped with 2 "
        "pods still on the node; the node stays cordoned and in maintenance, and KubeVirt finishes the live "
        "migrations already under way. Run again to go on, or leave maintenance with state=absent.")
    attempts = len(server.evictions)
    time.sleep(0.5)
    assert len(server.evictions) == attempts and sorted(server.pods_on("worker-1")) == ["ns1/web-a", "ns1/web-b"]


def test_a_drain_whose_run_is_there_or_that_has_nothing_left_is_not_stopped():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    result = Drainer(client, "worker-1", DrainOptions(), Deadline(10), owner=Owner()).run()
    assert result.done and result.fatal is None
    owner = Owner(ends_after_looks=0)
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(10), owner=owner)
    assert engine.result.pending == []
    assert engine._owner_gone(100.0) is None  # pylint: disable=protected-access
