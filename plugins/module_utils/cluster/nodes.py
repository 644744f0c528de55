# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading nodes: names, labels, conditions and readiness, cordon and taints, control-plane
detection and what taking a control-plane node down would cost etcd. The marks this collection
writes on a node (cordon, taints, label, its record) are node_marks.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# virt-handler's marks on its node (kubevirt pkg/virt-handler/heartbeat/heartbeat.go): the label every virt-launcher
# pod selects, "true" only once its device plugins registered with the kubelet ("false" in its first beat after it
# starts and when it stops cleanly), and the time of its last beat (at start, then every 60 to 132 s).
KUBEVIRT_SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
KUBEVIRT_HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
ETCD_GUARD_PDB = ("openshift-etcd", "etcd-guard-pdb")


def get_node(client, name):
    """The Node, or InvalidInputError naming it."""
    node = client.get_or_none("Node", name)
    if node is None:
        raise InvalidInputError("Node %s does not exist." % name, node=name)
    return node


def node_name(node):
    return (node.get("metadata") or {}).get("name")


def labels_of(node):
    return (node.get("metadata") or {}).get("labels") or {}


def condition(node, kind):
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def is_ready(node):
    cond = condition(node, "Ready")
    return bool(cond and cond.get("status") == "True")


def not_ready_reason(node):
    cond = condition(node, "Ready")
    if cond is None:
        return "it reports no Ready condition"
    text = "its Ready condition is %s" % cond.get("status")
    if cond.get("reason"):
        text += " (%s" % cond["reason"]
        text += " since %s)" % cond["lastTransitionTime"] if cond.get("lastTransitionTime") else ")"
    return text


def boot_id(node):
    """``status.nodeInfo.bootID``: the kernel's boot id, as the kubelet read it when it started."""
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")


def runs_virt_handler(node):
    """Whether a virt-handler has ever beaten on the node (KubeVirt runs there)."""
    return KUBEVIRT_SCHEDULABLE_LABEL in labels_of(node)


def virt_handler_heartbeat(node):
    return ((node.get("metadata") or {}).get("annotations") or {}).get(KUBEVIRT_HEARTBEAT_ANNOTATION)


def virt_handler_back(node, heartbeat_before):
    """Whether virt-handler beat again since ``heartbeat_before`` (the node's annotation before its machine
    restarted) and takes VMs: a label left "true" by a handler that died with its machine is not enough."""
    return virt_handler_heartbeat(node) not in (None, heartbeat_before) and \
        labels_of(node).get(KUBEVIRT_SCHEDULABLE_LABEL) == "true"


def is_cordoned(node):
    return bool((node.get("spec") or {}).get("unschedulable"))


def is_control_plane(node):
    labels = labels_of(node)
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def has_taint(node, taint):
    return any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"]
               for t in (node.get("spec") or {}).get("taints") or [])


def blocking_taints(node):
    """The node's taints that keep pods away unless tolerated (NoSchedule, NoExecute)."""
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]


def control_plane_refusal(node, nodes, etcd_guard=None):
    """A sentence when taking ``node`` down would cost etcd quorum, else None.

    ``nodes`` are all nodes; ``etcd_guard`` the openshift-etcd guard PDB when it exists.
    """
    if not is_control_plane(node):
        return None
    name = node_name(node)
    members = [n for n in nodes if is_control_plane(n)]
    ready = [n for n in members if is_ready(n)]
    quorum = len(members) // 2 + 1
    left = len(ready) - (1 if is_ready(node) else 0)
    if left < quorum:
        return ("Node %s is a control-plane node: with it down, %d of %d control-plane nodes would be Ready, "
                "below the etcd quorum of %d; set allow_control_plane=true only if etcd does not run there."
                % (name, left, len(members), quorum))
    if etcd_guard is not None:
        allowed = (etcd_guard.get("status") or {}).get("disruptionsAllowed")
        if allowed is not None and allowed < 1:
            return ("Node %s is a control-plane node and PodDisruptionBudget %s/%s allows no disruption now: "
                    "etcd would lose quorum; wait until every etcd member is healthy."
                    % ((name,) + ETCD_GUARD_PDB))
    return None
