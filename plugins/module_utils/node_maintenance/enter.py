# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entering maintenance the two ways node_maintenance knows: drain the node directly, or create a
NodeMaintenance CR and follow its status."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import cr as nm_cr
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.engine import (
    NOT_READY_GRACE,
    OWNER_CHECK_INTERVAL,
    Drainer,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import WaitTimeoutError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import explain_pending
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import vm_report
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import pods_permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import (
    Informer,
    wait_for_object,
    wait_until,
)


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


def _cordon(module, result, node, progress, note=""):
    """Cordon and taint the node and record it as in maintenance by this collection; (node after, diff)."""
    name = nodes_mod.node_name(node)
    before = node_marks.maintenance_view(node)
    node_after, (patch, after, _record) = node_marks.update_node(
        module.client, name, lambda current: node_marks.enter_changes(current, module.params.get("reason")), node=node)
    result["changed"] = result["changed"] or patch is not None
    if patch is not None:
        progress.line("phase=Running cordoned, tainted %s:NoSchedule%s" % (node_marks.DRAIN_TAINT["key"], note))
    return node_after, {"before": before, "after": after}


def enter_without_drain(module, result, plan, node, progress):
    """drain=false: the node enters maintenance (cordon, taints, this collection's record) and nothing is
    evicted; a later call with drain=true finds the maintenance its own and drains the node."""
    require(module.client, [Permission("patch", "nodes")], "put node %s into maintenance" % plan.node)
    node_after, diff = _cordon(module, result, node, progress, note="; not drained (drain=false)")
    result["phase"] = node_marks.maintenance_state(node_after)[1]
    result["vms"] = vm_report(module.client, plan, {}, final=False)
    if module.diff_mode:
        result["diff"] = diff
    return False


def enter_drain(module, result, plan, node, shutdown, options, deadline, progress, owner=None, began=None):
    """Cordon and drain; ``began()`` is called once the cordon is written (not when the node was cordoned
    already by an earlier call)."""
    params = module.params
    client = module.client
    name = plan.node
    require(client, _permissions_for_drain(plan, options, shutdown), "drain node %s" % name)
    node_after, diff = _cordon(module, result, node, progress)
    if began is not None and result["changed"]:
        began()
    wait_only = restart_elsewhere.shut_down(client, shutdown)
    if shutdown:
        result["changed"] = True
        progress.line(_vm_list_line("that cannot migrate", [(vm["namespace"], vm["name"]) for vm in shutdown]))
    drainer = Drainer(client, name, options.drain, deadline, progress=progress, wait_only=wait_only,
                      watch_budgets=plan.budgets_matter(), non_migratable=params["non_migratable"],
                      not_ready_grace=NOT_READY_GRACE, owner=owner)
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
    node_marks.set_record_phase(client, node_after, result["phase"], result["last_error"])
    progress.update(outcome.total, outcome.eviction, len(outcome.pending),
                    sum(1 for t in outcome.pending if t.launcher), phase=result["phase"],
                    vms=drainer.pending_vms(), error=result["last_error"] or drainer.last_error)
    if module.diff_mode:
        result["diff"] = diff
    return outcome.timed_out


def _cr_to_follow(client, name, cr_kind, ours_cr, reason, result, progress):
    """(kind, CR) of the node's NodeMaintenance: ours when there is one, else a new one."""
    if ours_cr is not None:
        return ours_cr
    cr = client.create(cr_kind, nm_cr.body(cr_kind, name, reason))
    result["changed"] = True
    progress.line("phase=Running created %s %s" % ("NodeMaintenance", cr["metadata"]["name"]))
    return cr_kind, cr


def _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress, owner=None):
    """(the NodeMaintenance once its phase is final, timed out, error of the run's end or None), reporting
    the drain's progress meanwhile.

    ``owner``: the run_owner.RunOwner of the run; once it is gone the wait ends with its error
    (the operator goes on draining: the NodeMaintenance stays)."""
    cr_name = cr["metadata"]["name"]
    vm_of_pod = dict((object_name(p), "%s/%s" % (p["metadata"]["namespace"], kubevirt.launcher_vmi_name(p)))
                     for p in plan.evict if kubevirt.is_launcher_pod(p) and kubevirt.launcher_vmi_name(p))
    informer = Informer(client, kind, field_selector="metadata.name=%s" % cr_name)
    ended = []

    def settled():
        if owner is not None and owner.gone():
            ended.append(owner.ended(plan.node, "the module stopped waiting for NodeMaintenance %s; the "
                                                "node-maintenance operator goes on with it, and the node stays in "
                                                "maintenance" % cr_name))
            return True
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
        settled_cr = wait_until(settled, [informer], deadline.remaining(), "NodeMaintenance %s" % cr_name,
                                deadline=deadline, recheck_every=OWNER_CHECK_INTERVAL if owner is not None else None)
        if ended:
            return informer.get(cr_name) or cr, False, ended[0]
        return settled_cr, False, None
    except WaitTimeoutError:
        return informer.get(cr_name) or cr, True, None
    finally:
        informer.stop()


def _cr_failure(client, name, plan, cr_name, view, timed_out, deadline, result):
    """Mark the maintenance failed and say why; returns the explanations of the pods left."""
    result["phase"] = "Failed"
    pending = _pending_pods(client, name, plan)
    explanations = dict(zip([object_name(p) for p in pending], explain_pending(
        client, name, pending, client.list("PodDisruptionBudget")[0])))
    what = ("Timed out after %ds waiting for NodeMaintenance %s" % (round(deadline.seconds), cr_name)) if timed_out \
        else "NodeMaintenance %s failed" % cr_name
    detail = "; ".join(explanations[object_name(p)] for p in pending)
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


def enter_cr(module, result, plan, cr_kind, ours_cr, shutdown, deadline, progress, owner=None, began=None):
    """Create (or follow) the NodeMaintenance CR; ``began()`` is called once this call created it."""
    params = module.params
    client = module.client
    name = plan.node
    node = nodes_mod.get_node(client, name)
    pending_off = node_marks.pending_taint_changes(node, None) is not None
    perms = [] if ours_cr else [Permission("create", "nodemaintenances", group=nm_cr.API_VERSIONS[cr_kind].split("/")[0])]
    perms.extend(restart_elsewhere.permissions(shutdown, plan.vms))
    if pending_off:
        perms.append(Permission("patch", "nodes"))
    if perms:
        require(client, perms, "put node %s into maintenance" % name)
    before = node_marks.maintenance_view(node)
    if pending_off:
        # What a drain by this collection does in its cordon (node_marks.enter_changes); the operator keeps other
        # taints.
        node, _patch = node_marks.update_node(
            client, name, lambda current: (node_marks.pending_taint_changes(current, None),), node=node)
        result["changed"] = True
    kind, cr = _cr_to_follow(client, name, cr_kind, ours_cr, params.get("reason"), result, progress)
    cr_name = cr["metadata"]["name"]
    if began is not None and ours_cr is None:
        began()
    if shutdown:
        wait_for_object(client, "Node", name, lambda n: n is not None and nodes_mod.is_cordoned(n),
                        deadline.remaining(), "NodeMaintenance %s to cordon node %s" % (cr_name, name))
        restart_elsewhere.shut_down(client, shutdown)
        result["changed"] = True
    namespaces = dict((p["metadata"]["name"], p["metadata"]["namespace"]) for p in plan.evict)
    timed_out, ended = False, None
    if params["wait"]:
        cr, timed_out, ended = _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress, owner=owner)
    else:
        cr = client.get_or_none(kind, cr_name) or cr
    view = _cr_view(plan, cr, namespaces, result)
    explanations = {}
    if ended is not None:
        result["phase"] = "Failed"
        result["last_error"] = ended.msg
    elif timed_out or view["phase"] == "Failed":
        explanations = _cr_failure(client, name, plan, cr_name, view, timed_out, deadline, result)
    restarted = {}
    if params["wait"] and ended is None and view["phase"] in ("Succeeded", "Running"):
        restarted = restart_elsewhere.start_again(client, plan.vms, name, deadline, progress)
    result["vms"] = vm_report(client, plan, explanations, final=params["wait"], restarted=restarted)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": node_marks.maintenance_view(nodes_mod.get_node(client, name))}
    return timed_out


def _pending_pods(client, name, plan):
    wanted = set(object_name(p) for p in plan.evict)
    items, _rv = client.list("Pod", field_selector="spec.nodeName=%s" % name)
    return [p for p in items if object_name(p) in wanted]
