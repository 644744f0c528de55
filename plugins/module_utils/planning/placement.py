# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where what leaves a node would go: the placement rules of the pods that replace its pods, the
nodes that can take them (those a rolling run has done first), and the last schedulable node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.blockers import (
    CAPACITY,
    PLACEMENT,
    SAFETY,
    Blocker,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.pod_neighbours import (
    PodNeighbours,
    has_pod_rules,
    required_pod_terms,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import controller_of, is_finished
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import RESOURCE_NAMES, format_amount
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.scheduling import (
    format_taint,
    untolerated_taints,
    why_not_on_node,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.snapshot import _requests


def _last_node(plan, snapshot, node):
    """Refuse the last node the node's workloads could run on: no other Ready, uncordoned node
    whose taints any pod that would move tolerates; with nothing to move, no other such node has
    only taints this node has too. Node selection is not counted: a VM pinned to the node is a
    placement blocker of its own, not a reason to call the whole node the last one."""
    if not plan.checks_last_node or not nodes_mod.is_ready(node) or nodes_mod.is_cordoned(node):
        return
    name = plan.node
    others = _other_schedulable_nodes(snapshot, name)
    movers = [p for p in plan.evict if _moves(p, plan)]
    if movers:
        if _some_node_tolerated(plan, movers, others):
            return
        takes = "has only taints one of its %d pod%s to move tolerates" % (len(movers), "" if len(movers) == 1 else "s")
    else:
        if _some_node_no_more_tainted(node, others):
            return
        takes = "has no taint this node lacks"
    plan.blockers.append(Blocker(SAFETY, (
        "Node %s is the last schedulable node for its workloads: no other node that is Ready and uncordoned %s, so "
        "they would have nowhere to go; set allow_last_schedulable_node=true to proceed anyway." % (name, takes))))


def _other_schedulable_nodes(snapshot, name):
    """The Ready, uncordoned nodes other than ``name``."""
    return [n for other, n in snapshot.nodes.items()
            if other != name and nodes_mod.is_ready(n) and not nodes_mod.is_cordoned(n)]


def _vm_by_pod(plan):
    """The plan's VMs by the id of their launcher pod."""
    return dict((id(vm["_pod"]), vm) for vm in plan.vms if vm["_pod"] is not None)


def _some_node_tolerated(plan, movers, others):
    """Whether one of ``others`` has only taints that the next pod of one of ``movers`` tolerates."""
    vm_by_pod = _vm_by_pod(plan)
    tolerations = {}
    for pod in movers:
        spec = _next_pod_spec(pod, vm_by_pod.get(id(pod)))
        tolerations.setdefault(repr(spec.get("tolerations")), spec.get("tolerations"))
    return any(not untolerated_taints(n, tol) for tol in tolerations.values() for n in others)


def _some_node_no_more_tainted(node, others):
    """Whether one of ``others`` has only blocking taints that ``node`` has too."""
    own = set(format_taint(t) for t in nodes_mod.blocking_taints(node))
    return any(set(format_taint(t) for t in nodes_mod.blocking_taints(n)) <= own for n in others)


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
    movers.sort(key=lambda p: (-_requests(p)["memory"], object_name(p)))
    vm_by_pod = _vm_by_pod(plan)
    room_short = []
    preferred_first = {}  # id of an eligible_nodes list -> the same nodes, those in ``prefer`` first
    for pod in movers:
        need = _requests(pod)
        vm = vm_by_pod.get(id(pod))
        spec = _next_pod_spec(pod, vm)
        eligible = _eligible_in_order(snapshot, spec, prefer, preferred_first)
        neighbours = _neighbours(snapshot, plan, pod, spec, vm is not None and vm["outcome"] == fates.MIGRATE)
        target, fits_alone, ruled_out = _first_fit(eligible, name, free, used, need, neighbours)
        if target is not None:
            _place(plan, used, pod, vm, spec, need, target)
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
            plan.pending.append((object_name(pod), ruled_out or "no other node accepts it (%s)" % _why_nowhere(
                snapshot, spec, need, name)))
    if room_short:
        _no_room_for_all(plan, name, room_short)


def _eligible_in_order(snapshot, spec, prefer, preferred_first):
    """The nodes the spec may go to, those in ``prefer`` first; ``preferred_first`` caches the
    reordered lists by the id of the eligible_nodes list they come from."""
    eligible = snapshot.eligible_nodes(spec)
    if prefer:
        key = id(eligible)
        if key not in preferred_first:
            preferred_first[key] = [n for n in eligible if n in prefer] + [n for n in eligible if n not in prefer]
        eligible = preferred_first[key]
    return eligible


def _first_fit(eligible, name, free, used, need, neighbours):
    """The first of ``eligible`` (not ``name``) with room for ``need`` next to what this plan
    already put there: (target or None, whether some node had room on its own, the first node its
    neighbours ruled out with why)."""
    fits_alone, ruled_out = False, None
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
            return candidate, fits_alone, ruled_out
    return None, fits_alone, ruled_out


def _place(plan, used, pod, vm, spec, need, target):
    """Record that the pod (and its VM) goes to ``target`` and takes ``need`` of its room."""
    bucket = used.setdefault(target, {})
    for resource, amount in need.items():
        bucket[resource] = bucket.get(resource, 0.0) + amount
    plan.targets[object_name(pod)] = target
    plan.placed.append((pod, target, spec))
    if required_pod_terms(spec, "podAntiAffinity"):
        plan.placed_holders.append((target, dict(pod, spec=spec)))
    if vm is not None:
        vm["target"] = target


def _no_room_for_all(plan, name, room_short):
    """The capacity blocker for the pods that would each fit somewhere but not all at once."""
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
                             ", ".join(object_name(p) for p in room_short[:3])))))
