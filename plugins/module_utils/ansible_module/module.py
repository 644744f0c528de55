# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module wrapper every module of the collection runs in.

It adds the auth options, checks the Python requirements on the managed host, builds
the client lazily, keeps secrets out of every result and message, and is the only place
where a ``MaintenanceError`` becomes ``fail_json``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import option_checks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError

REQUIRED_LIBRARIES = (("kubernetes", "kubernetes>=24.2.0"), ("urllib3", "urllib3"), ("yaml", "PyYAML"))
REDACTED = "********"


def missing_requirements():
    """The pip requirement strings of libraries that cannot be imported."""
    import importlib.util

    return [req for name, req in REQUIRED_LIBRARIES if importlib.util.find_spec(name) is None]


def redact(value, secrets):
    """A copy of ``value`` with every secret string replaced, at any depth."""
    secrets = [s for s in secrets if s and len(s) >= 4]
    if not secrets:
        return value

    def scrub(item):
        if isinstance(item, str):
            for secret in secrets:
                if secret in item:
                    item = item.replace(secret, REDACTED)
            return item
        if isinstance(item, dict):
            return dict((k, scrub(v)) for k, v in item.items())
        if isinstance(item, (list, tuple)):
            return [scrub(v) for v in item]
        return item

    return scrub(value)


class MaintenanceModule:
    """AnsibleModule plus the collection's connection, redaction and error handling."""

    def __init__(self, argument_spec, supports_check_mode=True, with_auth=True, **kwargs):
        spec = args.spec(args.AUTH, argument_spec) if with_auth else argument_spec
        self.ansible = AnsibleModule(argument_spec=spec, supports_check_mode=supports_check_mode, **kwargs)
        self.params = self.ansible.params
        self.check_mode = self.ansible.check_mode
        self.diff_mode = self.ansible._diff
        self.warnings = []
        self._client = None
        self._settings = None
        self._secrets = []
        self._events = None

    @property
    def client(self):
        """The API client, built on first use from the auth options."""
        if self._client is None:
            missing = missing_requirements()
            if missing:
                quoted = " ".join("'%s'" % m for m in missing)
                raise MaintenanceError(
                    "The Python libraries %s are required on the host that runs this module (%s); install them with: "
                    "%s -m pip install %s" % (", ".join(missing), sys.executable, sys.executable, quoted))
            from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
            from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import resolve_settings

            settings = resolve_settings(dict((k, self.params.get(k)) for k in args.AUTH_NAMES))
            self._settings = settings
            self._client = KubeClient(settings)
        return self._client

    @property
    def events(self):
        """The Event recorder of this call (k8s/events.py): the run is the lock holder the task
        passes (or its ``run`` option), nothing is recorded in check mode, notes are redacted like results."""
        if self._events is None:
            from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import EventRecorder

            lock = self.params.get("lock") if isinstance(self.params.get("lock"), dict) else {}
            run = lock.get("holder") or self.params.get("run")
            self._events = EventRecorder(self.client, run=run, warn=self.warn,
                                         scrub=lambda text: redact(text, self._all_secrets()),
                                         enabled=not self.check_mode)
        return self._events

    def _all_secrets(self):
        """Every secret known so far (a renewed token joins the connection's list during the run)."""
        secrets = list(self._secrets)
        # The values of no_log options (a BMC password) too: Events and messages are redacted here, not by Ansible.
        secrets.extend(v for v in self.ansible.no_log_values if isinstance(v, str))
        if self._settings is not None:
            secrets.extend(self._settings.secrets)
        for secret in secrets:
            if secret:
                self.ansible.no_log_values.add(secret)
        return secrets

    def warn(self, text):
        self.warnings.append(text)

    def run(self, action):
        """Run ``action(self)`` -> result dict; exit or fail the module with it."""
        try:
            option_checks.check(self.params)
            result = action(self)
        except MaintenanceError as exc:
            secrets = self._all_secrets()
            details = redact(dict(exc.details), secrets)
            details.pop("msg", None)
            self.ansible.fail_json(msg=redact(exc.msg, secrets), **details)
        secrets = self._all_secrets()
        for text in self.warnings:
            self.ansible.warn(redact(text, secrets))
        self.ansible.exit_json(**redact(result, secrets))
