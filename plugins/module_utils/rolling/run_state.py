# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rolling maintenance run keeps track of from node to node: the VMs that run (and the
VM behind each VMI), the nodes an earlier run left in maintenance (resumed first, and counted
as back in service when planning the others), and the order the run takes the nodes in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import plan as plan_mod


def vm_of(vmi):
    """(namespace, name, owned_by_vm) of the VM behind a VMI."""
    meta = vmi.get("metadata") or {}
    owner = kubevirt.vm_name_of(vmi)
    return meta.get("namespace"), owner or meta.get("name"), owner is not None


def running_vms(vmis):
    """Every VM (or stand-alone VMI) whose VMI is Running, with its node."""
    result = []
    for vmi in vmis:
        if not kubevirt.vmi_is_running(vmi):
            continue
        namespace, name, owned = vm_of(vmi)
        result.append({"namespace": namespace, "name": name, "node": kubevirt.vmi_node(vmi), "vm": owned})
    return sorted(result, key=lambda v: (v["namespace"], v["name"]))


def maintenance_reason(node, crs):
    """The reason recorded for a node's current maintenance (ours or a NodeMaintenance CR's)."""
    record = node_marks.maintenance_record(node) or {}
    if record.get("reason"):
        return record["reason"]
    for _kind, cr in crs:
        reason = (cr.get("spec") or {}).get("reason")
        if reason:
            return reason
    return None


def back_in_service(node):
    """The node as it will be once its maintenance ends: uncordoned, without the maintenance taints.

    The maintenance record stays, so the node's own plan still knows the maintenance is ours.
    """
    view = copy.deepcopy(node)
    spec = view.setdefault("spec", {})
    spec.pop("unschedulable", None)
    keys = set(t["key"] for t in node_marks.MAINTENANCE_TAINTS)
    spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") not in keys]
    return view


def resumed_maintenances(snapshot, selected, run_mark):
    """{node: (ours, reason, phase)} of the selected nodes an earlier run left in maintenance.

    This run finishes them before any other node, so the plans of the other nodes count the
    ones left by a run of ours as back in service.
    """
    resumed = {}
    for name in selected:
        in_maintenance, phase = plan_mod.maintenance_state(snapshot, name)
        if in_maintenance:
            reason = maintenance_reason(snapshot.node(name), snapshot.maintenances_of(name)) or ""
            resumed[name] = (reason.startswith(run_mark), reason, phase)
    for name, (ours, _reason, _phase) in resumed.items():
        if ours:
            snapshot.replace_node(name, back_in_service(snapshot.node(name)))
    return resumed


def run_order(snapshot, selected, resumed, order):
    """The nodes in the order the run takes them: the resumed nodes of ours first."""
    position = dict((name, i) for i, name in enumerate(selected))

    def order_key(name):
        ours_resumed = name in resumed and resumed[name][0]
        vms = len([v for v in snapshot.vmis_by_node.get(name, []) if kubevirt.vmi_is_active(v)])
        return (not ours_resumed, vms if order == "fewest_vms_first" else 0, position[name])

    return sorted(selected, key=order_key)
