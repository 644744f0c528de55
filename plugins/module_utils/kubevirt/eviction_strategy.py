# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Eviction strategies: per VM (``spec.template.spec.evictionStrategy``) and cluster-wide
(HyperConverged, else the KubeVirt CR's ``spec.configuration.evictionStrategy``).

Since KubeVirt 1.1 virt-api copies the VM's strategy, or the cluster default, into every new
VMI (pkg/defaults/defaults.go, setDefaultEvictionStrategy), and an eviction follows the VMI's
own value: a change reaches a running VM only when its VMI is re-created. Both scopes return
``restart_required`` (the running VMIs whose frozen strategy still differs from the new one)
and ``restart: true`` restarts exactly those.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_key, object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import hco as hco_utils
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migratability
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import run_strategy
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import vms
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import waiter
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.kubevirt import (
    live_migratable,
    vm_claim_names,
    vm_not_migratable_reason,
    vm_run_strategy,
    vmi_is_active,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.cluster_settings import (
    cluster_eviction_strategy,
    kubevirt_cr,
)

VM_PATH = ("spec", "template", "spec", "evictionStrategy")
KUBEVIRT_PATH = ("spec", "configuration", "evictionStrategy")
RESTARTABLE = ("Always", "RerunOnFailure", "Manual")


class VmChange:
    """The eviction-strategy change of one VirtualMachine."""

    def __init__(self, vm, vmi, desired, cluster_default):
        self.vm = vm
        self.vmi = vmi
        self.desired = desired
        self.cluster_default = cluster_default
        self.before = patches.value_at(vm, VM_PATH)
        self.after = desired
        self.restart = False
        self.restarted = False
        self.skipped_restart = None

    @property
    def key(self):
        return object_key(self.vm)

    @property
    def changed(self):
        return self.before != self.after or self.restarted

    def plan(self, vm):
        """JSON patch for the current ``vm`` (re-planned when someone changed it meanwhile)."""
        self.vm = vm
        self.before = patches.value_at(vm, VM_PATH)
        return patches.set_field(vm, VM_PATH, self.desired), None

    def effective_after(self):
        return self.after or self.cluster_default

    @property
    def restart_required(self):
        """True while the running VMI follows another strategy than the VM now asks for."""
        return frozen_differs(self.vmi, self.effective_after(), self.cluster_default) and not self.restarted

    def decide_restart(self):
        """Restart a running VMI whose effective strategy differs from what the VM now says."""
        if not frozen_differs(self.vmi, self.effective_after(), self.cluster_default):
            return
        strategy = vm_run_strategy(self.vm)
        if strategy == "Halted":
            return  # its VMI is on its way out; the next start uses the new value
        if strategy not in RESTARTABLE:
            self.skipped_restart = strategy
            return
        self.restart = True

    def result(self):
        namespace, name = self.key
        return dict(namespace=namespace, name=name, before=self.before, after=self.after,
                    effective=self.effective_after(), changed=self.changed, restarted=self.restarted)


def frozen_differs(vmi, wanted, cluster_default):
    """Whether an active VMI's own (frozen) eviction strategy differs from ``wanted``; a VMI
    without one (created before KubeVirt 1.1) follows the cluster default."""
    if not vmi_is_active(vmi):
        return False
    running = (vmi.get("spec") or {}).get("evictionStrategy") or cluster_default
    return running != wanted


def _restart_required(changes):
    return sorted("%s/%s" % c.key for c in changes if c.restart_required)


def _select_non_migratable(client, selection, selected, vmis, kubevirt, warn):
    """Only the VMs that cannot live-migrate (those a LiveMigrate drain would block on)."""
    pvcs = {}

    def judged_by_spec(vm):
        vmi = vmis.get(object_key(vm))
        return not vmi_is_active(vmi) or live_migratable(vmi)[0] is None

    needs_pvcs = any(vm_claim_names(vm) and judged_by_spec(vm) for vm in selected)
    if needs_pvcs:
        items, _rv = client.list("PersistentVolumeClaim", namespace=selection.list_namespace)
        pvcs = vms.index_by_key(items)
    # Stopped VMs are judged as virt-handler of the installed release would judge them.
    rules = migratability.ClusterRules(kubevirt)
    chosen, unknown = [], []
    for vm in selected:
        reason = vm_not_migratable_reason(vm, vmis.get(object_key(vm)), lambda ns, name: pvcs.get((ns, name)), rules)
        if reason == "Unknown":
            unknown.append(object_name(vm))
        elif reason:
            chosen.append(vm)
    if unknown:
        warn("Left out %d VirtualMachines whose migratability cannot be told (a PVC they use does not exist): %s."
             % (len(unknown), ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")))
    return chosen


def _decide_restarts(changes, warn):
    for change in changes:
        change.decide_restart()
    skipped = [c for c in changes if c.skipped_restart]
    if skipped:
        warn("Not restarted, as their run strategy would not start them again: %s. Their new eviction "
             "strategy applies from their next start." % ", ".join(
                 "%s/%s (%s)" % (c.key + (c.skipped_restart,)) for c in skipped[:10]))


def _apply_changes(client, changes, write):
    """Patch and restart the VMs that change, in parallel; raises when any of them failed."""
    served = False
    if write and any(c.restart for c in changes):
        served = run_strategy.subresources_served(client)

    def apply(change):
        if change.before != change.desired:
            _outcome, change.vm = patches.update_guarded(client, "VirtualMachine", change.vm, change.plan,
                                                         write=write)
        if change.restart:
            if write:
                run_strategy.request_vmi_action(client, change.vm, change.vmi, "restart", served)
            change.restarted = True
        return change

    work = [c for c in changes if c.before != c.after or c.restart]
    outcomes = vms.run_parallel(apply, work)
    results = [c.result() for c in changes]
    vms.raise_failures(outcomes, "Setting the eviction strategy", key_of=lambda c: c.key,
                       changed=any(o.error is None for o in outcomes), vms=results)


def _wait_for_restarts(client, selection, restarted, timeout):
    plans = []
    for change in restarted:
        plan = run_strategy.RunStrategyChange(change.vm, change.vmi)
        plan.vmi_request, plan.target = "restart", run_strategy.RUNNING
        plans.append(plan)
    run_strategy.wait_for_targets(client, selection, plans, timeout)


def _vm_diff(changes):
    changed = [c for c in changes if c.changed]
    return {
        "before": dict(("%s/%s" % c.key, {"evictionStrategy": c.before}) for c in changed),
        "after": dict(("%s/%s" % c.key, dict({"evictionStrategy": c.after},
                                             **({"restarted": True} if c.restarted else {}))) for c in changed),
    }


def _vm_scope(module):
    params = module.params
    client = module.client
    selection = vms.Selection(params).validate()
    desired = params["strategy"] if params["state"] == "present" else None
    kubevirt = kubevirt_cr(client)
    cluster_default = cluster_eviction_strategy(kubevirt)
    selected = vms.select(client, selection, module.warn)
    vmis = vms.list_vmis(client, selection, selected)
    if params["only_non_migratable"]:
        selected = _select_non_migratable(client, selection, selected, vmis, kubevirt, module.warn)
    changes = [VmChange(vm, vmis.get(object_key(vm)), desired, cluster_default) for vm in selected]
    if params["restart"]:
        _decide_restarts(changes, module.warn)
    write = not module.check_mode
    _apply_changes(client, changes, write)
    restarted = [c for c in changes if c.restarted]
    if write and restarted and params["wait"]:
        _wait_for_restarts(client, selection, restarted, params["wait_timeout"])
    for change in changes:
        if change.changed and write:
            module.events.normal(reference(change.vm, "VirtualMachine"), "EvictionStrategyChanged", "Update",
                                 "spec.template.spec.evictionStrategy %s -> %s%s" % (
                                     change.before or "unset", change.after or "unset",
                                     "; VMI restarted for it" if change.restarted else ""))
    result = dict(
        changed=any(c.changed for c in changes),
        vms=[c.result() for c in changes],
        cluster=dict(before=cluster_default, after=cluster_default),
        restart_required=_restart_required(changes),
    )
    if module.diff_mode:
        result["diff"] = _vm_diff(changes)
    return result


def _cluster_target(client):
    """(kind, object, field path, description, HyperConverged or None) of what holds the cluster default."""
    hco = hco_utils.find(client)
    if hco is not None:
        return hco.kind, hco.obj, hco.eviction_strategy_path, hco.describe(), hco
    kubevirt = kubevirt_cr(client)
    if kubevirt is not None:
        meta = kubevirt["metadata"]
        return "KubeVirt", kubevirt, KUBEVIRT_PATH, "KubeVirt %s/%s" % (meta.get("namespace"), meta["name"]), None
    raise InvalidInputError(
        "Cannot set the cluster eviction strategy: neither a HyperConverged nor a KubeVirt resource exists "
        "(is KubeVirt or OpenShift Virtualization installed?).")


def _wait_propagated(client, value, timeout):
    """Wait until HCO has copied ``value`` into the KubeVirt CR, which is what KubeVirt reads."""
    kubevirt = kubevirt_cr(client)
    if kubevirt is None:
        return
    meta = kubevirt["metadata"]
    waiter.wait_for_object(
        client, "KubeVirt", meta["name"],
        lambda obj: obj is not None and patches.value_at(obj, KUBEVIRT_PATH) == value,
        timeout, "the HyperConverged operator to set evictionStrategy %s in KubeVirt %s/%s"
        % (value, meta.get("namespace"), meta["name"]), namespace=meta.get("namespace"))


def _cluster_scope(module):
    params = module.params
    selection = vms.Selection(params)
    if selection.given or params["only_non_migratable"]:
        raise InvalidInputError(
            "Options name, namespace, label_selector, all_namespaces and only_non_migratable select "
            "VirtualMachines; they do not apply to scope=cluster.")
    client = module.client
    desired = params["strategy"] if params["state"] == "present" else None
    kind, obj, path, described, hco = _cluster_target(client)

    def plan(current):
        return patches.set_field(current, path, desired), patches.value_at(current, path)

    before, after_obj = patches.update_guarded(client, kind, obj, plan, write=not module.check_mode)
    changed = before != desired
    if changed and not module.check_mode:
        module.events.normal(reference(after_obj, kind), "EvictionStrategyChanged", "Update",
                             "the cluster's evictionStrategy %s -> %s" % (before or "unset", desired or "unset"))
    if changed and hco is not None and desired and params["wait"] and not module.check_mode:
        _wait_propagated(client, desired, params["wait_timeout"])
    # The VMs that follow the cluster default: those without a strategy of their own.
    followers = _cluster_followers(client, desired)
    restarted = []
    if params["restart"] and followers:
        restarted = _restart(module, followers)
    result = dict(changed=changed or bool(restarted), vms=[c.result() for c in restarted],
                  cluster=dict(before=before, after=desired, resource=described),
                  restart_required=_restart_required(followers))
    if module.diff_mode:
        result["diff"] = {"before": {described: {"evictionStrategy": before}},
                          "after": {described: {"evictionStrategy": desired}}}
    return result


def _cluster_followers(client, desired):
    """A VmChange (without a change of its own) for every VM that follows the cluster default."""
    selection = vms.Selection({"all_namespaces": True})
    selected = [vm for vm in vms.select(client, selection, lambda msg: None) if patches.value_at(vm, VM_PATH) is None]
    vmis = vms.list_vmis(client, selection, selected)
    return [VmChange(vm, vmis.get(object_key(vm)), None, desired) for vm in selected]


def _restart(module, changes):
    """Restart the VMIs of ``changes`` whose frozen strategy differs; returns those restarted."""
    client = module.client
    for change in changes:
        change.decide_restart()
    todo = [c for c in changes if c.restart]
    if not todo or module.check_mode:
        for change in todo:
            change.restarted = True
        return todo
    served = run_strategy.subresources_served(client)

    def apply(change):
        run_strategy.request_vmi_action(client, change.vm, change.vmi, "restart", served)
        change.restarted = True
        return change

    outcomes = vms.run_parallel(apply, todo)
    vms.raise_failures(outcomes, "Restarting VMs for the new eviction strategy", key_of=lambda c: c.key,
                       changed=True, vms=[c.result() for c in todo])
    if module.params["wait"]:
        plans = []
        for change in todo:
            plan = run_strategy.RunStrategyChange(change.vm, change.vmi)
            plan.vmi_request, plan.target = "restart", run_strategy.RUNNING
            plans.append(plan)
        run_strategy.wait_for_targets(client, None, plans, module.params["wait_timeout"])
    return todo


def run(module):
    """vm_eviction_strategy."""
    if module.params["state"] == "present" and not module.params.get("strategy"):
        raise InvalidInputError("Option strategy is required with state=present.")
    if module.params["scope"] == "cluster":
        return _cluster_scope(module)
    return _vm_scope(module)
