# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shutting VMs down for a drain, and starting them again elsewhere, through KubeVirt's API.

* Shutting down a VM the ``non_migratable=shutdown`` policy acts on goes through the VM's
  subresources (as ``virtctl`` does): ``restart`` for run strategies ``Always`` and
  ``RerunOnFailure`` (KubeVirt stops the VMI and starts a new one, which the cordon sends to
  another node), ``stop`` for ``Manual`` (the strategy stays Manual). ``Once`` and a VMI
  without a VM are shut down by deleting the VMI: ``stop`` would turn Once into Halted,
  and deleting ends the VMI exactly as an eviction does. A VM the drain gives up on (its
  live migrations kept failing) is shut down the same way under ``non_migratable=shutdown``.
* A ``RerunOnFailure`` VM whose guest an eviction shut down ends ``Succeeded``, which KubeVirt
  does not restart (pkg/virt-controller/watch/vm/vm.go); its ``start`` subresource does
  (pkg/virt-api/rest/lifecycle.go: a Succeeded VMI is replaced). ``start_again`` asks for
  that once the old VMI has ended and waits until the new one runs on another node.
* Such a VM is marked before the drain shuts it down (``mark_for_start``: a label and an
  annotation naming the node and the old VMI) and unmarked once it was started: a run stopped in
  between (the playbook killed, ``wait=false``) leaves the mark, and the next call for that node
  (entering maintenance again, or leaving it) starts the VM then (``marked_for_start``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import run_strategy
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ConflictError,
    MaintenanceError,
    NotFoundError,
    WaitTimeoutError,
    describe_object,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    START_AGAIN_ANNOTATION,
    START_AGAIN_LABEL,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import SUBRESOURCE_GROUP
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import annotation_json
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, Informer, wait_until

# Seconds a drain that ran out of time still spends starting again the VMs it shut down.
START_GRACE = 30

# Run strategies whose VMs are shut down through their restart (stop for Manual) subresource.
SUBRESOURCE_STRATEGIES = ("Always", "RerunOnFailure", "Manual")


def permissions(shutdown, entries):
    """What shutting down ``shutdown`` and starting again the VMs of ``entries`` needs."""
    perms = []
    by_action = {}
    for vm in shutdown:
        if vm["run_strategy"] in SUBRESOURCE_STRATEGIES:
            action = "stop" if vm["run_strategy"] == "Manual" else "restart"
            by_action.setdefault(action, set()).add(vm["namespace"])
        else:
            by_action.setdefault("delete", set()).add(vm["namespace"])
    for action, namespaces in sorted(by_action.items()):
        if action == "delete":
            perms.append(Permission("delete", "virtualmachineinstances", group="kubevirt.io",
                                    namespaces=sorted(namespaces)))
        else:
            perms.append(Permission("update", "virtualmachines", group=SUBRESOURCE_GROUP, subresource=action,
                                    namespaces=sorted(namespaces)))
    return perms + start_permissions((vm["namespace"], vm["name"]) for vm in needs_start(entries))


def shut_down(client, entries):
    """Shut down the VMs of ``entries`` (plan VM entries) that cannot leave by eviction.

    Returns the launcher pods the drain then only waits for (keys ``namespace/name``).
    """
    served = None
    waiting = []
    for vm in entries:
        if vm["run_strategy"] in SUBRESOURCE_STRATEGIES and served is None:
            served = run_strategy.subresources_served(client)
        _shut_down_one(client, vm["namespace"], vm["name"], vm["_vmi"], vm["run_strategy"], served)
        if vm["_pod"] is not None:
            pod = vm["_pod"]["metadata"]
            waiting.append("%s/%s" % (pod["namespace"], pod["name"]))
    return waiting


def shut_down_given_up(client, namespace, name, vmi_uid):
    """Shut down, under ``non_migratable=shutdown``, a VM whose live migrations kept failing
    during the drain, exactly as a blocker of the plan is shut down. Returns False when that
    VMI is gone already (a new one may run)."""
    try:
        vmi = client.get("VirtualMachineInstance", name, namespace)
    except NotFoundError:
        return False
    if vmi_uid and vmi["metadata"].get("uid") != vmi_uid:
        return False
    try:
        strategy = kubevirt.vm_run_strategy(client.get("VirtualMachine", name, namespace))
    except NotFoundError:
        strategy = None  # a VMI without a VM
    served = run_strategy.subresources_served(client) if strategy in SUBRESOURCE_STRATEGIES else None
    _shut_down_one(client, namespace, name, vmi, strategy, served)
    return True


def _shut_down_one(client, namespace, name, vmi, strategy, served):
    meta = vmi["metadata"]
    if strategy in SUBRESOURCE_STRATEGIES:
        owner = client.get("VirtualMachine", name, namespace)
        action = "stop" if strategy == "Manual" else "restart"
        run_strategy.request_vmi_action(client, owner, vmi, action, served)
    else:
        client.delete("VirtualMachineInstance", meta["name"], meta["namespace"],
                      body={"preconditions": {"uid": meta.get("uid")}})


def needs_start(entries):
    """The entries whose VM the collection starts again after the drain shut it down."""
    return [vm for vm in entries if vm["_fate"].restart_by == fates.BY_US and not vm["_fate"].shut_down_by_us]


def mark_for_start(client, entries, node):
    """Mark the VMs of ``entries`` the collection starts again after the drain (``needs_start``), before it shuts
    them down from ``node`` (a merge patch: marking again changes nothing)."""
    for vm in needs_start(entries):
        mark = {"node": node, "vmi": vm["_vmi"]["metadata"].get("uid")}
        try:
            client.patch("VirtualMachine", vm["name"], {"metadata": {
                "labels": {START_AGAIN_LABEL: "true"},
                "annotations": {START_AGAIN_ANNOTATION: json.dumps(mark, sort_keys=True)}}}, vm["namespace"])
        except NotFoundError:
            pass  # a VMI without a VM has no run strategy to start it by


def marked_for_start(client, node, tidy=True):
    """{(namespace, name): uid of the VMI it was shut down from} of the VMs marked for a start after the drain of
    ``node`` whose run strategy still asks for it (RerunOnFailure); a mark on any other (the VM stopped or its
    strategy changed since) is removed (``tidy``)."""
    vms, _rv = client.list("VirtualMachine", label_selector=START_AGAIN_LABEL)
    found, stale = {}, []
    for vm in vms:
        meta = vm["metadata"]
        mark = annotation_json(vm, START_AGAIN_ANNOTATION, dict) or {}
        if mark and mark.get("node") != node:
            continue  # another node's
        key = (meta["namespace"], meta["name"])
        if mark and kubevirt.vm_run_strategy(vm) == "RerunOnFailure":
            found[key] = mark.get("vmi")
        else:
            stale.append(key)
    if tidy:
        unmark(client, stale)
    return found


def start_permissions(keys):
    """What marking, starting and unmarking the VMs ``keys`` ((namespace, name), as ``marked_for_start`` has them)
    needs."""
    namespaces = sorted(set(namespace for namespace, _name in keys))
    if not namespaces:
        return []
    return [Permission("patch", "virtualmachines", group="kubevirt.io", namespaces=namespaces),
            Permission("update", "virtualmachines", group=SUBRESOURCE_GROUP, subresource="start",
                       namespaces=namespaces)]


def unmark(client, keys):
    """Remove the start mark of the VMs ``keys`` ((namespace, name))."""
    for namespace, name in keys:
        try:
            client.patch("VirtualMachine", name, {"metadata": {
                "labels": {START_AGAIN_LABEL: None}, "annotations": {START_AGAIN_ANNOTATION: None}}}, namespace)
        except NotFoundError:
            pass


def start_marked(client, marked, deadline, progress=None):
    """Start the VMs of ``marked`` (``marked_for_start``) that a run stopped between shutting them down and
    starting them, once the node is back in service: those whose old VMI has ended, or is ending (its
    virt-launcher pod terminating: the run stopped right after the eviction), waiting for that at most until
    ``deadline``; a VM whose old VMI still runs was never shut down. Unmarks them all; returns the
    ``namespace/name`` of those it started."""
    todo = {}
    for key, old_uid in marked.items():
        vmi = client.get_or_none("VirtualMachineInstance", key[1], key[0])
        if vmi is None or vmi["metadata"].get("uid") != old_uid or kubevirt.vmi_is_final(vmi) \
                or _launcher_terminating(client, vmi):
            todo[key] = old_uid
    try:
        started, _running = _start_when_ended(client, todo, None, deadline, progress, "an earlier drain")
    finally:
        unmark(client, sorted(marked))
    return ["%s/%s" % key for key in sorted(started)]


def _launcher_terminating(client, vmi):
    meta = vmi["metadata"]
    pods, _rv = client.list("Pod", namespace=meta["namespace"],
                            label_selector="%s=%s" % (kubevirt.CREATED_BY_LABEL, meta.get("uid")))
    return any(pod["metadata"].get("deletionTimestamp") for pod in pods)


def start_again(client, entries, source, deadline, progress=None):
    """Start the VMs of ``entries`` once their old VMI has ended, and those an earlier call marked for a start from
    ``source`` and never started (``marked_for_start``); wait until each runs on a node other than ``source``.
    Returns {(namespace, name): node} of those that run."""
    todo = dict(((vm["namespace"], vm["name"]), vm["_vmi"]["metadata"].get("uid")) for vm in needs_start(entries))
    marked = marked_for_start(client, source)
    for key, old_uid in marked.items():
        todo.setdefault(key, old_uid)
    if not todo:
        return {}
    # A drain that timed out (other VMs still blocking) still starts the VMs it shut down,
    # within a short grace period of its own.
    window = deadline if deadline.remaining() > START_GRACE else Deadline(START_GRACE)
    asked = set()
    try:
        _started, running = _start_when_ended(client, todo, source, window, progress, "the drain", asked=asked)
    finally:
        # Started (or replaced by KubeVirt): the next call has nothing left to start for them.
        unmark(client, sorted(key for key in marked if key in asked))
    return running


def _start_when_ended(client, todo, source, deadline, progress, by, asked=None):
    """Start each VM of ``todo`` ({(namespace, name): uid of its old VMI}) once that VMI has ended (none if
    KubeVirt replaced it meanwhile); wait until each runs on a node other than ``source`` (``source`` None: until
    each was started). A timeout ends the wait quietly. Returns (keys started by this call, {key: node} of those
    that run elsewhere); ``asked`` collects the keys no longer waited for to end."""
    asked = set() if asked is None else asked
    started, running = set(), {}
    if not todo:
        return started, running
    namespaces = set(ns for ns, _name in todo)
    informer = Informer(client, "VirtualMachineInstance",
                        namespace=list(namespaces)[0] if len(namespaces) == 1 else None)
    served = run_strategy.subresources_served(client)

    def check():
        for key, old_uid in todo.items():
            vmi = informer.get(key[1], key[0])
            uid = (vmi or {}).get("metadata", {}).get("uid")
            if key not in asked and (vmi is None or uid != old_uid or kubevirt.vmi_is_final(vmi)):
                if vmi is None or uid == old_uid:
                    _start(client, key, vmi, served)
                    started.add(key)
                    if progress is not None:
                        progress.line("started VM %s/%s again (run strategy RerunOnFailure, shut down by %s)"
                                      % (key + (by,)))
                asked.add(key)
            if source is not None and uid and uid != old_uid and kubevirt.vmi_phase_running(vmi) \
                    and kubevirt.vmi_node(vmi) not in (None, source):
                running[key] = kubevirt.vmi_node(vmi)
        return len(asked if source is None else running) == len(todo)

    def pending():
        return ", ".join("%s/%s" % key for key in sorted(todo) if key not in (asked if source is None else running))

    try:
        wait_until(check, [informer], deadline.remaining(), "VMs started again" + (
            " on another node" if source is not None else ""), describe_pending=pending, deadline=deadline)
    except WaitTimeoutError:
        pass  # the report says which did not come back
    finally:
        informer.stop()
    return started, running


def _start(client, key, vmi, served):
    namespace, name = key
    try:
        vm = client.get("VirtualMachine", name, namespace)
    except NotFoundError:
        return  # deleted meanwhile: nothing to start
    try:
        run_strategy.request_vmi_action(client, vm, vmi, "start", served)
    except ConflictError:
        pass  # "VM is already running": KubeVirt started it meanwhile
    except MaintenanceError as exc:
        raise MaintenanceError("Could not start %s again after the drain shut it down: %s"
                               % (describe_object("VirtualMachine", name, namespace), exc.msg))


def running_elsewhere(vmi, node):
    """Whether the VMI runs, on a node other than ``node``."""
    return vmi is not None and kubevirt.vmi_node(vmi) not in (None, node) and kubevirt.vmi_is_running(vmi)


def wait_running_elsewhere(client, node, vms, deadline, wait, result, done, key="rescheduled"):
    """Each of ``vms`` (``namespace``, ``name``, ``_vmi``) as {namespace, name, node}, once its VMI runs on a node other
    than ``node`` (``wait``), or as it is now. On timeout, WaitTimeoutError "<done>, but its VMs did not all run
    elsewhere ..." with ``result`` (its ``vms[key]``: those that do)."""
    namespaces = sorted(set(vm["namespace"] for vm in vms))

    def vmi_name(vm):
        return ((vm.get("_vmi") or {}).get("metadata") or {}).get("name") or vm["name"]

    def entry(vm, vmi):
        return {"namespace": vm["namespace"], "name": vm["name"],
                "node": kubevirt.vmi_node(vmi) if running_elsewhere(vmi, node) else None}

    if not wait:
        current = {}
        for namespace in namespaces:
            for vmi in client.list("VirtualMachineInstance", namespace=namespace)[0]:
                current[(namespace, vmi["metadata"]["name"])] = vmi
        return [entry(vm, current.get((vm["namespace"], vmi_name(vm)))) for vm in vms]
    informers = [Informer(client, "VirtualMachineInstance", namespace=ns) for ns in namespaces]

    def locate():
        found = []
        for vm in vms:
            vmi = None
            for informer in informers:
                vmi = vmi or informer.get(vmi_name(vm), vm["namespace"])
            found.append((vm, vmi))
        return found

    def describe():
        missing = ["%s/%s" % (vm["namespace"], vm["name"]) for vm, vmi in locate() if not running_elsewhere(vmi, node)]
        return "not yet Running on another node: %s" % ", ".join(missing)

    try:
        wait_until(lambda: all(running_elsewhere(vmi, node) for _vm, vmi in locate()), informers,
                   deadline.remaining(), "the VMs of node %s to run elsewhere" % node, describe_pending=describe,
                   deadline=deadline)
    except WaitTimeoutError as exc:
        result["vms"][key] = [entry(vm, vmi) for vm, vmi in locate() if running_elsewhere(vmi, node)]
        result["duration_seconds"] = round(deadline.elapsed(), 1)
        raise WaitTimeoutError("%s, but its VMs did not all run elsewhere within %ds: %s." % (
            done, round(deadline.seconds), describe()), **result) from exc
    finally:
        for informer in informers:
            informer.stop()
    return [entry(vm, vmi) for vm, vmi in locate()]
