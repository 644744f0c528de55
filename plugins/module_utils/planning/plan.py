# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What maintenance of a node would do - one computation for check mode,
node_maintenance_info and the rolling role's preflight.

A ``Snapshot`` (snapshot.py) reads the cluster once (nodes, pods, VMIs, VMs, PodDisruptionBudgets,
NodeMaintenances: a handful of list requests, pods trimmed page by page to what the
plan needs); ``compute_plan`` then answers for any node without another request: which
pods go and which stay, what happens to each VM, whether another node can take each
of them, which budgets allow no disruption, and every blocker as a sentence.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.blockers import (
    ALWAYS_FATAL,
    NODE,
    PDB,
    PODS,
    SAFETY,
    VM,
    Blocker,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import MANAGED_BY, MANAGED_BY_LABEL
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.placement import _last_node, _placement
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import (
    EVICT,
    REFUSE,
    classify_pod,
    is_finished,
    matching_pdbs,
)


class PlanOptions:
    """Drain options plus the safety overrides."""

    def __init__(self, drain, allow_control_plane=False, allow_last_schedulable_node=False, non_migratable="fail"):
        self.drain = drain
        self.allow_control_plane = allow_control_plane
        self.allow_last_schedulable_node = allow_last_schedulable_node
        self.non_migratable = non_migratable or "fail"

    @classmethod
    def from_params(cls, params):
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions

        return cls(DrainOptions.from_params(params),
                   allow_control_plane=params.get("allow_control_plane", False),
                   allow_last_schedulable_node=params.get("allow_last_schedulable_node", False),
                   non_migratable=params.get("non_migratable") or "fail")


# -- the plan --------------------------------------------------------------------------------------

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
            "evict": [object_name(p) for p in self.evict],
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
    pods = sorted(snapshot.pods_on(name), key=object_name)
    plan.total_pods = len(pods)
    refused = []
    for pod in pods:
        verdict, reason = classify_pod(pod, options.drain)
        if verdict == EVICT:
            plan.evict.append(pod)
        elif verdict == REFUSE:
            refused.append((object_name(pod), reason))
            plan.skip.append((object_name(pod), "blocks the drain: " + reason))
        else:
            plan.skip.append((object_name(pod), reason))
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
    ours = node_marks.maintenance_record(node) is not None or any(
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
        why_not = None if migratable else kubevirt_settings.describe_not_migratable(reason, message)
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
            multiple.append((object_name(pod), found))
        for pdb in found:
            key = "%s/%s" % (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
            covered.setdefault(key, (pdb, []))[1].append(object_name(pod))
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


def maintenance_state(snapshot, name):
    """(in maintenance, phase) of node ``name``: by a NodeMaintenance CR, our record or our drain taint."""
    crs = snapshot.maintenances_of(name)
    cr_phase = (((crs[0][1].get("status") or {}).get("phase")) or "Running") if crs else None
    return node_marks.maintenance_state(snapshot.node(name), cr_phase)


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
