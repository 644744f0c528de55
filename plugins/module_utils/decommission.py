# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_decommission: drain a node for good, delete it, and see its VMs run elsewhere.

A reachable node is drained with the same plan and engine as node_maintenance. An
unreachable (NotReady) node cannot confirm that its pods stopped; only when the
operator states the machine is powered off are its pods force-deleted (grace period 0),
since running the same VM twice on shared storage corrupts it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import fates, kubevirt, restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import (
    DrainOptions,
    Drainer,
    Progress,
    explain_pending,
    pod_key,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    BlockedError,
    MaintenanceError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import (
    blocked_message,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.plan import (
    NODE,
    SAFETY,
    PlanOptions,
    Snapshot,
    compute_plan,
    is_our_maintenance,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.waiter import Deadline, Informer, wait_until

RESTARTING = ("Always", "RerunOnFailure")


def _result(name):
    return {"changed": False, "node": name, "deleted": False, "evicted_pods": 0,
            "vms": {"rescheduled": [], "not_restarted": []}, "duration_seconds": 0.0}


def run(module):
    params = module.params
    deadline = Deadline(params["wait_timeout"])
    client = module.client
    name = params["name"]
    policy = params["non_migratable"]
    options = PlanOptions.from_params(params)
    result = _result(name)
    if client.get_or_none("Node", name) is None:
        return result  # already gone: nothing to do
    snapshot = Snapshot.load(client, [name])
    node = snapshot.node(name)
    plan = compute_plan(snapshot, name, options)
    powered_off = not nodes_mod.is_ready(node)
    if powered_off and not params["assume_powered_off"]:
        raise BlockedError(
            "Node %s is not Ready (%s), so its pods cannot be drained and its VMs may still run; make sure the "
            "machine is powered off, then re-run with assume_powered_off=true to force-delete its pods."
            % (name, nodes_mod.not_ready_reason(node)), node=name)
    if powered_off:
        fatal = [b for b in plan.blockers if b.kind == SAFETY]
    else:
        fatal = [b for b in plan.fatal_blockers(policy) if b.kind != NODE]
    if fatal:
        raise BlockedError(blocked_message(name, fatal, policy, task="be decommissioned"),
                           blockers=[b.text for b in fatal], plan=plan.as_dict(), node=name)
    shutdown = [] if powered_off else [vm for vm in plan.vms if vm["_fate"].shut_down_by_us]
    result["changed"] = True
    if module.check_mode:
        result["plan"] = plan.as_dict()
        result["deleted"] = True
        result["evicted_pods"] = len(plan.evict)
        for vm in plan.vms:
            moves = vm["_fate"].moves or (powered_off and vm["run_strategy"] in RESTARTING)
            if moves:
                target = plan.targets.get(pod_key(vm["_pod"])) if vm["_pod"] is not None else None
                result["vms"]["rescheduled"].append({"namespace": vm["namespace"], "name": vm["name"], "node": target})
            else:
                result["vms"]["not_restarted"].append({"namespace": vm["namespace"], "name": vm["name"],
                                                       "run_strategy": vm["run_strategy"]})
        return result

    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    namespaces = sorted(set(p["metadata"]["namespace"] for p in plan.evict))
    perms = [Permission("patch", "nodes"), Permission("delete", "nodes")]
    if powered_off or options.drain.disable_eviction:
        perms.append(Permission("delete", "pods", namespaces=namespaces))
    elif namespaces:
        perms.append(Permission("create", "pods", subresource="eviction", namespaces=namespaces))
    perms.extend(restart_elsewhere.permissions(shutdown, [] if powered_off else plan.vms))
    require(client, perms, "decommission node %s" % name)

    nodes_mod.update_node(client, name, lambda current: nodes_mod.enter_changes(current, "decommission"), node=node)
    if powered_off:
        drain_options = DrainOptions(ignore_daemonsets=True, delete_emptydir_data=True, force=True,
                                     grace_period=0, disable_eviction=True)
        progress.line("phase=Running node is not Ready and declared powered off: force-deleting its pods")
    else:
        drain_options = options.drain
    wait_only = restart_elsewhere.shut_down(client, shutdown)
    drainer = Drainer(client, name, drain_options, deadline, progress=progress, wait_only=wait_only,
                      watch_budgets=plan.budgets_matter(), non_migratable=policy)
    outcome = drainer.run(wait=True)
    result["evicted_pods"] = outcome.eviction - len(outcome.pending)
    if not outcome.done:
        if outcome.refused:
            message = "Node %s has pods the drain options do not allow to evict: %s." % (
                name, "; ".join("%s %s" % item for item in outcome.refused))
        elif outcome.fatal is not None:
            message = getattr(outcome.fatal, "msg", str(outcome.fatal))
        else:
            pending = outcome.pending
            sentences = explain_pending(client, name, [t.pod for t in pending], drainer.pdb_items(),
                                        reasons=dict((t.key, t.reason) for t in pending if t.reason))
            message = "Timed out after %ds draining node %s before deleting it: %s; the node stays cordoned." % (
                round(deadline.seconds), name, "; ".join(sentences))
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        error = WaitTimeoutError if outcome.timed_out else MaintenanceError
        raise error(message, pending_pods=outcome.pending_keys, **result)

    client.delete("Node", name)
    result["deleted"] = True
    progress.line("phase=Running deleted node")
    for kind, cr in snapshot.maintenances_of(name):
        if is_our_maintenance(cr):  # its node is gone: nothing is left to maintain
            try:
                client.delete(kind, cr["metadata"]["name"])
            except MaintenanceError as exc:
                module.warn("Node %s is deleted, but its NodeMaintenance %s is left: %s" % (
                    name, cr["metadata"]["name"], exc.msg))
    moving = []
    for vm in plan.vms:
        # A powered-off node's pods are force-deleted: its VMIs fail, and Always and
        # RerunOnFailure start failed VMIs again.
        if (vm["outcome"] == fates.MIGRATE and not powered_off) or vm["_fate"].restarted_by or \
                (powered_off and vm["run_strategy"] in RESTARTING):
            moving.append(vm)
        else:
            result["vms"]["not_restarted"].append({"namespace": vm["namespace"], "name": vm["name"],
                                                   "run_strategy": vm["run_strategy"]})
    if not powered_off:
        # RerunOnFailure VMs the drain shut down: KubeVirt does not start them again by itself.
        restart_elsewhere.start_again(client, plan.vms, name, deadline, progress)
    if moving:
        result["vms"]["rescheduled"] = _wait_for_vms(client, name, moving, deadline, params["wait_for_vms"], result)
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    progress.line("phase=Succeeded node deleted, %d VM%s running elsewhere" % (
        len(result["vms"]["rescheduled"]), "" if len(result["vms"]["rescheduled"]) == 1 else "s"))
    return result


def _running_elsewhere(vmi, name):
    return vmi is not None and kubevirt.vmi_node(vmi) not in (None, name) and \
        (vmi.get("status") or {}).get("phase") == "Running" and not vmi["metadata"].get("deletionTimestamp")


def _wait_for_vms(client, name, moving, deadline, wait, result):
    """Each moving VM as {namespace, name, node}; with ``wait``, once its VMI runs on another node."""
    namespaces = sorted(set(vm["namespace"] for vm in moving))
    if not wait:
        current = {}
        for namespace in namespaces:
            for vmi in client.list("VirtualMachineInstance", namespace=namespace)[0]:
                current[(namespace, vmi["metadata"]["name"])] = vmi
        return [_entry(vm, current.get((vm["namespace"], vm["_vmi"]["metadata"]["name"])), name) for vm in moving]
    informers = [Informer(client, "VirtualMachineInstance", namespace=ns) for ns in namespaces]

    def locate():
        found = []
        for vm in moving:
            vmi = None
            for informer in informers:
                vmi = vmi or informer.get(vm["_vmi"]["metadata"]["name"], vm["namespace"])
            found.append((vm, vmi))
        return found

    def describe():
        missing = ["%s/%s" % (vm["namespace"], vm["name"]) for vm, vmi in locate() if not _running_elsewhere(vmi, name)]
        return "not yet Running on another node: %s" % ", ".join(missing)

    try:
        wait_until(lambda: all(_running_elsewhere(vmi, name) for _vm, vmi in locate()), informers,
                   deadline.remaining(), "the VMs of node %s to run elsewhere" % name, describe_pending=describe,
                   deadline=deadline)
    except WaitTimeoutError as exc:
        result["vms"]["rescheduled"] = [_entry(vm, vmi, name) for vm, vmi in locate() if _running_elsewhere(vmi, name)]
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        raise WaitTimeoutError("Node %s was deleted, but its VMs did not all run elsewhere within %ds: %s." % (
            name, round(deadline.seconds), describe()), **result) from exc
    finally:
        for informer in informers:
            informer.stop()
    return [_entry(vm, vmi, name) for vm, vmi in locate()]


def _entry(vm, vmi, name):
    return {"namespace": vm["namespace"], "name": vm["name"],
            "node": kubevirt.vmi_node(vmi) if _running_elsewhere(vmi, name) else None}
