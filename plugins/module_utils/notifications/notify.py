# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_notify module: one message to every webhook, never a failure of the run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.notifications import webhooks


def _send_with(module):
    from ansible.module_utils.urls import open_url
    from ansible.module_utils.six.moves.urllib.error import HTTPError

    params = module.params

    def send(url, data, headers, timeout):
        try:
            response = open_url(url, data=data, headers=headers, method="POST", timeout=timeout,
                                validate_certs=params["validate_certs"], ca_path=params.get("ca_path"),
                                http_agent="kubevirt_ops.maintenance")
        except HTTPError as exc:
            return exc.code
        try:
            return response.getcode()
        finally:
            response.close()

    return send


def notify(module, send=None, sleep=None):
    params = module.params
    hooks = params.get("webhooks") or []
    webhooks.check(hooks)
    for option, low, high in (("retries", 0, 10), ("retry_delay", 0, 60), ("timeout", 1, 300)):
        if not low <= params[option] <= high:
            raise InvalidInputError("Option %s must be between %s and %s, not %s." % (option, low, high, params[option]),
                                    option=option)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    msg = webhooks.message(params["event"], params["text"], run=params.get("run"), node=params.get("node"),
                           details=params.get("details"), now=now)
    result = {"changed": False, "message": msg, "delivered": [], "failures": []}
    if module.check_mode or not hooks:
        return result
    kwargs = {} if sleep is None else {"sleep": sleep}
    delivery = webhooks.Delivery(send or _send_with(module), retries=params["retries"],
                                 retry_delay=params["retry_delay"], **kwargs)
    delivered, failures = delivery.deliver(hooks, msg, timeout=params["timeout"])
    result.update(changed=bool(delivered), delivered=delivered, failures=failures)
    for failure in failures:
        module.warn("The %s notification to webhook %d (%s) failed after %d attempt%s: %s. The run goes on." % (
            params["event"], failure["webhook"], failure["target"], failure["attempts"],
            "" if failure["attempts"] == 1 else "s", failure["error"]))
    return result
