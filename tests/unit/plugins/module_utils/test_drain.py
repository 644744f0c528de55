"""The drain engine against the in-memory API server: concurrency, 429 handling woken by
PodDisruptionBudget changes, 404, DELETE mode, deadlines and their explanations."""

import threading

import pytest

from drain_cluster import ReplicaSetSimulator, cluster, launcher, pdb, pod, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import drain
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import (
    DrainOptions,
    Drainer,
    Progress,
    classify_pod,
    explain_pending,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.waiter import Deadline


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
