# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of option values shared by every module, run before anything is read or written.

Option names mean the same in every module of the collection, so one table checks them all:
object names, namespaces, node lists, timeouts, grace periods, label selectors and CPU model
names. Each failure is one sentence naming the option and the value.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.args import DRAIN, DRAIN_POD_OPTIONS
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import parse_label_selector

# RFC 1123 subdomain (object names, node names) and label (namespaces), as the API server checks them.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
MAX_TIMEOUT = 7 * 24 * 3600
TIMEOUT_OPTIONS = ("wait_timeout", "timeout")
SELECTOR_OPTIONS = ("label_selector", "pod_selector")
# Options naming one namespaced object as {name, namespace}.
REFERENCE_OPTIONS = ("bmh",)
MAX_WATCH = 3600


def _bad(option, value, why):
    return InvalidInputError("Option %s=%r %s." % (option, value, why), option=option)


# (pattern, longest, what it is, what it may hold)
OBJECT_NAME = (_SUBDOMAIN, 253, "Kubernetes object name", "lowercase letters, digits, '-' and '.'")
NAMESPACE_NAME = (_LABEL, 63, "namespace name", "lowercase letters, digits and '-'")


def name(option, value, kind=OBJECT_NAME):
    """An RFC 1123 name as the API server checks it (object and node names, namespaces)."""
    pattern, longest, what, chars = kind
    if not value:
        raise _bad(option, value, "is empty: give a %s" % what)
    if len(value) > longest or not pattern.match(value):
        raise _bad(option, value, "is not a valid %s (%s, starting and ending with a letter or digit, at most %d "
                                  "characters)" % (what, chars, longest))


def label_value(option, value):
    """A label value (also a taint value): at most 63 letters, digits, '-', '_' and '.'."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise _bad(option, value, "is not a valid label value (letters, digits, '-', '_' and '.', starting and "
                                  "ending with a letter or digit, at most 63 characters)")


def _check_names(params):
    if params.get("name") is not None:
        name("name", params["name"])
    if params.get("namespace") is not None:
        name("namespace", params["namespace"], NAMESPACE_NAME)
    for node in params.get("nodes") or []:
        if isinstance(node, str):
            name("nodes", node)


def _check_timeouts(params):
    for option in TIMEOUT_OPTIONS:
        value = params.get(option)
        if value is not None and not 1 <= value <= MAX_TIMEOUT:
            raise _bad(option, value, "is not a usable timeout: give seconds from 1 to %d (7 days)" % MAX_TIMEOUT)


def _check_references(params):
    for option in REFERENCE_OPTIONS:
        reference = params.get(option)
        if reference:
            name("%s.name" % option, reference.get("name"))
            name("%s.namespace" % option, reference.get("namespace"), NAMESPACE_NAME)


def _check_durations(params):
    """The watch, the settle timeout and the grace period, each with a range of its own."""
    watch = params.get("reregistration_watch")
    if watch is not None and not 0 <= watch <= MAX_WATCH:
        raise _bad("reregistration_watch", watch,
                   "is not a usable watch: give seconds from 0 (no watch) to %d" % MAX_WATCH)
    settle = params.get("settle_timeout")
    if settle is not None and not 0 <= settle <= MAX_TIMEOUT:
        raise _bad("settle_timeout", settle, "is not a usable timeout: give seconds from 0 (do not wait) to %d (7 days)"
                   % MAX_TIMEOUT)
    grace = params.get("grace_period")
    if grace is not None and grace < -1:
        raise _bad("grace_period", grace, "is not a grace period: give -1 (each pod's own) or seconds from 0")


def _check_selectors(params):
    for option in SELECTOR_OPTIONS:
        if params.get(option):
            parse_label_selector(params[option], option)
    if params.get("mark"):
        label_value("mark", params["mark"])


def _check_lock(params):
    lock = params.get("lock")
    if isinstance(lock, dict) and lock.get("name"):
        name("lock.name", lock["name"])
        if lock.get("namespace") is not None:
            name("lock.namespace", lock["namespace"], NAMESPACE_NAME)


def _check_cpu_models(params):
    for model in params.get("cpu_models") or []:
        if not (model or "").strip():
            raise _bad("cpu_models", params["cpu_models"], "holds an empty CPU model name")


# In this order: the first option that cannot be right is the one reported.
_CHECKS = (_check_names, _check_timeouts, _check_references, _check_durations, _check_selectors, _check_lock,
           _check_cpu_models)


def fold_drain_options(params):
    """Copy the keys set in ``drain_options`` onto the flat drain options of the same names.

    A flat option changed from its default to another value than the dict's is a contradiction,
    refused in one sentence rather than settled silently.
    """
    grouped = params.get("drain_options")
    if not grouped:
        return
    for option in DRAIN_POD_OPTIONS:
        value = grouped.get(option)
        if value is None:
            continue
        flat = params.get(option)
        if flat != DRAIN[option].get("default") and flat != value:
            raise InvalidInputError(
                "Option %s=%r contradicts drain_options.%s=%r: give it in one place." % (option, flat, option, value),
                option=option)
        params[option] = value


def check(params):
    """Fold ``drain_options``, then raise InvalidInputError for the first option whose value cannot be right."""
    fold_drain_options(params)
    for check_some in _CHECKS:
        check_some(params)
