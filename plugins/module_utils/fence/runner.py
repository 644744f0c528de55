# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_fence: a failed node's machine powered off through its BMC, then the node marked out of service.

Kubernetes non-graceful node shutdown (GA in 1.28; kubernetes ``pkg/controller/podgc/gc_controller.go``
``gcTerminating``, the attach-detach controller): on a node tainted
``node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`` whose Ready condition is not True, the pod GC
force-deletes the pods and the volumes are detached at once. KubeVirt then sees the virt-launcher pods gone
(virt-controller ``pkg/virt-controller/watch/vmi``) and fails the VMIs, so Always and RerunOnFailure VMs start
again on other nodes. Without the taint, a dead node's VMIs stay Running in the API until the node is deleted
or boots again. The taint is only safe once the machine is known off: set on a node whose guests still run
(a network partition), it starts them a second time, on shared storage too. So the power-off comes first,
confirmed from the BMC's own reading, and a node whose kubelet still heartbeats is refused.

``state: absent`` powers the machine on, waits for the node to be Ready again and removes the taint.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import now_seconds
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import power
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, wait_for_object
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import vms as vms_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.fates import RESTARTING
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import road
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import story
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.result import (
    pause_remediation,
    pauses_predicted,
    restore_remediation,
    restored_on_failure,
)

OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
TAINT_TEXT = "%s=%s:%s" % (OUT_OF_SERVICE["key"], OUT_OF_SERVICE["value"], OUT_OF_SERVICE["effect"])

NOT_RESTARTED = {
    "Manual": "run strategy Manual: KubeVirt does not start it again by itself",
    "Halted": "run strategy Halted",
    "Once": "run strategy Once: a VMI that failed is not started again",
}


def run(module):
    params = module.params
    name = params["name"]
    deadline = Deadline(params["wait_timeout"])
    given = road.check_options(params)
    client = module.client
    result = {"changed": False, "node": name, "state": params["state"], "fenced": False, "machine": None,
              "vms": {"restarted": [], "not_restarted": []}, "remediation_paused": [], "remediation_restored": []}
    node = client.get_or_none("Node", name)
    if node is None:
        raise InvalidInputError("Node %s does not exist." % name, option="name")
    refuse_while_held(client, params.get("lock"), "Node %s was not %s" % (
        name, "fenced" if params["state"] == "present" else "unfenced"), node=name)
    machine = road.resolve(client, name, node, params, given)
    if params["state"] == "present":
        beat = power.heartbeat(node, client.get_or_none("Lease", name, power.NODE_LEASE_NAMESPACE))
        if beat.alive:
            raise BlockedError(
                "Node %s still heartbeats (%s): a live node is drained (node_maintenance) or decommissioned, never "
                "fenced; nothing was changed." % (name, beat.describe()), node=name, heartbeat=beat.as_dict())
    # Before anything changes: the BMC (or the BareMetalHost) answers, and says how the machine is.
    result["machine"] = dict(machine.as_dict(), power_state=machine.power_state(), actions=[])
    result["fenced"] = nodes_mod.has_taint(node, OUT_OF_SERVICE)
    if params["state"] == "present":
        return _fence(module, client, name, node, machine, deadline, result)
    return _unfence(module, client, name, node, machine, deadline, result)


# -- fencing ---------------------------------------------------------------------------------------

def _fence(module, client, name, node, machine, deadline, result):
    params = module.params
    vms = _vms_on(client, name)
    result["vms"]["not_restarted"] = [_not_restarted(vm) for vm in vms if vm["run_strategy"] not in RESTARTING]
    restarting = [vm for vm in vms if vm["run_strategy"] in RESTARTING]
    if result["fenced"] and result["machine"]["power_state"] == "Off":
        result["vms"]["restarted"] = restart_elsewhere.wait_running_elsewhere(
            client, name, restarting, deadline, False, result, "Node %s is fenced" % name, key="restarted")
        return result
    machine.refuse_power_off_if_disabled(node=name)
    pauses = remediation.to_pause(client, node) if params["pause_remediation"] else []
    result["changed"] = True
    if module.check_mode:
        result["fenced"] = True
        result["remediation_paused"] = pauses_predicted(node, pauses)
        result["vms"]["restarted"] = [{"namespace": vm["namespace"], "name": vm["name"], "node": None}
                                      for vm in restarting]
        return result
    needed = [Permission("patch", "nodes"), Permission("watch", "virtualmachineinstances", group="kubevirt.io")]
    require(client, needed + machine.permissions(), "fence node %s" % name)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    node = pause_remediation(client, node, pauses, progress, result)
    with restored_on_failure(module, name, progress, result, "Fencing"):
        with story.told_on_failure(module.events, node, story.FAILED_FENCING, "Fencing"):
            progress.line("phase=Running powering off the machine of node %s through %s" % (name, machine.describe()))
            try:
                actions = machine.power_off(deadline.remaining(), graceful=False)
            except WaitTimeoutError as exc:
                raise WaitTimeoutError("Node %s was not fenced: %s did not report the machine off within %ds (%s); "
                                       "the node is not tainted." % (name, machine.describe(), round(deadline.seconds),
                                                                     exc.details.get("pending") or "no answer"),
                                       **result) from exc
            result["machine"].update(power_state="Off", actions=actions)
            story.powered_off(module.events, node, "%s, %s" % (
                machine.describe(), ", ".join(actions) or "it was off already"))
            node = node_marks.update_node(client, name, _taint_change(True), node=node)[0]
            result["fenced"] = True
            story.fenced(module.events, node, TAINT_TEXT)
            progress.line("phase=Running machine off, node tainted %s" % TAINT_TEXT)
    result["vms"]["restarted"] = restart_elsewhere.wait_running_elsewhere(
        client, name, restarting, deadline, params["wait_for_vms"], result, "Node %s was fenced" % name,
        key="restarted")
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    progress.line("phase=Succeeded node fenced, %d VM%s running elsewhere" % (
        len(result["vms"]["restarted"]), "" if len(result["vms"]["restarted"]) == 1 else "s"))
    return result


def _vms_on(client, name):
    """The VMIs on the node, each {namespace, name, run_strategy, _vmi} (run_strategy None: no VM owns it)."""
    vmis = vms_mod.vmis_on_node(client, name)
    owners = {}  # (namespace, VM name) -> VM, one list per namespace
    for namespace in sorted(set(vmi["metadata"]["namespace"] for vmi in vmis)):
        for vm in client.list("VirtualMachine", namespace=namespace)[0]:
            owners[(namespace, vm["metadata"]["name"])] = vm
    vms = []
    for vmi in vmis:
        namespace, vm_name = vmi["metadata"]["namespace"], kubevirt.vm_name_of(vmi)
        vm = owners.get((namespace, vm_name)) if vm_name else None
        vms.append({"namespace": namespace, "name": vm_name or vmi["metadata"]["name"], "_vmi": vmi,
                    "run_strategy": kubevirt.vm_run_strategy(vm) if vm else None})
    return sorted(vms, key=lambda vm: (vm["namespace"], vm["name"]))


def _not_restarted(vm):
    reason = NOT_RESTARTED.get(vm["run_strategy"]) or (
        "no VirtualMachine owns the VMI" if vm["run_strategy"] is None else "run strategy %s" % vm["run_strategy"])
    return {"namespace": vm["namespace"], "name": vm["name"], "run_strategy": vm["run_strategy"], "reason": reason}


def _taint_change(present):
    def compute(current):
        taints = list((current.get("spec") or {}).get("taints") or [])
        has = nodes_mod.has_taint(current, OUT_OF_SERVICE)
        if present and not has:
            return {"spec": {"taints": taints + [dict(OUT_OF_SERVICE, timeAdded=now_seconds())]}}, True
        if not present and has:
            kept = [t for t in taints if not (t.get("key") == OUT_OF_SERVICE["key"]
                                              and t.get("effect") == OUT_OF_SERVICE["effect"])]
            return {"spec": {"taints": kept or None}}, True
        return None, False
    return compute


# -- unfencing -------------------------------------------------------------------------------------

def _unfence(module, client, name, node, machine, deadline, result):
    params = module.params
    if not result["fenced"] and result["machine"]["power_state"] == "On" and nodes_mod.is_ready(node):
        return result
    result["changed"] = True
    if module.check_mode:
        result["fenced"] = False
        return result
    require(client, [Permission("patch", "nodes"), Permission("watch", "nodes")]
            + machine.permissions(), "unfence node %s" % name)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    boot_before = nodes_mod.boot_id(node)
    progress.line("phase=Running powering on the machine of node %s through %s" % (name, machine.describe()))
    try:
        actions = machine.power_on(deadline.remaining())
    except WaitTimeoutError as exc:
        raise WaitTimeoutError("Node %s was not unfenced: %s did not report the machine on within %ds (%s); the node "
                               "stays tainted." % (name, machine.describe(), round(deadline.seconds),
                                                   exc.details.get("pending") or "no answer"), **result) from exc
    result["machine"].update(power_state="On", actions=actions)
    if actions:
        story.powered_on(module.events, node, "%s, %s" % (machine.describe(), ", ".join(actions)))
    progress.line("phase=Running machine on, waiting for node %s to be Ready" % name)
    try:
        node = wait_for_object(client, "Node", name, lambda n: n is not None and nodes_mod.is_ready(n),
                               deadline.remaining(), "node %s to be Ready" % name,
                               describe_pending=lambda: nodes_mod.not_ready_reason(
                                   client.get_or_none("Node", name) or {}))
    except WaitTimeoutError as exc:
        pending = exc.details.get("pending") or "no answer"
        raise WaitTimeoutError("Node %s was not unfenced: its machine is on, but the node was not Ready within %ds "
                               "(%s); the node stays tainted." % (name, round(deadline.seconds), pending),
                               **result) from exc
    result["boot_id"] = {"before": boot_before, "after": nodes_mod.boot_id(node)}
    node = node_marks.update_node(client, name, _taint_change(False), node=node)[0]
    result["fenced"] = False
    story.unfenced(module.events, node, TAINT_TEXT)
    if params["pause_remediation"]:
        restore_remediation(client, name, progress, result)
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    progress.line("phase=Succeeded node unfenced: machine on, node Ready, taint removed")
    return result
