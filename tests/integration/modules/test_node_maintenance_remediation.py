"""node_maintenance pauses node remediation while a node is in maintenance, and state=absent
aborts an interrupted maintenance cleanly.

The lab serves the NodeHealthCheck, MachineHealthCheck and Machine CRDs (lab/standins/crds.py)
with no controller behind them: the tests prove what the module writes and restores. The
evacuations are real: KubeVirt's eviction admitter marks the VMIs and its evacuation controller
creates the migrations.
"""

import json
import os
import uuid

import identities
import pytest
import runs
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from safety import ResourceVersions
from test_node_maintenance import (  # noqa: F401  (leave_nodes_as_found: the same clean-up as there)
    EXCLUDE_LABEL,
    GROUP,
    VERSION,
    core,
    custom,
    leave_nodes_as_found,
    node_state,
    start_vms,
    vmi,
    workers,
    OnlyNode,
)

from lab.wait import wait_for

NHC = ("remediation.medik8s.io", "v1alpha1", "nodehealthchecks")
OPENSHIFT = ("machine.openshift.io", "v1beta1")
CAPI = ("cluster.x-k8s.io", "v1beta1")
PAUSED = "cluster.x-k8s.io/paused"
PAUSED_FOR = "maintenance.kubevirt-ops.io/paused-for"
NODE_RECORD = "maintenance.kubevirt-ops.io/remediation-paused"
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"


@pytest.fixture
def operator(lab, k8s, tmp_path):
    """Runs modules as a ServiceAccount bound only to docs/rbac's operator roles."""
    identities.apply_rbac(k8s, identities.OPERATOR_FILE)
    identity = identities.create_identity(k8s, lab.kubeconfig, str(tmp_path), prefix="kvops-remed",
                                          cluster_roles=["kubevirt-ops-maintenance-operator"],
                                          roles=[("kube-system", "kubevirt-ops-maintenance-lock")])

    def _run(module, args, check=False):
        return runs.module(identity.kubeconfig, module, args, check=check).result()
    try:
        yield _run
    finally:
        identities.delete_identity(k8s, identity)


def ours(node):
    return "kubevirt-ops: maintenance of node %s" % node


class Checks:
    """Health checks and Machines a test creates; all deleted at the end."""

    def __init__(self, k8s, namespace):
        self.api = custom(k8s)
        self.namespace = namespace
        self.suffix = uuid.uuid4().hex[:6]
        self.created = []

    def nhc(self, name, selector, pause_requests=None):
        spec = {"selector": selector, "unhealthyConditions": [{"type": "Ready", "status": "False", "duration": "300s"}]}
        if pause_requests:
            spec["pauseRequests"] = pause_requests
        name = "%s-%s" % (name, self.suffix)
        self.api.create_cluster_custom_object(*NHC, {"apiVersion": "%s/%s" % NHC[:2], "kind": "NodeHealthCheck",
                                                     "metadata": {"name": name}, "spec": spec})
        self.created.append((NHC, None, name))
        return name

    def get_nhc(self, name):
        return self.api.get_cluster_custom_object(*NHC, name)

    def machine(self, api, name, node, labels, cluster=None):
        group, version = api
        body = {"apiVersion": "%s/%s" % api, "kind": "Machine", "metadata": {"name": name, "labels": labels},
                "spec": {"clusterName": cluster} if cluster else {}}
        self.api.create_namespaced_custom_object(group, version, self.namespace, "machines", body)
        self.created.append(((group, version, "machines"), self.namespace, name))
        self.api.patch_namespaced_custom_object_status(group, version, self.namespace, "machines", name, {
            "status": {"nodeRef": {"kind": "Node", "name": node}, "phase": "Running"}})

    def mhc(self, api, name, selector, annotations=None, cluster=None):
        group, version = api
        spec = {"selector": selector, "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}]}
        if cluster:
            spec["clusterName"] = cluster
        body = {"apiVersion": "%s/%s" % api, "kind": "MachineHealthCheck",
                "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}
        self.api.create_namespaced_custom_object(group, version, self.namespace, "machinehealthchecks", body)
        self.created.append(((group, version, "machinehealthchecks"), self.namespace, name))

    def get_mhc(self, api, name):
        return self.api.get_namespaced_custom_object(api[0], api[1], self.namespace, "machinehealthchecks", name)

    def delete_all(self):
        for (group, version, plural), namespace, name in reversed(self.created):
            try:
                if namespace:
                    self.api.delete_namespaced_custom_object(group, version, namespace, plural, name)
                else:
                    self.api.delete_cluster_custom_object(group, version, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def annotations(obj):
    return (obj.get("metadata") or {}).get("annotations") or {}


def version(obj):
    return obj["metadata"]["resourceVersion"]


def node_annotations(k8s, node):
    return core(k8s).read_node(node).metadata.annotations or {}


def pauses(entries):
    return sorted((e["kind"], e["api_version"], e["name"], e["how"]) for e in entries)


def test_remediation_paused_during_maintenance_and_restored(k8s, namespace, run_module):
    node = workers(k8s)[3]
    checks = Checks(k8s, namespace)
    core(k8s).patch_node(node, {"metadata": {"labels": {"example.com/rack": "r7"}}})
    try:
        covering = checks.nhc("workers", {"matchExpressions": [
            {"key": "node-role.kubernetes.io/worker", "operator": "Exists"}]}, pause_requests=["upgrade-manager"])
        other = checks.nhc("elsewhere", {"matchLabels": {"kubernetes.io/hostname": "no-such-node"}})
        role = {"machine.openshift.io/cluster-api-machine-role": "worker"}
        checks.machine(OPENSHIFT, "m-" + node, node, role)
        checks.mhc(OPENSHIFT, "mhc-workers", {"matchLabels": role})
        checks.mhc(OPENSHIFT, "mhc-infra", {"matchLabels": {"machine.openshift.io/cluster-api-machine-role": "infra"}})
        checks.machine(CAPI, "capi-" + node, node, {"pool": "a", "cluster.x-k8s.io/cluster-name": "lab"}, cluster="lab")
        checks.mhc(CAPI, "capi-paused", {"matchLabels": {"pool": "a"}}, annotations={PAUSED: ""}, cluster="lab")
        checks.mhc(CAPI, "capi-other-cluster", {"matchLabels": {"pool": "a"}}, cluster="other")
        untouched = {
            "nhc": version(checks.get_nhc(other)),
            "infra": version(checks.get_mhc(OPENSHIFT, "mhc-infra")),
            "capi-paused": version(checks.get_mhc(CAPI, "capi-paused")),
            "capi-other": version(checks.get_mhc(CAPI, "capi-other-cluster")),
        }
        expected = [("MachineHealthCheck", "machine.openshift.io/v1beta1", "mhc-workers", "annotation"),
                    ("Node", "v1", node, "label"),
                    ("NodeHealthCheck", "remediation.medik8s.io/v1alpha1", covering, "pauseRequests")]

        # Check mode says what would be paused and writes nothing. (The node's own resourceVersion
        # moves with every kwok heartbeat; ResourceVersions compares what a client could change.)
        versions = ResourceVersions(k8s)
        before = {"nhc": version(checks.get_nhc(covering)), "mhc": version(checks.get_mhc(OPENSHIFT, "mhc-workers"))}
        checked = run_module("node_maintenance", {"name": node, "method": "drain"}, check=True)
        assert checked["changed"] is True and pauses(checked["remediation_paused"]) == expected, checked
        assert before == {"nhc": version(checks.get_nhc(covering)),
                          "mhc": version(checks.get_mhc(OPENSHIFT, "mhc-workers"))}
        assert [c for c in versions.changes() if c.split(" ")[0] in ("NodeHealthCheck", "MachineHealthCheck",
                                                                    "CapiMachineHealthCheck")
                or c.startswith("Node %s " % node)] == []

        entered = run_module("node_maintenance", {"name": node, "method": "drain", "reason": "firmware"})
        assert entered["phase"] == "Succeeded", entered
        assert pauses(entered["remediation_paused"]) == expected
        assert checks.get_nhc(covering)["spec"]["pauseRequests"] == ["upgrade-manager", ours(node)]
        mhc = annotations(checks.get_mhc(OPENSHIFT, "mhc-workers"))
        assert mhc[PAUSED] == ours(node) and json.loads(mhc[PAUSED_FOR]) == [node]
        assert untouched == {
            "nhc": version(checks.get_nhc(other)),
            "infra": version(checks.get_mhc(OPENSHIFT, "mhc-infra")),
            "capi-paused": version(checks.get_mhc(CAPI, "capi-paused")),
            "capi-other": version(checks.get_mhc(CAPI, "capi-other-cluster")),
        }
        record = json.loads(node_annotations(k8s, node)[NODE_RECORD])
        assert sorted((r["kind"], r["name"]) for r in record) == [
            ("MachineHealthCheck", "mhc-workers"), ("NodeHealthCheck", covering)]
        assert node_state(k8s, node)["label"] == "true"

        again = run_module("node_maintenance", {"name": node, "method": "drain"})
        assert again["changed"] is False and again["remediation_paused"] == [], again

        left = run_module("node_maintenance", {"name": node, "state": "absent"})
        assert left["changed"] is True
        assert pauses(left["remediation_restored"]) == [e for e in expected if e[0] != "Node"]
        assert checks.get_nhc(covering)["spec"]["pauseRequests"] == ["upgrade-manager"]
        assert PAUSED not in annotations(checks.get_mhc(OPENSHIFT, "mhc-workers"))
        assert PAUSED_FOR not in annotations(checks.get_mhc(OPENSHIFT, "mhc-workers"))
        assert annotations(checks.get_mhc(CAPI, "capi-paused"))[PAUSED] == ""
        assert untouched["capi-paused"] == version(checks.get_mhc(CAPI, "capi-paused"))
        assert NODE_RECORD not in node_annotations(k8s, node)
        assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
        assert (core(k8s).read_node(node).metadata.labels or {}).get("example.com/rack") == "r7"
        assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is False

        # Turned off: the checks stay as they are, the exclude label comes with maintenance.
        nhc_version = version(checks.get_nhc(covering))
        off = run_module("node_maintenance", {"name": node, "method": "drain", "pause_remediation": False})
        assert pauses(off["remediation_paused"]) == [("Node", "v1", node, "label")], off
        assert version(checks.get_nhc(covering)) == nhc_version
        run_module("node_maintenance", {"name": node, "state": "absent"})
    finally:
        checks.delete_all()
        core(k8s).patch_node(node, {"metadata": {"labels": {"example.com/rack": None}}})


def create_pinned_vm(k8s, namespace, name, node):
    """A live-migratable LiveMigrate VM whose nodeSelector allows only ``node``: its evacuation
    migration's target pod can never be scheduled, so the evacuation stays pending."""
    spec = {"domain": {"devices": {"disks": []}, "resources": {"requests": {"memory": "256Mi", "cpu": "50m"}}},
            "terminationGracePeriodSeconds": 0, "volumes": [], "evictionStrategy": "LiveMigrate",
            "nodeSelector": {"kubernetes.io/hostname": node}}
    custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
        "spec": {"runStrategy": "Always", "template": {"spec": spec}}})


def evacuation_migrations(k8s, node, namespace):
    items = custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                      "virtualmachineinstancemigrations")["items"]
    return [m for m in items if annotations(m).get(EVACUATION_ANNOTATION) == node]


def unfinished(migrations):
    return [m for m in migrations if (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def evacuating_from(k8s, namespace, name):
    return ((vmi(k8s, namespace, name) or {}).get("status") or {}).get("evacuationNodeName")


def test_failed_maintenance_restores_remediation_and_absent_aborts_it(k8s, namespace, run_module, operator):
    """As the least-privileged operator identity: its rights cover pausing, restoring and the abort."""
    node = workers(k8s)[0]
    checks = Checks(k8s, namespace)
    try:
        nhc = checks.nhc("this-node", {"matchLabels": {"kubernetes.io/hostname": node}})
        with OnlyNode(k8s, node):
            create_pinned_vm(k8s, namespace, "pinned", node)
        start_vms(k8s, namespace, node, {"external": ("External", "Always", True)})
        wait_for(lambda: (vmi(k8s, namespace, "pinned") or {}).get("status", {}).get("phase") == "Running", 180,
                 "VM pinned to run on %s" % node)

        # A drain that cannot finish: the failure restores the pause it set, the node stays cordoned.
        failed = operator("node_maintenance", {"name": node, "method": "drain", "non_migratable": "wait",
                                               "wait_timeout": 25})
        assert failed.get("failed") and failed["phase"] == "Failed", failed
        assert [e["name"] for e in failed["remediation_paused"] if e["kind"] == "NodeHealthCheck"] == [nhc]
        assert [e["name"] for e in failed["remediation_restored"]] == [nhc], failed
        assert not checks.get_nhc(nhc)["spec"].get("pauseRequests")
        assert NODE_RECORD not in node_annotations(k8s, node)
        assert node_state(k8s, node)["unschedulable"] is True
        wait_for(lambda: unfinished(evacuation_migrations(k8s, node, namespace)), 60,
                 "the evacuation controller to create the migration of VM pinned")
        assert evacuating_from(k8s, namespace, "pinned") == node
        assert evacuating_from(k8s, namespace, "external") == node
        pending = sorted(m["metadata"]["name"] for m in unfinished(evacuation_migrations(k8s, node, namespace)))

        # Check mode predicts the abort and writes nothing.
        versions = ResourceVersions(k8s)
        predicted = operator("node_maintenance", {"name": node, "state": "absent"}, check=True)
        assert predicted["changed"] is True
        assert sorted((e["namespace"], e["name"], e["how"]) for e in predicted["evacuations_cancelled"]) == [
            (namespace, "external", "evacuate/cancel"), (namespace, "pinned", "evacuate/cancel")], predicted
        assert sorted(predicted["migrations_deleted"]) == ["%s/%s" % (namespace, n) for n in pending]
        assert [c for c in versions.changes() if c.startswith("Node %s " % node) or namespace + "/" in c] == []

        aborted = operator("node_maintenance", {"name": node, "state": "absent"})
        assert aborted["changed"] is True, aborted
        assert sorted((e["name"], e["node"], e["how"]) for e in aborted["evacuations_cancelled"]) == [
            ("external", node, "evacuate/cancel"), ("pinned", node, "evacuate/cancel")]
        assert set("%s/%s" % (namespace, n) for n in pending) <= set(aborted["migrations_deleted"])
        assert evacuating_from(k8s, namespace, "pinned") is None
        assert evacuating_from(k8s, namespace, "external") is None
        wait_for(lambda: not unfinished(evacuation_migrations(k8s, node, namespace)), 60,
                 "the deleted evacuation migrations to go")
        assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
        assert vmi(k8s, namespace, "pinned")["status"]["nodeName"] == node
        assert EXCLUDE_LABEL not in (core(k8s).read_node(node).metadata.labels or {})
        assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is False
    finally:
        checks.delete_all()


def test_absent_leaves_evacuations_of_a_node_not_in_maintenance(k8s, namespace, run_module):
    """A VMI marked for evacuation from a node nobody put into maintenance (the descheduler marks
    VMIs the same way) is not ours to cancel."""
    node = workers(k8s)[1]
    start_vms(k8s, namespace, node, {"external": ("External", "Always", True)})
    pod = [p for p in core(k8s).list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items
           if p.spec.node_name == node][0]
    try:
        core(k8s).create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))
    except ApiException as exc:
        assert exc.status == 429, exc
    wait_for(lambda: evacuating_from(k8s, namespace, "external") == node, 30, "the eviction to mark VM external")
    result = run_module("node_maintenance", {"name": node, "state": "absent"})
    assert result["changed"] is False and result["evacuations_cancelled"] == [], result
    assert evacuating_from(k8s, namespace, "external") == node


def test_a_killed_run_is_restored_and_aborted_by_absent(lab, k8s, namespace, run_module):
    """The machine running the drain dies mid-way: what the node's record and our entries say
    was paused is restored, and the evacuations the drain started are cancelled."""
    node = workers(k8s)[2]
    checks = Checks(k8s, namespace)
    try:
        nhc = checks.nhc("killed", {"matchLabels": {"kubernetes.io/hostname": node}}, pause_requests=["someone"])
        with OnlyNode(k8s, node):
            create_pinned_vm(k8s, namespace, "pinned", node)
        wait_for(lambda: (vmi(k8s, namespace, "pinned") or {}).get("status", {}).get("phase") == "Running", 180,
                 "VM pinned to run on %s" % node)
        argv = [os.path.join(runs.BIN, "ansible"), "localhost", "-c", "local", "-m",
                "kubevirt_ops.maintenance.node_maintenance",
                "-a", json.dumps({"name": node, "method": "drain", "non_migratable": "wait", "wait_timeout": 600})]
        started = runs.Started(argv, lab.kubeconfig, {})
        try:
            wait_for(lambda: evacuating_from(k8s, namespace, "pinned") == node or not started.running(), 120,
                     "the drain to mark VM pinned for evacuation")
            started.kill()
            output = started.output()
        finally:
            started.close()
        assert checks.get_nhc(nhc)["spec"]["pauseRequests"] == ["someone", ours(node)], output
        assert json.loads(node_annotations(k8s, node)[NODE_RECORD]) == [
            {"kind": "NodeHealthCheck", "namespace": None, "name": nhc}]

        aborted = run_module("node_maintenance", {"name": node, "state": "absent"})
        assert [e["name"] for e in aborted["remediation_restored"]] == [nhc], aborted
        assert [e["name"] for e in aborted["evacuations_cancelled"]] == ["pinned"]
        assert checks.get_nhc(nhc)["spec"]["pauseRequests"] == ["someone"]
        assert NODE_RECORD not in node_annotations(k8s, node)
        assert evacuating_from(k8s, namespace, "pinned") is None
        wait_for(lambda: not unfinished(evacuation_migrations(k8s, node, namespace)), 60,
                 "no evacuation migration of %s left" % node)
        assert node_state(k8s, node) == {"unschedulable": False, "taints": [], "label": None, "record": False}
    finally:
        checks.delete_all()
