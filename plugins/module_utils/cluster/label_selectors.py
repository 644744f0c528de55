# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Label selectors as the API server reads them: kubectl-style selector strings (an option's
``label_selector``) parsed and checked, and structured LabelSelectors (matchLabels /
matchExpressions of a PodDisruptionBudget, a pod affinity term...) matched against labels.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

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
