# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preference of a rolling run: VMs leaving a node go to nodes already done.

The nodes of a run still to maintain carry the taint ``kubevirt-ops.io/maintenance-pending``
with effect PreferNoSchedule and the run's mark as value. KubeVirt creates the target pod of
a live migration (and the launcher pod of a VM started again) as an ordinary pod that the
kube-scheduler places (pkg/virt-controller/services/template.go); the scheduler's
TaintToleration score plugin ranks nodes with fewer PreferNoSchedule taints the pod does not
tolerate higher (kubernetes pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go,
Score and NormalizeScore), so a node already done (or not part of the run) wins over one
still to do, and a pending node still takes a VM when nothing else has room: the taint
prefers, it never blocks. A scheduler profile without score plugins (OpenShift's NoScoring)
ignores it.

Why a taint and not our own VirtualMachineInstanceMigration with ``spec.addedNodeSelector``
(kubevirt.io/api core/v1 types.go, since KubeVirt 1.6): that selector is a hard constraint,
so a VM would stay on its node when the done nodes are full; it only covers migrations we
create ourselves, not VMs restarted by their run strategy; and the first node has no done
node to select. The evacuation controller does step aside for a VMI that already has a
migration (pkg/virt-controller/watch/drain/evacuation/evacuation.go,
filterRunningNonMigratingVMIs), so that route stays open for a later, stricter mode.

``state: present`` puts the taint on exactly the given nodes with the run's mark and takes
it off every other node, also where an earlier run (a mark of its own) left it: a resumed
run cleans up after one that died. ``state: absent`` takes it off every node. Only one run
holds the cluster lock at a time, so no other run's taints are taken away while in use.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.nodes import node_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.node_marks import (
    PENDING_TAINT,
    is_pending_taint,
    pending_taint_changes,
    update_node,
)

PENDING_TAINT_KEY, PENDING_EFFECT = PENDING_TAINT["key"], PENDING_TAINT["effect"]


def marks_of(node):
    """The marks of our taint on the node (normally one, or none)."""
    return [t.get("value") or "" for t in (node.get("spec") or {}).get("taints") or [] if is_pending_taint(t)]


def plan(nodes, wanted, mark):
    """{node name: (marks before, mark after or None)} of the nodes whose taint changes.

    ``nodes``: every Node object; ``wanted``: names that should carry ``mark``.
    """
    changes = {}
    for node in nodes:
        name = node_name(node)
        after = mark if name in wanted else None
        before = marks_of(node)
        if before != ([after] if after else []):
            changes[name] = (before, after)
    return changes


def _check_options(state, mark, wanted):
    if state == "present" and not mark:
        raise InvalidInputError("Option mark is required with state=present: give the run's mark, "
                                "the value of the taint on the nodes still to do.", option="mark")
    if state == "absent" and wanted:
        raise InvalidInputError("Option nodes is not taken with state=absent: the taint goes from every node.",
                                option="nodes")


def _pending_result(state, mark, wanted, changes):
    return {
        "changed": bool(changes),
        "pending": sorted(wanted),
        "added": sorted(name for name, (before, after) in changes.items() if after and not before),
        "removed": sorted(name for name, (before, after) in changes.items() if before and not after),
        "stale": sorted(name for name, (before, _after) in changes.items()
                        if state == "present" and any(m != mark for m in before)),
        "taint": {"key": PENDING_TAINT_KEY, "value": mark if state == "present" else None, "effect": PENDING_EFFECT},
    }


def _pending_diff(changes):
    return {
        "before": {"pending": dict((name, (before or [None])[0]) for name, (before, _a) in sorted(changes.items()))},
        "after": {"pending": dict((name, after) for name, (_b, after) in sorted(changes.items()))},
    }


def set_pending(module):
    params = module.params
    state, mark = params["state"], params.get("mark")
    wanted = list(dict.fromkeys(params.get("nodes") or []))
    _check_options(state, mark, wanted)
    nodes, _rv = module.client.list("Node")
    by_name = dict((node_name(n), n) for n in nodes)
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise InvalidInputError("Node %s does not exist (option nodes)." % ", ".join(missing), option="nodes")
    changes = plan(nodes, set(wanted), mark)
    for name in sorted(changes):
        if module.check_mode:
            continue
        update_node(module.client, name, lambda current: (pending_taint_changes(current, changes[name][1]),),
                    node=by_name[name])
        after = changes[name][1]
        module.events.normal(reference(by_name[name], "Node"), "MaintenancePending" if after else "PendingCleared",
                             "Taint", "VMs leaving other nodes prefer nodes already done: this one is still to do "
                             "(taint %s=%s:%s)" % (PENDING_TAINT_KEY, after, PENDING_EFFECT) if after else
                             "No longer still to do in a rolling run (taint %s removed)" % PENDING_TAINT_KEY)
    result = _pending_result(state, mark, wanted, changes)
    if module.diff_mode:
        result["diff"] = _pending_diff(changes)
    return result
