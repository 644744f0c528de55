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

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.scheduling import parse_label_selector

# RFC 1123 subdomain (object names, node names) and label (namespaces), as the API server checks them.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_TIMEOUT = 7 * 24 * 3600
TIMEOUT_OPTIONS = ("wait_timeout", "timeout")
SELECTOR_OPTIONS = ("label_selector", "pod_selector")


def _bad(option, value, why):
    return InvalidInputError("Option %s=%r %s." % (option, value, why), option=option)


def object_name(option, value):
    if not value:
        raise _bad(option, value, "is empty: give the name of a Kubernetes object")
    if len(value) > 253 or not _SUBDOMAIN.match(value):
        raise _bad(option, value, "is not a valid Kubernetes object name (lowercase letters, digits, '-' and '.', "
                                  "starting and ending with a letter or digit, at most 253 characters)")


def namespace_name(option, value):
    if not value:
        raise _bad(option, value, "is empty: give a namespace")
    if len(value) > 63 or not _LABEL.match(value):
        raise _bad(option, value, "is not a valid namespace name (lowercase letters, digits and '-', starting and "
                                  "ending with a letter or digit, at most 63 characters)")


def check(params):
    """Raise InvalidInputError for the first option whose value cannot be right."""
    for option in ("name",):
        if option in params and params[option] is not None:
            object_name(option, params[option])
    if params.get("namespace") is not None:
        namespace_name("namespace", params["namespace"])
    for node in params.get("nodes") or []:
        if isinstance(node, str):
            object_name("nodes", node)
    for option in TIMEOUT_OPTIONS:
        value = params.get(option)
        if value is not None and not 1 <= value <= MAX_TIMEOUT:
            raise _bad(option, value, "is not a usable timeout: give seconds from 1 to %d (7 days)" % MAX_TIMEOUT)
    grace = params.get("grace_period")
    if grace is not None and grace < -1:
        raise _bad("grace_period", grace, "is not a grace period: give -1 (each pod's own) or seconds from 0")
    for option in SELECTOR_OPTIONS:
        if params.get(option):
            parse_label_selector(params[option], option)
    for model in params.get("cpu_models") or []:
        if not (model or "").strip():
            raise _bad("cpu_models", params["cpu_models"], "holds an empty CPU model name")
