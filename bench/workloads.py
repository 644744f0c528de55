"""Preparing a scenario: the same workload on the same, freshly reset node, every time.

Pods are put on the target node by cordoning every other worker while they are
created (so ReplicaSets and VMs stay ordinary: no nodeName or nodeSelector pinning
them), then the other workers are made schedulable again so evicted pods and
migrating VMs have somewhere to go. Each run gets a namespace of its own; the previous
one is deleted, and gone, before the next run starts.
"""

import time
import uuid

from bench.kube import ApiError

WORKER_ROLE = "node-role.kubernetes.io/worker"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
BENCH_LABEL = "kubevirt-ops.bench/run"
# What any of the peers may leave on a node; reset removes all of it.
MAINTENANCE_TAINT_KEYS = ("medik8s.io/drain", "node.kubernetes.io/unschedulable")
MAINTENANCE_LABELS = ("remediation.medik8s.io/exclude-from-remediation",)
PREPARE_TIMEOUT = 600


class Timeout(Exception):
    pass


def wait_for(predicate, timeout, what, interval=0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def is_ready(pod):
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def is_daemon_pod(pod):
    return any(ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def workers(kube):
    """The lab's workers (lab-worker-1..N), in their numeric order."""
    nodes, _ = kube.list("Node")
    names = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"].startswith("lab-worker-")]
    return sorted(names, key=lambda name: int(name.rsplit("-", 1)[1]))


# -- nodes ------------------------------------------------------------------------------

def set_schedulable(kube, node, schedulable):
    kube.patch("Node", node, {"spec": {"unschedulable": None if schedulable else True}})


def reset_node(kube, node):
    """Take the node out of any maintenance a peer left it in: no CR, taint, label or cordon."""
    if kube.served("NodeMaintenance"):
        _delete_node_maintenances(kube, node)
    current = kube.get("Node", node)
    kube.patch("Node", node, _reset_patch(current))


def _delete_node_maintenances(kube, node):
    """Delete the node's NodeMaintenance CRs and wait until they are gone."""
    crs, _ = kube.list("NodeMaintenance")
    mine = [cr for cr in crs if (cr.get("spec") or {}).get("nodeName") == node]
    for cr in mine:
        kube.delete("NodeMaintenance", cr["metadata"]["name"])
    if mine:
        try:
            wait_for(lambda: not [c for c in kube.list("NodeMaintenance")[0]
                                  if (c.get("spec") or {}).get("nodeName") == node],
                     30, f"the NodeMaintenance of {node} to be deleted")
        except Timeout:
            # Nobody is left to process the finalizer (its controller is stopped).
            _drop_node_maintenance_finalizers(kube, node)


def _drop_node_maintenance_finalizers(kube, node):
    """Remove the finalizers of the node's NodeMaintenance CRs, so that their deletion completes."""
    for cr in kube.list("NodeMaintenance")[0]:
        if (cr.get("spec") or {}).get("nodeName") == node:
            kube.patch("NodeMaintenance", cr["metadata"]["name"], {"metadata": {"finalizers": None}})


def _maintenance_left(current):
    """Of the node ``current``: the taints to keep, and the labels and annotations to remove (set to None)."""
    taints = [t for t in (current.get("spec") or {}).get("taints") or []
              if t.get("key") not in MAINTENANCE_TAINT_KEYS and "kubevirt_ops" not in t.get("key", "")
              and "kubevirt-ops" not in t.get("key", "")]
    labels = {key: None for key in (current["metadata"].get("labels") or {})
              if key in MAINTENANCE_LABELS or "kubevirt_ops" in key or "kubevirt-ops" in key}
    annotations = {key: None for key in (current["metadata"].get("annotations") or {})
                   if "kubevirt_ops" in key or "kubevirt-ops" in key}
    return taints, labels, annotations


def _reset_patch(current):
    """The merge patch of the node ``current`` that uncordons it and removes what a peer left on it."""
    taints, labels, annotations = _maintenance_left(current)
    # Merge patch: a key set to null is removed; never send null for a whole map.
    patch = {"spec": {"unschedulable": None}}
    if len(taints) != len((current.get("spec") or {}).get("taints") or []):
        patch["spec"]["taints"] = taints
    meta = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if meta:
        patch["metadata"] = meta
    return patch


# -- namespaces -------------------------------------------------------------------------

def new_namespace(kube, prefix):
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create("Namespace", {"metadata": {"name": name, "labels": {BENCH_LABEL: prefix}}})
    wait_for(lambda: kube.get_or_none("ServiceAccount", "default", name), 120,
             f"the default ServiceAccount of {name}")
    return name


def delete_namespaces(kube, wait=True, timeout=PREPARE_TIMEOUT):
    """Delete every namespace the harness created and wait until they are gone."""
    spaces, _ = kube.list("Namespace", label_selector=BENCH_LABEL)
    for ns in spaces:
        if not ns["metadata"].get("deletionTimestamp"):
            kube.delete("Namespace", ns["metadata"]["name"])
    if wait and spaces:
        wait_for(lambda: not kube.list("Namespace", label_selector=BENCH_LABEL)[0], timeout,
                 "benchmark namespaces to be deleted", interval=0.5)


# -- workloads --------------------------------------------------------------------------

def replica_set(name, replicas, extra_labels=None):
    labels = {"app": name}
    labels.update(extra_labels or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "app",
                        "image": PAUSE_IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    }],
                },
            },
        },
    }


def pdb(name, app, max_unavailable=1):
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}},
    }


def virtual_machine(name, memory, eviction_strategy="LiveMigrate"):
    """A VM on a ReadWriteMany PVC with a masquerade interface: live-migratable."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"app": "bench-vm"}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"app": "bench-vm", "vm": name}},
                "spec": {
                    "evictionStrategy": eviction_strategy,
                    "domain": {
                        "cpu": {"cores": 1},
                        "memory": {"guest": memory},
                        "resources": {"requests": {"memory": memory}},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": f"{name}-root"}}],
                },
            },
        },
    }


def rwx_claim(name, size="10Gi"):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": size}}},
    }


class Placement:
    """Context: only ``targets`` are schedulable among the workers while workloads are created."""

    def __init__(self, kube, targets):
        self.kube = kube
        self.targets = set(targets)
        self.others = [w for w in workers(kube) if w not in self.targets]

    def __enter__(self):
        for node in self.others:
            set_schedulable(self.kube, node, False)
        for node in self.targets:
            set_schedulable(self.kube, node, True)
        return self

    def __exit__(self, *exc):
        for node in self.others:
            set_schedulable(self.kube, node, True)
        return False


def create_pods(kube, namespace, replica_sets, per_set, with_pdbs=False):
    """``replica_sets`` ReplicaSets of ``per_set`` pods (and a PDB each, maxUnavailable 1)."""
    expected = {}
    for i in range(replica_sets):
        name = f"app-{i:02d}"
        kube.create("ReplicaSet", replica_set(name, per_set), namespace)
        if with_pdbs:
            kube.create("PodDisruptionBudget", pdb(f"{name}-pdb", name), namespace)
        expected[name] = per_set
    return expected


def create_vms(kube, namespace, count, memory, prefix="vm"):
    names = []
    for i in range(count):
        name = f"{prefix}-{i:02d}"
        kube.create("PersistentVolumeClaim", rwx_claim(f"{name}-root"), namespace)
        kube.create("VirtualMachine", virtual_machine(name, memory), namespace)
        names.append(name)
    return names


def pods_ready_on(kube, namespace, nodes, count):
    """True once ``count`` pods of the namespace are Ready, all on ``nodes``."""
    pods, _ = kube.list("Pod", namespace)
    ready = [p for p in pods if is_ready(p)]
    return len(ready) == count == len(pods) and all(p["spec"].get("nodeName") in nodes for p in ready)


def pdbs_settled(kube, namespace, expected_healthy):
    """The scenario's PDBs (not KubeVirt's per-VMI ones) observed by the disruption controller, each
    allowing one disruption."""
    pdbs = [p for p in kube.list("PodDisruptionBudget", namespace)[0] if p["metadata"]["name"] in expected_healthy]
    if len(pdbs) != len(expected_healthy):
        return False
    for item in pdbs:
        status = item.get("status") or {}
        if status.get("observedGeneration") != item["metadata"].get("generation"):
            return False
        if status.get("currentHealthy") != expected_healthy.get(item["metadata"]["name"]):
            return False
        if status.get("disruptionsAllowed", 0) < 1:
            return False
    return True


def vms_running_on(kube, namespace, names, nodes):
    """Every VMI Running and Ready, live-migratable, on ``nodes``, its launcher pod Ready.

    KubeVirt 1.6 and later keeps no PodDisruptionBudget per VMI: virt-api's eviction webhook
    alone decides what an eviction of a launcher pod does, so there is no budget to wait for.
    """
    vmis = {v["metadata"]["name"]: v for v in kube.list("VirtualMachineInstance", namespace)[0]}
    for name in names:
        vmi = vmis.get(name)
        if vmi is None:
            return False
        status = vmi.get("status") or {}
        if status.get("phase") != "Running" or status.get("nodeName") not in nodes:
            return False
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get("LiveMigratable") != "True" or conditions.get("Ready") != "True":
            return False
    pods = [p for p in kube.list("Pod", namespace, label_selector="kubevirt.io=virt-launcher")[0]]
    return sum(1 for p in pods if is_ready(p) and p["spec"].get("nodeName") in nodes) == len(names)


def vmi_uids(kube, namespace):
    return {v["metadata"]["name"]: v["metadata"]["uid"] for v in kube.list("VirtualMachineInstance", namespace)[0]}


def remaining_pods(kube, node):
    """Pods still on ``node`` that a drain must remove: DaemonSet pods do not count, nor finished
    pods (Succeeded or Failed hold nothing on the node; a live migration leaves its source
    virt-launcher pod Succeeded, and KubeVirt deletes it with its VMI)."""
    pods, _ = kube.list("Pod", field_selector=f"spec.nodeName={node}")
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                  if not is_daemon_pod(p) and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def settle(kube, timeout=120):
    """Wait until no pod of the cluster is terminating or pending (the previous run is over)."""
    def quiet():
        pods, _ = kube.list("Pod")
        return not [p for p in pods if p["metadata"].get("deletionTimestamp")
                    or (p.get("status") or {}).get("phase") == "Pending"]
    try:
        wait_for(quiet, timeout, "no pod terminating or pending", interval=0.5)
    except Timeout:
        pass  # measured anyway; the run records it


def is_api_error(exc, status):
    return isinstance(exc, ApiError) and exc.status == status
