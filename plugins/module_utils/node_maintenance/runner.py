# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_maintenance and node_maintenance_info: put a node into maintenance and back.

Entering: read the cluster once and compute the plan; refuse (nothing changed) when the
plan has blockers the non_migratable policy does not handle; then either drain directly
(cordon, taint and label as the node-maintenance operator does, shut down exactly the
blocking VMs when asked, run the drain engine) or create a NodeMaintenance CR and follow
its status - with method auto, after evacuating the VMs as the drain does. All report in
the same shape. Leaving: undo what this collection added.

This file chooses and runs; the two ways in are in enter.py, the way out in leave.py, and
the shape of the result in result.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import cr as nm_cr
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import story
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MaintenanceError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import (
    parse_label_selector,
    requirements_match,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.enter import (
    enter_cr,
    enter_cr_after_evacuation,
    enter_drain,
    enter_without_drain,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.leave import leave
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import (
    base_result,
    blocker_text,
    pause_remediation,
    pauses_predicted,
    restored_on_failure,
    shut_down_entry,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.plan import (
    PlanOptions,
    compute_plan,
    node_summary,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress, percent
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import run_owner
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.blockers import blocked_message
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.snapshot import Snapshot
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline


# The drain of the node-maintenance operator cannot be tuned: the NodeMaintenance spec holds only
# nodeName and reason (api/v1beta1/nodemaintenance_types.go), and the k8s.io/kubectl drain.Helper
# is configured once for every node in initDrainer (controllers/nodemaintenance_controller.go of
# medik8s/node-maintenance-operator v0.17.0, the release the lab runs): Force = true,
# DeleteEmptyDirData = true, IgnoreAllDaemonSets = true, GracePeriodSeconds = -1 and
# Timeout = DrainerTimeout (30 s); PodSelector stays "" (every pod) and DisableEviction false
# (the Eviction API). A failed RunNodeDrain is requeued after waitDurationOnDrainError (5 s),
# so a VM whose live migrations keep failing is retried until the NodeMaintenance is deleted.
# The legacy nodemaintenance.kubevirt.io group is served by this operator's predecessor
# (kubevirt/node-maintenance-operator, per upstream's README.md) and gets the same rule.
# Each drain option of this collection, with the value the operator uses and what it does.
OPERATOR_DRAIN = (
    ("ignore_daemonsets", True, "leaves DaemonSet pods on the node"),
    ("delete_emptydir_data", True, "evicts pods with emptyDir data"),
    ("force", True, "deletes pods no controller manages"),
    ("pod_selector", None, "evicts every pod"),
    ("grace_period", -1, "gives each pod its own terminationGracePeriodSeconds"),
    ("disable_eviction", False, "always uses the Eviction API"),
)
# non_migratable=shutdown before the drain is done by this collection with either method (it
# shuts down the VMs of the plan that cannot migrate), but shutting down a VM whose live
# migrations keep failing during the drain is not: the operator retries it, as with
# non_migratable=wait (and fail, whose task then fails at wait_timeout, the node staying in
# maintenance).
OPERATOR_RETRIES_FAILED_MIGRATIONS = "retries a VM whose live migrations keep failing instead of shutting it down"


def operator_ignored(params):
    """[(option=value, what the operator does instead)] for each option set to a value that the
    node-maintenance operator's drain does not use; defaults never count."""
    ignored = []
    for option, operator_value, instead in OPERATOR_DRAIN:
        value = params.get(option)
        if option == "pod_selector":
            value = value or None
        elif value is None:
            continue
        if value != operator_value:
            if isinstance(value, bool):
                shown = str(value).lower()
            elif isinstance(value, str):
                shown = "'%s'" % value
            else:
                shown = value
            ignored.append(("%s=%s" % (option, shown), instead))
    if params.get("non_migratable") == "shutdown":
        ignored.append(("non_migratable=shutdown", OPERATOR_RETRIES_FAILED_MIGRATIONS))
    if params.get("drain") is False:
        ignored.append(("drain=false", "always drains the node"))
    return ignored


def _listed(ignored):
    names = [option for option, _instead in ignored]
    return names[0] if len(names) == 1 else "%s and %s" % (", ".join(names[:-1]), names[-1])


def _instead(ignored):
    return "(it %s)" % "; it ".join(instead for _option, instead in ignored)


def _ignored_text(ignored):
    return "%s %s" % (_listed(ignored), _instead(ignored))


def choose_method(requested, name, cr_kind, ours_cr, node, ignored=()):
    """(method, reason, warning): the method to use, one sentence saying why, and a warning
    (or None) when options the node-maintenance operator ignores are kept unused."""
    record = node_marks.maintenance_record(node)
    # A record naming method cr: method auto began the maintenance with the evacuation of the VMs, and created
    # the NodeMaintenance after it, or is still to (enter.enter_cr_after_evacuation).
    cr_record = record is not None and record.get("method") == "cr"
    if requested == "cr":
        if cr_kind is None:
            raise InvalidInputError("method=cr needs the NodeMaintenance CRD (nodemaintenance.medik8s.io or "
                                    "nodemaintenance.kubevirt.io), which this cluster does not serve.", node=name)
        if record is not None and not cr_record:
            raise InvalidInputError("Node %s is in maintenance through a drain by this collection; end it with "
                                    "state=absent before using method=cr." % name, node=name)
        if ignored:
            one = len(ignored) == 1
            raise InvalidInputError(
                "Node %s cannot enter maintenance with method=cr and %s: the NodeMaintenance operator ignores %s %s; "
                "use method=drain or auto, or leave %s." % (
                    name, _listed(ignored), "that option" if one else "these options", _instead(ignored),
                    "it at its default" if one else "them at their defaults"), node=name, method="cr")
        return "cr", "method cr as requested.", None
    if requested == "drain":
        if ours_cr is not None:
            raise InvalidInputError("Node %s is in maintenance through NodeMaintenance %s; end it with state=absent "
                                    "before using method=drain." % (name, ours_cr[1]["metadata"]["name"]), node=name)
        return "drain", "method drain as requested.", None
    if ours_cr is not None:
        cr_name = ours_cr[1]["metadata"]["name"]
        if ignored:
            reason = ("method auto kept cr: node %s is already in maintenance through NodeMaintenance %s, and the "
                      "NodeMaintenance operator ignores %s; end the maintenance with state=absent to drain with "
                      "these options." % (name, cr_name, _ignored_text(ignored)))
            return "cr", reason, reason
        return "cr", ("method auto kept cr: node %s is already in maintenance through NodeMaintenance %s."
                      % (name, cr_name)), None
    if record is not None and not cr_record:
        return "drain", ("method auto kept drain: node %s is already in maintenance through a drain by this "
                         "collection." % name), None
    # A new maintenance, or one whose NodeMaintenance is still to be created: chosen afresh.
    if cr_kind is None:
        return "drain", ("method auto chose drain: the cluster does not serve the NodeMaintenance API "
                         "(no node-maintenance operator)."), None
    group = nm_cr.API_VERSIONS[cr_kind].split("/")[0]
    if ignored:
        reason = "method auto chose drain: the NodeMaintenance operator ignores %s." % _ignored_text(ignored)
        return "drain", reason, reason
    if cr_record:
        return "cr", ("method auto kept cr: node %s is already in maintenance by this collection, its "
                      "NodeMaintenance not created yet." % name), None
    return "cr", ("method auto chose cr: the NodeMaintenance operator is installed (%s is served) and no option "
                  "it ignores is set." % group), None


# Added to method_reason when method auto evacuates the VMs before it creates the NodeMaintenance.
PACED_NOTE = ("The VMs leave first, paced to KubeVirt's free migration lanes as method drain does; then the "
              "NodeMaintenance drains the rest and holds the node.")


def paced_evacuation(requested, method, ours_cr, params):
    """True when method auto evacuates the node's VMs itself before it creates the NodeMaintenance: the CR is
    chosen, none exists yet, and the module waits (without wait it leaves the whole drain to the operator)."""
    return requested == "auto" and method == "cr" and ours_cr is None and params["wait"]


def run(module):
    if module.params.get("state") == "absent":
        return leave(module)
    return enter(module)


# -- entering maintenance ----------------------------------------------------------------------

def enter(module):
    params = module.params
    deadline = Deadline(params["wait_timeout"])
    name = params["name"]
    policy = params["non_migratable"]
    options = PlanOptions.from_params(params)
    owner = run_owner(params, name)
    client = module.client
    snapshot = Snapshot.load(client, [name])
    node = snapshot.node(name)
    # After the reads (an identity that may not read the node hears about the node first), before any write.
    refuse_while_held(client, params.get("lock"), "Node %s was not put into maintenance" % name, node=name)
    cr_kind = nm_cr.served_kind(snapshot)
    ours_cr, _foreign = nm_cr.ours_and_foreign(snapshot, name)
    method, method_reason, warning = choose_method(params["method"], name, cr_kind, ours_cr, node,
                                                   operator_ignored(params))
    if warning:
        module.warn(warning)
    paced = paced_evacuation(params["method"], method, ours_cr, params)
    if paced:
        method_reason = "%s %s" % (method_reason, PACED_NOTE)
    plan = compute_plan(snapshot, name, options)
    result = base_result(name, method)
    result["method_reason"] = method_reason
    result["total_pods"] = plan.total_pods
    result["eviction_pods"] = len(plan.evict)
    result["pending_pods"] = [object_name(p) for p in plan.evict]
    result["drain_progress"] = percent(len(plan.evict), len(plan.evict))
    fatal = plan.fatal_blockers(policy)
    if fatal:
        raise BlockedError(blocked_message(name, fatal, policy), blockers=[b.text for b in fatal],
                           plan=plan.as_dict(), node=name, method=method, method_reason=method_reason)
    drain = params.get("drain", True)
    shutdown = [vm for vm in plan.vms if vm["_fate"].shut_down_by_us] if drain else []
    pauses = remediation.to_pause(client, node) if params["pause_remediation"] else []
    if module.check_mode:
        result["remediation_paused"] = pauses_predicted(node, pauses)
        return predict(module, result, plan, node, method, ours_cr, shutdown, deadline, pauses)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    node = pause_remediation(client, node, pauses, progress, result)
    with restored_on_failure(module, name, progress, result, "Entering maintenance of"):
        with story.told_on_failure(module.events, node, story.FAILED, "Maintenance", lambda: result["changed"]):
            timed_out = _enter(module, result, plan, node, method, drain, shutdown, options, deadline, progress,
                               cr_kind, ours_cr, owner, paced)
            result["duration_seconds"] = round(deadline.elapsed(), 1)
            if result["phase"] == "Failed":
                error = WaitTimeoutError if timed_out else MaintenanceError
                raise error(result["last_error"], **result)
    if result["changed"] and drain and result["phase"] == "Succeeded":
        story.succeeded(module.events, node, snapshot, result, params.get("reason"))
    return result


def _enter(module, result, plan, node, method, drain, shutdown, options, deadline, progress, cr_kind, ours_cr, owner,
           paced=False):
    """Enter maintenance the chosen way (``paced``: paced_evacuation); True when it timed out. The node's Event
    tells it began once the cordon or the CR is written."""
    def began():
        story.began(module.events, node, result, len(plan.vms), module.params.get("reason"))

    if not drain:
        timed_out = enter_without_drain(module, result, plan, node, progress)
        if result["changed"]:
            began()
    elif method == "drain":
        timed_out = enter_drain(module, result, plan, node, shutdown, options, deadline, progress, owner=owner,
                                began=began)
    elif paced:
        timed_out = enter_cr_after_evacuation(module, result, plan, node, cr_kind, shutdown, options, deadline,
                                              progress, owner=owner, began=began)
    else:
        timed_out = enter_cr(module, result, plan, cr_kind, ours_cr, shutdown, deadline, progress, owner=owner,
                             began=began)
    return timed_out


def predict(module, result, plan, node, method, ours_cr, shutdown, deadline, pauses=()):
    """Check mode: the same shape, computed from the plan, with nothing written."""
    params = module.params
    result["plan"] = plan.as_dict()
    if not params.get("drain", True):
        patch, after, record = node_marks.enter_changes(node, params.get("reason"))
        result["phase"] = record["phase"]
        result["changed"] = bool(patch or pauses)
        result["vms"]["pending"] = [{"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                     "outcome": vm["outcome"]} for vm in plan.vms]
    else:
        result["phase"] = "Succeeded" if params["wait"] else "Running"
        if params["wait"]:
            result["pending_pods"] = []
            result["drain_progress"] = 100
        _predict_vms(result["vms"], plan)
        if method == "drain":
            patch, after, _record = node_marks.enter_changes(node, params.get("reason"))
            result["changed"] = bool(patch or plan.evict or shutdown or pauses)
        else:
            result["changed"] = _cr_changes(plan, ours_cr, shutdown, pauses)
            after = _nmo_after_view(node)
    if module.diff_mode:
        result["diff"] = {"before": node_marks.maintenance_view(node), "after": after}
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    return result


def _predict_vms(vms, plan):
    """What the drain would do to each VM of the plan, in the result's ``vms`` lists."""
    for vm in plan.vms:
        outcome = vm["_fate"].result
        uid = vm["_vmi"]["metadata"].get("uid")
        if outcome == fates.MIGRATE:
            target = plan.targets.get(object_name(vm["_pod"])) if vm["_pod"] is not None else None
            vms["migrated"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                    "target": target})
        elif outcome in fates.SHUT_DOWN_OUTCOMES:
            vms["shut_down"].append(shut_down_entry(vm, plan.node))
        else:
            vms["blocked"].append({"namespace": vm["namespace"], "name": vm["name"],
                                   "reason": blocker_text(plan, uid)})


def _cr_changes(plan, ours_cr, shutdown, pauses):
    """Whether entering maintenance through a NodeMaintenance CR would change anything."""
    cr_phase = ((ours_cr[1].get("status") or {}).get("phase")) if ours_cr else None
    if cr_phase == "Succeeded" and not plan.evict:
        return bool(shutdown) or bool(pauses)
    return ours_cr is None or bool(shutdown) or bool(pauses)


def _nmo_after_view(node):
    """The node as the node-maintenance operator leaves it while in maintenance."""
    _patch, after, _record = node_marks.enter_changes(node)
    return after


# -- node_maintenance_info -----------------------------------------------------------------------

def info(module):
    params = module.params
    client = module.client
    options = PlanOptions.from_params(params)
    if params.get("name"):
        snapshot = Snapshot.load(client, [params["name"]])
        names = [snapshot.node(params["name"])["metadata"]["name"]]
    else:
        requirements = parse_label_selector(params.get("label_selector"), "label_selector")
        snapshot = Snapshot.load(client)
        names = sorted(n for n, node in snapshot.nodes.items()
                       if requirements_match(requirements, nodes_mod.labels_of(node)))
        if not names:
            if params.get("label_selector"):
                raise InvalidInputError("No node matches label_selector '%s'." % params["label_selector"],
                                        label_selector=params["label_selector"])
            raise InvalidInputError("The cluster has no nodes.")
    return {"changed": False, "nodes": [node_summary(snapshot, n, options) for n in names]}
