# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Leaving maintenance (node_maintenance with state=absent): undo what this collection added."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import evacuation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import story
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import cr as nm_cr
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import BlockedError, WaitTimeoutError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import (
    MOVE_BACK_NOTE,
    base_result,
    restore_remediation,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.snapshot import NODE_MAINTENANCE_KINDS, Snapshot
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, wait_for_object


def _ours_cr_to_leave(client, name):
    """Our NodeMaintenance of the node (or None); one created by someone else is refused."""
    snapshot = Snapshot(client)
    for kind in NODE_MAINTENANCE_KINDS:
        if snapshot.served(kind):
            snapshot.maintenances.extend((kind, cr) for cr in client.list(kind)[0])
    ours_cr, foreign = nm_cr.ours_and_foreign(snapshot, name)
    if foreign:
        raise BlockedError("Node %s is held by NodeMaintenance %s, which this collection did not create; delete "
                           "that CR to end its maintenance." % (name, foreign[0][1]["metadata"]["name"]),
                           node=name)
    return ours_cr


def _leave_method_reason(name, ours_cr):
    if ours_cr:
        return "state=absent deletes NodeMaintenance %s, through which node %s is in maintenance." % (
            ours_cr[1]["metadata"]["name"], name)
    return "state=absent removes what a drain by this collection added to node %s (no NodeMaintenance of this " \
        "collection holds it)." % name


def _view_after_cr(after):
    """The node's maintenance view once the operator released it after its NodeMaintenance is deleted."""
    return dict(after, unschedulable=False, labels={node_marks.EXCLUDE_LABEL: None}, taints=[
        t for t in after["taints"] if t.get("key") not in [m["key"] for m in node_marks.MAINTENANCE_TAINTS]])


def _planned_leave(client, name, marked, migrations, pauses, to_start, result):
    """The result of a check run, or of a node with nothing to undo: what leaving would do."""
    result["vms_started_again"] = ["%s/%s" % key for key in sorted(to_start)]
    how = evacuation.CANCEL_ACTION if marked and evacuation.uses_cancel_action(client) else "status"
    result["evacuations_cancelled"] = [{"namespace": v["metadata"].get("namespace"), "name": v["metadata"]["name"],
                                        "node": name, "how": how} for v in marked]
    result["migrations_deleted"] = ["%s/%s" % (m["metadata"].get("namespace"), m["metadata"]["name"])
                                    for m in migrations]
    result["remediation_restored"] = [remediation.entry(kind, check, remediation.how(kind))
                                      for kind, check in pauses]
    result["msg"] = ("Node %s is not in maintenance by this collection. " % name if not result["changed"]
                     else "") + MOVE_BACK_NOTE
    return result


def released_by_operator(node):
    """True once nothing the operator's maintenance put on the node is left.

    The operator (v0.17, controllers/nodemaintenance_controller.go stopNodeMaintenanceImp) removes
    its taints first, then uncordons, then removes the exclude-from-remediation label. While the
    node is still cordoned without the taint, the node lifecycle controller puts
    node.kubernetes.io/unschedulable back (kubernetes pkg/controller/nodelifecycle,
    doNoScheduleTaintingPass) and takes it off only after the uncordon. The scheduler keeps pods
    off a node with that NoSchedule taint, so the node is back in service only when it is gone too.
    """
    return node is not None and not nodes_mod.is_cordoned(node) and \
        not any(nodes_mod.has_taint(node, taint) for taint in node_marks.MAINTENANCE_TAINTS) and \
        nodes_mod.labels_of(node).get(node_marks.EXCLUDE_LABEL) != "true"


# How long a released node must stay released before the module says so, unless the node lifecycle
# controller was seen correcting itself (see _wait_for_release).
RELEASE_QUIET_SECONDS = 2.0


class LifecycleTaintSettled:
    """Given the node's versions in order: True once the node lifecycle controller was seen taking the
    unschedulable taint off the uncordoned node (one version uncordoned with the taint, a later one uncordoned
    without it).

    The operator takes its taints off before it uncordons (stopNodeMaintenanceImp: AddOrRemoveTaint, then
    RunCordonOrUncordon, in every release of medik8s/node-maintenance-operator and of its predecessor), so a
    taint that leaves an uncordoned node is the node lifecycle controller's doing, from a view of the node
    uncordoned. Its passes over one node run one after another (doNodeProcessingPassWorker takes the node from
    a workqueue, which never hands one key to two workers at once), each from a view of the node no older than
    the last one's, so no decision taken from the cordoned node can land after that one.
    """

    def __init__(self):
        self._tainted_uncordoned = False

    def __call__(self, node):
        uncordoned = not nodes_mod.is_cordoned(node)
        tainted = nodes_mod.has_taint(node, node_marks.UNSCHEDULABLE_TAINT)
        settled = self._tainted_uncordoned and uncordoned and not tainted
        self._tainted_uncordoned = uncordoned and tainted
        return settled


def _wait_for_release(client, name, cr, deadline, result):
    """The node once released and, unless the node lifecycle controller was seen correcting its taint
    (LifecycleTaintSettled), still released RELEASE_QUIET_SECONDS later.

    The node lifecycle controller decides from its informer's view of the node and then adds the
    unschedulable taint to whatever node it reads afresh (kubernetes pkg/controller/controller_utils.go
    AddOrUpdateTaintOnNode), so a decision taken while it still saw the node cordoned can land just
    after the operator's uncordon (in the lab about 0.1 s after the operator's last write, most times),
    and is undone only on its next pass: one clean moment is not yet a released node.
    """
    what = "the node-maintenance operator to release node %s" % name
    try:
        return wait_for_object(client, "Node", name, released_by_operator, deadline.remaining(), what,
                               stable_for=RELEASE_QUIET_SECONDS, settles=LifecycleTaintSettled())
    except WaitTimeoutError as exc:
        raise WaitTimeoutError("NodeMaintenance %s was deleted, but node %s still carries its maintenance "
                               "marks (cordon, taints or exclude-from-remediation label) after %ds: is the "
                               "node-maintenance operator running?" % (
                                   cr["metadata"]["name"], name, round(deadline.seconds)),
                               **dict(((k, v) for k, v in result.items() if k != "msg"), changed=True)
                               ) from exc


def _leave_cr(module, name, ours_cr, node, marked, result, progress, in_maintenance, deadline):
    client = module.client
    kind, cr = ours_cr
    require(client, [Permission("delete", "nodemaintenances", group=nm_cr.API_VERSIONS[kind].split("/")[0])],
            "end the maintenance of node %s" % name)
    client.delete(kind, cr["metadata"]["name"])
    if module.params["wait"]:
        node = _wait_for_release(client, name, cr, deadline, result)
    # The operator no longer drains: what its drain left marked for evacuation is cancelled.
    _cancel_evacuations(module, name, marked, result, progress, in_maintenance)
    # Anything this collection recorded itself (an earlier drain) goes too.
    if node_marks.maintenance_record(node) is not None:
        node_marks.update_node(client, name, node_marks.leave_changes)


def _leave_drain(module, name, node, marked, result, progress, in_maintenance):
    client = module.client
    require(client, [Permission("patch", "nodes")], "end the maintenance of node %s" % name)
    # Cancelled before the uncordon, so no VM keeps leaving a node that is back in service.
    _cancel_evacuations(module, name, marked, result, progress, in_maintenance)
    node_marks.update_node(client, name, node_marks.leave_changes, node=None if marked else node)


def leave(module):
    params = module.params
    deadline = Deadline(params["wait_timeout"])
    client = module.client
    name = params["name"]
    node = nodes_mod.get_node(client, name)
    ours_cr = _ours_cr_to_leave(client, name)
    method = "cr" if ours_cr else "drain"
    result = base_result(name, method)
    result["method_reason"] = _leave_method_reason(name, ours_cr)
    result["msg"] = MOVE_BACK_NOTE
    before = node_marks.maintenance_view(node)
    patch, after, kept_cordon = node_marks.leave_changes(node)
    if ours_cr:
        after = _view_after_cr(after)
    # Evacuations are cancelled only on a node in maintenance (ours, or cordoned by hand): on
    # another node they belong to someone else (the descheduler marks VMIs the same way).
    in_maintenance = bool(ours_cr) or node_marks.marked_for_maintenance(node) or nodes_mod.is_cordoned(node)
    marked, migrations = evacuation.pending(client, name) if in_maintenance else ([], [])
    pauses = remediation.to_restore(client, node)
    # RerunOnFailure VMs an earlier drain of the node shut down and a run stopped before it started them again
    # (such a run leaves the node in maintenance: a node that is not has none).
    to_start = restart_elsewhere.marked_for_start(client, name, tidy=not module.check_mode) if in_maintenance else {}
    result["changed"] = bool(ours_cr or patch or marked or migrations or pauses or to_start)
    if result["changed"]:
        # Uncordoning a node that another run drained and may still work on would hand it back too early.
        refuse_while_held(client, params.get("lock"), "Node %s was left in maintenance" % name, node=name)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": after}
    if kept_cordon:
        module.warn("Node %s was already cordoned before this collection's maintenance began, so it stays cordoned."
                    % name)
    if module.check_mode or not result["changed"]:
        return _planned_leave(client, name, marked, migrations, pauses, to_start, result)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    perms = evacuation.permissions(client, marked, migrations) + remediation.permissions(pauses) + \
        restart_elsewhere.start_permissions(to_start)
    if perms:
        require(client, perms, "end the maintenance of node %s" % name)
    if ours_cr:
        _leave_cr(module, name, ours_cr, node, marked, result, progress, in_maintenance, deadline)
    else:
        _leave_drain(module, name, node, marked, result, progress, in_maintenance)
    result["vms_started_again"] = restart_elsewhere.start_marked(client, to_start, deadline, progress)
    restore_remediation(client, name, progress, result)
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    result["msg"] = "Node %s left maintenance. %s" % (name, MOVE_BACK_NOTE)
    progress.line("left maintenance")
    story.removed(module.events, node, result)
    return result


def _cancel_evacuations(module, name, marked, result, progress, in_maintenance):
    if not in_maintenance:
        return
    cancelled, deleted = evacuation.cancel(module.client, name, marked, warn=module.warn)
    result["evacuations_cancelled"] = cancelled
    result["migrations_deleted"] = deleted
    if cancelled or deleted:
        progress.line("cancelled %d evacuation%s, deleted %d pending migration%s" % (
            len(cancelled), "" if len(cancelled) == 1 else "s", len(deleted), "" if len(deleted) == 1 else "s"))
