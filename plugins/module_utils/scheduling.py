# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the scheduler would say: label selectors, taints and tolerations, required node
affinity, resource quantities and pod requests.

Pure functions over plain dicts, so the plan can ask "could this pod run on that node?"
for many pods and nodes without a request to the API server.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import InvalidInputError

# -- label selectors -------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_KEY = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_terms(text):
    """Split a selector on commas that are not inside parentheses."""
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms]


def parse_label_selector(text, option="label_selector"):
    """A kubectl-style label selector string -> list of (key, operator, values).

    Operators: ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!exists``. Raises
    InvalidInputError naming the option and the bad term.
    """
    requirements = []
    if text is None or not text.strip():
        return requirements

    def bad(term, why):
        return InvalidInputError("Option %s has an invalid label selector term '%s': %s." % (option, term, why),
                                 option=option)

    for term in _split_terms(text):
        if not term:
            raise bad(term, "empty term (stray comma?)")
        match = _SET_TERM.match(term)
        if match:
            key, op, raw = match.group(1), match.group(2), match.group(3)
            values = [v.strip() for v in raw.split(",")]
            if not all(values) or not all(_VALUE.match(v) for v in values):
                raise bad(term, "the value list must hold valid label values")
            parsed = (key, op, values)
        elif "!=" in term:
            key, value = [p.strip() for p in term.split("!=", 1)]
            parsed = (key, "!=", [value])
        elif "=" in term:
            key, value = [p.strip() for p in term.replace("==", "=", 1).split("=", 1)]
            parsed = (key, "=", [value])
        elif term.startswith("!"):
            parsed = (term[1:].strip(), "!exists", [])
        else:
            parsed = (term, "exists", [])
        key = parsed[0]
        if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
            raise bad(term, "'%s' is not a valid label key" % key)
        for value in parsed[2]:
            if not _VALUE.match(value) or len(value) > 63:
                raise bad(term, "'%s' is not a valid label value" % value)
        requirements.append(parsed)
    return requirements


def requirements_match(requirements, labels):
    labels = labels or {}
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op in ("=", "in"):
            if not present or value not in values:
                return False
        elif op in ("!=", "notin"):
            if present and value in values:
                return False
        elif op == "exists":
            if not present:
                return False
        elif op == "!exists":
            if present:
                return False
    return True


def selector_matches(selector, labels):
    """A structured LabelSelector (matchLabels/matchExpressions) against labels.

    An empty selector matches everything (as for a PodDisruptionBudget); ``None`` nothing.
    """
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


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


# -- resources -----------------------------------------------------------------------------

_SUFFIXES = {
    "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]{0,2})$")


def parse_quantity(value):
    """A Kubernetes resource quantity ('250m', '1.5Gi', '2', 1e3) -> float; 0 when unparseable."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        return 0.0
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


RESOURCE_NAMES = ("cpu", "memory")  # always counted; any other requested resource is counted when requested


def _add_requests(totals, requests, combine):
    for name, value in (requests or {}).items():
        amount = parse_quantity(value)
        if amount:
            totals[name] = combine(totals.get(name, 0.0), amount)


def pod_requests(pod_spec):
    """{'cpu': cores, 'memory': bytes, 'pods': 1, other resource: amount} the scheduler reserves for the pod.

    Every requested resource counts, as in the scheduler's NodeResourcesFit: hugepages-<size>,
    ephemeral-storage and extended resources (GPUs, KubeVirt's devices.kubevirt.io/kvm) besides
    CPU and memory; containers add up, an init container needs its own at most, overhead adds.
    """
    totals = dict((r, 0.0) for r in RESOURCE_NAMES)
    for container in pod_spec.get("containers") or []:
        _add_requests(totals, (container.get("resources") or {}).get("requests"), lambda a, b: a + b)
    for container in pod_spec.get("initContainers") or []:
        _add_requests(totals, (container.get("resources") or {}).get("requests"), max)
    _add_requests(totals, pod_spec.get("overhead"), lambda a, b: a + b)
    totals["pods"] = 1.0
    return totals


def node_room(node):
    """The node's allocatable resources as numbers (pod slots 110 when not reported)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    room = dict((name, parse_quantity(value)) for name, value in allocatable.items())
    for name in RESOURCE_NAMES:
        room.setdefault(name, 0.0)
    room["pods"] = room.get("pods") or 110.0
    return room


def format_amount(resource, value):
    """'cpu 500m', 'memory 2Gi', '3 pods', 'hugepages-2Mi 1Gi', 'nvidia.com/gpu 1'."""
    value = max(0.0, value)
    if resource == "cpu":
        return "cpu " + format_cpu(value)
    if resource == "pods":
        return "%d pods" % value
    if resource == "memory" or resource.startswith("hugepages-") or resource == "ephemeral-storage":
        return "%s %s" % (resource, format_memory(value))
    return "%s %s" % (resource, ("%d" % value) if abs(value - round(value)) < 1e-9 else ("%g" % value))


def format_cpu(cores):
    if cores >= 1 and abs(cores - round(cores)) < 1e-9:
        return "%d" % round(cores)
    return "%dm" % round(cores * 1000)


def format_memory(value):
    for suffix, size in (("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10)):
        if value >= size:
            amount = value / size
            return ("%d%s" % (round(amount), suffix)) if abs(amount - round(amount)) < 0.05 else \
                ("%.1f%s" % (amount, suffix))
    return "%d" % round(value)


# -- pods beside pods: inter-pod affinity and topology spread ------------------------------

def required_pod_terms(pod_spec, kind):
    """The required terms of ``podAffinity`` or ``podAntiAffinity`` (preferred ones never block)."""
    return (((pod_spec.get("affinity") or {}).get(kind) or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def hard_spread_constraints(pod_spec):
    """The topology spread constraints the scheduler enforces (whenUnsatisfiable DoNotSchedule)."""
    return [c for c in pod_spec.get("topologySpreadConstraints") or []
            if (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule" and c.get("topologyKey")]


def has_pod_rules(pod_spec):
    """Whether where other pods run matters for this pod."""
    return bool(required_pod_terms(pod_spec, "podAffinity") or required_pod_terms(pod_spec, "podAntiAffinity")
                or hard_spread_constraints(pod_spec))


def term_selects(term, owner_namespace, pod, namespace_labels=None):
    """Whether a pod affinity term of a pod in ``owner_namespace`` selects ``pod``.

    The term looks at its own namespace unless it lists namespaces or has a namespaceSelector
    (empty: every namespace). ``namespace_labels`` ({namespace: labels}) answers a non-empty
    namespaceSelector; without it such a selector counts as matching.
    """
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace")
    listed = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    if not listed and ns_selector is None:
        in_scope = namespace == owner_namespace
    else:
        in_scope = namespace in listed
        if not in_scope and ns_selector is not None:
            if not ns_selector.get("matchLabels") and not ns_selector.get("matchExpressions"):
                in_scope = True
            elif namespace_labels is None:
                in_scope = True
            else:
                in_scope = selector_matches(ns_selector, namespace_labels.get(namespace) or {})
    return in_scope and selector_matches(term.get("labelSelector"), meta.get("labels"))


def node_passes_selection(pod_spec, node):
    """The pod's nodeSelector and required node affinity allow the node (taints aside)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    return node_affinity_matches(pod_spec.get("affinity"), node)


def _node_label(nodes, name, key):
    return ((nodes.get(name) or {}).get("metadata", {}).get("labels") or {}).get(key)


def _affinity_rules(pod, nodes, present, namespace_labels):
    """Per required pod affinity term of ``pod``: its topology key, the domains with a pod it
    selects, whether it selects a pod anywhere, and whether it selects ``pod`` itself."""
    namespace = (pod.get("metadata") or {}).get("namespace")
    rules = []
    for term in required_pod_terms(pod.get("spec") or {}, "podAffinity"):
        key = term.get("topologyKey")
        names = [name for name, other in present if term_selects(term, namespace, other, namespace_labels)]
        rules.append((key, set(_node_label(nodes, n, key) for n in names) - {None}, bool(names),
                      term_selects(term, namespace, pod, namespace_labels)))
    return rules


def _own_anti_affinity_rules(pod, nodes, present, namespace_labels):
    """Per required pod anti-affinity term of ``pod``: its topology key and the first pod it
    selects in each domain."""
    namespace = (pod.get("metadata") or {}).get("namespace")
    rules = []
    for term in required_pod_terms(pod.get("spec") or {}, "podAntiAffinity"):
        key = term.get("topologyKey")
        found = {}
        for name, other in present:
            domain = _node_label(nodes, name, key)
            if domain is not None and domain not in found and \
                    term_selects(term, namespace, other, namespace_labels):
                found[domain] = other
        rules.append((key, found, "with"))
    return rules


def _holders_anti_affinity_rules(pod, nodes, anti_holders, namespace_labels):
    """The required pod anti-affinity terms of running pods that select ``pod``, each with the
    domain of its pod."""
    rules = []
    for name, holder in anti_holders:
        for term in required_pod_terms(holder.get("spec") or {}, "podAntiAffinity"):
            key = term.get("topologyKey")
            domain = _node_label(nodes, name, key)
            if domain is not None and term_selects(term, holder["metadata"].get("namespace"), pod, namespace_labels):
                rules.append((key, {domain: holder}, "of"))
    return rules


def _spread_rules(pod, nodes, present):
    """Per hard topology spread constraint of ``pod``: the constraint, the matching pods per
    domain, and whether ``pod`` itself matches (1 or 0)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace")
    rules = []
    for constraint in hard_spread_constraints(spec):
        domain_of = _spread_domains(constraint, spec, nodes)
        counts = dict((domain, 0) for domain in domain_of.values())
        selector = constraint.get("labelSelector")
        for name, other in present:
            if name in domain_of and other["metadata"].get("namespace") == namespace and \
                    not other["metadata"].get("deletionTimestamp") and \
                    selector_matches(selector, other["metadata"].get("labels")):
                counts[domain_of[name]] += 1
        own = 1 if selector_matches(selector, meta.get("labels")) else 0
        rules.append((constraint, counts, own))
    return rules


def _spread_domains(constraint, spec, nodes):
    """{node name: domain} of the nodes that count for the spread constraint."""
    key = constraint.get("topologyKey")
    # The domains: every node with the key that the pod's node selection allows (nodeAffinityPolicy
    # Honor, the default) - cordoned nodes included; taints only with nodeTaintsPolicy Honor.
    domain_of = {}
    for name, node in nodes.items():
        domain = _node_label(nodes, name, key)
        if domain is None:
            continue
        if (constraint.get("nodeAffinityPolicy") or "Honor") == "Honor" and \
                not node_passes_selection(spec, node):
            continue
        if constraint.get("nodeTaintsPolicy") == "Honor" and untolerated_taints(node, spec.get("tolerations")):
            continue
        domain_of[name] = domain
    return domain_of


class PodNeighbours:
    """What the scheduler's InterPodAffinity and PodTopologySpread filters say about one pod, given
    where the other pods run: :meth:`why_not` answers per candidate node without another pass
    over the pods.

    ``nodes``: {name: node}; ``present``: (node name, pod) of every pod that runs while this pod is
    scheduled; ``anti_holders``: those of them with required pod anti-affinity terms.
    """

    def __init__(self, pod, nodes, present, anti_holders, namespace_labels=None):
        self.nodes = nodes
        present = list(present)
        # (key, domains with a matching pod, whether a matching pod exists anywhere, self-match)
        self.affinity = _affinity_rules(pod, nodes, present, namespace_labels)
        # (key, {domain: the matching pod there}, whose term: "with" / "of")
        self.anti = _own_anti_affinity_rules(pod, nodes, present, namespace_labels) + \
            _holders_anti_affinity_rules(pod, nodes, anti_holders, namespace_labels)
        # (constraint, {domain: count}, own)
        self.spread = _spread_rules(pod, nodes, present)

    def why_not(self, candidate):
        """None when the pod may run on node ``candidate`` as far as other pods go, else a short reason."""
        def describe(pod):
            return "%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"].get("name"))

        for key, domains, anywhere, self_match in self.affinity:
            if _node_label(self.nodes, candidate, key) in domains:
                continue
            if not anywhere and self_match:
                continue  # the first pod of its group may go anywhere (as the scheduler allows)
            return "pod affinity (%s) not satisfied" % key
        for key, found, whose in self.anti:
            value = _node_label(self.nodes, candidate, key)
            if value is not None and value in found:
                return "pod anti-affinity (%s) %s pod %s" % (key, whose, describe(found[value]))
        for constraint, counts, own in self.spread:
            key = constraint["topologyKey"]
            value = _node_label(self.nodes, candidate, key)
            if value is None:
                return "topology spread: no %s label" % key
            here = counts.get(value, 0)
            minimum = min(list(counts.values()) + [here])
            if constraint.get("minDomains") and len(set(counts) | {value}) < constraint["minDomains"]:
                minimum = 0
            max_skew = int(constraint.get("maxSkew") or 1)
            if here + own - minimum > max_skew:
                return "topology spread (%s, maxSkew %d): %d matching pods in %s against %d in the emptiest " \
                       "domain" % (key, max_skew, here + own, value, minimum)
        return None
