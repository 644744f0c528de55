# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: health_gate_verdict
short_description: Whether one try of a rolling maintenance run's health gate passed, and why not
version_added: 0.1.0
description:
  - Takes a health gate (C(rolling_maintenance_health_gate) of the rolling_maintenance role) and the result of one
    try of its check, and returns whether the try passed and, when it did not, why, in one line.
  - A C(command) check passes when the command exits 0; the reason gives the exit code and the last line of its
    error output (else of its output, else of the try's message, for example a timeout), at most about 200
    characters of it.
  - A C(url) check passes when the answer's status is one of C(status_code) (default V([200])) and its body
    contains C(expect), when given; the reason says that nothing answered (and why), which status came instead,
    or what the body lacks, naming the URL as O(url_shown) gives it.
  - A C(tasks) check judged here has passed (a failing task file is judged by the task that failed).
  - The rolling_maintenance role uses it after each try of the gate; the reason goes to the progress line and,
    when the gate gives up, to the run's message.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The health gate, with one of C(command), C(url) and C(tasks), and for C(url) C(status_code) and
      C(expect).
    type: dict
    required: true
  command:
    description: The result of the command (M(ansible.builtin.command)), for a C(command) check.
    type: dict
  http:
    description: The result of the GET (M(ansible.builtin.uri), with C(return_content) when the gate has
      C(expect)), for a C(url) check.
    type: dict
  url_shown:
    description: The URL as messages show it, without user, password and query string.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Judge the try
  ansible.builtin.set_fact:
    gate_try: >-
      {{ {'url': 'http://prometheus:9090/api/v1/query', 'expect': '"result":[]'}
         | kubevirt_ops.maintenance.health_gate_verdict(http=answer, url_shown='http://prometheus:9090/api/v1/query') }}
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    passed:
      description: Whether the try passed.
      type: bool
    reason:
      description:
        - Why it failed; an empty string when it passed.
        - "For example C(HTTP 503 from http://prometheus:9090/api/v1/query (expected 200)) or C(exited 1: connection
          refused)."
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.health_gate import verdict


def health_gate_verdict(gate, command=None, http=None, url_shown=""):
    if not isinstance(gate, dict):
        raise AnsibleFilterError("health_gate_verdict: the input must be the health gate (a dictionary).")
    for name, result in (("command", command), ("http", http)):
        if not (result is None or isinstance(result, dict)):
            raise AnsibleFilterError("health_gate_verdict: %s must be the result of the try (a dictionary)." % name)
    try:
        return verdict(gate, command=command, http=http, url_shown=url_shown or "")
    except TypeError as exc:
        raise AnsibleFilterError("health_gate_verdict: the gate's expect and the answer must be text (%s)." % exc)


class FilterModule:
    def filters(self):
        return {"health_gate_verdict": health_gate_verdict}
