# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the scheduler would say about a pod and a node: taints and tolerations, the
nodeSelector and required node affinity.

Pure functions over plain dicts, so the plan can ask "could this pod run on that node?"
for many pods and nodes without a request to the API server. Resource requests are
quantities.py's; other pods (pod affinity, topology spread) pod_neighbours.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# -- taints and tolerations ------------------------------------------------------------

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations, taint):
    for tol in tolerations or []:
        effect = tol.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key")
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taints(node, tolerations):
    """The node's NoSchedule/NoExecute taints the tolerations do not cover."""
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, t)]


def format_taint(taint):
    value = taint.get("value")
    return "%s%s:%s" % (taint.get("key"), ("=" + value) if value else "", taint.get("effect"))


# -- node selection ----------------------------------------------------------------------

def _number(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _node_requirement_ok(expr, values_source):
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    present = key in values_source
    value = values_source.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have, want = _number(value), _number(values[0] if values else None)
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_affinity_matches(affinity, node):
    """Required node affinity (requiredDuringSchedulingIgnoredDuringExecution) against a node."""
    required = (((affinity or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    for term in terms:
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue  # an empty term matches nothing
        if all(_node_requirement_ok(e, labels) for e in term.get("matchExpressions") or []) and \
                all(_node_requirement_ok(e, fields) for e in term.get("matchFields") or []):
            return True
    return False


def why_not_on_node(pod_spec, node):
    """None when the pod's placement rules allow the node, else a short reason."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    missing = ["%s=%s" % (k, v) for k, v in sorted((pod_spec.get("nodeSelector") or {}).items())
               if labels.get(k) != v]
    if missing:
        return "nodeSelector %s not matched" % ",".join(missing)
    if not node_affinity_matches(pod_spec.get("affinity"), node):
        return "required node affinity not matched"
    taints = untolerated_taints(node, pod_spec.get("tolerations"))
    if taints:
        return "taint %s not tolerated" % ", ".join(format_taint(t) for t in taints)
    return None


def node_passes_selection(pod_spec, node):
    """The pod's nodeSelector and required node affinity allow the node (taints aside)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    return node_affinity_matches(pod_spec.get("affinity"), node)
