# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NodeMaintenance custom resource of the node-maintenance operator.

The current API group is ``nodemaintenance.medik8s.io``; clusters with the older
operator only serve ``nodemaintenance.kubevirt.io``. The CR this collection creates
is labelled as managed by it, so a CR someone else created is never taken over.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_MAINTENANCE_CR_PREFIX,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.plan import is_our_maintenance
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning.snapshot import NODE_MAINTENANCE_KINDS

API_VERSIONS = {
    "NodeMaintenance": "nodemaintenance.medik8s.io/v1beta1",
    "LegacyNodeMaintenance": "nodemaintenance.kubevirt.io/v1beta1",
}


def served_kind(snapshot):
    """The NodeMaintenance kind to use (medik8s first), or None when neither CRD is served."""
    for kind in NODE_MAINTENANCE_KINDS:
        if snapshot.served(kind):
            return kind
    return None


def cr_name(node):
    """Our CR's name for a node: 'kubevirt-ops-<node>', shortened with a hash when too long."""
    name = NODE_MAINTENANCE_CR_PREFIX + node
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(node.encode("utf-8")).hexdigest()[:10]
    return name[:242] + "-" + digest


def ours_and_foreign(snapshot, node):
    """((kind, cr) of ours or None, [(kind, cr) created by others]) for a node."""
    ours, foreign = None, []
    for kind, cr in snapshot.maintenances_of(node):
        if is_our_maintenance(cr):
            ours = (kind, cr)
        else:
            foreign.append((kind, cr))
    return ours, foreign


def body(kind, node, reason=None):
    spec = {"nodeName": node}
    if reason:
        spec["reason"] = reason
    return {
        "apiVersion": API_VERSIONS[kind],
        "kind": "NodeMaintenance",
        "metadata": {"name": cr_name(node), "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": spec,
    }


def status_view(cr, namespaces_by_pod=None):
    """The CR's status in node_maintenance's return shape.

    NMO lists pending pods by name only; ``namespaces_by_pod`` (name -> namespace, from
    the node's pods) restores 'namespace/name' where it can.
    """
    status = (cr or {}).get("status") or {}
    namespaces_by_pod = namespaces_by_pod or {}
    pending = []
    for name in status.get("pendingPods") or []:
        namespace = namespaces_by_pod.get(name)
        pending.append("%s/%s" % (namespace, name) if namespace and "/" not in name else name)
    total = status.get("totalpods", status.get("totalPods"))
    return {
        "phase": status.get("phase") or "Running",
        "drain_progress": int(status.get("drainProgress") or 0),
        "last_error": status.get("lastError") or None,
        "pending_pods": pending,
        "total_pods": int(total or 0),
        "eviction_pods": int(status.get("evictionPods") or 0),
    }
