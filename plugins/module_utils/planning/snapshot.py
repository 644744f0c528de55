# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One read of the cluster for the plans: nodes, pods (trimmed page by page to what a plan needs),
VMIs, VMs, PodDisruptionBudgets and NodeMaintenances, the room left on each node, and the
cluster as it would be after a plan."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ApiError,
    InvalidInputError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.pod_neighbours import required_pod_terms
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import is_finished
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import node_room, pod_requests
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.scheduling import why_not_on_node

NODE_MAINTENANCE_KINDS = ("NodeMaintenance", "LegacyNodeMaintenance")


class _Shared:
    """One object for equal pieces of many pods: the pods of a ReplicaSet have the same labels,
    owner, requests and placement rules, so a snapshot of 30,000 pods holds a few thousand of
    each instead. Shared pieces are only read, never modified."""

    def __init__(self):
        self._seen = {}

    def __call__(self, value):
        if not value:
            return value
        # repr is cheap and exact for decoded JSON; equal values in another key order are merely
        # not shared.
        return self._seen.setdefault(repr(value), value)


def _no_sharing(value):
    return value


def _slim_pod(pod, share=_no_sharing):
    """The parts of a pod the plan and the drain look at (keeps memory flat on big clusters)."""
    status = pod.get("status") or {}
    return {"metadata": _slim_metadata(pod.get("metadata") or {}, share),
            "spec": share(_slim_spec(pod.get("spec") or {})),
            "status": share({"phase": status.get("phase")})}


_POD_META_KEYS = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp", "resourceVersion")


def _slim_metadata(meta, share, keys=_POD_META_KEYS):
    """``keys`` of an object's metadata (a pod's: name, owners, labels and versions), labels and
    owner references shared, and of the annotations only a pod's mirror-pod one."""
    annotations = meta.get("annotations") or {}
    slim_meta = _picked(meta, keys)
    if "kubernetes.io/config.mirror" in annotations:
        slim_meta["annotations"] = {"kubernetes.io/config.mirror": annotations["kubernetes.io/config.mirror"]}
    for key in ("labels", "ownerReferences"):
        if key in slim_meta:
            slim_meta[key] = share(slim_meta[key])
    return slim_meta


def _picked(obj, keys):
    return dict((k, obj[k]) for k in keys if k in obj)


def _requests_only(containers):
    return [{"resources": {"requests": (c.get("resources") or {}).get("requests") or {}}}
            for c in containers or []]


def _slim_spec(spec):
    """The pod's node, requests, emptyDir volumes and placement rules."""
    slim_spec = {
        "nodeName": spec.get("nodeName"),
        "containers": _requests_only(spec.get("containers")),
        "volumes": [{"name": v.get("name"), "emptyDir": {}} for v in spec.get("volumes") or [] if "emptyDir" in v],
    }
    for key in ("nodeSelector", "tolerations", "overhead", "topologySpreadConstraints"):
        if spec.get(key):
            slim_spec[key] = spec[key]
    if spec.get("initContainers"):
        slim_spec["initContainers"] = _requests_only(spec["initContainers"])
        for slim, full in zip(slim_spec["initContainers"], spec["initContainers"]):
            if full.get("restartPolicy"):
                slim["restartPolicy"] = full["restartPolicy"]  # a sidecar: it keeps running
    affinity = dict((k, v) for k, v in (spec.get("affinity") or {}).items()
                    if k in ("nodeAffinity", "podAffinity", "podAntiAffinity") and v)
    if affinity:
        slim_spec["affinity"] = affinity
    return slim_spec


# What a plan reads of a VMI's status (kubevirt.py: node, phase, conditions LiveMigratable and
# Ready, guest memory, migration state, evacuation mark); the rest (interfaces, volumeStatus,
# phaseTransitionTimestamps, guest OS, ...) is about half of a VMI and is dropped page by page.
_VMI_STATUS_KEYS = ("nodeName", "phase", "conditions", "memory", "migrationState", "evacuationNodeName")
_VMI_META_KEYS = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp",
                  "resourceVersion", "creationTimestamp")


def _slim_vmi(vmi, share=_no_sharing):
    """A VMI as the plan reads it: its metadata (no annotations or managed fields), its whole spec
    (placement, eviction strategy, memory) and the status keys of ``_VMI_STATUS_KEYS``."""
    meta = _slim_metadata(vmi.get("metadata") or {}, share, _VMI_META_KEYS)
    status = _picked(vmi.get("status") or {}, _VMI_STATUS_KEYS)
    if "conditions" in status:  # what they say, not when: then most VMIs' conditions are equal
        status["conditions"] = [_picked(c, ("type", "status", "reason", "message")) for c in status["conditions"] or []]
    for key in ("conditions", "memory"):
        if key in status:
            status[key] = share(status[key])
    return {"metadata": meta, "spec": _shared_parts(vmi.get("spec") or {}, share), "status": status}


def _shared_parts(spec, share):
    """A VMI's spec with its parts shared among VMIs where equal: VMs made from one template differ
    in their volumes and their domain's firmware (serial, UUID), not in CPU, devices, memory,
    networks or placement rules."""
    shared = dict((k, share(v)) for k, v in spec.items() if k != "domain")
    if "domain" in spec:
        shared["domain"] = dict((k, share(v)) for k, v in (spec["domain"] or {}).items())
    return shared


_VM_META_KEYS = ("name", "namespace", "uid", "labels", "deletionTimestamp", "resourceVersion")


def _slim_vm(vm):
    """A VM as the plan reads it: who it is and its run strategy (``kubevirt.vm_run_strategy``);
    its template is the VMI's spec, read from the VMI."""
    return {"metadata": _picked(vm.get("metadata") or {}, _VM_META_KEYS),
            "spec": _picked(vm.get("spec") or {}, ("runStrategy", "running"))}


def _without(obj, key):
    return dict((k, v) for k, v in obj.items() if k != key)


def _slim_node(node):
    """A node without its image list (status.images: up to tens of KB on a real node, never read)
    and its managed fields; the node itself is left as it was."""
    status, meta = node.get("status"), node.get("metadata")
    if not (status and "images" in status) and not (meta and "managedFields" in meta):
        return node
    slim = dict(node)
    if status and "images" in status:
        slim["status"] = _without(status, "images")
    if meta and "managedFields" in meta:
        slim["metadata"] = _without(meta, "managedFields")
    return slim


def _requests(pod):
    """pod_requests of a snapshot pod, computed once and kept with its (shared) spec: on a large
    cluster every pod counts for its node's free room and again in the placement of its node."""
    spec = pod["spec"]
    cached = spec.get("_requests")
    if cached is None:
        cached = spec["_requests"] = pod_requests(spec)
    return cached


class Snapshot:
    """One read of everything a plan needs; built by :meth:`load`."""

    def __init__(self, client):
        self.client = client
        self.nodes = {}
        self.pods_by_node = {}
        self.vmis = []
        self.vmis_by_uid = {}
        self.vmis_by_node = {}
        self.vms = {}
        self.pdbs = []
        self.pdbs_by_namespace = {}  # budgets other than a VMI's own, by namespace
        self.cluster_eviction_strategy = None
        self.kubevirt = False
        self.kubevirt_cr = None  # the KubeVirt CR (its configuration: eviction strategy, migration limits)
        self.maintenances = []  # (kind, object)
        self.etcd_guard = None
        self._free = None
        self._eligible = {}
        self._anti_holders = None

    def served(self, kind):
        """Whether the API serves ``kind`` (the client's discovery, kept for the run)."""
        return self.client.kind_served(kind)

    @classmethod
    def load(cls, client, node_names=None):
        """Read the cluster. ``node_names``: the nodes to plan (VMs are then read per namespace)."""
        snap = cls(client)
        items, _rv = client.list("Node", transform=_slim_node, drop_managed_fields=True)
        snap.nodes = dict((n["metadata"]["name"], n) for n in items)
        snap._read_pods()
        snap.kubevirt = snap.served("VirtualMachineInstance")
        if snap.kubevirt:
            snap._read_kubevirt(node_names)
        snap._read_pdbs()
        for kind in NODE_MAINTENANCE_KINDS:
            if snap.served(kind):
                snap.maintenances.extend((kind, cr) for cr in client.list(kind)[0])
        planned = snap.nodes.values() if node_names is None else [snap.nodes[n] for n in node_names if n in snap.nodes]
        if any(nodes_mod.is_control_plane(n) for n in planned):
            snap._read_etcd_guard()
        return snap

    def _read_pods(self):
        share = _Shared()
        pods, _rv = self.client.list("Pod", transform=lambda pod: _slim_pod(pod, share), drop_managed_fields=True)
        for pod in pods:
            self.pods_by_node.setdefault(pod["spec"].get("nodeName") or "", []).append(pod)

    def _read_kubevirt(self, node_names):
        """The VMIs, the cluster-wide eviction strategy and the VMs."""
        share = _Shared()
        vmis, _rv = self.client.list("VirtualMachineInstance", drop_managed_fields=True,
                                     transform=lambda vmi: _slim_vmi(vmi, share))
        self.vmis = [v for v in vmis if kubevirt.vmi_is_active(v) or kubevirt.vmi_node(v)]
        self.vmis_by_uid = dict((v["metadata"].get("uid"), v) for v in self.vmis)
        for vmi in self.vmis:
            self.vmis_by_node.setdefault(kubevirt.vmi_node(vmi), []).append(vmi)
        if self.served("KubeVirt"):
            self._read_cluster_eviction_strategy()
        self._read_vms(node_names)

    def _read_cluster_eviction_strategy(self):
        crs, _rv = self.client.list("KubeVirt")
        self.kubevirt_cr = crs[0] if crs else None
        for cr in crs:
            value = kubevirt_settings.cluster_eviction_strategy(cr)
            if value:
                self.cluster_eviction_strategy = value
                break

    def _read_vms(self, node_names):
        """All VMs, or those of the namespaces with VMIs on the planned nodes when there are few."""
        wanted = None
        if node_names is not None:
            wanted = set(node_names)
        namespaces = sorted(set(v["metadata"]["namespace"] for v in self.vmis
                                if wanted is None or kubevirt.vmi_node(v) in wanted))
        if wanted is None or len(namespaces) > 3:
            vms, _rv = self.client.list("VirtualMachine", transform=_slim_vm, drop_managed_fields=True)
        else:
            vms = []
            for namespace in namespaces:
                vms.extend(self.client.list("VirtualMachine", namespace=namespace, transform=_slim_vm,
                                            drop_managed_fields=True)[0])
        self.vms = dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in vms)

    def _read_pdbs(self):
        self.pdbs, _rv = self.client.list("PodDisruptionBudget")
        for pdb in self.pdbs:
            if not kubevirt.is_vmi_pdb(pdb):
                self.pdbs_by_namespace.setdefault(pdb["metadata"].get("namespace"), []).append(pdb)

    def _read_etcd_guard(self):
        try:
            self.etcd_guard = self.client.get_or_none("PodDisruptionBudget", nodes_mod.ETCD_GUARD_PDB[1],
                                                      nodes_mod.ETCD_GUARD_PDB[0])
        except ApiError:
            self.etcd_guard = None  # not allowed to read it: the quorum count still applies

    def node(self, name):
        node = self.nodes.get(name)
        if node is None:
            raise InvalidInputError("Node %s does not exist." % name, node=name)
        return node

    def pods_on(self, name):
        return self.pods_by_node.get(name, [])

    def replace_node(self, name, node):
        """Plan with ``node`` as node ``name`` from now on (for example as it will be once its
        maintenance ends); placement worked out for the node as it was is forgotten."""
        self.nodes[name] = node
        self._eligible = {}

    def maintenances_of(self, name):
        return [(kind, cr) for kind, cr in self.maintenances if (cr.get("spec") or {}).get("nodeName") == name]

    # -- room on the other nodes -----------------------------------------------------------------

    def free(self):
        """Allocatable minus the requests of the pods that run there, per node and resource."""
        if self._free is None:
            self._free = {}
            for name, node in self.nodes.items():
                room = node_room(node)
                for pod in self.pods_on(name):
                    if is_finished(pod):
                        continue
                    for resource, amount in _requests(pod).items():
                        room[resource] = room.get(resource, 0.0) - amount
                self._free[name] = room
        return self._free

    def present(self):
        """(node name, pod) of every pod that runs or is about to (finished ones left out)."""
        for name, pods in self.pods_by_node.items():
            if not name:
                continue
            for pod in pods:
                if not is_finished(pod):
                    yield name, pod

    def anti_holders(self):
        """{id(pod): (node name, pod)} of the running pods with required pod anti-affinity terms."""
        if self._anti_holders is None:
            self._anti_holders = dict((id(pod), (name, pod)) for name, pod in self.present()
                                      if required_pod_terms(pod["spec"], "podAntiAffinity"))
        return self._anti_holders

    def apply_plan(self, plan):
        """Plan later nodes as if ``plan`` had run: what left its node runs where the plan put it
        (pods and VMIs), what stops is gone, and the room follows."""
        free = self.free()
        holders = self.anti_holders()
        leaving = set(id(pod) for pod in plan.evict)
        self.pods_by_node[plan.node] = [p for p in self.pods_on(plan.node) if id(p) not in leaving]
        for pod in plan.evict:
            holders.pop(id(pod), None)
            if not is_finished(pod):
                for resource, amount in _requests(pod).items():
                    free[plan.node][resource] = free[plan.node].get(resource, 0.0) + amount
        moved_vmis = {}
        for pod, target, spec in plan.placed:
            moved = dict(pod, spec=dict(spec, nodeName=target))
            self.pods_by_node.setdefault(target, []).append(moved)
            for resource, amount in _requests(pod).items():
                free[target][resource] = free[target].get(resource, 0.0) - amount
            if required_pod_terms(spec, "podAntiAffinity"):
                holders[id(moved)] = (target, moved)
            if kubevirt.is_launcher_pod(pod):
                moved_vmis[kubevirt.launcher_vmi_uid(pod)] = target
        staying = []
        for vmi in self.vmis_by_node.get(plan.node, []):
            target = moved_vmis.get(vmi["metadata"].get("uid"))
            if target is None and vmi["metadata"].get("uid") not in plan.vmi_uids_leaving:
                staying.append(vmi)
            elif target is not None:
                status = dict(vmi.get("status") or {}, nodeName=target)
                self.vmis_by_node.setdefault(target, []).append(dict(vmi, status=status))
        self.vmis_by_node[plan.node] = staying
        # The nodes with the most free memory first, as eligible_nodes orders them (nearly sorted: cheap).
        for names in self._eligible.values():
            names.sort(key=lambda n: (-free[n]["memory"], n))

    def cordon_for_plan(self, names):
        """Plan as if ``names`` were cordoned (the other nodes of a batch, in maintenance at the
        same time): they take nothing. Returns what :meth:`restore_nodes` puts back."""
        saved = {}
        for name in names:
            node = self.nodes.get(name)
            if node is None or nodes_mod.is_cordoned(node):
                continue
            saved[name] = node
            self.nodes[name] = dict(node, spec=dict(node.get("spec") or {}, unschedulable=True))
        if saved:
            self._eligible = {}
        return saved

    def restore_nodes(self, saved):
        """Undo :meth:`cordon_for_plan`: the nodes are back in service (a batch is done)."""
        self.nodes.update(saved)
        if saved:
            self._eligible = {}

    def eligible_nodes(self, pod_spec):
        """Nodes that accept the pod by its placement rules (ignoring room), in a stable order."""
        signature = repr((sorted((pod_spec.get("nodeSelector") or {}).items()), pod_spec.get("affinity"),
                          pod_spec.get("tolerations")))
        if signature not in self._eligible:
            free = self.free()
            names = [name for name, node in self.nodes.items()
                     if nodes_mod.is_ready(node) and why_not_on_node(pod_spec, node) is None]
            names.sort(key=lambda n: (-free[n]["memory"], n))
            self._eligible[signature] = names
        return self._eligible[signature]
