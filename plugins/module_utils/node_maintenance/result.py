# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The result node_maintenance reports, entering or leaving: its shape, the VMs' fates, and the
remediation pauses restored."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError

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


def describe_check(item):
    where = "%s/%s" % (item["namespace"], item["name"]) if item.get("namespace") else item["name"]
    return "%s %s" % (item["kind"], where)


def pauses_predicted(node, pauses):
    """Check mode: what :func:`pause_remediation` would report as ``remediation_paused``."""
    return [remediation.entry(kind, check, remediation.how(kind)) for kind, check in pauses] \
        + remediation.label_entry(node)


def pause_remediation(client, node, pauses, progress, result):
    """Pause ``pauses`` (remediation.to_pause) for ``node``, recorded on the node first; the entries go to
    ``result["remediation_paused"]`` with the exclude label the node gets with maintenance. Returns the node after."""
    name = node["metadata"]["name"]
    if pauses:
        require(client, [Permission("patch", "nodes")] + remediation.permissions(pauses),
                "pause the remediation of node %s" % name)
    label = remediation.label_entry(node)
    node, paused = remediation.pause(client, node, pauses)
    result["remediation_paused"] = paused + label
    if paused:
        result["changed"] = True
        progress.line("paused remediation: %s" % ", ".join(describe_check(e) for e in paused))
    return node


@contextlib.contextmanager
def restored_on_failure(module, name, progress, result, doing):
    """Undo the remediation pauses for node ``name`` when the body fails (``doing``: what failed, e.g.
    "Decommissioning"); the body's failure is raised, with ``remediation_restored`` in its result, and a
    failure to restore is a warning."""
    try:
        yield
    except Exception as failure:
        if module.params["pause_remediation"]:
            try:
                restored = restore_remediation(module.client, name, progress, result)
            except MaintenanceError as exc:
                module.warn("%s node %s failed, and restoring the remediation paused for it failed too "
                            "(node_maintenance state=absent restores it): %s" % (doing, name, exc.msg))
            else:
                if isinstance(failure, MaintenanceError):
                    failure.details["remediation_restored"] = restored
        raise


def restore_remediation(client, name, progress, result=None, deleted_node=None):
    """Undo this collection's remediation pauses for node ``name`` (failure or end of maintenance);
    ``deleted_node``: the node as last read, for a node that is gone (decommissioned)."""
    node = deleted_node if deleted_node is not None else nodes_mod.get_node(client, name)
    _node, restored = remediation.restore(client, node, node_deleted=deleted_node is not None)
    if restored:
        progress.line("restored remediation: %s" % ", ".join(describe_check(e) for e in restored))
    if result is not None:
        result["remediation_restored"] = restored
    return restored


def blocker_text(plan, uid):
    for blocker in plan.blockers:
        if blocker.vmi_uid == uid:
            return blocker.text
    return None


def shut_down_entry(vm, source, restarted_on=None):
    outcome, restarted_by = vm["_fate"].after_shutdown
    entry = {"namespace": vm["namespace"], "name": vm["name"], "source": source, "run_strategy": vm["run_strategy"],
             "outcome": outcome}
    if restarted_by:
        entry["restart_by"] = restarted_by
    if restarted_on is not None:
        entry["restarted_on"] = restarted_on
    return entry


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
            reason = explanations.get(object_name(pod)) if pod is not None else None
            if final or vm["outcome"] in (fates.BLOCK, fates.EXTERNAL):
                vms["blocked"].append({"namespace": vm["namespace"], "name": vm["name"],
                                       "reason": reason or blocker_text(plan, uid) or
                                       "still on node %s" % plan.node})
            else:
                vms["pending"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                       "outcome": vm["outcome"]})
        elif now is not None and kubevirt.vmi_is_active(now):
            vms["migrated"].append({"namespace": vm["namespace"], "name": vm["name"], "source": plan.node,
                                    "target": kubevirt.migration_target(now)})
        else:
            vms["shut_down"].append(shut_down_entry(vm, plan.node, (restarted or {}).get((vm["namespace"], vm["name"]))))
    return vms
