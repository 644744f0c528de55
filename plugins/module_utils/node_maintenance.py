# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_maintenance and node_maintenance_info: put a node into maintenance and back.

Entering: read the cluster once and compute the plan; refuse (nothing changed) when the
plan has blockers the non_migratable policy does not handle; then either drain directly
(cordon, taint and label as the node-maintenance operator does, shut down exactly the
blocking VMs when asked, run the drain engine) or create a NodeMaintenance CR and follow
its status. Both report in the same shape. Leaving: undo what this collection added.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import evacuation, fates, kubevirt, restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import nm_cr, remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import NOT_READY_GRACE, Drainer
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    BlockedError,
    InvalidInputError,
    MaintenanceError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.explain import explain_pending
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.plan import (
    PlanOptions,
    compute_plan,
    node_summary,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.pods import pod_key, pods_permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.progress import Progress, percent
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.scheduling import (
    parse_label_selector,
    requirements_match,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.snapshot import NODE_MAINTENANCE_KINDS, Snapshot
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.waiter import (
    Deadline,
    Informer,
    wait_for_object,
    wait_until,
)

MOVE_BACK_NOTE = "VMs that left the node during maintenance do not move back by themselves."


def empty_vms():
    return {"migrated": [], "shut_down": [], "blocked": [], "pending": []}


def base_result(name, method):
    return {
        "changed": False,
        "node": name,
        "method": method,
        "method_reason": None,
        "phase": None,
        "total_pods": 0,
        "eviction_pods": 0,
        "pending_pods": [],
        "drain_progress": 100,
        "vms": empty_vms(),
        "duration_seconds": 0.0,
        "last_error": None,
        "remediation_paused": [],
        "remediation_restored": [],
        "evacuations_cancelled": [],
        "migrations_deleted": [],
    }


def blocked_message(name, blockers, policy, task="enter maintenance"):
    texts = [b.text.rstrip(".") for b in blockers]
    if len(texts) == 1:
        return "Node %s cannot %s (non_migratable=%s): %s." % (name, task, policy, texts[0])
    return "Node %s cannot %s (non_migratable=%s), %d blockers: %s." % (
        name, task, policy, len(texts), "; ".join("(%d) %s" % (i + 1, t) for i, t in enumerate(texts)))


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
    record = nodes_mod.maintenance_record(node)
    if requested == "cr":
        if cr_kind is None:
            raise InvalidInputError("method=cr needs the NodeMaintenance CRD (nodemaintenance.medik8s.io or "
                                    "nodemaintenance.kubevirt.io), which this cluster does not serve.", node=name)
        if record is not None:
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
    if record is not None:
        return "drain", ("method auto kept drain: node %s is already in maintenance through a drain by this "
                         "collection." % name), None
    if cr_kind is None:
        return "drain", ("method auto chose drain: the cluster does not serve the NodeMaintenance API "
                         "(no node-maintenance operator)."), None
    group = nm_cr.API_VERSIONS[cr_kind].split("/")[0]
    if ignored:
        reason = "method auto chose drain: the NodeMaintenance operator ignores %s." % _ignored_text(ignored)
        return "drain", reason, reason
    return "cr", ("method auto chose cr: the NodeMaintenance operator is installed (%s is served) and no option "
                  "it ignores is set." % group), None


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
    plan = compute_plan(snapshot, name, options)
    result = base_result(name, method)
    result["method_reason"] = method_reason
    result["total_pods"] = plan.total_pods
    result["eviction_pods"] = len(plan.evict)
    result["pending_pods"] = [pod_key(p) for p in plan.evict]
    result["drain_progress"] = percent(len(plan.evict), len(plan.evict))
    fatal = plan.fatal_blockers(policy)
    if fatal:
        raise BlockedError(blocked_message(name, fatal, policy), blockers=[b.text for b in fatal],
                           plan=plan.as_dict(), node=name, method=method, method_reason=method_reason)
    shutdown = [vm for vm in plan.vms if vm["_fate"].shut_down_by_us]
    pauses = remediation.to_pause(client, node) if params["pause_remediation"] else []
    if module.check_mode:
        result["remediation_paused"] = [remediation.entry(kind, check, remediation.how(kind)) for kind, check in pauses] \
            + remediation.label_entry(node)
        return predict(module, result, plan, node, method, ours_cr, shutdown, deadline, pauses)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    if pauses:
        require(client, [Permission("patch", "nodes")] + remediation.permissions(pauses),
                "pause the remediation of node %s" % name)
    label = remediation.label_entry(node)
    node, paused = remediation.pause(client, node, pauses)
    result["remediation_paused"] = paused + label
    if paused:
        result["changed"] = True
        progress.line("paused remediation: %s" % ", ".join(_describe_check(e) for e in paused))
    try:
        if method == "drain":
            timed_out = enter_drain(module, result, plan, node, shutdown, options, deadline, progress)
        else:
            timed_out = enter_cr(module, result, plan, cr_kind, ours_cr, shutdown, deadline, progress)
    except Exception:
        if params["pause_remediation"]:
            try:
                _restore_remediation(client, name, progress, result)
            except MaintenanceError as exc:
                module.warn("Entering maintenance of node %s failed, and restoring the remediation paused for it "
                            "failed too (state=absent restores it): %s" % (name, exc.msg))
        raise  # the failure of the drain, not of the restore
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    if result["phase"] == "Failed":
        if params["pause_remediation"]:
            _restore_remediation(client, name, progress, result)
        error = WaitTimeoutError if timed_out else MaintenanceError
        raise error(result["last_error"], **result)
    return result


def _describe_check(item):
    where = "%s/%s" % (item["namespace"], item["name"]) if item.get("namespace") else item["name"]
    return "%s %s" % (item["kind"], where)


def _restore_remediation(client, name, progress, result=None):
    """Undo this collection's remediation pauses for node ``name`` (failure or end of maintenance)."""
    _node, restored = remediation.restore(client, nodes_mod.get_node(client, name))
    if restored:
        progress.line("restored remediation: %s" % ", ".join(_describe_check(e) for e in restored))
    if result is not None:
        result["remediation_restored"] = restored
    return restored


def predict(module, result, plan, node, method, ours_cr, shutdown, deadline, pauses=()):
    """Check mode: the same shape, computed from the plan, with nothing written."""
    params = module.params
    result["plan"] = plan.as_dict()
    result["phase"] = "Succeeded" if params["wait"] else "Running"
    if params["wait"]:
        result["pending_pods"] = []
        result["drain_progress"] = 100
    vms = result["vms"]
    for vm in plan.vms:
        outcome = vm["_fate"].result
        uid = vm["_vmi"]["metadata"].get("uid")
        if outcome == fates.MIGRATE:
            target = plan.targets.get(pod_key(vm["_pod"])) if vm["_pod"] is not None else None
            vms["migrated"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                    "target": target})
        elif outcome in fates.SHUT_DOWN_OUTCOMES:
            vms["shut_down"].append(_shut_down_entry(vm, plan.node))
        else:
            vms["blocked"].append({"namespace": vm["namespace"], "name": vm["name"],
                                   "reason": _blocker_text(plan, uid)})
    if method == "drain":
        patch, after, _record = nodes_mod.enter_changes(node, params.get("reason"))
        result["changed"] = bool(patch or plan.evict or shutdown or pauses)
        diff_after = after
    else:
        cr_phase = ((ours_cr[1].get("status") or {}).get("phase")) if ours_cr else None
        result["changed"] = ours_cr is None or bool(shutdown) or bool(pauses)
        if cr_phase == "Succeeded" and not plan.evict:
            result["changed"] = bool(shutdown) or bool(pauses)
        diff_after = _nmo_after_view(node)
    if module.diff_mode:
        result["diff"] = {"before": nodes_mod.maintenance_view(node), "after": diff_after}
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    return result


def _nmo_after_view(node):
    """The node as the node-maintenance operator leaves it while in maintenance."""
    _patch, after, _record = nodes_mod.enter_changes(node)
    return after


def _blocker_text(plan, uid):
    for blocker in plan.blockers:
        if blocker.vmi_uid == uid:
            return blocker.text
    return None


def _shut_down_entry(vm, source, restarted_on=None):
    outcome, restarted_by = vm["_fate"].after_shutdown
    entry = {"namespace": vm["namespace"], "name": vm["name"], "source": source, "run_strategy": vm["run_strategy"],
             "outcome": outcome}
    if restarted_by:
        entry["restart_by"] = restarted_by
    if restarted_on is not None:
        entry["restarted_on"] = restarted_on
    return entry


def _permissions_for_drain(plan, options, shutdown):
    namespaces = sorted(set(p["metadata"]["namespace"] for p in plan.evict))
    perms = [Permission("patch", "nodes")]
    if namespaces:
        perms.append(pods_permission(namespaces, options.drain.disable_eviction))
    perms.extend(restart_elsewhere.permissions(shutdown, plan.vms))
    return perms


def _vm_list_line(what, vms):
    """'shut down 2 VMs that ...: ns/a, ns/b' for the progress log; ``vms`` are (namespace, name) pairs."""
    return "shut down %d VM%s %s: %s" % (
        len(vms), "" if len(vms) == 1 else "s", what, ", ".join("%s/%s" % vm for vm in vms))


def _drain_phase(client, name, outcome, drainer, deadline, explanations, result):
    """The phase and last error of the drain's outcome; explains the pods a timed-out drain left."""
    if outcome.refused:
        result["phase"] = "Failed"
        result["last_error"] = "Node %s has pods the drain options do not allow to evict: %s." % (
            name, "; ".join("%s %s" % item for item in outcome.refused))
    elif outcome.fatal is not None:
        result["phase"] = "Failed"
        result["last_error"] = getattr(outcome.fatal, "msg", str(outcome.fatal))
    elif outcome.timed_out:
        result["phase"] = "Failed"
        pending = outcome.pending
        explanations.update(zip([t.key for t in pending], explain_pending(
            client, name, [t.pod for t in pending], drainer.pdb_items(),
            reasons=dict((t.key, t.reason) for t in pending if t.reason))))
        result["last_error"] = "Timed out after %ds draining node %s: %d pod%s left: %s." % (
            round(deadline.seconds), name, len(pending), "" if len(pending) == 1 else "s",
            "; ".join(explanations[t.key] for t in pending))
    else:
        result["phase"] = "Succeeded" if not outcome.pending else "Running"


def enter_drain(module, result, plan, node, shutdown, options, deadline, progress):
    params = module.params
    client = module.client
    name = plan.node
    require(client, _permissions_for_drain(plan, options, shutdown), "drain node %s" % name)
    before = nodes_mod.maintenance_view(node)
    node_after, (patch, after, _record) = nodes_mod.update_node(
        client, name, lambda current: nodes_mod.enter_changes(current, params.get("reason")), node=node)
    result["changed"] = result["changed"] or patch is not None
    if patch is not None:
        progress.line("phase=Running cordoned, tainted %s:NoSchedule" % nodes_mod.DRAIN_TAINT["key"])
    wait_only = restart_elsewhere.shut_down(client, shutdown)
    if shutdown:
        result["changed"] = True
        progress.line(_vm_list_line("that cannot migrate", [(vm["namespace"], vm["name"]) for vm in shutdown]))
    drainer = Drainer(client, name, options.drain, deadline, progress=progress, wait_only=wait_only,
                      watch_budgets=plan.budgets_matter(), non_migratable=params["non_migratable"],
                      not_ready_grace=NOT_READY_GRACE)
    outcome = drainer.run(wait=params["wait"])
    if outcome.evicted:
        result["changed"] = True
    result["total_pods"] = outcome.total
    result["eviction_pods"] = outcome.eviction
    result["pending_pods"] = outcome.pending_keys
    result["drain_progress"] = outcome.progress
    explanations = dict((key, "its live migrations keep failing: %s" % why) for key, why in outcome.gave_up.items())
    if outcome.shut_down:
        progress.line(_vm_list_line("whose live migrations kept failing", outcome.shut_down))
    _drain_phase(client, name, outcome, drainer, deadline, explanations, result)
    restarted = {}
    if params["wait"] and outcome.fatal is None and not outcome.refused:
        restarted = restart_elsewhere.start_again(client, plan.vms, name, deadline, progress)
    result["vms"] = vm_report(client, plan, explanations, final=params["wait"], restarted=restarted)
    nodes_mod.set_record_phase(client, node_after, result["phase"], result["last_error"])
    progress.update(outcome.total, outcome.eviction, len(outcome.pending),
                    sum(1 for t in outcome.pending if t.launcher), phase=result["phase"],
                    vms=drainer.pending_vms(), error=result["last_error"] or drainer.last_error)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": after}
    return outcome.timed_out


def vm_report(client, plan, explanations, final=True, restarted=None):
    """Where each VM that ran on the node is now: migrated, shut down, blocked or pending."""
    vms = empty_vms()
    if not plan.vms:
        return vms
    current = {}
    for namespace in sorted(set(vm["namespace"] for vm in plan.vms)):
        for vmi in client.list("VirtualMachineInstance", namespace=namespace)[0]:
            current[vmi["metadata"].get("uid")] = vmi
    for vm in plan.vms:
        uid = vm["_vmi"]["metadata"].get("uid")
        now = current.get(uid)
        if now is not None and kubevirt.vmi_is_active(now) and kubevirt.migration_target(now) == plan.node:
            pod = vm["_pod"]
            reason = explanations.get(pod_key(pod)) if pod is not None else None
            if final or vm["outcome"] in (fates.BLOCK, fates.EXTERNAL):
                vms["blocked"].append({"namespace": vm["namespace"], "name": vm["name"],
                                       "reason": reason or _blocker_text(plan, uid) or
                                       "still on node %s" % plan.node})
            else:
                vms["pending"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                       "outcome": vm["outcome"]})
        elif now is not None and kubevirt.vmi_is_active(now):
            vms["migrated"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                    "target": kubevirt.migration_target(now)})
        else:
            vms["shut_down"].append(_shut_down_entry(vm, plan.node, (restarted or {}).get((vm["namespace"], vm["name"]))))
    return vms


def _cr_to_follow(client, name, cr_kind, ours_cr, reason, result, progress):
    """(kind, CR) of the node's NodeMaintenance: ours when there is one, else a new one."""
    if ours_cr is not None:
        return ours_cr
    cr = client.create(cr_kind, nm_cr.body(cr_kind, name, reason))
    result["changed"] = True
    progress.line("phase=Running created %s %s" % ("NodeMaintenance", cr["metadata"]["name"]))
    return cr_kind, cr


def _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress):
    """(the NodeMaintenance once its phase is final, timed out), reporting the drain's progress meanwhile."""
    cr_name = cr["metadata"]["name"]
    vm_of_pod = dict((pod_key(p), "%s/%s" % (p["metadata"]["namespace"], kubevirt.launcher_vmi_name(p)))
                     for p in plan.evict if kubevirt.is_launcher_pod(p) and kubevirt.launcher_vmi_name(p))
    informer = Informer(client, kind, field_selector="metadata.name=%s" % cr_name)

    def settled():
        current = informer.get(cr_name)
        if current is None:
            return False
        view = nm_cr.status_view(current, namespaces)
        progress.update(view["total_pods"], view["eviction_pods"], len(view["pending_pods"]),
                        sum(1 for p in view["pending_pods"] if "virt-launcher-" in p),
                        vms=[vm_of_pod[p] for p in view["pending_pods"] if p in vm_of_pod],
                        error=view["last_error"])
        return current if view["phase"] in kubevirt.FINISHED_PHASES else False

    try:
        return wait_until(settled, [informer], deadline.remaining(), "NodeMaintenance %s" % cr_name,
                          deadline=deadline), False
    except WaitTimeoutError:
        return informer.get(cr_name) or cr, True
    finally:
        informer.stop()


def _cr_failure(client, name, plan, cr_name, view, timed_out, deadline, result):
    """Mark the maintenance failed and say why; returns the explanations of the pods left."""
    result["phase"] = "Failed"
    pending = _pending_pods(client, name, plan)
    explanations = dict(zip([pod_key(p) for p in pending], explain_pending(
        client, name, pending, client.list("PodDisruptionBudget")[0])))
    what = ("Timed out after %ds waiting for NodeMaintenance %s" % (round(deadline.seconds), cr_name)) if timed_out \
        else "NodeMaintenance %s failed" % cr_name
    detail = "; ".join(explanations[pod_key(p)] for p in pending)
    result["last_error"] = "%s (phase %s%s)%s." % (
        what, view["phase"], ", last error: %s" % view["last_error"].rstrip(".") if view["last_error"] else "",
        ": %s" % detail if detail else "")
    return explanations


def _cr_view(plan, cr, namespaces, result):
    """The NodeMaintenance's status into the result (the plan's pod counts while it has none)."""
    view = nm_cr.status_view(cr, namespaces)
    result.update(view)
    if not view["eviction_pods"] and not view["total_pods"]:
        result["eviction_pods"] = len(plan.evict)
        result["total_pods"] = plan.total_pods
    if view["phase"] == "Succeeded":
        result["drain_progress"] = 100
        result["pending_pods"] = []
    return view


def enter_cr(module, result, plan, cr_kind, ours_cr, shutdown, deadline, progress):
    params = module.params
    client = module.client
    name = plan.node
    perms = [] if ours_cr else [Permission("create", "nodemaintenances", group=nm_cr.API_VERSIONS[cr_kind].split("/")[0])]
    perms.extend(restart_elsewhere.permissions(shutdown, plan.vms))
    if perms:
        require(client, perms, "put node %s into maintenance" % name)
    node = nodes_mod.get_node(client, name)
    before = nodes_mod.maintenance_view(node)
    kind, cr = _cr_to_follow(client, name, cr_kind, ours_cr, params.get("reason"), result, progress)
    cr_name = cr["metadata"]["name"]
    if shutdown:
        wait_for_object(client, "Node", name, lambda n: n is not None and nodes_mod.is_cordoned(n),
                        deadline.remaining(), "NodeMaintenance %s to cordon node %s" % (cr_name, name))
        restart_elsewhere.shut_down(client, shutdown)
        result["changed"] = True
    namespaces = dict((p["metadata"]["name"], p["metadata"]["namespace"]) for p in plan.evict)
    timed_out = False
    if params["wait"]:
        cr, timed_out = _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress)
    else:
        cr = client.get_or_none(kind, cr_name) or cr
    view = _cr_view(plan, cr, namespaces, result)
    explanations = {}
    if timed_out or view["phase"] == "Failed":
        explanations = _cr_failure(client, name, plan, cr_name, view, timed_out, deadline, result)
    restarted = {}
    if params["wait"] and view["phase"] in ("Succeeded", "Running"):
        restarted = restart_elsewhere.start_again(client, plan.vms, name, deadline, progress)
    result["vms"] = vm_report(client, plan, explanations, final=params["wait"], restarted=restarted)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": nodes_mod.maintenance_view(nodes_mod.get_node(client, name))}
    return timed_out


def _pending_pods(client, name, plan):
    wanted = set(pod_key(p) for p in plan.evict)
    items, _rv = client.list("Pod", field_selector="spec.nodeName=%s" % name)
    return [p for p in items if pod_key(p) in wanted]


# -- leaving maintenance ----------------------------------------------------------------------

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
    return dict(after, unschedulable=False, labels={nodes_mod.EXCLUDE_LABEL: None}, taints=[
        t for t in after["taints"] if t.get("key") not in [m["key"] for m in nodes_mod.MAINTENANCE_TAINTS]])


def _planned_leave(client, name, marked, migrations, pauses, result):
    """The result of a check run, or of a node with nothing to undo: what leaving would do."""
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


def _wait_for_release(client, name, cr, deadline, result):
    def released(current):
        return current is not None and not nodes_mod.is_cordoned(current) and \
            not nodes_mod.has_taint(current, nodes_mod.DRAIN_TAINT)
    try:
        return wait_for_object(client, "Node", name, released, deadline.remaining(),
                               "the node-maintenance operator to release node %s" % name)
    except WaitTimeoutError as exc:
        raise WaitTimeoutError("NodeMaintenance %s was deleted, but node %s is still cordoned after %ds: is "
                               "the node-maintenance operator running?" % (
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
    if nodes_mod.maintenance_record(node) is not None:
        nodes_mod.update_node(client, name, nodes_mod.leave_changes)


def _leave_drain(module, name, node, marked, result, progress, in_maintenance):
    client = module.client
    require(client, [Permission("patch", "nodes")], "end the maintenance of node %s" % name)
    # Cancelled before the uncordon, so no VM keeps leaving a node that is back in service.
    _cancel_evacuations(module, name, marked, result, progress, in_maintenance)
    nodes_mod.update_node(client, name, nodes_mod.leave_changes, node=None if marked else node)


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
    before = nodes_mod.maintenance_view(node)
    patch, after, kept_cordon = nodes_mod.leave_changes(node)
    if ours_cr:
        after = _view_after_cr(after)
    # Evacuations are cancelled only on a node in maintenance (ours, or cordoned by hand): on
    # another node they belong to someone else (the descheduler marks VMIs the same way).
    in_maintenance = bool(ours_cr) or nodes_mod.marked_for_maintenance(node) or nodes_mod.is_cordoned(node)
    marked, migrations = evacuation.pending(client, name) if in_maintenance else ([], [])
    pauses = remediation.to_restore(client, node)
    result["changed"] = bool(ours_cr or patch or marked or migrations or pauses)
    if result["changed"]:
        # Uncordoning a node that another run drained and may still work on would hand it back too early.
        refuse_while_held(client, params.get("lock"), "Node %s was left in maintenance" % name, node=name)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": after}
    if kept_cordon:
        module.warn("Node %s was already cordoned before this collection's maintenance began, so it stays cordoned."
                    % name)
    if module.check_mode or not result["changed"]:
        return _planned_leave(client, name, marked, migrations, pauses, result)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    perms = evacuation.permissions(client, marked, migrations) + remediation.permissions(pauses)
    if perms:
        require(client, perms, "end the maintenance of node %s" % name)
    if ours_cr:
        _leave_cr(module, name, ours_cr, node, marked, result, progress, in_maintenance, deadline)
    else:
        _leave_drain(module, name, node, marked, result, progress, in_maintenance)
    _restore_remediation(client, name, progress, result)
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    result["msg"] = "Node %s left maintenance. %s" % (name, MOVE_BACK_NOTE)
    progress.line("left maintenance")
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
