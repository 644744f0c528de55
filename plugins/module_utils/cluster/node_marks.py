# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The marks of maintenance on a node, as the NodeMaintenance operator sets them (cordon, the
drain taint, the remediation exclusion label), a rolling run's pending taint, and the record of
what this collection changed, so that leaving maintenance undoes exactly that.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import annotation_json
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.nodes import (
    get_node,
    has_taint,
    labels_of,
    node_name,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    NODE_STATE_ANNOTATION,
    PENDING_TAINT_KEY,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import now_seconds

DRAIN_TAINT = {"key": "medik8s.io/drain", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
MAINTENANCE_TAINTS = (UNSCHEDULABLE_TAINT, DRAIN_TAINT)
# A rolling run's mark on the nodes still to do (pending_nodes.py): a preference, which a node
# entering maintenance no longer needs (it is cordoned, and done when it leaves).
PENDING_TAINT = {"key": PENDING_TAINT_KEY, "effect": "PreferNoSchedule"}
EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"


def is_pending_taint(taint):
    return taint.get("key") == PENDING_TAINT["key"] and taint.get("effect") == PENDING_TAINT["effect"]


def pending_taint_changes(node, mark):
    """The merge patch that leaves exactly a rolling run's pending taint with ``mark`` on the node
    (``mark`` None: none), or None when the node already has exactly that."""
    taints = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if not is_pending_taint(t)]
    wanted = kept + ([dict(PENDING_TAINT, value=mark)] if mark else [])
    if [t for t in taints if is_pending_taint(t)] == [t for t in wanted if is_pending_taint(t)]:
        return None
    return {"spec": {"taints": wanted or None}}


def maintenance_record(node):
    """What this collection recorded on the node when it entered maintenance (or None)."""
    return annotation_json(node, NODE_STATE_ANNOTATION, dict)


def maintenance_state(node, cr_phase=None):
    """(in maintenance, phase) of a node: by a NodeMaintenance CR (``cr_phase``: its phase, None when no
    CR names the node), else this collection's record (phase Running when it records none), else the
    drain taint (phase Running)."""
    record = maintenance_record(node)
    record_phase = (record.get("phase") or "Running") if record is not None else None
    drain_tainted = has_taint(node, DRAIN_TAINT)
    return (cr_phase is not None or record is not None or drain_tainted,
            cr_phase or record_phase or ("Running" if drain_tainted else None))


def marked_for_maintenance(node):
    """The node carries the drain taint of a NodeMaintenance or this collection's record."""
    return maintenance_state(node)[0]


def maintenance_view(node):
    """The node fields maintenance changes, as shown in diff mode."""
    spec = node.get("spec") or {}
    return {
        "unschedulable": bool(spec.get("unschedulable")),
        "taints": copy.deepcopy(spec.get("taints") or []),
        "labels": {EXCLUDE_LABEL: labels_of(node).get(EXCLUDE_LABEL)},
    }


def enter_changes(node, reason=None, method=None):
    """(patch or None, after view, record) that put the node into maintenance as NMO does.

    The record lists what was actually added, so that leaving maintenance removes that and
    nothing else; an existing record (an earlier, interrupted run) is kept. ``method``: the way
    in to record (default: the existing record's, else "drain").
    """
    existing = maintenance_record(node)
    added = set((existing or {}).get("added") or [])
    patch, marked = _marks_patch(node, added)
    record = dict(existing or {"method": "drain", "started": now_seconds()})
    if method is not None:
        record["method"] = method
    if marked or existing is None:
        record["phase"] = "Running"  # a finished drain keeps its phase until the node changes again
    if reason is not None:
        record["reason"] = reason
    record["added"] = sorted(added)
    if patch or existing != record:
        patch.setdefault("metadata", {}).setdefault("annotations", {})[NODE_STATE_ANNOTATION] = json.dumps(
            record, sort_keys=True)
    after = copy.deepcopy(node)
    _apply_merge(after, patch)
    return (patch or None), maintenance_view(after), record


def _marks_patch(node, added):
    """(merge patch, whether a mark of maintenance was added): the cordon, the maintenance taints
    (a rolling run's pending taint goes) and the remediation exclusion label the node lacks.
    ``added`` is extended with what the patch adds."""
    spec = node.get("spec") or {}
    taints = [copy.deepcopy(t) for t in spec.get("taints") or [] if not is_pending_taint(t)]
    pending_off = len(taints) != len(spec.get("taints") or [])
    patch = {}
    if not spec.get("unschedulable"):
        patch["spec"] = {"unschedulable": True}
        added.add("unschedulable")
    new_taints = []
    for taint in MAINTENANCE_TAINTS:
        if not has_taint(node, taint):
            new_taints.append(dict(taint, timeAdded=now_seconds()))
            added.add("taint:" + taint["key"])
    if new_taints or pending_off:
        patch.setdefault("spec", {})["taints"] = (taints + new_taints) or None
    if labels_of(node).get(EXCLUDE_LABEL) != "true":
        patch.setdefault("metadata", {})["labels"] = {EXCLUDE_LABEL: "true"}
        added.add("label")
    marked = bool(new_taints) or "unschedulable" in patch.get("spec", {}) or "labels" in patch.get("metadata", {})
    return patch, marked


def leave_changes(node):
    """(patch or None, after view, kept_cordon) that undo this collection's marks.

    Taints and the label are removed only when this collection recorded adding them. The
    cordon is lifted when this collection set it, or when there is no record at all (a node
    cordoned by hand is "in maintenance" for the user asking to end it); a node that was
    already cordoned before this collection's maintenance began stays cordoned
    (``kept_cordon`` is then True).
    """
    record = maintenance_record(node)
    added = set((record or {}).get("added") or [])
    spec = node.get("spec") or {}
    patch = {}
    uncordon = bool(spec.get("unschedulable")) and (record is None or "unschedulable" in added)
    kept_cordon = bool(spec.get("unschedulable")) and not uncordon
    if uncordon:
        patch["spec"] = {"unschedulable": None}
    ours = [DRAIN_TAINT["key"]] if "taint:" + DRAIN_TAINT["key"] in added else []
    if uncordon:
        # The node controller adds this taint for every cordon; it goes with the cordon.
        ours.append(UNSCHEDULABLE_TAINT["key"])
    taints = spec.get("taints") or []
    kept = [t for t in taints if not (t.get("key") in ours and t.get("effect") == "NoSchedule")]
    if len(kept) != len(taints):
        patch.setdefault("spec", {})["taints"] = kept or None
    if "label" in added and EXCLUDE_LABEL in labels_of(node):
        patch.setdefault("metadata", {})["labels"] = {EXCLUDE_LABEL: None}
    if record is not None:
        patch.setdefault("metadata", {}).setdefault("annotations", {})[NODE_STATE_ANNOTATION] = None
    after = copy.deepcopy(node)
    _apply_merge(after, patch)
    return (patch or None), maintenance_view(after), kept_cordon


def _apply_merge(target, patch):
    for key, value in (patch or {}).items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _apply_merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def update_node(client, name, compute, node=None):
    """Apply ``compute(node) -> (patch or None, ...)`` with a resourceVersion precondition.

    Taints are a list, which a merge patch replaces whole: the client's guarded update sends
    the resourceVersion read, so a concurrent change (the node controller adding its own
    taint) fails the write, and the change is then recomputed from a fresh copy. Returns
    (node after, compute's result).
    """
    if node is None:
        node = get_node(client, name)

    def decide(current):
        result = compute(current)
        return result[0], result

    result, after = client.update_guarded("Node", name, decide, current=node, details={"node": name})
    return after, result


def set_record_phase(client, node, phase, last_error=None):
    """Record the outcome of the drain on the node (read by node_maintenance_info)."""
    record = maintenance_record(node)
    if record is None or (record.get("phase") == phase and record.get("last_error") == last_error):
        return node
    record = dict(record, phase=phase, updated=now_seconds())
    if last_error:
        record["last_error"] = last_error[:1000]
    else:
        record.pop("last_error", None)
    return client.patch("Node", node_name(node), {"metadata": {"annotations": {
        NODE_STATE_ANNOTATION: json.dumps(record, sort_keys=True)}}})
