# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entering maintenance the ways node_maintenance knows: drain the node directly; create a
NodeMaintenance CR and follow its status; or (method auto with the node-maintenance operator)
evacuate the node's VMs at KubeVirt's pace first, then create the CR for the rest."""

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
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError, WaitTimeoutError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import explain_pending
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.finished_launchers import (
    remove_finished_launchers,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import vm_report
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import pods_permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import percent
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import (
    Informer,
    wait_for_object,
    wait_until,
)


def _permissions_for_drain(plan, drain_options, shutdown, launchers_only=False):
    namespaces = sorted(set(p["metadata"]["namespace"] for p in plan.evict
                            if not launchers_only or kubevirt.is_launcher_pod(p)))
    perms = [Permission("patch", "nodes")]
    if namespaces:
        perms.append(pods_permission(namespaces, drain_options.disable_eviction))
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


def _cordon(module, result, node, progress, note="", method=None):
    """Cordon and taint the node and record it as in maintenance by this collection (``method``: the way in
    the record names, node_marks.enter_changes); (node after, diff)."""
    name = nodes_mod.node_name(node)
    before = node_marks.maintenance_view(node)
    node_after, (patch, after, _record) = node_marks.update_node(
        module.client, name, lambda current: node_marks.enter_changes(current, module.params.get("reason"), method),
        node=node)
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
    client = module.client
    name = plan.node
    require(client, _permissions_for_drain(plan, options.drain, shutdown), "drain node %s" % name)
    node_after, diff = _cordon(module, result, node, progress, method="drain")
    if began is not None and result["changed"]:
        began()
    outcome, drainer, explanations = _drain(module, result, plan, shutdown, options.drain, deadline, progress,
                                            owner, module.params["wait"])
    _drain_report(module, result, plan, node_after, outcome, drainer, explanations, deadline, progress)
    if module.diff_mode:
        result["diff"] = diff
    return outcome.timed_out


def _drain(module, result, plan, shutdown, drain_options, deadline, progress, owner, wait):
    """Shut down the VMs of ``shutdown`` and run the drain engine on the node's pods ``drain_options``
    select; its numbers, phase and last error go to ``result``. (outcome, drainer, explanations of the
    pods left)."""
    client = module.client
    name = plan.node
    # Marked first: a run stopped after the eviction and before their start leaves the mark to the next call.
    restart_elsewhere.mark_for_start(client, plan.vms, name)
    wait_only = restart_elsewhere.shut_down(client, shutdown)
    if shutdown:
        result["changed"] = True
        progress.line(_vm_list_line("that cannot migrate", [(vm["namespace"], vm["name"]) for vm in shutdown]))
    drainer = Drainer(client, name, drain_options, deadline, progress=progress, wait_only=wait_only,
                      watch_budgets=plan.budgets_matter(), non_migratable=module.params["non_migratable"],
                      not_ready_grace=NOT_READY_GRACE, owner=owner)
    outcome = drainer.run(wait=wait)
    if outcome.evicted:
        result["changed"] = True
    result["total_pods"] = outcome.total
    result["eviction_pods"] = outcome.eviction
    result["pending_pods"] = outcome.pending_keys
    result["drain_progress"] = outcome.progress
    explanations = dict((key, "its live migrations keep failing: %s" % why) for key, why in outcome.gave_up.items())
    explanations.update(outcome.stranded)
    stranded = [tuple(t.vm.split("/", 1)) for t in outcome.targets if t.key in outcome.stranded]
    kept_failing = [vm for vm in outcome.shut_down if vm not in stranded]
    if kept_failing:
        progress.line(_vm_list_line("whose live migrations kept failing", kept_failing))
    if stranded:
        progress.line(_vm_list_line("whose guest died during a live migration off the node", stranded))
    _drain_phase(client, name, outcome, drainer, deadline, explanations, result)
    return outcome, drainer, explanations


def _drain_report(module, result, plan, node, outcome, drainer, explanations, deadline, progress):
    """The end of a drain by this collection: the VMs it shut down started again elsewhere (waited for), where
    each VM went, the phase recorded on the node and the last status line."""
    client = module.client
    wait = module.params["wait"]
    restarted = {}
    if wait and not outcome.refused:
        # The VMs the drain shut down for the collection to start (RerunOnFailure) are down already: they start
        # again whether the drain finished, timed out or stopped on another VM (whose failed migrations, say);
        # a resumed run no longer finds them on the node. A drain that stopped keeps its own error.
        try:
            restarted = restart_elsewhere.start_again(client, plan.vms, plan.node, deadline, progress)
        except MaintenanceError as exc:
            if outcome.fatal is None:
                raise
            progress.line(exc.msg)
    result["vms"] = vm_report(client, plan, explanations, final=wait, restarted=restarted)
    node_marks.set_record_phase(client, node, result["phase"], result["last_error"])
    progress.update(outcome.total, outcome.eviction, len(outcome.pending),
                    sum(1 for t in outcome.pending if t.launcher), phase=result["phase"],
                    vms=drainer.pending_vms(), error=result["last_error"] or drainer.last_error)


# -- method auto with the node-maintenance operator: the VMs first, at KubeVirt's pace ---------------------
#
# The operator drains with k8s.io/kubectl's drain library (RunNodeDrain in
# controllers/nodemaintenance_controller.go of medik8s/node-maintenance-operator v0.17.0), which evicts every
# pod of the node at once. For a virt-launcher pod an eviction only marks its VMI for evacuation, and
# virt-controller then creates a migration for every marked VMI while it counts a free slot - counting only
# migrations past Pending (pkg/virt-controller/watch/drain/evacuation/evacuation.go, FilterRunningMigrations) -
# and holds those over parallelOutboundMigrationsPerNode / parallelMigrationsPerCluster in Pending, looking
# at them again only 5 s later (handleTargetPodCreation, pkg/virt-controller/watch/migration/migration.go of
# kubevirt v1.7.0). So the VMs leave first through this collection's drain engine, which asks for an
# evacuation only as a migration lane frees (drain/engine.py), and only then is the NodeMaintenance created:
# the operator finds the node cordoned and tainted as it would leave it itself (AddOrRemoveTaint and
# RunCordonOrUncordon change nothing then, controllers/taint.go), takes its Lease medik8s-leases/node-<name>,
# drains what is left and reports Succeeded, and the console shows the node in maintenance as with method cr.
# What is left would be the finished virt-launcher pods of the migrated VMs, which the operator's drain evicts
# and polls for once a second: they go first (drain/finished_launchers.py), so the operator finds them gone.

def enter_cr_after_evacuation(module, result, plan, node, cr_kind, shutdown, options, deadline, progress,
                              owner=None, began=None):
    """Enter maintenance as a drain does (cordon, taints, the record naming method cr), evacuate the node's VMs
    with the drain engine, then create the NodeMaintenance and follow it. A failed or timed-out evacuation ends
    the call as a failed drain (the node stays cordoned, no NodeMaintenance); a later call resumes it."""
    client = module.client
    name = plan.node
    # The drain's options, for the node's virt-launcher pods only, always through the Eviction API.
    evacuation = options.drain.replaced(pod_selector=kubevirt.LAUNCHER_LABEL, disable_eviction=False)
    group = nm_cr.API_VERSIONS[cr_kind].split("/")[0]
    require(client, _permissions_for_drain(plan, evacuation, shutdown, launchers_only=True) +
            [Permission("create", "nodemaintenances", group=group)], "put node %s into maintenance" % name)
    node_after, diff = _cordon(module, result, node, progress, method="cr")
    if began is not None and result["changed"]:
        began()
    outcome, drainer, explanations = _drain(module, result, plan, shutdown, evacuation, deadline, progress, owner,
                                            wait=True)
    if module.diff_mode:
        result["diff"] = diff
    if result["phase"] != "Succeeded":
        _drain_report(module, result, plan, node_after, outcome, drainer, explanations, deadline, progress)
        return outcome.timed_out
    remove_finished_launchers(client, name, evacuation, deadline)
    kind, cr = _cr_to_follow(client, name, cr_kind, None, module.params.get("reason"), result, progress,
                             after="VMs evacuated")
    timed_out = _follow_cr(module, result, plan, kind, cr, deadline, progress, owner, evacuated=True)
    # The whole maintenance in the numbers: the pods the evacuation and the operator removed together.
    result["total_pods"] = plan.total_pods
    result["eviction_pods"] = len(plan.evict)
    if result["phase"] != "Succeeded":
        result["drain_progress"] = percent(len(plan.evict), min(len(plan.evict), len(result["pending_pods"])))
    node_marks.set_record_phase(client, nodes_mod.get_node(client, name), result["phase"], result["last_error"])
    return timed_out


def _cr_to_follow(client, name, cr_kind, ours_cr, reason, result, progress, after=None):
    """(kind, CR) of the node's NodeMaintenance: ours when there is one, else a new one (``after``: what
    was done before, for the progress line)."""
    if ours_cr is not None:
        return ours_cr
    cr = client.create(cr_kind, nm_cr.body(cr_kind, name, reason))
    result["changed"] = True
    done = "%s, " % after if after else ""
    progress.line("phase=Running %screated NodeMaintenance %s" % (done, cr["metadata"]["name"]))
    return cr_kind, cr


def _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress, owner=None, evacuated=False):
    """(the NodeMaintenance once its phase is final, timed out, error of the run's end or None), reporting
    the drain's progress meanwhile.

    ``owner``: the run_owner.RunOwner of the run; once it is gone the wait ends with its error
    (the operator goes on draining: the NodeMaintenance stays). ``evacuated``: see _follow_cr."""
    cr_name = cr["metadata"]["name"]
    vm_of_pod = dict((object_name(p), "%s/%s" % (p["metadata"]["namespace"], kubevirt.launcher_vmi_name(p)))
                     for p in plan.evict if kubevirt.is_launcher_pod(p) and kubevirt.launcher_vmi_name(p))

    def vms_left(pending):
        """(how many, which) of the pending pods are virt-launcher pods of VMs still on the node: none once the
        VMs were evacuated (the operator still lists their finished pods)."""
        if evacuated:
            return 0, []
        return sum(1 for p in pending if "virt-launcher-" in p), [vm_of_pod[p] for p in pending if p in vm_of_pod]

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
        count, vms = vms_left(view["pending_pods"])
        progress.update(view["total_pods"], view["eviction_pods"], len(view["pending_pods"]), count, vms=vms,
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
    restart_elsewhere.mark_for_start(client, plan.vms, name)  # before the operator's eviction shuts them down
    kind, cr = _cr_to_follow(client, name, cr_kind, ours_cr, params.get("reason"), result, progress)
    cr_name = cr["metadata"]["name"]
    if began is not None and ours_cr is None:
        began()
    if shutdown:
        wait_for_object(client, "Node", name, lambda n: n is not None and nodes_mod.is_cordoned(n),
                        deadline.remaining(), "NodeMaintenance %s to cordon node %s" % (cr_name, name))
        restart_elsewhere.shut_down(client, shutdown)
        result["changed"] = True
    timed_out = _follow_cr(module, result, plan, kind, cr, deadline, progress, owner)
    if module.diff_mode:
        result["diff"] = {"before": before, "after": node_marks.maintenance_view(nodes_mod.get_node(client, name))}
    return timed_out


def _follow_cr(module, result, plan, kind, cr, deadline, progress, owner, evacuated=False):
    """Follow the node's NodeMaintenance (until its phase is final, with wait) and report it in ``result``;
    True when it timed out. ``evacuated``: the node's VMs left before the NodeMaintenance was created, so the
    virt-launcher pods the operator still lists are those of guests that run elsewhere (the progress names no VM
    as left)."""
    params = module.params
    client = module.client
    name = plan.node
    cr_name = cr["metadata"]["name"]
    namespaces = dict((p["metadata"]["name"], p["metadata"]["namespace"]) for p in plan.evict)
    timed_out, ended = False, None
    if params["wait"]:
        cr, timed_out, ended = _wait_for_cr(client, kind, cr, plan, namespaces, deadline, progress, owner=owner,
                                            evacuated=evacuated)
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
    return timed_out


def _pending_pods(client, name, plan):
    wanted = set(object_name(p) for p in plan.evict)
    items, _rv = client.list("Pod", field_selector="spec.nodeName=%s" % name)
    return [p for p in items if object_name(p) in wanted]
