#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: maintenance_notify
short_description: Tell people about a maintenance run through webhooks (Slack-compatible or JSON)
version_added: 0.2.0
description:
  - Posts one message to every webhook in O(webhooks). The roles call it when a run starts, when each node is
    done or failed, when a run stops early (with the command that finishes it) and when it finishes (with the
    report's summary).
  - A notification never fails the task. An endpoint that cannot be reached, or answers 408, 429 or 5xx, is
    tried again O(retries) times; then the failure is reported in RV(failures) and as a warning.
  - Webhook URLs are secrets (a Slack webhook holds its token in its path). Results and warnings name a webhook
    only by its position and its scheme and host.
  - The message leaves the machine the task runs on; run it on the controller (with C(delegate_to) V(localhost)) or on
    a host that may reach the webhooks.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  webhooks:
    description: Where to send the message. An empty list sends nothing.
    type: list
    elements: dict
    default: []
    suboptions:
      url:
        description: The webhook's C(http://) or C(https://) URL.
        type: str
        required: true
      format:
        description:
          - V(slack) sends a JSON object with only a C(text) field, what Slack's incoming webhooks (and Mattermost,
            Rocket.Chat) take.
          - V(json) sends the whole message (RV(message)) as a JSON object.
        type: str
        choices: [slack, json]
        default: json
      headers:
        description: Extra HTTP headers, for example C(Authorization). Kept out of results and logs.
        type: dict
  event:
    description: What happened.
    type: str
    required: true
    choices: [run_started, node_done, node_failed, run_stopped, run_finished, node_decommissioned,
              node_decommission_failed]
  text:
    description: The message people read.
    type: str
    required: true
  run:
    description: The run's id.
    type: str
  node:
    description: The node the message is about.
    type: str
  details:
    description: Data sent along in the V(json) format (counts, the resume command, the report's files).
    type: dict
    default: {}
  retries:
    description: How many more times a failed delivery is tried (after 1, 2, ... times O(retry_delay) seconds), 0 to 10.
    type: int
    default: 2
  retry_delay:
    description: Seconds before the first retry, 0 to 60.
    type: float
    default: 1.0
  timeout:
    description: Seconds for each request, 1 to 300.
    type: int
    default: 10
  validate_certs:
    description: Whether to check the webhooks' TLS certificates.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to check the webhooks' certificates with, instead of the system's.
    type: path
extends_documentation_fragment:
  - kubevirt_ops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: Check mode sends nothing and returns the message that would be sent.
  diff_mode:
    support: none
  idempotent:
    support: none
"""

EXAMPLES = r"""
- name: Tell the team's channel that a node is done
  kubevirt_ops.maintenance.maintenance_notify:
    webhooks:
      - url: "{{ slack_webhook_url }}"
        format: slack
      - url: https://alerts.example.com/hooks/maintenance
        headers:
          Authorization: "Bearer {{ alerts_token }}"
    event: node_done
    run: "{{ run_id }}"
    node: worker-3
    text: "worker-3 is done: 12 VMs migrated, back in service."
  delegate_to: localhost
"""

RETURN = r"""
message:
  description: The message (the body of the V(json) format).
  returned: always
  type: dict
  contains:
    source:
      description: Always C(kubevirt_ops.maintenance).
      type: str
    event:
      description: O(event).
      type: str
    run:
      description: O(run).
      type: str
    node:
      description: O(node).
      type: str
    text:
      description: O(text).
      type: str
    details:
      description: O(details).
      type: dict
    time:
      description: When it was sent (UTC, RFC 3339).
      type: str
  sample: {source: kubevirt_ops.maintenance, event: node_done, run: "20261128-0600-ab12", node: worker-3,
           text: "worker-3 is done", details: {}, time: "2026-11-28T06:00:00Z"}
delivered:
  description: The webhooks that took the message.
  returned: always
  type: list
  elements: dict
  contains:
    webhook:
      description: Its position in O(webhooks), from 1.
      type: int
    target:
      description: Its scheme and host.
      type: str
    format:
      description: O(webhooks[].format).
      type: str
    status:
      description: The HTTP status of the last attempt.
      type: int
    attempts:
      description: How many requests it took.
      type: int
    error:
      description: Always null here.
      type: str
  sample: [{webhook: 1, target: "https://hooks.slack.com", format: slack, status: 200, attempts: 1, error: null}]
failures:
  description: The webhooks that did not take it, with why (the same fields as RV(delivered)).
  returned: always
  type: list
  elements: dict
  sample: [{webhook: 2, target: "https://alerts.example.com", format: json, status: 503, attempts: 3,
            error: HTTP 503}]
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.notifications.notify import notify
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.notifications.webhooks import EVENTS, FORMATS


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            webhooks=dict(type="list", elements="dict", default=[], options=dict(
                url=dict(type="str", required=True, no_log=True),
                format=dict(type="str", choices=list(FORMATS), default="json"),
                headers=dict(type="dict", no_log=True),
            )),
            event=dict(type="str", required=True, choices=list(EVENTS)),
            text=dict(type="str", required=True),
            run=dict(type="str"),
            node=dict(type="str"),
            details=dict(type="dict", default={}),
            retries=dict(type="int", default=2),
            retry_delay=dict(type="float", default=1.0),
            timeout=dict(type="int", default=10),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
        ),
        with_auth=False,
    )
    module.run(notify)


if __name__ == "__main__":
    main()
