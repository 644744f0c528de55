# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_decommission: drain a node for good, delete it, and see its VMs run elsewhere.

A reachable node is drained with the same plan and engine as node_maintenance. An
unreachable (NotReady) node cannot confirm that its pods stopped; only when the
operator states the machine is powered off are its pods force-deleted (grace period 0),
since running the same VM twice on shared storage corrupts it.

A node is deleted only once its machine is off (module_utils/power.py decides how that is
established), since a running kubelet registers its deleted node again; afterwards the node's
name is watched for a while, and its return fails the task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import power
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import metal3, redfish, road
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import story
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.blockers import NODE, SAFETY
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.engine import Drainer
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MaintenanceError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import explain_pending
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import (
    describe_check,
    pause_remediation,
    pauses_predicted,
    restore_remediation,
    restored_on_failure,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.blockers import blocked_message
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.plan import (
    PlanOptions,
    compute_plan,
    is_our_maintenance,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions, pods_permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import run_owner
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.snapshot import Snapshot
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import (
    Deadline,
    Informer,
    wait_until,
)

RESTARTING = ("Always", "RerunOnFailure")


def _result(name):
    return {"changed": False, "node": name, "deleted": False, "evicted_pods": 0,
            "vms": {"rescheduled": [], "not_restarted": []}, "duration_seconds": 0.0,
            "powered_off_by": None, "power_off": {"method": None, "bmh": None, "heartbeat": None},
            "reregistration": {"watch_seconds": 0, "reregistered": False},
            "remediation_paused": [], "remediation_restored": []}


def _check_machine_options(params, name):
    """The options that say how to reach the machine agree with power_off; the machine, or None."""
    if params.get("bmh") and params.get("power_off") != "bmh":
        given = "%s/%s" % (params["bmh"]["namespace"], params["bmh"]["name"])
        raise InvalidInputError("Option bmh names BareMetalHost %s, but power_off is not bmh: set power_off=bmh to "
                                "power node %s off through it." % (given, name), option="bmh")
    if params.get("bmc") and params.get("power_off") != "redfish":
        raise InvalidInputError("Option bmc names the BMC at %s, but power_off is not redfish: set power_off=redfish "
                                "to power node %s off through it." % (params["bmc"]["address"], name), option="bmc")
    if params.get("power_off") == "redfish":
        if not params.get("bmc"):
            raise InvalidInputError("Option power_off=redfish needs the machine's BMC: give bmc={address, username, "
                                    "password} for node %s." % name, option="bmc")
        return redfish.RedfishMachine(params["bmc"])
    return None


def _refuse_blockers(name, plan, policy, powered_off):
    if powered_off:
        fatal = [b for b in plan.blockers if b.kind == SAFETY]
    else:
        fatal = [b for b in plan.fatal_blockers(policy) if b.kind != NODE]
    if fatal:
        raise BlockedError(blocked_message(name, fatal, policy, task="be decommissioned"),
                           blockers=[b.text for b in fatal], plan=plan.as_dict(), node=name)


def _check_mode_result(plan, decision, powered_off, result):
    result["powered_off_by"] = decision.powered_off_by  # how it would be; a real run says so once it is
    result["plan"] = plan.as_dict()
    result["deleted"] = True
    result["evicted_pods"] = len(plan.evict)
    for vm in plan.vms:
        moves = vm["_fate"].moves or (powered_off and vm["run_strategy"] in RESTARTING)
        if moves:
            target = plan.targets.get(object_name(vm["_pod"])) if vm["_pod"] is not None else None
            result["vms"]["rescheduled"].append({"namespace": vm["namespace"], "name": vm["name"], "node": target})
        else:
            result["vms"]["not_restarted"].append({"namespace": vm["namespace"], "name": vm["name"],
                                                   "run_strategy": vm["run_strategy"]})
    return result


def _require_permissions(client, name, plan, shutdown, powered_off, delete_pods, host, decision):
    namespaces = sorted(set(p["metadata"]["namespace"] for p in plan.evict))
    perms = [Permission("patch", "nodes"), Permission("delete", "nodes")]
    if delete_pods or namespaces:
        perms.append(pods_permission(namespaces, delete_pods))
    perms.extend(restart_elsewhere.permissions(shutdown, [] if powered_off else plan.vms))
    if host is not None:
        perms.append(Permission("patch", "baremetalhosts", group="metal3.io",
                                namespaces=[host["metadata"]["namespace"]]))
    if decision.waits_for_heartbeat:
        perms.append(Permission("watch", "leases", group="coordination.k8s.io",
                                namespaces=[power.NODE_LEASE_NAMESPACE]))
    require(client, perms, "decommission node %s" % name)


def _drain_failure(client, name, outcome, drainer, deadline):
    """The sentence that says why the drain did not empty the node."""
    if outcome.refused:
        return "Node %s has pods the drain options do not allow to evict: %s." % (
            name, "; ".join("%s %s" % item for item in outcome.refused))
    if outcome.fatal is not None:
        return getattr(outcome.fatal, "msg", str(outcome.fatal))
    pending = outcome.pending
    sentences = explain_pending(client, name, [t.pod for t in pending], drainer.pdb_items(),
                                reasons=dict((t.key, t.reason) for t in pending if t.reason))
    return "Timed out after %ds draining node %s before deleting it: %s; the node stays cordoned." % (
        round(deadline.seconds), name, "; ".join(sentences))


def _drain(client, name, plan, options, policy, powered_off, shutdown, deadline, progress, result, owner=None):
    """Drain the node (force-deleting the pods of a powered-off one); raises when it is not emptied."""
    if powered_off:
        drain_options = DrainOptions(ignore_daemonsets=True, delete_emptydir_data=True, force=True,
                                     grace_period=0, disable_eviction=True)
        progress.line("phase=Running node is not Ready and declared powered off: force-deleting its pods")
    else:
        drain_options = options.drain
    wait_only = restart_elsewhere.shut_down(client, shutdown)
    drainer = Drainer(client, name, drain_options, deadline, progress=progress, wait_only=wait_only,
                      watch_budgets=plan.budgets_matter(), non_migratable=policy, owner=owner)
    outcome = drainer.run(wait=True)
    result["evicted_pods"] = outcome.eviction - len(outcome.pending)
    if outcome.done:
        return
    message = _drain_failure(client, name, outcome, drainer, deadline)
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    error = WaitTimeoutError if outcome.timed_out else MaintenanceError
    raise error(message, pending_pods=outcome.pending_keys, **result)


def run(module):
    params = module.params
    deadline = Deadline(params["wait_timeout"])
    client = module.client
    name = params["name"]
    policy = params["non_migratable"]
    options = PlanOptions.from_params(params)
    result = _result(name)
    machine = _check_machine_options(params, name)
    owner = run_owner(params, name)
    if client.get_or_none("Node", name) is None:
        return result  # already gone: nothing to do
    refuse_while_held(client, params.get("lock"), "Node %s was not decommissioned" % name, node=name)
    snapshot = Snapshot.load(client, [name])
    node = snapshot.node(name)
    plan = compute_plan(snapshot, name, options)
    beat = power.heartbeat(node, client.get_or_none("Lease", name, power.NODE_LEASE_NAMESPACE))
    powered_off = not nodes_mod.is_ready(node)

    def decide():
        return power.decide(name, node, beat, params.get("power_off"), params["assume_powered_off"])

    # A NotReady node is refused before anything else, a heartbeating one after the drain's blockers.
    decision = decide() if powered_off else None
    _refuse_blockers(name, plan, policy, powered_off)
    decision = decision or decide()
    road.refuse_bmc_of_a_managed_host(client, name, node, machine)
    host = metal3.find_bmh(client, name, node, params.get("bmh")) if decision.method == "bmh" else None
    if host is not None:
        metal3.Metal3Machine(client, host).refuse_power_off_if_disabled(node=name)
    result["power_off"] = {"method": decision.method, "bmh": metal3.bmh_key(host) if host else None,
                           "bmc": None, "heartbeat": beat.as_dict()}
    if machine is not None:
        # Before anything changes: the BMC answers and takes the credentials.
        result["power_off"]["bmc"] = dict(machine.as_dict(), power_state=machine.power_state())
    result["reregistration"]["watch_seconds"] = params["reregistration_watch"]
    shutdown = [] if powered_off else [vm for vm in plan.vms if vm["_fate"].shut_down_by_us]
    pauses = remediation.to_pause(client, node) if params["pause_remediation"] else []
    result["changed"] = True
    if module.check_mode:
        result["remediation_paused"] = pauses_predicted(node, pauses)
        return _check_mode_result(plan, decision, powered_off, result)

    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    delete_pods = powered_off or options.drain.disable_eviction
    _require_permissions(client, name, plan, shutdown, powered_off, delete_pods, host, decision)

    node = pause_remediation(client, node, pauses, progress, result)
    with restored_on_failure(module, name, progress, result, "Decommissioning"):
        node = _empty_and_delete(client, name, node, plan, options, policy, powered_off, shutdown, decision,
                                 host, deadline, progress, result, owner=owner, events=module.events,
                                 machine=machine)
    watch = _ReregistrationWatch(client, name, node["metadata"].get("uid"), params["reregistration_watch"])
    try:
        _restore_after_deletion(module, client, name, node, progress, result)
        _after_deletion(module, client, name, snapshot, plan, powered_off, deadline, progress, result)
        watch.finish(result, deadline, progress)
    finally:
        watch.stop()
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    story.decommissioned(module.events, node, result)
    progress.line("phase=Succeeded node deleted, %d VM%s running elsewhere" % (
        len(result["vms"]["rescheduled"]), "" if len(result["vms"]["rescheduled"]) == 1 else "s"))
    return result


def _restore_after_deletion(module, client, name, node, progress, result):
    """The node is gone: nothing is left to remediate, and the shared pauses must not outlive the task."""
    try:
        restored = restore_remediation(client, name, progress, result, deleted_node=node)
    except MaintenanceError as exc:
        raise MaintenanceError(
            "Node %s is deleted, but restoring the remediation paused for it failed: %s Remove the pause by hand: the "
            "entry '%s' of spec.pauseRequests in NodeHealthChecks, and the annotation %s of MachineHealthChecks that "
            "list the node in %s." % (name, exc.msg.rstrip("."), remediation.pause_request(name),
                                      remediation.PAUSED_ANNOTATION, remediation.PAUSED_FOR_ANNOTATION), **result)
    machines = [e for e in restored if e["kind"] == "MachineHealthCheck"]
    if machines:
        # A MachineHealthCheck remediates a Machine whose Node is gone (machine-api-operator
        # pkg/controller/machinehealthcheck, cluster-api machinehealthcheck_targets.go: node missing).
        module.warn("Node %s is deleted, but its Machine is not: %s covers it again and remediates (replaces) a "
                    "Machine whose Node is gone. To remove the machine for good, delete the Machine or scale its "
                    "MachineSet down." % (name, ", ".join(describe_check(e) for e in machines)))


def _empty_and_delete(client, name, node, plan, options, policy, powered_off, shutdown, decision, host, deadline,
                      progress, result, owner, events, machine=None):
    """Cordon and mark the node, see its machine off, drain it and delete it; returns the node as last read."""
    node_marks.update_node(client, name, lambda current: node_marks.enter_changes(current, "decommission"), node=node)
    story.began_decommission(events, node, len(plan.evict), len(plan.vms))
    with story.told_on_failure(events, node, story.FAILED_DECOMMISSION, "Decommissioning"):
        if decision.before_drain:
            _confirm_powered_off(client, name, decision, host, deadline, progress, result, node, events, machine)
        _drain(client, name, plan, options, policy, powered_off, shutdown, deadline, progress, result, owner=owner)
        if not decision.before_drain:
            _confirm_powered_off(client, name, decision, host, deadline, progress, result, node, events, machine)
        node = client.get_or_none("Node", name) or node
        client.delete("Node", name)
    result["deleted"] = True
    progress.line("phase=Running deleted node")
    return node


def _after_deletion(module, client, name, snapshot, plan, powered_off, deadline, progress, result):
    """Remove our NodeMaintenance of the node and see its VMs run elsewhere."""
    params = module.params
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
        result["vms"]["rescheduled"] = restart_elsewhere.wait_running_elsewhere(
            client, name, moving, deadline, params["wait_for_vms"], result, "Node %s was deleted" % name)


def _confirm_powered_off(client, name, decision, host, deadline, progress, result, node, events, machine=None):
    """Return once the node's machine is off as ``decision`` says it must be established; else raise."""
    if decision.method == "bmh":
        _power_off_bmh(client, name, host, deadline, progress, result)
        story.powered_off(events, node, "BareMetalHost %s, spec.online=false" % metal3.bmh_key(host))
    if decision.method == "redfish":
        resets = _power_off_redfish(name, machine, decision, deadline, progress, result)
        story.powered_off(events, node, "%s, ComputerSystem.Reset %s" % (
            machine.describe(), " then ".join(resets) or "not needed (already off)"))
    if decision.waits_for_heartbeat:
        beat = _wait_heartbeat_stopped(client, name, decision.method == "manual", deadline, progress, result)
        if beat is not None:
            result["power_off"]["heartbeat"] = beat.as_dict()
    result["powered_off_by"] = decision.powered_off_by


def _power_off_bmh(client, name, host, deadline, progress, result):
    machine = metal3.Metal3Machine(client, host)
    progress.line("phase=Running powering off node %s through BareMetalHost %s (spec.online=false)" % (
        name, machine.key))
    try:
        machine.power_off(deadline.remaining())
    except WaitTimeoutError as exc:
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        raise WaitTimeoutError("Node %s was not deleted: its BareMetalHost %s did not report poweredOn=false within "
                               "%ds of setting spec.online=false; the node stays drained and cordoned." % (
                                   name, machine.key, round(deadline.seconds)), **result) from exc


def _power_off_redfish(name, machine, decision, deadline, progress, result):
    """Power the machine off through its BMC (gracefully when the node is drained and alive, ForceOff when it
    is not Ready: its OS may not answer) and return the reset types sent."""
    graceful = not decision.before_drain
    progress.line("phase=Running powering off node %s through %s (%s)" % (
        name, machine.describe(), "GracefulShutdown, ForceOff if it does not end" if graceful else "ForceOff"))
    try:
        resets = machine.power_off(deadline.remaining(), graceful=graceful)
    except WaitTimeoutError as exc:
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        raise WaitTimeoutError("Node %s was not deleted: %s did not report the machine Off within %ds (%s); the node "
                               "stays drained and cordoned." % (name, machine.describe(), round(deadline.seconds),
                                                                exc.details.get("pending") or "no answer"),
                               **result) from exc
    result["power_off"]["bmc"] = dict(machine.as_dict(), power_state=redfish.OFF, resets=resets)
    return resets


def _wait_heartbeat_stopped(client, name, manual, deadline, progress, result):
    """The node's last Heartbeat once it stopped (None when the node went away meanwhile)."""
    nodes = Informer(client, "Node", field_selector="metadata.name=%s" % name)
    leases = Informer(client, "Lease", namespace=power.NODE_LEASE_NAMESPACE, field_selector="metadata.name=%s" % name)
    shown = []
    hint = "; power the machine off now" if manual else ""

    def current():
        node = nodes.get(name)
        return None if node is None else power.heartbeat(node, leases.get(name, power.NODE_LEASE_NAMESPACE))

    def check():
        beat = current()
        if beat is None:
            return "gone"
        if not shown or shown[-1] != beat.last:
            shown.append(beat.last)
            progress.line("phase=Running waiting for node %s to stop heartbeating: %s%s" % (
                name, beat.describe(), hint if beat.alive else ""))
        return beat if not beat.alive else None

    def pending():
        beat = current()
        return beat.describe() if beat is not None else "the node is gone"

    try:
        # Time alone ends a heartbeat (no event says "not renewed"): re-check every second.
        found = wait_until(check, [nodes, leases], deadline.remaining(), "node %s to stop heartbeating" % name,
                           describe_pending=pending, recheck_every=1.0, deadline=deadline)
    except WaitTimeoutError as exc:
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        beat = current()
        if beat is not None:
            result["power_off"]["heartbeat"] = beat.as_dict()
        raise WaitTimeoutError("Node %s still heartbeats after %ds (%s), so it was not deleted; it stays drained and "
                               "cordoned: power the machine off and run the decommission again." % (
                                   name, round(deadline.seconds), beat.describe() if beat else "gone"),
                               **result) from exc
    finally:
        nodes.stop()
        leases.stop()
    progress.line("phase=Running node %s stopped heartbeating" % name)
    return None if found == "gone" else found


class _ReregistrationWatch:
    """Watches a deleted node's name: a Node of that name created again (another uid) means its
    kubelet still runs and registered it again."""

    def __init__(self, client, name, deleted_uid, seconds):
        self.name = name
        self.deleted_uid = deleted_uid
        self.seconds = seconds
        self.until = time.monotonic() + seconds
        self.informer = None
        if seconds > 0:
            self.informer = Informer(client, "Node", field_selector="metadata.name=%s" % name).start()

    def _returned(self):
        node = self.informer.get(self.name)
        if node is not None and node["metadata"].get("uid") != self.deleted_uid:
            return node
        return None

    def finish(self, result, deadline, progress):
        if self.informer is None:
            return
        progress.line("phase=Running watching for node %s to register again (%ds)" % (self.name, self.seconds))
        try:
            # At least a moment, so that the watch has listed once even when the VMs took longer.
            back = wait_until(self._returned, [self.informer], max(1.0, self.until - time.monotonic()),
                              "node %s to register again" % self.name)
        except WaitTimeoutError:
            return
        result["reregistration"]["reregistered"] = True
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        raise MaintenanceError(
            "Node %s registered again after this run deleted it (new uid %s, created %s): its machine still runs a "
            "kubelet, and the node is back in the cluster; power the machine off for good (power_off=bmh, or by hand "
            "with power_off=manual) and decommission it again." % (
                self.name, back["metadata"].get("uid"), back["metadata"].get("creationTimestamp")), **result)

    def stop(self):
        if self.informer is not None:
            self.informer.stop()
