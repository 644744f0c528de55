"""node_maintenance, node_maintenance_info and node_decommission on the lab.

Workloads are put on one node by cordoning the other nodes while they start. Every test
leaves the nodes as it found them (our taints, label, record and NodeMaintenances removed,
nodes uncordoned), also when it fails.
"""

import datetime
import json
import os
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import recorded_events
import runs
import workloads
from safety import PdbWatcher, ResourceVersions

from lab import nodes as lab_nodes
from lab.wait import wait_for

GROUP, VERSION = "kubevirt.io", "v1"
RECORD = "maintenance.kubevirt-ops.io/node-maintenance"
EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"
OUR_TAINTS = ("medik8s.io/drain", "node.kubernetes.io/unschedulable")
NM_GROUPS = ("nodemaintenance.medik8s.io", "nodemaintenance.kubevirt.io")


# -- helpers ---------------------------------------------------------------------------------

def core(k8s):
    return client.CoreV1Api(k8s)


def custom(k8s):
    return client.CustomObjectsApi(k8s)


def workers(k8s):
    items = core(k8s).list_node(label_selector="node-role.kubernetes.io/worker").items
    return sorted(n.metadata.name for n in items if not n.spec.unschedulable)


def ours(cr):
    return ((cr.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/managed-by") == \
        "kubevirt_ops.maintenance"


def node_maintenances(k8s):
    found = []
    for group in NM_GROUPS:
        try:
            found.extend((group, cr) for cr in custom(k8s).list_cluster_custom_object(
                group, "v1beta1", "nodemaintenances")["items"])
        except ApiException as exc:
            if exc.status != 404:
                raise
    return found


def clear_maintenance(k8s):
    """Remove what this collection (or a NodeMaintenance of ours) left on any node."""
    for group, cr in node_maintenances(k8s):
        if ours(cr):
            try:
                custom(k8s).delete_cluster_custom_object(group, "v1beta1", "nodemaintenances", cr["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
    wait_for(lambda: not any(ours(cr) for _g, cr in node_maintenances(k8s)), 120, "our NodeMaintenances to go")
    for node in core(k8s).list_node().items:
        annotations = node.metadata.annotations or {}
        taints = node.spec.taints or []
        if RECORD not in annotations and not any(t.key == "medik8s.io/drain" for t in taints):
            continue
        core(k8s).patch_node(node.metadata.name, {
            "metadata": {"annotations": {RECORD: None}, "labels": {EXCLUDE_LABEL: None}},
            "spec": {"unschedulable": None,
                     "taints": [t.to_dict() for t in taints if t.key not in OUR_TAINTS] or None},
        })


def remove_vms(k8s, namespace):
    """Delete the test's VMs and wait until their VMIs and pods are gone, so that what a test
    started (a VM that blocks a drain, say) cannot show up in the next test's plan."""
    for vm in custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines")["items"]:
        custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines",
                                                    vm["metadata"]["name"])

    def gone():
        left = custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances")
        return not left["items"] and not core(k8s).list_namespaced_pod(
            namespace, label_selector="kubevirt.io=virt-launcher").items

    wait_for(gone, 180, "the VMs of %s to be gone" % namespace)


@pytest.fixture(autouse=True)
def leave_nodes_as_found(lab, k8s, restore_nodes, namespace):
    clear_maintenance(k8s)
    yield
    try:
        remove_vms(k8s, namespace)
    finally:
        clear_maintenance(k8s)


class OnlyNode:
    """Cordon every other schedulable node, so that what starts now lands on ``node``."""

    def __init__(self, k8s, node):
        self.k8s = k8s
        self.node = node
        self.others = []

    def __enter__(self):
        for node in core(self.k8s).list_node().items:
            if node.metadata.name != self.node and not node.spec.unschedulable:
                core(self.k8s).patch_node(node.metadata.name, {"spec": {"unschedulable": True}})
                self.others.append(node.metadata.name)
        return self

    def __exit__(self, *exc):
        for name in self.others:
            core(self.k8s).patch_node(name, {"spec": {"unschedulable": None}})


def create_vm(k8s, namespace, name, eviction="LiveMigrate", run_strategy="Always", migratable=True):
    spec = {"domain": {"devices": {"disks": []}, "resources": {"requests": {"memory": "256Mi", "cpu": "50m"}}},
            "terminationGracePeriodSeconds": 0, "volumes": []}
    if eviction:
        spec["evictionStrategy"] = eviction
    if not migratable:
        core(k8s).create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": name + "-root"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        spec["volumes"].append({"name": "root", "persistentVolumeClaim": {"claimName": name + "-root"}})
        spec["domain"]["devices"]["disks"].append({"name": "root", "disk": {"bus": "virtio"}})
    # Manual VMs start as Always and switch once running (Manual never starts a VM by itself).
    body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Always" if run_strategy == "Manual" else run_strategy,
                     "template": {"spec": spec}}}
    custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", body)
    return run_strategy


def vmi(k8s, namespace, name):
    try:
        return custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def running_on(k8s, namespace, name):
    found = vmi(k8s, namespace, name)
    status = (found or {}).get("status") or {}
    conditions = dict((c.get("type"), c.get("status")) for c in status.get("conditions") or [])
    if status.get("phase") == "Running" and "LiveMigratable" in conditions:
        return status.get("nodeName")
    return None


def deleted_node_settled(k8s, namespace, node, name):
    """No pod of ``namespace`` is bound to the deleted ``node`` and VMI ``name`` lists only live pods."""
    pods = core(k8s).list_namespaced_pod(namespace).items
    if any(p.spec.node_name == node for p in pods):
        return False
    active = ((vmi(k8s, namespace, name) or {}).get("status") or {}).get("activePods") or {}
    return set(active) <= set(p.metadata.uid for p in pods)


def start_vms(k8s, namespace, node, specs):
    """specs: {name: (eviction, run_strategy, migratable)}; all Running on ``node`` afterwards.

    The other nodes are cordoned meanwhile, but the scheduler sees a cordon through its node watch,
    a moment later (longer while that watch reconnects after an API server restart): a VM started
    elsewhere has its VMI deleted, and its run strategy starts it again, until all run on ``node``."""
    with OnlyNode(k8s, node):
        for name, (eviction, run_strategy, migratable) in specs.items():
            create_vm(k8s, namespace, name, eviction, run_strategy, migratable)

        def all_on_node():
            where = dict((n, running_on(k8s, namespace, n)) for n in specs)
            for name, at in where.items():
                if at not in (None, node):
                    try:
                        custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                    "virtualmachineinstances", name)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
            return all(at == node for at in where.values())

        wait_for(all_on_node, 180, "VMs %s to run on %s" % (", ".join(specs), node))
    for name, (_eviction, run_strategy, _migratable) in specs.items():
        if run_strategy == "Manual":
            custom(k8s).patch_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", name,
                                                       {"spec": {"runStrategy": "Manual"}})


def start_deployment(k8s, namespace, node, name, replicas, max_unavailable=None):
    labels = {"app": name}
    with OnlyNode(k8s, node):
        client.AppsV1Api(k8s).create_namespaced_deployment(namespace, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                                           "terminationGracePeriodSeconds": 0}}}})

        def all_on_node():
            # As in start_vms: a pod the scheduler placed before it saw the cordons is deleted (its
            # ReplicaSet makes another) until every pod runs on ``node``.
            for pod in core(k8s).list_namespaced_pod(namespace, label_selector="app=%s" % name).items:
                if pod.spec.node_name not in (None, node) and not pod.metadata.deletion_timestamp:
                    try:
                        core(k8s).delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
            return len(ready_pods(k8s, namespace, name, node)) == replicas

        wait_for(all_on_node, 120, "%d pods of %s on %s" % (replicas, name, node))
    if max_unavailable is not None:
        client.PolicyV1Api(k8s).create_namespaced_pod_disruption_budget(namespace, {
            "metadata": {"name": name},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": labels}}})

        def observed():
            pdb = client.PolicyV1Api(k8s).read_namespaced_pod_disruption_budget(name, namespace)
            return pdb.status and pdb.status.observed_generation and pdb.status.disruptions_allowed == max_unavailable

        wait_for(observed, 60, "PodDisruptionBudget %s/%s to be observed" % (namespace, name))


def ready_pods(k8s, namespace, app, node=None):
    pods = core(k8s).list_namespaced_pod(namespace, label_selector="app=%s" % app).items
    return [p for p in pods if (node is None or p.spec.node_name == node) and p.status.phase == "Running"
            and not p.metadata.deletion_timestamp
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def pods_on(k8s, node, namespace):
    return [p.metadata.name for p in core(k8s).list_namespaced_pod(
        namespace, field_selector="spec.nodeName=%s" % node).items]


def node_state(k8s, name):
    node = core(k8s).read_node(name)
    return {
        "unschedulable": bool(node.spec.unschedulable),
        "taints": sorted(t.key for t in node.spec.taints or []),
        "label": (node.metadata.labels or {}).get(EXCLUDE_LABEL),
        "record": RECORD in (node.metadata.annotations or {}),
    }


def changes_to(versions, namespace, nodes=None):
    """What changed among what a module could have touched: nodes, NodeMaintenances, the
    test's namespace (other tests' clean-up elsewhere is not ours to judge)."""
    found = []
    for change in versions.changes():
        kind, rest = change.split(" ", 1)
        name = rest.split(" ", 1)[0]
        if kind in ("NodeMaintenance", "LegacyNodeMaintenance") or name.startswith(namespace + "/"):
            found.append(change)
        elif kind == "Node" and (nodes is None or name in nodes):
            found.append(change)
    return found


def by_name(entries):
    return dict((e["name"], e) for e in entries)


# -- the eviction table ---------------------------------------------------------------------------

EXPECTED_OUTCOMES = {
    "mig": "migrate",
    "lmip-mig": "migrate",
    "lmip-always": "restart_elsewhere",
    "lmip-manual": "stay_stopped",
    "none-rerun": "restart_elsewhere",
    "blocker": "block",
}


def test_eviction_table_through_node_maintenance(k8s, namespace, run_module):
    # The plans compared below predict where each VM restarts from the room on the other nodes:
    # an earlier test's namespace still being deleted would change that room between two plans.
    workloads.wait_no_namespace_terminating(k8s)
    node = workers(k8s)[0]
    start_vms(k8s, namespace, node, {
        "mig": ("LiveMigrate", "Always", True),
        "lmip-mig": ("LiveMigrateIfPossible", "Manual", True),
        "lmip-always": ("LiveMigrateIfPossible", "Always", False),
        "lmip-manual": ("LiveMigrateIfPossible", "Manual", False),
        "none-rerun": ("None", "RerunOnFailure", True),
        "blocker": ("LiveMigrate", "Always", False),
    })
    info = run_module("node_maintenance_info", {"name": node})
    plan = info["nodes"][0]["plan"]
    ours_only = dict((v["name"], v) for v in plan["vms"] if v["namespace"] == namespace)
    assert dict((n, v["outcome"]) for n, v in ours_only.items()) == EXPECTED_OUTCOMES
    assert ours_only["blocker"]["live_migratable"] is False
    assert ours_only["blocker"]["reason"].startswith("DisksNotLiveMigratable")
    blockers = plan["blockers"]
    assert len(blockers) == 1 and blockers[0].startswith("VM %s/blocker cannot leave node %s" % (namespace, node))

    # The default policy refuses before any write, with the blockers the info module found.
    versions = ResourceVersions(k8s)
    failed = run_module("node_maintenance", {"name": node, "method": "drain"})
    assert failed.get("failed") and failed["blockers"] == blockers
    checked = run_module("node_maintenance", {"name": node, "method": "drain", "non_migratable": "shutdown"},
                         check=True, diff=True)
    assert not checked.get("failed") and checked["changed"] is True
    # This test's VMs: other tests' namespaces may still be terminating on the same node.
    assert [v for v in checked["plan"]["vms"] if v["namespace"] == namespace] == list(ours_only.values())
    assert set(v["name"] for v in checked["vms"]["migrated"]) >= {"mig", "lmip-mig"}
    assert changes_to(versions, namespace) == []

    # non_migratable=wait behaves like oc adm drain: everything else leaves, the blocker stays.
    waited = run_module("node_maintenance", {"name": node, "method": "drain", "non_migratable": "wait",
                                             "wait_timeout": 40})
    assert waited.get("failed") and waited.get("phase") == "Failed", waited
    blocked = by_name(v for v in waited["vms"]["blocked"] if v["namespace"] == namespace)
    assert list(blocked) == ["blocker"]
    assert "is not live-migratable (DisksNotLiveMigratable" in blocked["blocker"]["reason"]
    assert "VM %s/blocker" % namespace in waited["last_error"]
    migrated = by_name(v for v in waited["vms"]["migrated"] if v["namespace"] == namespace)
    assert sorted(migrated) == ["lmip-mig", "mig"]
    for name, entry in migrated.items():
        assert entry["source"] == node and entry["target"] not in (None, node)
        assert vmi(k8s, namespace, name)["status"]["nodeName"] == entry["target"]
    shut = by_name(v for v in waited["vms"]["shut_down"] if v["namespace"] == namespace)
    assert dict((n, v["outcome"]) for n, v in shut.items()) == {
        "lmip-always": "restart_elsewhere", "lmip-manual": "stay_stopped", "none-rerun": "restart_elsewhere"}
    assert node_state(k8s, node)["unschedulable"] is True

    # A re-run with the shutdown policy finishes the job, without breaking any budget.
    with PdbWatcher(k8s) as watcher:
        done = run_module("node_maintenance", {"name": node, "method": "drain", "non_migratable": "shutdown"})
    assert done.get("phase") == "Succeeded" and done["pending_pods"] == [] and done["drain_progress"] == 100, done
    assert [(v["name"], v["outcome"]) for v in done["vms"]["shut_down"]] == [("blocker", "restart_elsewhere")]
    assert watcher.violations == []
    assert run_module("node_maintenance", {"name": node, "method": "drain"})["changed"] is False
    wait_for(lambda: all(running_on(k8s, namespace, n) not in (None, node)
                         for n in ("mig", "lmip-mig", "lmip-always", "none-rerun", "blocker")), 180,
             "the VMs that restart to run elsewhere")
    assert (vmi(k8s, namespace, "lmip-manual") or {}).get("status", {}).get("phase") != "Running"

    left = run_module("node_maintenance", {"name": node, "state": "absent"}, diff=True)
    assert left["changed"] is True and "do not move back by themselves" in left["msg"]
    assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is False


START_AGAIN = "maintenance.kubevirt-ops.io/start-again"


def start_again_mark(k8s, namespace, name):
    """(label, annotation as a dict) of the collection's start-again mark on VM ``name``."""
    meta = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", name)["metadata"]
    raw = (meta.get("annotations") or {}).get(START_AGAIN)
    return (meta.get("labels") or {}).get(START_AGAIN), json.loads(raw) if raw else None


def vmi_uid(k8s, namespace, name):
    return ((vmi(k8s, namespace, name) or {}).get("metadata") or {}).get("uid")


def evicted_and_marked(k8s, namespace, node, name, run_module):
    """A drain that shuts down RerunOnFailure VM ``name`` and stops before starting it again: ``wait=false``
    returns once every eviction is asked, as a playbook killed at that moment leaves it. The old VMI's uid."""
    old = vmi_uid(k8s, namespace, name)
    first = run_module("node_maintenance", {"name": node, "method": "drain", "wait": False})
    assert not first.get("failed"), first
    assert start_again_mark(k8s, namespace, name) == ("true", {"node": node, "vmi": old})
    # Its guest shuts down: the VMI ends Succeeded, and KubeVirt's VM controller deletes it for RerunOnFailure.
    wait_for(lambda: ((vmi(k8s, namespace, name) or {}).get("status") or {}).get("phase") in (None, "Succeeded"), 120,
             "the guest of %s to shut down after its eviction" % name)
    assert running_on(k8s, namespace, name) is None
    return old


def test_a_rerun_vm_a_stopped_drain_shut_down_is_started_by_the_next_call(k8s, namespace, run_module):
    """A RerunOnFailure VM with eviction strategy None leaves its node by shutting down, and KubeVirt does not start
    it again after a clean shutdown: the collection does, after the drain. A run that stopped in between left it
    stopped for good (the next run no longer finds it on the node); the mark set before the drain makes the next
    call for the node start it, whether it resumes the maintenance or ends it."""
    node = workers(k8s)[1]
    start_vms(k8s, namespace, node, {"batch-1": ("None", "RerunOnFailure", True)})
    old = evicted_and_marked(k8s, namespace, node, "batch-1", run_module)
    resumed = run_module("node_maintenance", {"name": node, "method": "drain"})
    assert resumed.get("phase") == "Succeeded", resumed
    assert running_on(k8s, namespace, "batch-1") not in (None, node)
    assert vmi_uid(k8s, namespace, "batch-1") != old
    assert start_again_mark(k8s, namespace, "batch-1") == (None, None)
    left = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert left["vms_started_again"] == [], left

    # Stopped the same way, then the maintenance ended: the VM starts once the node is back in service.
    start_vms(k8s, namespace, node, {"batch-2": ("None", "RerunOnFailure", True)})
    old = evicted_and_marked(k8s, namespace, node, "batch-2", run_module)
    planned = run_module("node_maintenance", {"name": node, "state": "absent"}, check=True)
    assert planned["changed"] is True and planned["vms_started_again"] == ["%s/batch-2" % namespace], planned
    assert start_again_mark(k8s, namespace, "batch-2")[0] == "true"  # check mode changed nothing
    left = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert left["vms_started_again"] == ["%s/batch-2" % namespace], left
    wait_for(lambda: running_on(k8s, namespace, "batch-2") is not None and vmi_uid(k8s, namespace, "batch-2") != old,
             120, "batch-2 to run again")
    assert start_again_mark(k8s, namespace, "batch-2") == (None, None)
    assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}


# -- PodDisruptionBudgets and an interrupted run ------------------------------------------------------

def test_pdb_gated_drain_survives_being_killed(lab, k8s, namespace, run_module):
    node = workers(k8s)[1]
    start_deployment(k8s, namespace, node, "web", 10, max_unavailable=1)
    with PdbWatcher(k8s) as watcher:
        argv = [os.path.join(runs.BIN, "ansible"), "localhost", "-c", "local", "-m",
                "kubevirt_ops.maintenance.node_maintenance",
                "-a", json.dumps({"name": node, "method": "drain"})]
        started = runs.Started(argv, lab.kubeconfig, {})
        try:
            wait_for(lambda: len(pods_on(k8s, node, namespace)) <= 8 or not started.running(), 120,
                     "the drain to evict a few pods")
            started.kill()
            output = started.output()
        finally:
            started.close()
        left_behind = len(pods_on(k8s, node, namespace))
        assert node_state(k8s, node)["unschedulable"] is True, output
        done = run_module("node_maintenance", {"name": node, "method": "drain"})
    assert done["phase"] == "Succeeded", done
    assert done["eviction_pods"] <= left_behind and done["pending_pods"] == []
    if left_behind:
        assert done["changed"] is True  # the second run evicted what the first one left
    assert pods_on(k8s, node, namespace) == []
    assert "%s/web" % namespace in watcher.budgets_seen
    assert watcher.violations == []
    wait_for(lambda: len(ready_pods(k8s, namespace, "web")) == 10, 120, "the Deployment to be whole again")


def test_external_eviction_strategy_waits_for_an_external_controller(k8s, namespace, run_module):
    """KubeVirt never migrates a VM with eviction strategy External: it only marks it for evacuation
    (pod-eviction-admitter.go). The plan says so, the default policy refuses before any write, and
    non_migratable=wait reports the VM blocked, waiting for that controller."""
    node = workers(k8s)[0]
    start_vms(k8s, namespace, node, {"external": ("External", "Always", True)})
    plan = run_module("node_maintenance_info", {"name": node})["nodes"][0]["plan"]
    entry = [v for v in plan["vms"] if v["namespace"] == namespace][0]
    assert entry["outcome"] == "external" and entry["live_migratable"] is True, entry
    mine = [b for b in plan["blockers"] if "%s/external" % namespace in b]
    assert len(mine) == 1 and "external controller" in mine[0], plan["blockers"]

    versions = ResourceVersions(k8s)
    refused = run_module("node_maintenance", {"name": node, "method": "drain"})
    assert refused.get("failed") and any("%s/external" % namespace in b for b in refused["blockers"]), refused
    assert changes_to(versions, namespace) == []
    try:
        waited = run_module("node_maintenance", {"name": node, "method": "drain", "non_migratable": "wait",
                                                 "wait_timeout": 20})
        assert waited.get("failed") and waited["phase"] == "Failed", waited
        blocked = by_name(v for v in waited["vms"]["blocked"] if v["namespace"] == namespace)
        assert list(blocked) == ["external"], waited["vms"]
        assert running_on(k8s, namespace, "external") == node  # nothing moved it
    finally:
        run_module("node_maintenance", {"name": node, "state": "absent"})


# -- the NodeMaintenance custom resource ---------------------------------------------------------

def test_method_cr_round_trip(k8s, namespace, run_module):
    node = workers(k8s)[2]
    start_vms(k8s, namespace, node, {"vm-a": ("LiveMigrate", "Always", True)})
    start_deployment(k8s, namespace, node, "app", 3, max_unavailable=1)
    versions = ResourceVersions(k8s)
    checked = run_module("node_maintenance", {"name": node, "method": "cr"}, check=True)
    assert checked["changed"] is True and checked["method"] == "cr" and "plan" in checked
    assert changes_to(versions, namespace) == []

    result = run_module("node_maintenance", {"name": node, "method": "cr", "reason": "firmware"})
    assert result["phase"] == "Succeeded" and result["method"] == "cr", result
    assert result["pending_pods"] == [] and result["drain_progress"] == 100
    (moved,) = [v for v in result["vms"]["migrated"] if v["namespace"] == namespace]
    assert moved["name"] == "vm-a" and moved["source"] == node
    assert moved["target"] == vmi(k8s, namespace, "vm-a")["status"]["nodeName"] != node
    crs = [cr for _g, cr in node_maintenances(k8s) if cr["spec"]["nodeName"] == node]
    assert len(crs) == 1 and ours(crs[0]) and crs[0]["spec"]["reason"] == "firmware"
    assert run_module("node_maintenance", {"name": node})["changed"] is False

    info = run_module("node_maintenance_info", {"name": node})["nodes"][0]
    assert info["in_maintenance"] is True and info["maintenance_phase"] == "Succeeded"

    left = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert left["changed"] is True and left["method"] == "cr"
    assert [cr for _g, cr in node_maintenances(k8s) if cr["spec"]["nodeName"] == node] == []
    assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is False


# -- which method: options the node-maintenance operator ignores ------------------------------------

def namespace_pod_versions(k8s, namespace):
    return dict((p.metadata.name, (p.spec.node_name, p.metadata.resource_version))
                for p in core(k8s).list_namespaced_pod(namespace).items)


def node_maintenances_of(k8s, node):
    return [cr["metadata"]["name"] for _g, cr in node_maintenances(k8s) if cr["spec"]["nodeName"] == node]


def test_auto_drains_itself_when_pod_selector_is_set(lab, k8s, namespace, run_module):
    """The operator is installed, but it would evict every pod: auto drains with the selector."""
    node = workers(k8s)[1]
    # A label of this test's own: pods of other tests' namespaces (still terminating on the same
    # node) must not match the selector.
    app = "picked-" + namespace.rsplit("-", 1)[-1]
    start_deployment(k8s, namespace, node, app, 2)
    start_deployment(k8s, namespace, node, "keep", 1)
    assert run_module("node_maintenance", {"name": node}, check=True)["method"] == "cr"  # the operator is there
    args = {"name": node, "pod_selector": "app=%s" % app}
    reason = ("method auto chose drain: the NodeMaintenance operator ignores pod_selector='app=%s' (it evicts "
              "every pod)." % app)
    versions = ResourceVersions(k8s)
    checked = run_module("node_maintenance", args, check=True)
    assert checked["method"] == "drain" and checked["method_reason"] == reason, checked
    assert sorted(checked["plan"]["evict"]) == sorted("%s/%s" % (namespace, p.metadata.name)
                                                       for p in ready_pods(k8s, namespace, app, node))
    assert changes_to(versions, namespace) == []

    done = runs.module(lab.kubeconfig, "node_maintenance", args)
    result = done.result()
    assert result["method"] == "drain" and result["method_reason"] == reason, result
    assert result["phase"] == "Succeeded" and result["changed"] is True and result["eviction_pods"] == 2
    assert "method auto chose drain" in done.output  # also a warning
    # What an operator sees with kubectl: cordoned and tainted by the drain, no NodeMaintenance,
    # only the selected pods gone.
    assert node_maintenances_of(k8s, node) == []
    assert node_state(k8s, node) == {"unschedulable": True, "label": "true", "record": True,
                                     "taints": ["medik8s.io/drain", "node.kubernetes.io/unschedulable"]}
    assert [p.metadata.name for p in ready_pods(k8s, namespace, "keep", node)] and \
        not [p for p in pods_on(k8s, node, namespace) if p.startswith(app + "-")]
    again = run_module("node_maintenance", args)
    assert again["changed"] is False and again["method"] == "drain"
    assert again["method_reason"] == ("method auto kept drain: node %s is already in maintenance through a drain "
                                      "by this collection." % node)

    left = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert left["changed"] is True and left["method"] == "drain"
    assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    assert node_maintenances_of(k8s, node) == []


def collection_writes(audit_log, offset):
    """The write requests the collection sent since ``offset`` of the lab's audit log."""
    writes = []
    with open(audit_log, errors="replace") as handle:
        handle.seek(offset)
        for line in handle:
            if "kubevirt_ops.maintenance/" not in line:
                continue
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("userAgent") or "").startswith("kubevirt_ops.maintenance/") and \
                    event.get("verb") in ("create", "update", "patch", "delete", "deletecollection") and \
                    ref.get("resource") not in ("selfsubjectaccessreviews", "selfsubjectrulesreviews"):
                writes.append("%s %s/%s" % (event["verb"], ref.get("resource"), ref.get("name")))
    return writes


def test_method_cr_refuses_grace_period_and_changes_nothing(lab, k8s, namespace, run_module):
    node = workers(k8s)[1]
    start_deployment(k8s, namespace, node, "app", 2)
    audit_log = os.path.join(str(lab.state_dir), "audit.log")
    offset = os.path.getsize(audit_log)
    versions = ResourceVersions(k8s)
    pods_before = namespace_pod_versions(k8s, namespace)
    message = ("Node %s cannot enter maintenance with method=cr and grace_period=5: the NodeMaintenance operator "
               "ignores that option (it gives each pod its own terminationGracePeriodSeconds); use method=drain or "
               "auto, or leave it at its default." % node)
    for check in (True, False):
        failed = run_module("node_maintenance", {"name": node, "method": "cr", "grace_period": 5}, check=check)
        assert failed.get("failed") and failed["msg"] == message, failed
    assert changes_to(versions, namespace) == []
    assert namespace_pod_versions(k8s, namespace) == pods_before
    assert node_maintenances_of(k8s, node) == []
    assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    # The node's own resourceVersion moves with kwok's heartbeats, so ResourceVersions compares its
    # spec, labels and annotations; the audit log shows the collection wrote nothing at all.
    assert collection_writes(audit_log, offset) == []

    left = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert left["changed"] is False


# -- bad input -------------------------------------------------------------------------------------

@pytest.fixture
def reader(k8s):
    """A user who may read everything and change nothing."""
    rbac = client.RbacAuthorizationV1Api(k8s)
    name = "kvops-test-reader-%s" % uuid.uuid4().hex[:6]
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    yield name
    rbac.delete_cluster_role_binding(name)
    rbac.delete_cluster_role(name)


def test_bad_input_is_one_sentence_and_changes_nothing(k8s, namespace, run_module, reader):
    node = workers(k8s)[0]
    start_deployment(k8s, namespace, node, "small", 1)
    versions = ResourceVersions(k8s)
    cases = [
        ("node_maintenance", {"name": "lab-worker-404"}, "Node lab-worker-404 does not exist."),
        ("node_maintenance", {"name": "lab-worker-404", "state": "absent"}, "Node lab-worker-404 does not exist."),
        ("node_maintenance_info", {"label_selector": "node-role.kubernetes.io/wroker"},
         "No node matches label_selector 'node-role.kubernetes.io/wroker'."),
        ("node_maintenance", {"name": node, "pod_selector": "app in (small"},
         "Option pod_selector has an invalid label selector term 'app in (small': "),
        ("node_maintenance", {"name": node, "method": "drain", "impersonate_user": reader},
         "Cannot drain node %s: permission denied: %s may not patch nodes, create pods/eviction in namespace "
         % (node, reader)),
        ("node_maintenance", {"name": node, "method": "cr", "impersonate_user": reader},
         "Cannot put node %s into maintenance: permission denied: %s may not create "
         "nodemaintenances.nodemaintenance.medik8s.io." % (node, reader)),
        ("node_maintenance", {"name": node, "impersonate_user": "kvops-nobody"}, "Cannot list "),
        ("node_maintenance", {"name": "lab-cp-1", "method": "drain"}, "Node lab-cp-1 cannot enter maintenance"),
        ("node_decommission", {"name": "lab-cp-1"}, "Node lab-cp-1 cannot be decommissioned"),
    ]
    for module, args, message in cases:
        result = run_module(module, args)
        assert result.get("failed"), (module, args, result)
        assert result["msg"].startswith(message), (module, args, result["msg"])
        assert "Traceback" not in result["msg"] and "\n" not in result["msg"]
    assert changes_to(versions, namespace) == []


# -- decommission --------------------------------------------------------------------------------

@pytest.fixture
def extra_nodes(k8s):
    """Two extra kwok nodes this test may delete; whatever is left of them is deleted afterwards."""
    suffix = uuid.uuid4().hex[:5]
    version = core(k8s).list_node().items[0].status.node_info.kubelet_version
    plans = [lab_nodes.NodePlan("lab-extra-%s-%d" % (suffix, i), False, "10.99.%d.1" % i, "10.245.%d.0/24" % i)
             for i in (1, 2)]
    lab_nodes.ensure(k8s, plans, version)
    names = [p.name for p in plans]

    def ready_for_vms():
        found = [core(k8s).read_node(n) for n in names]
        return all(lab_nodes.is_ready(n) and (n.metadata.labels or {}).get("kubevirt.io/schedulable") == "true"
                   for n in found)

    # A new node gets its virt-handler pod from the DaemonSet controller, which on a loaded machine may find its
    # cache behind its own last write ("read version ... is not as new as written version") and requeue the
    # DaemonSet with its rate limiter's growing backoff (kube-controller-manager daemon_controller.go): minutes.
    wait_for(ready_for_vms, 600, "the extra nodes to be Ready for VMs")
    yield names
    for name in names:
        workloads.remove_node(k8s, name)


def test_decommission_reschedules_vms(lab, k8s, namespace, run_module, extra_nodes):
    healthy, dying = extra_nodes
    start_vms(k8s, namespace, healthy, {"keep": ("LiveMigrate", "Always", True),
                                        "manual": ("None", "Manual", True)})
    start_vms(k8s, namespace, dying, {"restart": ("None", "Always", True)})

    # The healthy node's kubelet (KWOK) heartbeats to the end: only the user's word lets it be deleted.
    result = run_module("node_decommission", {"name": healthy, "assume_powered_off": True})
    assert result["deleted"] is True and result["changed"] is True, result
    rescheduled = by_name(result["vms"]["rescheduled"])
    assert list(rescheduled) == ["keep"] and rescheduled["keep"]["node"] not in (None, healthy)
    assert result["vms"]["not_restarted"] == [{"namespace": namespace, "name": "manual", "run_strategy": "Manual"}]
    assert result["evicted_pods"] >= 2
    with pytest.raises(ApiException):
        core(k8s).read_node(healthy)
    assert run_module("node_decommission", {"name": healthy, "assume_powered_off": True})["changed"] is False
    # The drain leaves "keep"'s finished source virt-launcher pod; Kubernetes' PodGC deletes the pods of a
    # deleted node (after its 40 s quarantine) and virt-controller then drops the pod from the VMI's
    # activePods. Both are the first decommission's doing, so they must be over before the snapshot below.
    wait_for(lambda: deleted_node_settled(k8s, namespace, healthy, "keep"), 180,
             "PodGC to delete the pods of node %s and virt-controller to drop them from the VMI" % healthy)

    # "keep" may have migrated onto the dying node in the first decommission.
    on_dying = [n for n in ("keep", "restart") if running_on(k8s, namespace, n) == dying]
    lab.node_fail(dying)
    versions = ResourceVersions(k8s)
    refused = run_module("node_decommission", {"name": dying})
    assert refused.get("failed") and refused["msg"].startswith("Node %s is not Ready" % dying)
    assert "assume_powered_off=true" in refused["msg"]
    # The node-lifecycle controller keeps changing the failed node itself (taints, conditions), and
    # with it the readiness of its pods, VMIs and VMs; nothing else may change.
    failing = set("%s %s/%s changed" % (kind, namespace, name) for name in on_dying
                  for kind in ("VirtualMachine", "VirtualMachineInstance"))
    changed = [c for c in changes_to(versions, namespace, nodes=[n for n in workers(k8s) if n != dying])
               if c not in failing and not (c.startswith("Pod ") and versions.pod_nodes.get(
                   tuple(c.split(" ")[1].split("/", 1))) == dying)]
    assert changed == []
    assert node_state(k8s, dying)["record"] is False and node_state(k8s, dying)["unschedulable"] is False
    result = run_module("node_decommission", {"name": dying, "assume_powered_off": True})
    assert result["deleted"] is True, result
    # "keep" may have migrated onto the dying node in the first decommission; then it moves again.
    moved = dict((v["name"], v["node"] not in (None, dying)) for v in result["vms"]["rescheduled"])
    assert moved.get("restart") is True and all(moved.values()), result["vms"]
    assert set(moved) <= {"restart", "keep"}, result["vms"]


# -- evacuations paced to KubeVirt's migration limits ------------------------------------------------

def test_drain_asks_for_evacuations_only_as_fast_as_kubevirt_migrates(k8s, namespace, run_module):
    """Six VMs, KubeVirt's default parallelOutboundMigrationsPerNode of 2: the drain marks a VM for
    evacuation only when fewer than two of the node's migrations are under way, so KubeVirt never
    holds one back in Pending (where it would look at it again only 5 s later); kubectl drain marks
    all six at once, and virt-controller creates migrations for them beyond the limit."""
    first, second = workers(k8s)[:2]
    names = ["paced-%d" % i for i in range(6)]
    workloads.vms_start_on(k8s, namespace, (first, second), names, "2Gi")
    with workloads.MigrationRecorder(k8s, namespace) as watched:
        result = run_module("node_maintenance", {"name": first, "method": "drain"})
        wait_for(lambda: len(watched.seen) >= 6 and not watched.unfinished, 60, "the migrations to be seen ended")
    assert result["phase"] == "Succeeded", result
    migrated = sorted(v["name"] for v in result["vms"]["migrated"] if v["namespace"] == namespace)
    assert migrated == names
    assert len(watched.seen) == 6 and watched.most_unfinished == 2, (len(watched.seen), watched.most_unfinished)
    assert all(vmi(k8s, namespace, n)["status"]["nodeName"] == second for n in names)


# Phases in which KubeVirt counts a migration against its limits (VirtualMachineInstanceMigration.IsRunning,
# kubevirt.io/api core/v1 types.go); Pending (and no phase yet) is where it holds the others back.
RUNNING_MIGRATION_PHASES = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")


class PendingRecorder(workloads.MigrationRecorder):
    """The migrations of the namespace as MigrationRecorder sees them, plus, in the order the API server
    sent the changes: ``held``, the migrations seen Pending while ``lanes`` others were running (the only
    case in which KubeVirt's limits keep a migration Pending: handleTargetPodCreation in
    pkg/virt-controller/watch/migration/migration.go then looks at it again 5 s later), and
    ``pending_seconds``, how long each was seen Pending by the watch."""

    def __init__(self, k8s, namespace, lanes):
        super().__init__(k8s, namespace)
        self.lanes = lanes
        self.phases = {}
        self.pending_since = {}
        self.pending_seconds = {}
        self.held = set()

    def _record(self, item, deleted=False):
        super()._record(item, deleted)
        uid = item["metadata"]["uid"]
        phase = (item.get("status") or {}).get("phase") or "Pending"
        now = time.monotonic()
        if deleted:
            self.phases.pop(uid, None)
        else:
            self.phases[uid] = phase
        if phase == "Pending" and not deleted:
            self.pending_since.setdefault(uid, now)
        elif uid not in self.pending_seconds:
            self.pending_seconds[uid] = now - self.pending_since.get(uid, now)
        running = sum(1 for p in self.phases.values() if p in RUNNING_MIGRATION_PHASES)
        if running >= self.lanes:
            self.held.update(u for u, p in self.phases.items() if p == "Pending")


def pending_by_timestamps(migration):
    """Seconds from a migration's creation to its leaving Pending, from its timestamps (whole seconds)."""
    created = migration["metadata"]["creationTimestamp"]
    left = sorted(entry["phaseTransitionTimestamp"] for entry in migration["status"].get("phaseTransitionTimestamps")
                  or [] if entry.get("phase") not in ("Pending", None))
    if not left:
        return None
    stamps = [datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ") for text in (created, left[0])]
    return (stamps[1] - stamps[0]).total_seconds()


def migration_lanes(k8s):
    """KubeVirt's limit on migrations off one node: the lesser of its two limits (defaults 2 and 5)."""
    kv = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, "kubevirt", "kubevirts", "kubevirt")
    limits = ((kv.get("spec") or {}).get("configuration") or {}).get("migrations") or {}
    return min(limits.get("parallelOutboundMigrationsPerNode", 2), limits.get("parallelMigrationsPerCluster", 5))


def test_auto_with_the_operator_evacuates_at_kubevirts_pace_then_the_cr_holds_the_node(k8s, namespace, run_module):
    """The default (method auto, the node-maintenance operator installed) is not the slow path: the VMs
    leave first, no faster than KubeVirt migrates them, so no migration waits in Pending over KubeVirt's
    limits; then the NodeMaintenance drains the rest (a Deployment's pod), is Succeeded, and the operator
    holds its Lease on the node. state=absent leaves the node clean."""
    first, second = workers(k8s)[:2]
    lanes = migration_lanes(k8s)
    names = ["auto-%d" % i for i in range(3 * lanes)]
    workloads.vms_start_on(k8s, namespace, (first, second), names, "256Mi")
    start_deployment(k8s, namespace, first, "rest", 1)
    with PendingRecorder(k8s, namespace, lanes) as watched:
        started = time.monotonic()
        result = run_module("node_maintenance", {"name": first, "reason": "paced"})
        took = time.monotonic() - started
        wait_for(lambda: len(watched.seen) >= len(names) and not watched.unfinished, 60,
                 "the migrations to be seen ended")
    assert result["phase"] == "Succeeded" and result["method"] == "cr", result
    assert result["method_reason"].startswith("method auto chose cr") and \
        "paced to KubeVirt's free migration lanes" in result["method_reason"], result["method_reason"]
    assert sorted(v["name"] for v in result["vms"]["migrated"] if v["namespace"] == namespace) == names
    assert all(vmi(k8s, namespace, n)["status"]["nodeName"] == second for n in names)
    seen = list(watched.seen.values())
    pending = dict((m["spec"]["vmiName"], (round(watched.pending_seconds.get(m["metadata"]["uid"], 0.0), 2),
                                           pending_by_timestamps(m))) for m in seen)
    print("\nmethod auto: %d VMs in %.1f s (%.2f s per VM), lanes %d, most migrations unfinished at once %d; "
          "Pending per VM (watch s, timestamps s): %s" % (
              len(names), took, took / len(names), lanes, watched.most_unfinished, pending))
    # One migration per VM, each Succeeded; none ever Pending while the node's lanes were all taken.
    assert len(seen) == len(names) and all(m["status"]["phase"] == "Succeeded" for m in seen), seen
    assert watched.held == set(), pending
    assert watched.most_unfinished <= lanes, watched.most_unfinished

    # What the console and medik8s see: our NodeMaintenance Succeeded, the operator's Lease on the node, the
    # Deployment's pod drained by the operator.
    (cr,) = [cr for _g, cr in node_maintenances(k8s) if cr["spec"]["nodeName"] == first]
    assert ours(cr) and cr["spec"]["reason"] == "paced" and cr["status"]["phase"] == "Succeeded", cr
    # The migrated VMs' finished virt-launcher pods went before the NodeMaintenance came: the operator's drain
    # found the Deployment's pod alone to evict.
    assert cr["status"]["evictionPods"] == 1, cr["status"]
    lease = client.CoordinationV1Api(k8s).read_namespaced_lease("node-%s" % first, "medik8s-leases")
    assert lease.spec.holder_identity == "node-maintenance"
    assert ready_pods(k8s, namespace, "rest", first) == []
    assert node_state(k8s, first) == {"unschedulable": True, "label": "true", "record": True,
                                      "taints": ["medik8s.io/drain", "node.kubernetes.io/unschedulable"]}
    again = run_module("node_maintenance", {"name": first, "reason": "paced"})
    assert again["changed"] is False and again["method"] == "cr", again

    left = run_module("node_maintenance", {"name": first, "state": "absent"})
    assert left["changed"] is True and left["method"] == "cr", left
    assert node_maintenances_of(k8s, first) == []
    assert node_state(k8s, first) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    with pytest.raises(ApiException) as gone:
        client.CoordinationV1Api(k8s).read_namespaced_lease("node-%s" % first, "medik8s-leases")
    assert gone.value.status == 404


def test_a_drain_tells_its_story_on_the_node_and_on_each_of_its_30_vms(k8s, namespace, run_module):
    """The Events of one maintenance: the node's story in order, one Event per VM saying where it
    went and why, and nothing more (30 VMs: 33 Event objects)."""
    first, second = workers(k8s)[:2]
    names = ["told-%02d" % i for i in range(30)]
    workloads.vms_start_on(k8s, namespace, (first, second), names, "128Mi")
    # An empty lock name: no lock to respect, the holder still names the run in every Event.
    run = {"name": "", "holder": "events-test-%s" % uuid.uuid4().hex[:6]}
    entered = run_module("node_maintenance", {"name": first, "method": "drain", "reason": "firmware", "lock": run})
    assert entered["phase"] == "Succeeded", entered
    assert sorted(v["name"] for v in entered["vms"]["migrated"] if v["namespace"] == namespace) == names
    assert not [w for w in entered.get("warnings") or [] if "Event" in w], entered["warnings"]
    left = run_module("node_maintenance", {"name": first, "state": "absent", "lock": run})
    assert left["changed"], left

    story = [e for e in recorded_events.of(k8s, first, "Node") if e["run"] == run["holder"]]
    assert [e["reason"] for e in story] == ["BeginMaintenance", "SucceedMaintenance", "RemovedMaintenance"], story
    assert "30 VMs migrated" in story[1]["note"] and story[1]["namespace"] == "default"
    for name in names:
        [told] = recorded_events.of(k8s, name, "VirtualMachine", namespace)
        assert told["reason"] == "Migrated" and told["related"] == first and told["run"] == run["holder"]
        assert told["note"].startswith("Live-migrated from %s to %s for the maintenance of node %s (firmware)" % (
            first, second, first)), told
    ours = [e for e in client.CoreV1Api(k8s).list_event_for_all_namespaces().items
            if (e.metadata.annotations or {}).get(recorded_events.RUN_ANNOTATION) == run["holder"]]
    assert len(ours) == len(names) + 3, [(e.involved_object.name, e.reason) for e in ours]
