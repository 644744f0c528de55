# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods beside pods: what the scheduler's InterPodAffinity and PodTopologySpread filters say
about where a pod may go, given where the other pods run (required pod affinity and
anti-affinity terms, hard topology spread constraints).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import selector_matches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.scheduling import (
    node_passes_selection,
    untolerated_taints,
)


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
