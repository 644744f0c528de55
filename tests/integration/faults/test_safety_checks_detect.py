"""The safety checks catch what they are meant to catch (so that "0 violations" means something).

* A pod deleted directly (no eviction, so no PodDisruptionBudget check) while its budget
  allows no disruption is a violation the PdbWatcher reports; an eviction the API server
  grants is not.
* A VMI deleted behind the operation's back (its VM re-creates it, with a new UID) is a
  problem for VmSafety, unless the operation reported shutting that VM down.
"""

import time

from kubernetes import client

import safety
import workloads
from lab.wait import wait_for


def test_pdb_watcher_reports_a_pod_deleted_against_its_budget(k8s, fault_namespace):
    workloads.create_guarded_deployment(k8s, fault_namespace, "tight", replicas=2, min_available=2)
    core = client.CoreV1Api(k8s)
    pods = core.list_namespaced_pod(fault_namespace, label_selector="app=tight").items
    with safety.PdbWatcher(k8s) as watcher:
        core.delete_namespaced_pod(pods[0].metadata.name, fault_namespace, grace_period_seconds=0)
        wait_for(lambda: len([p for p in core.list_namespaced_pod(fault_namespace, label_selector="app=tight").items
                              if not p.metadata.deletion_timestamp]) == 2, 60, "the replacement pod")
    assert [v["pdb"] for v in watcher.violations] == ["%s/tight" % fault_namespace], watcher.violations


def test_pdb_watcher_accepts_evictions_the_budget_allows(k8s, fault_namespace):
    workloads.create_guarded_deployment(k8s, fault_namespace, "loose", replicas=3, min_available=2)
    core = client.CoreV1Api(k8s)
    wait_for(lambda: (client.PolicyV1Api(k8s).read_namespaced_pod_disruption_budget("loose", fault_namespace)
                      .status.disruptions_allowed or 0) >= 1, 60, "the budget to allow a disruption")
    pod = core.list_namespaced_pod(fault_namespace, label_selector="app=loose").items[0]
    with safety.PdbWatcher(k8s) as watcher:
        core.create_namespaced_pod_eviction(pod.metadata.name, fault_namespace, {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod.metadata.name, "namespace": fault_namespace}})
        time.sleep(1)  # let the watch see the pod go (no assertion on timing)
    assert watcher.violations == []
    assert watcher.disruptions >= 1


def _pod(name, node, ready=True, phase="Running", deleting=False):
    meta = {"namespace": "ns", "name": name, "labels": {"app": "x"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_pdb_watcher_counts_pods_taken_away_not_pods_that_only_turned_unready():
    """Replayed without a lab: a pod that turns unready while it runs (its node's heartbeat lapsed) violates no
    budget; a pod deleted, evicted (being deleted) or ended while its budget is short does, the unready one counted
    as unavailable."""
    watcher = safety.PdbWatcher(None)
    record = watcher._recorder.record
    pdb = {"metadata": {"namespace": "ns", "name": "x"},
           "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "x"}}}}
    events = [("Namespace", "SYNC", {"metadata": {"name": "ns"}}), ("PodDisruptionBudget", "SYNC", pdb)]
    nodes = (("a", "n1"), ("b", "n2"), ("c", "n2"), ("d", "n3"))
    events += [("Pod", "SYNC", _pod(name, node)) for name, node in nodes]
    events += [("Pod", "MODIFIED", _pod("b", "n2", ready=False)),                 # unready: nothing taken away
               ("Pod", "MODIFIED", _pod("a", "n1", deleting=True)),               # evicted while b is unready
               ("Pod", "MODIFIED", _pod("c", "n2", phase="Succeeded", ready=False)),  # ended
               ("Pod", "DELETED", _pod("d", "n3"))]                               # deleted
    for rv, (kind, etype, obj) in enumerate(events, start=1):
        record(rv, kind, etype, obj)
    violations = watcher._replay()
    assert [(v["pod"], v["available"]) for v in violations] == [("ns/a", 2), ("ns/c", 1), ("ns/d", 0)], violations
    assert watcher.disruptions == 3


def test_vm_safety_flags_an_unexplained_vmi_restart(k8s, fault_namespace):
    workloads.create_vm(k8s, fault_namespace, "victim")
    workloads.wait_vms_running(k8s, fault_namespace, ["victim"])
    check = safety.VmSafety(k8s, [fault_namespace])
    client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
        "kubevirt.io", "v1", fault_namespace, "virtualmachineinstances", "victim")
    workloads.wait_vms_running(k8s, fault_namespace, ["victim"])
    unexplained = check.verify(timeout=5)
    assert len(unexplained.problems) == 1 and "victim" in unexplained.problems[0], unexplained
    # A restart cannot be undone: the check does not wait for it to go away (only a VM not running yet may still
    # come right).
    assert unexplained.unsettled == [], unexplained
    explained = check.verify(shut_down=["%s/victim" % fault_namespace], timeout=30)
    assert explained.problems == [] and explained.restarted == ["%s/victim" % fault_namespace], explained
