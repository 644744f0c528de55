# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument-spec fragments, each paired with the doc fragment of the same name.

auth <-> doc_fragments/auth.py, wait <-> doc_fragments/wait.py,
drain <-> doc_fragments/drain.py, drain_grouped <-> doc_fragments/drain.py GROUPED,
drain_owner <-> doc_fragments/drain.py OWNER, vm_selection <-> doc_fragments/vm_selection.py,
lock <-> doc_fragments/lock.py.
Option names and K8S_AUTH_* fallbacks are kubernetes.core's, so users reuse their
variables, environment and module_defaults.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible.module_utils.basic import env_fallback

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    DEFAULT_LOCK_NAME,
    DEFAULT_LOCK_NAMESPACE,
)

AUTH = {
    "kubeconfig": {"type": "raw", "fallback": (env_fallback, ["K8S_AUTH_KUBECONFIG"])},
    "context": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_CONTEXT"])},
    "host": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_HOST"])},
    "api_key": {"type": "str", "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_API_KEY"])},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"], "fallback": (env_fallback, ["K8S_AUTH_VERIFY_SSL"])},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"], "fallback": (env_fallback, ["K8S_AUTH_SSL_CA_CERT"])},
    "client_cert": {"type": "path", "aliases": ["cert_file"], "fallback": (env_fallback, ["K8S_AUTH_CERT_FILE"])},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_KEY_FILE"])},
    "proxy": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_PROXY"])},
    "impersonate_user": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_IMPERSONATE_USER"])},
    "impersonate_groups": {"type": "list", "elements": "str", "fallback": (env_fallback, ["K8S_AUTH_IMPERSONATE_GROUPS"])},
}

WAIT = {
    "wait": {"type": "bool", "default": True},
    "wait_timeout": {"type": "int", "default": 300},
}

DRAIN = {
    "ignore_daemonsets": {"type": "bool", "default": True},
    "delete_emptydir_data": {"type": "bool", "default": True},
    "force": {"type": "bool", "default": True},
    "pod_selector": {"type": "str"},
    "grace_period": {"type": "int", "default": -1},
    "disable_eviction": {"type": "bool", "default": False},
    "non_migratable": {"type": "str", "default": "fail", "choices": ["fail", "shutdown", "wait"]},
}

# The six pod options of DRAIN as one dict, for callers that keep them together (the roles'
# ``rolling_maintenance_drain_options``); option_checks folds it into the flat options.
DRAIN_POD_OPTIONS = ("ignore_daemonsets", "delete_emptydir_data", "force", "pod_selector", "grace_period",
                     "disable_eviction")
DRAIN_GROUPED = {
    "drain_options": {"type": "dict", "options": dict(
        (option, {"type": DRAIN[option]["type"]}) for option in DRAIN_POD_OPTIONS)},
}

# The run a drain belongs to (module_utils/run_owner.py); set by the drain action plugin.
DRAIN_OWNER = {
    "owner_pid": {"type": "int"},
}

VM_SELECTION = {
    "name": {"type": "str"},
    "namespace": {"type": "str"},
    "label_selector": {"type": "str"},
    "all_namespaces": {"type": "bool", "default": False},
}


def lock_option(apply_defaults=True):
    """The ``lock`` option: the cluster lock (Lease) a module respects, and the caller's holder.

    With ``apply_defaults`` the option names the roles' lock when it is left out (and when it is
    null); without it, a module looks at a lock only when one is given. An empty name opts out.
    """
    return {"type": "dict", "apply_defaults": apply_defaults, "options": {
        "name": {"type": "str", "default": DEFAULT_LOCK_NAME},
        "namespace": {"type": "str", "default": DEFAULT_LOCK_NAMESPACE},
        "holder": {"type": "str"},
    }}


LOCK = {"lock": lock_option()}
# The run of the Events a module writes, for modules without a lock option (doc fragment run).
RUN = {"run": {"type": "str"}}

# A machine's BMC over Redfish (doc fragment bmc; module_utils/machine/redfish.py).
BMC = {"bmc": {"type": "dict", "options": {
    "address": {"type": "str", "required": True},
    "username": {"type": "str", "required": True},
    "password": {"type": "str", "required": True, "no_log": True},
    "ca_path": {"type": "path"},
    "validate_certs": {"type": "bool", "default": True},
}}}

# A node's Metal3 BareMetalHost, when its providerID does not name it (module_utils/machine/metal3.py).
BMH = {"bmh": {"type": "dict", "options": {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
}}}

# What is asked of a machine (node_machine; the machines option of maintenance_preflight, which checks it ahead).
MACHINE_WORK = {
    "firmware": {"type": "list", "elements": "dict", "default": [], "options": {
        "component": {"type": "str", "required": True},
        "url": {"type": "str", "required": True},
        "version": {"type": "str", "required": True},
    }},
    "bios": {"type": "dict", "default": {}},
    "reboot": {"type": "bool", "default": False},
}

AUTH_NAMES = tuple(AUTH)


def spec(*fragments, **overrides):
    """Deep-copied union of fragments; ``overrides`` replace single options' specs."""
    merged = {}
    for fragment in fragments:
        merged.update(copy.deepcopy(fragment))
    for name, option in overrides.items():
        merged[name] = option
    return merged
