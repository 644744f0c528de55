# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What maintenance of a node would do - one computation for check mode,
node_maintenance_info and the rolling role's preflight.

A ``Snapshot`` reads the cluster once (nodes, pods, VMIs, VMs, PodDisruptionBudgets,
NodeMaintenances: a handful of list requests, pods trimmed page by page to what the
plan needs); ``compute_plan`` then answers for any node without another request: which
pods go and which stay, what happens to each VM, whether another node can take each
of them, which budgets allow no disruption, and every blocker as a sentence.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import fates, kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.pods import (
    EVICT,
    REFUSE,
    classify_pod,
    controller_of,
    is_finished,
    matching_pdbs,
    pod_key,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    ApiError,
    InvalidInputError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.identity import MANAGED_BY, MANAGED_BY_LABEL
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.scheduling import (
    RESOURCE_NAMES,
    PodNeighbours,
    format_amount,
    has_pod_rules,
    node_room,
    pod_requests,
    required_pod_terms,
    format_taint,
    untolerated_taints,
    why_not_on_node,
)

# Blocker kinds, and how each non_migratable policy treats them.
SAFETY = "safety"        # refusals: last schedulable node, etcd quorum, another NodeMaintenance
PODS = "pods"            # pods the drain options forbid evicting (kubectl fails the same way)
VM = "vm"                # a VM that can neither migrate nor be shut down by eviction
PLACEMENT = "placement"  # a VM that no other node can take
CAPACITY = "capacity"    # the other nodes lack room for everything
PDB = "pdb"              # a budget that never allows a disruption
NODE = "node"            # the node itself cannot complete a drain (NotReady)

ALWAYS_FATAL = (SAFETY, PODS)

NODE_MAINTENANCE_KINDS = ("NodeMaintenance", "LegacyNodeMaintenance")


class PlanOptions:
    """Drain options plus the safety overrides."""

    def __init__(self, drain, allow_control_plane=False, allow_last_schedulable_node=False, non_migratable="fail"):
        self.drain = drain
        self.allow_control_plane = allow_control_plane
        self.allow_last_schedulable_node = allow_last_schedulable_node
        self.non_migratable = non_migratable or "fail"

    @classmethod
    def from_params(cls, params):
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.pods import DrainOptions

        return cls(DrainOptions.from_params(params),
                   allow_control_plane=params.get("allow_control_plane", False),
                   allow_last_schedulable_node=params.get("allow_last_schedulable_node", False),
                   non_migratable=params.get("non_migratable") or "fail")


# -- reading the cluster ------------------------------------------------------------------------

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
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    slim_meta = dict((k, meta[k]) for k in ("name", "namespace", "uid", "labels", "ownerReferences",
                                            "deletionTimestamp", "resourceVersion") if k in meta)
    if "kubernetes.io/config.mirror" in annotations:
        slim_meta["annotations"] = {"kubernetes.io/config.mirror": annotations["kubernetes.io/config.mirror"]}
    for key in ("labels", "ownerReferences"):
        if key in slim_meta:
            slim_meta[key] = share(slim_meta[key])

    def requests_only(containers):
        return [{"resources": {"requests": (c.get("resources") or {}).get("requests") or {}}}
                for c in containers or []]

    slim_spec = {
        "nodeName": spec.get("nodeName"),
        "containers": requests_only(spec.get("containers")),
        "volumes": [{"name": v.get("name"), "emptyDir": {}} for v in spec.get("volumes") or [] if "emptyDir" in v],
    }
    for key in ("nodeSelector", "tolerations", "overhead", "topologySpreadConstraints"):
        if spec.get(key):
            slim_spec[key] = spec[key]
    if spec.get("initContainers"):
        slim_spec["initContainers"] = requests_only(spec["initContainers"])
    affinity = dict((k, v) for k, v in (spec.get("affinity") or {}).items()
                    if k in ("nodeAffinity", "podAffinity", "podAntiAffinity") and v)
    if affinity:
        slim_spec["affinity"] = affinity
    status = pod.get("status") or {}
    return {"metadata": slim_meta, "spec": share(slim_spec), "status": share({"phase": status.get("phase")})}


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
        items, _rv = client.list("Node")
        snap.nodes = dict((n["metadata"]["name"], n) for n in items)
        share = _Shared()
        pods, _rv = client.list("Pod", transform=lambda pod: _slim_pod(pod, share), drop_managed_fields=True)
        for pod in pods:
            snap.pods_by_node.setdefault(pod["spec"].get("nodeName") or "", []).append(pod)
        snap.kubevirt = snap.served("VirtualMachineInstance")
        if snap.kubevirt:
            vmis, _rv = client.list("VirtualMachineInstance")
            snap.vmis = [v for v in vmis if kubevirt.vmi_is_active(v) or kubevirt.vmi_node(v)]
            snap.vmis_by_uid = dict((v["metadata"].get("uid"), v) for v in snap.vmis)
            for vmi in snap.vmis:
                snap.vmis_by_node.setdefault(kubevirt.vmi_node(vmi), []).append(vmi)
            if snap.served("KubeVirt"):
                crs, _rv = client.list("KubeVirt")
                for cr in crs:
                    value = kubevirt.cluster_eviction_strategy(cr)
                    if value:
                        snap.cluster_eviction_strategy = value
                        break
            wanted = None
            if node_names is not None:
                wanted = set(node_names)
            namespaces = sorted(set(v["metadata"]["namespace"] for v in snap.vmis
                                    if wanted is None or kubevirt.vmi_node(v) in wanted))
            if wanted is None or len(namespaces) > 3:
                vms, _rv = client.list("VirtualMachine")
            else:
                vms = []
                for namespace in namespaces:
                    vms.extend(client.list("VirtualMachine", namespace=namespace)[0])
            snap.vms = dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in vms)
        snap.pdbs, _rv = client.list("PodDisruptionBudget")
        for pdb in snap.pdbs:
            if not kubevirt.is_vmi_pdb(pdb):
                snap.pdbs_by_namespace.setdefault(pdb["metadata"].get("namespace"), []).append(pdb)
        for kind in NODE_MAINTENANCE_KINDS:
            if snap.served(kind):
                snap.maintenances.extend((kind, cr) for cr in client.list(kind)[0])
        planned = snap.nodes.values() if node_names is None else [snap.nodes[n] for n in node_names if n in snap.nodes]
        if any(nodes_mod.is_control_plane(n) for n in planned):
            try:
                snap.etcd_guard = client.get_or_none("PodDisruptionBudget", nodes_mod.ETCD_GUARD_PDB[1],
                                                     nodes_mod.ETCD_GUARD_PDB[0])
            except ApiError:
                snap.etcd_guard = None  # not allowed to read it: the quorum count still applies
        return snap

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


# -- the plan --------------------------------------------------------------------------------------

class Blocker:
    def __init__(self, kind, text, vmi_uid=None):
        self.kind = kind
        self.text = text
        self.vmi_uid = vmi_uid


class Plan:
    """The plan for one node; :meth:`as_dict` is the public shape."""

    def __init__(self, node):
        self.node = node
        self.total_pods = 0
        self.evict = []           # slim pods
        self.skip = []            # (pod key, reason)
        self.vms = []             # public VM entries (dicts), with private keys starting with '_'
        self.blockers = []
        self.capacity_ok = True
        self.pdbs = []
        self.targets = {}         # pod key -> predicted node
        self.placed = []          # (pod, predicted node, spec of the pod that runs there)
        self.pending = []         # (pod key, why): ordinary pods no other node would take
        self.placed_holders = []  # (node, pod) of the placed pods with required pod anti-affinity
        self.leaving_ids = frozenset()
        self.checks_last_node = False  # False for a node this collection already holds
        self.vmi_uids_leaving = set()
        self.non_migratable = "fail"  # the policy the VMs' fates were decided under
        self._budget_namespaces = set()

    def budgets_matter(self):
        """Whether a PodDisruptionBudget other than a VMI's own covers a pod to evict."""
        return any(p["metadata"].get("namespace") in self._budget_namespaces for p in self.evict)

    def vm_blockers(self):
        return [b for b in self.blockers if b.kind == VM]

    def fatal_blockers(self, policy):
        """The blockers that stop maintenance before any write under a non_migratable policy."""
        if policy == "fail":
            return list(self.blockers)
        if policy == "shutdown":
            return [b for b in self.blockers if b.kind != VM]
        return [b for b in self.blockers if b.kind in ALWAYS_FATAL]

    def as_dict(self):
        return {
            "evict": [pod_key(p) for p in self.evict],
            "skip": [{"pod": key, "reason": reason} for key, reason in self.skip],
            "vms": [dict((k, v) for k, v in vm.items() if not k.startswith("_")) for vm in self.vms],
            "blockers": [b.text for b in self.blockers],
            "capacity_ok": self.capacity_ok,
            "pdbs": self.pdbs,
            "pending": [{"pod": key, "reason": reason} for key, reason in self.pending],
        }


def is_our_maintenance(cr):
    return ((cr.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


def compute_plan(snapshot, name, options, prefer=None):
    """What maintenance of node ``name`` would do, from ``snapshot`` (no API request).

    ``prefer``: nodes to place what leaves on first (those a rolling run has already done)."""
    node = snapshot.node(name)
    plan = Plan(name)
    plan.non_migratable = getattr(options, "non_migratable", "fail")
    plan._budget_namespaces = set(snapshot.pdbs_by_namespace)
    pods = sorted(snapshot.pods_on(name), key=pod_key)
    plan.total_pods = len(pods)
    refused = []
    for pod in pods:
        verdict, reason = classify_pod(pod, options.drain)
        if verdict == EVICT:
            plan.evict.append(pod)
        elif verdict == REFUSE:
            refused.append((pod_key(pod), reason))
            plan.skip.append((pod_key(pod), "blocks the drain: " + reason))
        else:
            plan.skip.append((pod_key(pod), reason))
    _safety(plan, snapshot, node, options)
    if refused:
        plan.blockers.append(Blocker(PODS, "Node %s has pods the drain options do not allow to evict: %s." % (
            name, "; ".join("%s %s" % (key, reason) for key, reason in refused))))
    if not nodes_mod.is_ready(node):
        plan.blockers.append(Blocker(NODE, "Node %s is not Ready (%s): its pods cannot confirm termination, so a "
                                           "drain would not finish; for a dead node use node_decommission with "
                                           "assume_powered_off=true." % (name, nodes_mod.not_ready_reason(node))))
    _vms(plan, snapshot, name)
    if not options.allow_last_schedulable_node:
        _last_node(plan, snapshot, node)
    if not options.drain.disable_eviction:
        _pdbs(plan, snapshot)
    _placement(plan, snapshot, name, prefer)
    return plan


def _safety(plan, snapshot, node, options):
    name = plan.node
    ours = nodes_mod.maintenance_record(node) is not None or any(
        is_our_maintenance(cr) for _kind, cr in snapshot.maintenances_of(name))
    for kind, cr in snapshot.maintenances_of(name):
        if not is_our_maintenance(cr):
            plan.blockers.append(Blocker(SAFETY, "Node %s is already held by %s %s, which this collection did not "
                                                 "create; end that maintenance first." % (
                                                     name, "NodeMaintenance", cr["metadata"]["name"])))
    if ours:
        return  # entered earlier by this collection: the checks passed then, a re-run finishes the job
    plan.checks_last_node = True
    everything = list(snapshot.nodes.values())
    if not options.allow_control_plane:
        text = nodes_mod.control_plane_refusal(node, everything, snapshot.etcd_guard)
        if text:
            plan.blockers.append(Blocker(SAFETY, text))


def _last_node(plan, snapshot, node):
    """Refuse the last node the node's workloads could run on: no other Ready, uncordoned node
    whose taints any pod that would move tolerates; with nothing to move, no other such node has
    only taints this node has too. Node selection is not counted: a VM pinned to the node is a
    placement blocker of its own, not a reason to call the whole node the last one."""
    if not plan.checks_last_node or not nodes_mod.is_ready(node) or nodes_mod.is_cordoned(node):
        return
    name = plan.node
    others = [n for other, n in snapshot.nodes.items()
              if other != name and nodes_mod.is_ready(n) and not nodes_mod.is_cordoned(n)]
    movers = [p for p in plan.evict if _moves(p, plan)]
    if movers:
        vm_by_pod = dict((id(vm["_pod"]), vm) for vm in plan.vms if vm["_pod"] is not None)
        tolerations = {}
        for pod in movers:
            spec = _next_pod_spec(pod, vm_by_pod.get(id(pod)))
            tolerations.setdefault(repr(spec.get("tolerations")), spec.get("tolerations"))
        if any(not untolerated_taints(n, tol) for tol in tolerations.values() for n in others):
            return
        takes = "has only taints one of its %d pod%s to move tolerates" % (len(movers), "" if len(movers) == 1 else "s")
    else:
        own = set(format_taint(t) for t in nodes_mod.blocking_taints(node))
        if any(set(format_taint(t) for t in nodes_mod.blocking_taints(n)) <= own for n in others):
            return
        takes = "has no taint this node lacks"
    plan.blockers.append(Blocker(SAFETY, (
        "Node %s is the last schedulable node for its workloads: no other node that is Ready and uncordoned %s, so "
        "they would have nowhere to go; set allow_last_schedulable_node=true to proceed anyway." % (name, takes))))


def _vms(plan, snapshot, name):
    launchers = {}
    for pod in plan.evict:
        if kubevirt.is_launcher_pod(pod):
            launchers[kubevirt.launcher_vmi_uid(pod)] = pod
    selected_out = set(kubevirt.launcher_vmi_uid(snapshot_pod) for snapshot_pod in snapshot.pods_on(name)
                       if kubevirt.is_launcher_pod(snapshot_pod)) - set(launchers)
    on_node = snapshot.vmis_by_node.get(name, [])
    for vmi in sorted(on_node, key=lambda v: (v["metadata"]["namespace"], v["metadata"]["name"])):
        if not kubevirt.vmi_is_active(vmi):
            continue
        uid = vmi["metadata"].get("uid")
        if uid in selected_out:
            continue  # its launcher pod is not part of this drain (pod_selector)
        namespace = vmi["metadata"]["namespace"]
        vm_name = kubevirt.vm_name_of(vmi)
        vm = snapshot.vms.get((namespace, vm_name)) if vm_name else None
        run_strategy = kubevirt.vm_run_strategy(vm) if vm else None
        migratable, reason, message = kubevirt.live_migratable(vmi)
        display = "%s/%s" % (namespace, vm_name or vmi["metadata"]["name"])
        why_not = None if migratable else kubevirt.describe_not_migratable(reason, message)
        fate = fates.decide(vmi, run_strategy, snapshot.cluster_eviction_strategy, plan.non_migratable,
                            display, name, not_migratable_reason=why_not)
        entry = {
            "namespace": namespace,
            "name": vm_name or vmi["metadata"]["name"],
            "eviction_strategy": fate.strategy,
            "live_migratable": bool(migratable),
            "reason": why_not,
            "outcome": fate.outcome,
            "explanation": fate.sentence,
            "restart_by": fate.restart_by,
            "run_strategy": run_strategy,
            "memory": kubevirt.vmi_guest_memory(vmi),
            "target": None,
            "_vmi": vmi,
            "_pod": launchers.get(uid),
            "_fate": fate,
        }
        plan.vms.append(entry)
        if entry["_pod"] is not None:
            plan.vmi_uids_leaving.add(uid)
        if fate.obstacle:
            plan.blockers.append(Blocker(VM, fate.obstacle, vmi_uid=uid))


def _pdbs(plan, snapshot):
    if not snapshot.pdbs_by_namespace:
        return
    covered = {}
    multiple = []
    for pod in plan.evict:
        if is_finished(pod) or pod["metadata"].get("deletionTimestamp"):
            continue
        found = matching_pdbs(pod, snapshot.pdbs_by_namespace.get(pod["metadata"].get("namespace"), []))
        if len(found) > 1:
            multiple.append((pod_key(pod), found))
        for pdb in found:
            key = "%s/%s" % (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
            covered.setdefault(key, (pdb, []))[1].append(pod_key(pod))
    for key in sorted(covered):
        pdb, pod_keys = covered[key]
        status = pdb.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        if allowed is None or allowed > 0:
            continue
        expected, desired = status.get("expectedPods"), status.get("desiredHealthy")
        never = expected is not None and desired is not None and expected > 0 and desired >= expected
        plan.pdbs.append({"namespace": pdb["metadata"]["namespace"], "name": pdb["metadata"]["name"],
                          "disruptions_allowed": allowed, "pods": pod_keys, "never_allows": never})
        if never:
            plan.blockers.append(Blocker(PDB, (
                "PodDisruptionBudget %s never allows a disruption (%s healthy pods required of %s), so %s cannot be "
                "evicted; relax the budget or scale the workload up." % (key, desired, expected, ", ".join(pod_keys)))))
    for key, found in multiple:
        plan.blockers.append(Blocker(PDB, "Pod %s is covered by more than one PodDisruptionBudget (%s), which the "
                                          "Eviction API refuses to handle; remove the overlap." % (
                                              key, ", ".join(p["metadata"]["name"] for p in found))))


def _moves(pod, plan):
    """Whether the pod will be re-created on another node after it leaves."""
    if is_finished(pod):
        return False
    if kubevirt.is_launcher_pod(pod):
        for vm in plan.vms:
            if vm["_pod"] is pod:
                return vm["outcome"] in fates.MOVING_OUTCOMES
        return False
    controller = controller_of(pod)
    return controller is not None and controller.get("kind") != "DaemonSet"


def _next_pod_spec(pod, vm):
    """The placement rules of the pod that will replace ``pod`` on another node.

    A VM's next launcher pod (a migration's target or a restart's new pod) is made from the
    VMI: its affinity (node and pod) and topology spread constraints; KubeVirt adds to a
    migration target only an anti-affinity to the VM's own pod on the node it leaves
    (``createMigrationPodAntiAffinityRule``, pkg/virt-controller/watch/migration/migration.go),
    which the placement's exclusion of that node already covers. A pod that was itself a
    migration target carries that term for its old source node; the next one does not.
    """
    spec = pod["spec"]
    if vm is None:
        return spec
    spec = dict(spec)
    vmi_spec = vm["_vmi"].get("spec") or {}
    for key in ("affinity", "topologySpreadConstraints"):
        if vmi_spec.get(key):
            spec[key] = vmi_spec[key]
        else:
            spec.pop(key, None)
    return spec


def _fits(room, need):
    return all(room.get(r, 0.0) + 1e-9 >= need[r] for r in need)


def _why_nowhere(snapshot, spec, need, name, neighbours=None):
    """'lab-worker-2, lab-worker-3: cordoned; lab-worker-4: 1 CPU free, needs 2'."""
    groups = {}
    free = snapshot.free()
    for other, node in sorted(snapshot.nodes.items()):
        if other == name:
            continue
        if not nodes_mod.is_ready(node):
            why = "not Ready"
        else:
            why = why_not_on_node(spec, node)
        if why is None:
            room = free[other]
            short = [r for r in need if room.get(r, 0.0) + 1e-9 < need[r]]
            if short:
                why = "not enough %s free (%s)" % (
                    " and ".join("pod slots" if r == "pods" else r for r in short),
                    ", ".join(format_amount(r, room.get(r, 0.0)) + " free, " + format_amount(r, need[r]) + " needed"
                              for r in short))
            elif neighbours is not None:
                why = neighbours.why_not(other)
        if why is None:
            continue
        groups.setdefault(why, []).append(other)
    parts = []
    for why, names in sorted(groups.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(names[:3]) + (" and %d more" % (len(names) - 3) if len(names) > 3 else "")
        parts.append("%s: %s" % (shown, why))
    return "; ".join(parts) or "there is no other node"


def _neighbours(snapshot, plan, pod, spec, stays):
    """The pods around the pod that replaces ``pod``, when any rule of it or of them looks at pods:
    what runs now, less what leaves node ``plan.node`` (except ``pod`` itself when ``stays``: a
    migrating VM's source pod runs until its target runs), plus what this plan placed so far."""
    holders = snapshot.anti_holders()
    if not has_pod_rules(spec) and not holders and not plan.placed_holders:
        return None
    leaving = plan.leaving_ids
    if stays:
        leaving = leaving - {id(pod)}
    present = [(n, p) for n, p in snapshot.present() if id(p) not in leaving]
    present += [(target, dict(p, spec=s)) for p, target, s in plan.placed]
    anti = [(n, p) for key, (n, p) in holders.items() if key not in leaving] + plan.placed_holders
    replacement = dict(pod, spec=spec)
    return PodNeighbours(replacement, snapshot.nodes, present, anti)


def _placement(plan, snapshot, name, prefer=None):
    """Can the other nodes take what leaves? Per VM, and all of it at once (first fit, the nodes in
    ``prefer`` first), with what the scheduler checks: node selection, taints, every requested
    resource, pod affinity and anti-affinity, topology spread."""
    free = snapshot.free()
    used = {}
    plan.leaving_ids = frozenset(id(p) for p in plan.evict)
    movers = [p for p in plan.evict if _moves(p, plan)]
    movers.sort(key=lambda p: (-_requests(p)["memory"], pod_key(p)))
    vm_by_pod = dict((id(vm["_pod"]), vm) for vm in plan.vms if vm["_pod"] is not None)
    room_short = []
    preferred_first = {}  # id of an eligible_nodes list -> the same nodes, those in ``prefer`` first
    for pod in movers:
        need = _requests(pod)
        vm = vm_by_pod.get(id(pod))
        spec = _next_pod_spec(pod, vm)
        eligible = snapshot.eligible_nodes(spec)
        if prefer:
            key = id(eligible)
            if key not in preferred_first:
                preferred_first[key] = [n for n in eligible if n in prefer] + [n for n in eligible if n not in prefer]
            eligible = preferred_first[key]
        neighbours = _neighbours(snapshot, plan, pod, spec, vm is not None and vm["outcome"] == fates.MIGRATE)
        target, fits_alone, ruled_out = None, False, None
        for candidate in eligible:
            if candidate == name or not _fits(free[candidate], need):
                continue
            why = neighbours.why_not(candidate) if neighbours is not None else None
            if why is not None:
                ruled_out = ruled_out or "%s: %s" % (candidate, why)
                continue
            fits_alone = True
            taken = used.get(candidate)
            if taken is None or _fits(dict((r, free[candidate].get(r, 0.0) - taken.get(r, 0.0)) for r in need), need):
                target = candidate
                break
        if target is not None:
            bucket = used.setdefault(target, {})
            for resource, amount in need.items():
                bucket[resource] = bucket.get(resource, 0.0) + amount
            plan.targets[pod_key(pod)] = target
            plan.placed.append((pod, target, spec))
            if required_pod_terms(spec, "podAntiAffinity"):
                plan.placed_holders.append((target, dict(pod, spec=spec)))
            if vm is not None:
                vm["target"] = target
        elif fits_alone:
            room_short.append(pod)
        elif vm is not None:
            plan.capacity_ok = False
            plan.blockers.append(Blocker(PLACEMENT, "VM %s/%s cannot move off node %s: no other node can take it "
                                                    "(%s)." % (vm["namespace"], vm["name"], name,
                                                               _why_nowhere(snapshot, spec, need, name, neighbours)),
                                         vmi_uid=vm["_vmi"]["metadata"].get("uid")))
        elif ruled_out is None and [n for n in eligible if n != name]:
            room_short.append(pod)
        else:
            # An ordinary pod whose own rules allow no other node stays Pending; the drain still completes.
            plan.pending.append((pod_key(pod), ruled_out or "no other node accepts it (%s)" % _why_nowhere(
                snapshot, spec, need, name)))
    if room_short:
        plan.capacity_ok = False
        total = {}
        for pod in room_short:
            for resource, amount in _requests(pod).items():
                total[resource] = total.get(resource, 0.0) + amount
        shown = [format_amount(r, total[r]) for r in RESOURCE_NAMES] + [
            format_amount(r, total[r]) for r in sorted(total) if r not in RESOURCE_NAMES + ("pods",)]
        plan.blockers.append(Blocker(CAPACITY, (
            "The other nodes lack room for everything node %s runs: %d pod%s (%s) would find no node, "
            "for example %s." % (name, len(room_short), "" if len(room_short) == 1 else "s", ", ".join(shown),
                                 ", ".join(pod_key(p) for p in room_short[:3])))))


def maintenance_state(snapshot, name):
    """(in maintenance, phase) of node ``name``: by a NodeMaintenance CR, our record or our drain taint."""
    crs = snapshot.maintenances_of(name)
    cr_phase = (((crs[0][1].get("status") or {}).get("phase")) or "Running") if crs else None
    return nodes_mod.maintenance_state(snapshot.node(name), cr_phase)


def node_summary(snapshot, name, options, plan=None):
    """One entry of node_maintenance_info's ``nodes``; ``plan``: compute_plan's, if already made."""
    node = snapshot.node(name)
    if plan is None:
        plan = compute_plan(snapshot, name, options)
    in_maintenance, phase = maintenance_state(snapshot, name)
    return {
        "name": name,
        "ready": nodes_mod.is_ready(node),
        "schedulable": not nodes_mod.is_cordoned(node),
        "control_plane": nodes_mod.is_control_plane(node),
        "in_maintenance": in_maintenance,
        "maintenance_phase": phase,
        "plan": plan.as_dict(),
    }
