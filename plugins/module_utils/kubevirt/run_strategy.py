# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run strategies and the start/stop/restart actions of VirtualMachines.

The transition table (kubevirt-behavior page, as virtctl and the console apply it):

  before \\ action   start                  stop      restart
  Always            -                      Halted    Always (VMI re-created)
  RerunOnFailure    -                      (kept)*   RerunOnFailure (VMI re-created)
  ...
  * KubeVirt >= 1.2 stops the VMI and keeps RerunOnFailure; the seeds' table (and
    KubeVirt < 1.2) says Halted.
  Manual            Manual (VMI started)   Manual    Manual (VMI re-created)
  Halted            Always                 -         -

``Once`` follows upstream's handlers: stop -> Halted, start and restart are refused
(a Once VM never starts again by itself). A VM still using the deprecated
``spec.running`` gets the equivalent ``spec.runStrategy`` in the same write.

Changes of the run strategy are JSON patches of the VM spec (tested against the old
value). Actions that keep the run strategy go through the ``subresources.kubevirt.io``
API when the cluster serves it, else through what that API does on the VM object:
``status.stateChangeRequests`` (Stop with the VMI's uid, then Start) for Manual and
RerunOnFailure, deleting the VMI for an Always restart.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_key
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import vms
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import waiter
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    InvalidInputError,
    MaintenanceError,
    describe_object,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import SUBRESOURCE_GROUP
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.kubevirt import (
    FINISHED_PHASES,
    vm_run_strategy,
    vmi_is_active,
    vmi_phase,
)

ACTIONS = ("start", "stop", "restart")

# Run strategy after each action; None = the action is refused for that strategy.
AFTER_ACTION = {
    "Always": {"start": "Always", "stop": "Halted", "restart": "Always"},
    # KubeVirt >= 1.2 keeps RerunOnFailure on stop (pkg/virt-api/rest/lifecycle.go asks the VM
    # controller to stop the VMI instead of rewriting the strategy); the seeds' table says Halted.
    "RerunOnFailure": {"start": "RerunOnFailure", "stop": "RerunOnFailure", "restart": "RerunOnFailure"},
    "Manual": {"start": "Manual", "stop": "Manual", "restart": "Manual"},
    "Halted": {"start": "Always", "stop": "Halted", "restart": "Halted"},
    "Once": {"start": "Once", "stop": "Halted", "restart": None},
}

# What "done" means for the VMI, per wait target.
RUNNING = "running"  # a VMI in phase Running (for a restart: a new one)
GONE = "gone"  # no VMI
STARTED_ONCE = "started"  # a VMI that runs or has run to its end


def vmi_uid(vmi):
    return (vmi.get("metadata") or {}).get("uid") if vmi else None


class RunStrategyChange:
    """What one task does to one VirtualMachine."""

    def __init__(self, vm, vmi):
        self.vm = vm
        self.vmi = vmi
        spec = vm.get("spec") or {}
        self.uses_running = "running" in spec
        self.before = vm_run_strategy(vm)
        self.after = self.before
        self.write_spec = False  # spec.runStrategy (and spec.running) change
        self.vmi_request = None  # start | stop | restart, acting on the VMI
        self.action = None  # the action performed, as reported
        self.target = None  # what to wait for
        self.old_uid = vmi_uid(vmi)
        self.phase = vmi_phase(vmi)
        self.error = None

    @property
    def key(self):
        return object_key(self.vm)

    def describe(self):
        return describe_object("VirtualMachine", self.key[1], self.key[0])

    @property
    def changed(self):
        return bool(self.write_spec or self.vmi_request)

    def result(self):
        namespace, name = self.key
        return dict(namespace=namespace, name=name, before=self.before, after=self.after, action=self.action,
                    vmi_phase=self.phase, changed=self.changed)

    def diff(self):
        before = {"runStrategy": self.before}
        if self.uses_running:
            before = {"running": (self.vm.get("spec") or {}).get("running")}
        after = {"runStrategy": self.after}
        if self.vmi_request:
            before["vmi"] = self.phase
            after["vmi"] = {"start": "started", "stop": "stopped", "restart": "re-created"}[self.vmi_request]
        return before, after


def plan_run_strategy(vm, vmi, run_strategy):
    """Setting ``spec.runStrategy`` (replacing ``spec.running``)."""
    plan = RunStrategyChange(vm, vmi)
    plan.after = run_strategy
    plan.write_spec = plan.uses_running or (vm.get("spec") or {}).get("runStrategy") != run_strategy
    if plan.write_spec and plan.before != run_strategy:
        if run_strategy == "Halted":
            plan.target = GONE
        elif run_strategy == "Always":
            plan.target = RUNNING
        elif run_strategy == "RerunOnFailure" and vmi_phase(vmi) != "Succeeded":
            # RerunOnFailure starts a missing VMI, but does not restart one that ended cleanly.
            plan.target = RUNNING
        elif run_strategy == "Once" and not vmi:
            plan.target = STARTED_ONCE
    return plan


def plan_action(vm, vmi, action):
    """One of start/stop/restart, following the transition table."""
    plan = RunStrategyChange(vm, vmi)
    before = plan.before
    if before not in AFTER_ACTION:
        plan.error = "%s has run strategy %s, which supports no %s." % (plan.describe(), before, action)
        return plan
    after = AFTER_ACTION[before][action]
    if after is None:
        plan.error = ("%s has run strategy %s, which does not support %s: it would not run again; set run_strategy "
                      "instead." % (plan.describe(), before, action))
        return plan
    plan.after = after
    active = vmi_is_active(vmi)
    if after != before:
        # Always/RerunOnFailure/Once stop -> Halted, Halted start -> Always: a spec change.
        plan.write_spec = True
        plan.action = action
        plan.target = RUNNING if after == "Always" else GONE
    elif action == "start" and not active and before in ("Manual", "RerunOnFailure"):
        plan.vmi_request = "start"
    elif action == "start" and not active and before == "Once":
        plan.error = ("%s has run strategy Once and its VMI is not running; Once does not support start: set "
                      "run_strategy instead." % plan.describe())
        return plan
    elif action == "stop" and active and before in ("Manual", "RerunOnFailure"):
        plan.vmi_request = "stop"
    elif action == "restart" and vmi and before in ("Always", "RerunOnFailure", "Manual"):
        plan.vmi_request = "restart"
    if plan.vmi_request:
        plan.action = action
        plan.target = GONE if action == "stop" else RUNNING
    if plan.uses_running:
        plan.write_spec = True  # replace the deprecated field, even when the strategy stays
    return plan


def _spec_operations(vm, after):
    """JSON patch: runStrategy = after, without spec.running (one write; the old values are tested)."""
    spec = vm.get("spec") or {}
    operations = []
    if "running" in spec:
        operations += [{"op": "test", "path": "/spec/running", "value": spec["running"]},
                       {"op": "remove", "path": "/spec/running"}]
        if "runStrategy" in spec:
            operations += patches.set_field(vm, ("spec", "runStrategy"), after)
        else:
            operations.append({"op": "add", "path": "/spec/runStrategy", "value": after})
        return operations
    return patches.set_field(vm, ("spec", "runStrategy"), after)


def subresources_served(client):
    """Whether the cluster serves virtctl's API (``subresources.kubevirt.io/v1``) right now."""
    return client.api_available("%s/v1" % SUBRESOURCE_GROUP, resource="virtualmachines")


def _state_change_operations(vm, changes):
    """Upstream's status patch: add stateChangeRequests unless another request is pending."""
    status = vm.get("status") or {}
    if not status:
        return [{"op": "add", "path": "/status", "value": {"stateChangeRequests": changes}}]
    pending = status.get("stateChangeRequests") or []
    operations = [{"op": "test", "path": "/status/stateChangeRequests", "value": status.get("stateChangeRequests")}]
    if not pending:
        return operations + [{"op": "add", "path": "/status/stateChangeRequests", "value": changes}]
    if len(changes) == 1 and changes[0]["action"] == "Stop":
        return operations + [{"op": "replace", "path": "/status/stateChangeRequests", "value": changes}]
    raise MaintenanceError("%s already has a start or stop request pending; try again once KubeVirt has handled it."
                           % describe_object("VirtualMachine", vm["metadata"]["name"], vm["metadata"]["namespace"]))


def _request_state_change(client, vm, changes):
    def plan(current):
        return _state_change_operations(current, changes), None

    patches.update_guarded(client, "VirtualMachine", vm, plan, subresource="status")


def request_vmi_action(client, vm, vmi, action, served):
    """start / stop / restart the VMI of ``vm`` without changing its run strategy."""
    if served:
        namespace, name = object_key(vm)
        client.subresource_action("VirtualMachine", name, namespace, action)
        return
    strategy = vm_run_strategy(vm)
    uid = vmi_uid(vmi)
    stop = {"action": "Stop", "uid": uid} if uid else {"action": "Stop"}
    if action == "restart" and strategy == "Always":
        # The VM controller re-creates the VMI at once; the uid precondition spares a newer VMI.
        # (RerunOnFailure re-creates only a failed VMI, so it gets Stop+Start requests below.)
        namespace, name = object_key(vm)
        client.delete("VirtualMachineInstance", name, namespace, body={"preconditions": {"uid": uid}})
    elif action == "restart":
        _request_state_change(client, vm, [stop, {"action": "Start"}])
    elif action == "stop":
        _request_state_change(client, vm, [stop])
    elif vmi and not vmi_is_active(vmi):
        _request_state_change(client, vm, [stop, {"action": "Start"}])
    else:
        _request_state_change(client, vm, [{"action": "Start"}])


def execute(client, plan, served):
    """Carry out one plan (not in check mode)."""
    if plan.write_spec:
        def spec_plan(current):
            return _spec_operations(current, plan.after), None

        _outcome, plan.vm = patches.update_guarded(client, "VirtualMachine", plan.vm, spec_plan)
    if plan.vmi_request:
        request_vmi_action(client, plan.vm, plan.vmi, plan.vmi_request, served)
    return plan


def _reached(plan, vmi):
    if plan.target == GONE:
        return vmi is None
    if vmi is None or (vmi.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if plan.vmi_request == "restart" and vmi_uid(vmi) == plan.old_uid:
        return False
    phase = vmi_phase(vmi)
    if plan.target == STARTED_ONCE:
        return phase == "Running" or phase in FINISHED_PHASES
    return phase == "Running"


def wait_for_targets(client, selection, plans, timeout):
    """Wait (watching VMIs) until every plan's VMI reached its target; update their phases."""
    plans = [p for p in plans if p.target]
    if not plans:
        return
    field_selector = None
    if len(plans) == 1:
        field_selector = "metadata.name=%s" % plans[0].key[1]
    namespace = selection.list_namespace if selection else None
    informer = waiter.Informer(client, "VirtualMachineInstance", namespace=namespace, field_selector=field_selector)

    def pending():
        return [p for p in plans if not _reached(p, informer.objects.get(p.key))]

    def check():
        for plan in plans:
            plan.phase = vmi_phase(informer.objects.get(plan.key))
        return not pending()

    def describe_pending():
        left = pending()
        words = {RUNNING: "Running", GONE: "gone", STARTED_ONCE: "started"}
        text = ", ".join("%s/%s (VMI %s, waiting for %s)" % (p.key[0], p.key[1], p.phase or "absent", words[p.target])
                         for p in left[:10])
        return text + (" and %d more" % (len(left) - 10) if len(left) > 10 else "")

    what = "the VMI of %s" % describe_object("VirtualMachine", plans[0].key[1], plans[0].key[0]) \
        if len(plans) == 1 else "the VMIs of %d VirtualMachines" % len(plans)
    try:
        waiter.wait_until(check, [informer], timeout, what, describe_pending=describe_pending)
    finally:
        informer.stop()


def _refuse(plans):
    """Nothing is changed when any VM refuses its plan."""
    refused = [p for p in plans if p.error]
    if refused:
        more = " (and %d more)" % (len(refused) - 3) if len(refused) > 3 else ""
        raise InvalidInputError("Nothing was changed: %s%s" % (" ".join(p.error for p in refused[:3]), more),
                                refused=["%s/%s" % p.key for p in refused])


def _plans_diff(changing):
    diffs = dict(("%s/%s" % p.key, p.diff()) for p in changing)
    return {"before": dict((k, v[0]) for k, v in diffs.items()),
            "after": dict((k, v[1]) for k, v in diffs.items())}


def _execute_plans(client, selection, plans, changing, params):
    served = subresources_served(client) if any(p.vmi_request for p in changing) else False
    outcomes = vms.run_parallel(lambda p: execute(client, p, served), changing)
    vms.raise_failures(outcomes, "Changing the run strategy", key_of=lambda p: p.key,
                       changed=any(o.error is None for o in outcomes),
                       vms=[p.result() for p in plans])
    if params.get("wait"):
        wait_for_targets(client, selection, changing, params["wait_timeout"])


def run(module):
    """vm_run_strategy: set a run strategy or apply an action to the selected VMs."""
    params = module.params
    selection = vms.Selection(params).validate()
    client = module.client
    selected = vms.select(client, selection, module.warn)
    vmis = vms.list_vmis(client, selection, selected)
    if params.get("run_strategy"):
        plans = [plan_run_strategy(vm, vmis.get(object_key(vm)), params["run_strategy"]) for vm in selected]
    else:
        plans = [plan_action(vm, vmis.get(object_key(vm)), params["action"]) for vm in selected]
    _refuse(plans)
    changing = [p for p in plans if p.changed]
    result = {"changed": bool(changing)}
    if module.diff_mode:
        result["diff"] = _plans_diff(changing)
    if changing and not module.check_mode:
        _execute_plans(client, selection, plans, changing, params)
        for plan in changing:
            before, after = plan.diff()
            module.events.normal(reference(plan.vm, "VirtualMachine"), "RunStrategyChanged", "Update",
                                 "; ".join("%s %s -> %s" % (k, before.get(k, "-"), after[k]) for k in sorted(after)
                                           if before.get(k) != after[k]) or plan.action or "run strategy changed")
    result["vms"] = [p.result() for p in plans]
    return result
