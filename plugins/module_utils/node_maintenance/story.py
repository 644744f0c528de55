# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Events of a node's maintenance: what ``kubectl describe node`` and ``kubectl describe vm``
show of it.

Reasons follow the node-maintenance-operator's (``BeginMaintenance``, ``SucceedMaintenance``,
``FailedMaintenance``, ``RemovedMaintenance``; medik8s node-maintenance-operator
``controllers/nodemaintenance_controller.go``), so one query finds the maintenance of a node
whichever tool did it. Every VM that ran on the node gets one Event: where it went and why.
Nothing here decides anything; it tells what the result already says.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates

BEGIN = "BeginMaintenance"
SUCCEED = "SucceedMaintenance"
FAILED = "FailedMaintenance"
REMOVED = "RemovedMaintenance"
MIGRATED = "Migrated"
SHUT_DOWN = "ShutDownForMaintenance"
STARTED_ELSEWHERE = "StartedElsewhere"
LEFT_STOPPED = "LeftStopped"
BEGIN_DECOMMISSION = "BeginDecommission"
DECOMMISSIONED = "Decommissioned"
FAILED_DECOMMISSION = "FailedDecommission"
POWERED_OFF = "PoweredOff"
POWERED_ON = "PoweredOn"
FENCED = "Fenced"
UNFENCED = "Unfenced"
FAILED_FENCING = "FailedFencing"
MACHINE_RESTARTED = "MachineRestarted"
MACHINE_SERVICED = "MachineServiced"
FAILED_MACHINE_SERVICE = "FailedMachineService"


def _plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def _why(node, reason):
    return "maintenance of node %s%s" % (node, " (%s)" % reason if reason else "")


def node_ref(node):
    return reference(node, "Node")


def vm_ref(snapshot, namespace, name):
    vm = snapshot.vms.get((namespace, name)) if snapshot is not None else None
    if vm is not None:
        return reference(vm, "VirtualMachine")
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "namespace": namespace, "name": name}


def began(events, node, result, vm_count, reason=None):
    events.normal(node_ref(node), BEGIN, "Cordon",
                  "Entering maintenance (%s, method %s): %s to evict, %s among them" % (
                      reason or "no reason given", result["method"], _plural(result["eviction_pods"], "pod"),
                      _plural(vm_count, "VM")))


def succeeded(events, node, snapshot, result, reason=None):
    """The node is in maintenance: one Event on the node, one on every VM that ran there."""
    vms = result["vms"]
    name = node["metadata"]["name"]
    events.normal(node_ref(node), SUCCEED, "Drain",
                  "In maintenance after %.1f s: %s migrated, %s shut down, %s evicted" % (
                      result.get("duration_seconds") or 0.0, _plural(len(vms["migrated"]), "VM"),
                      _plural(len(vms["shut_down"]), "VM"), _plural(result["eviction_pods"], "pod")))
    why = _why(name, reason)
    related = node_ref(node)
    for vm in vms["migrated"]:
        events.normal(vm_ref(snapshot, vm["namespace"], vm["name"]), MIGRATED, "Migrate",
                      "Live-migrated from %s to %s for the %s" % (vm["source"], vm["target"] or "another node", why),
                      related=related)
    for vm in vms["shut_down"]:
        ref = vm_ref(snapshot, vm["namespace"], vm["name"])
        events.normal(ref, SHUT_DOWN, "Stop",
                      "Shut down on %s for the %s: it cannot live-migrate (run strategy %s)" % (
                          vm["source"], why, vm.get("run_strategy") or "none"), related=related)
        if vm.get("restarted_on"):
            events.normal(ref, STARTED_ELSEWHERE, "Start",
                          "Started again on %s after the shutdown for the %s" % (vm["restarted_on"], why),
                          related=related)
        elif vm.get("outcome") in fates.STOPPED_OUTCOMES:
            events.normal(ref, LEFT_STOPPED, "Stop",
                          "Left stopped after the shutdown for the %s (run strategy %s)" % (
                              why, vm.get("run_strategy") or "none"), related=related)


@contextlib.contextmanager
def told_on_failure(events, node, reason, doing, changed=lambda: True, action="Drain"):
    """A Warning Event on the node when the body fails with the collection's error (raised on) after
    it changed something (``changed()``; a failure that changed nothing leaves no trace):
    ``doing`` names the work, e.g. "Maintenance" or "Decommissioning"."""
    try:
        yield
    except MaintenanceError as failure:
        if changed():
            events.warning(node_ref(node), reason, action, "%s failed: %s" % (doing, failure.msg))
        raise


def removed(events, node, result):
    events.normal(node_ref(node), REMOVED, "Uncordon",
                  "Left maintenance after %.1f s: uncordoned%s" % (
                      result.get("duration_seconds") or 0.0,
                      ", %s cancelled" % _plural(len(result["evacuations_cancelled"]), "evacuation")
                      if result.get("evacuations_cancelled") else ""))


def began_decommission(events, node, pods, vm_count):
    events.normal(node_ref(node), BEGIN_DECOMMISSION, "Cordon",
                  "Decommissioning: cordoned, %s to evict, %s among them" % (
                      _plural(pods, "pod"), _plural(vm_count, "VM")))


def powered_off(events, node, by):
    events.normal(node_ref(node), POWERED_OFF, "PowerOff", "Machine powered off: %s" % by)


def powered_on(events, node, by):
    events.normal(node_ref(node), POWERED_ON, "PowerOn", "Machine powered on: %s" % by)


def machine_restarted(events, node, by):
    events.normal(node_ref(node), MACHINE_RESTARTED, "Restart", "Machine restarted, node Ready with a new boot: %s" % by)


def machine_serviced(events, node, what):
    events.normal(node_ref(node), MACHINE_SERVICED, "Service", "Machine serviced: %s" % what)


def fenced(events, node, taint):
    events.normal(node_ref(node), FENCED, "Taint",
                  "Fenced: machine off, tainted %s (its pods are deleted, its volumes detached)" % taint)


def unfenced(events, node, taint):
    events.normal(node_ref(node), UNFENCED, "Taint", "Unfenced: machine on, node Ready, taint %s removed" % taint)


def decommissioned(events, node, result):
    vms = result["vms"]
    events.normal(node_ref(node), DECOMMISSIONED, "Delete",
                  "Drained and deleted after %.1f s (machine off: %s): %s running elsewhere, %s not restarted" % (
                      result.get("duration_seconds") or 0.0, result.get("powered_off_by") or "not confirmed",
                      _plural(len(vms.get("rescheduled") or []), "VM"),
                      _plural(len(vms.get("not_restarted") or []), "VM")))
