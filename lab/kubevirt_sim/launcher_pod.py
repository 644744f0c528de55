"""The virt-launcher pod of a VMI, shaped like upstream's so the real scheduler,
PodDisruptionBudgets and drains treat it as they treat the real one.

Resource requests come from the VM's domain, placement (nodeSelector, affinity,
tolerations) is copied, PVC volumes become pod volumes (so volume binding
applies), and the emptyDir volumes upstream's launcher has are there too (which is
why a drain needs --delete-emptydir-data).
"""

import copy

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o

LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.6.0"
# Upstream's default cpuAllocationRatio: a vCPU without an explicit request asks
# for a tenth of a core.
CPU_ALLOCATION_RATIO = 10
EMPTY_DIRS = ("private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks")


def launcher_pod(vmi, migration=None, source_node=None):
    """The pod manifest for ``vmi``; with ``migration`` set, the migration target."""
    vmi_spec = o.spec(vmi)
    name = o.meta(vmi, "name")
    pod_labels = dict(o.labels(vmi))
    pod_labels.pop(o.NODE_NAME_LABEL, None)
    pod_labels.pop(o.MIGRATION_TARGET_NODE_LABEL, None)
    pod_labels.update(
        {
            o.APP_LABEL: o.LAUNCHER,
            o.CREATED_BY_LABEL: o.meta(vmi, "uid"),
            o.VM_NAME_LABEL: _vm_name(vmi),
        }
    )
    if migration is not None:
        pod_labels[o.MIGRATION_JOB_LABEL] = o.meta(migration, "uid")

    node_selector = dict(vmi_spec.get("nodeSelector") or {})
    node_selector[o.SCHEDULABLE_LABEL] = "true"
    if migration is not None:
        node_selector.update(o.spec(migration).get("addedNodeSelector") or {})

    affinity = copy.deepcopy(vmi_spec.get("affinity")) or None
    if migration is not None and source_node:
        affinity = _exclude_node(affinity, source_node)

    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": int(vmi_spec.get("terminationGracePeriodSeconds", 180)) + 15,
        "nodeSelector": node_selector,
        "containers": [
            {
                "name": "compute",
                "image": LAUNCHER_IMAGE,
                "command": ["/usr/bin/virt-launcher-monitor", "--name", name],
                "resources": _resources(vmi_spec),
            }
        ],
        "volumes": _volumes(vmi_spec),
    }
    if affinity:
        pod_spec["affinity"] = affinity
    for field in ("tolerations", "priorityClassName", "schedulerName", "hostname", "subdomain"):
        if vmi_spec.get(field):
            pod_spec[field] = copy.deepcopy(vmi_spec[field])

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{name}-",
            "namespace": o.meta(vmi, "namespace"),
            "labels": pod_labels,
            "annotations": {
                o.DOMAIN_ANNOTATION: name,
                "kubectl.kubernetes.io/default-container": "compute",
            },
            "ownerReferences": [k.owner_reference(vmi)],
        },
        "spec": pod_spec,
    }


def _vm_name(vmi):
    for ref in o.meta(vmi, "ownerReferences") or []:
        if ref.get("kind") == "VirtualMachine":
            return ref.get("name")
    return o.meta(vmi, "name")


def _resources(vmi_spec):
    domain = vmi_spec.get("domain") or {}
    resources = domain.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    if "memory" not in requests:
        guest = (domain.get("memory") or {}).get("guest")
        if guest is not None:
            requests["memory"] = guest
    if "cpu" not in requests:
        requests["cpu"] = f"{o.vcpus(vmi_spec) * 1000 // CPU_ALLOCATION_RATIO}m"
    out = {"requests": {k_: str(v) for k_, v in requests.items()}}
    if resources.get("limits"):
        out["limits"] = {k_: str(v) for k_, v in resources["limits"].items()}
    return out


def _volumes(vmi_spec):
    volumes = [{"name": name, "emptyDir": {}} for name in EMPTY_DIRS]
    for volume in vmi_spec.get("volumes") or []:
        claim = None
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
        elif "dataVolume" in volume:
            claim = volume["dataVolume"].get("name")
        if claim:
            volumes.append(
                {"name": f"vol-{volume.get('name')}", "persistentVolumeClaim": {"claimName": claim}}
            )
    return volumes


def _exclude_node(affinity, node_name):
    """Add a required node affinity that keeps the pod off ``node_name``.

    Required node selector terms are ORed, so the exclusion goes into every term.
    It matches on the node's name field, which every node has (labels may not).
    """
    affinity = affinity or {}
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    exclusion = {"key": "metadata.name", "operator": "NotIn", "values": [node_name]}
    for term in terms:
        term.setdefault("matchFields", []).append(dict(exclusion))
    required["nodeSelectorTerms"] = terms
    return affinity
