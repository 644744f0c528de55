# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_phase
short_description: Move the node in flight of a rolling maintenance run on to its next phase
version_added: 0.1.0
description:
  - Takes the entry of the node a rolling maintenance run is working on (its C(phase), C(phase_start) and the
    C(phases) behind it) and returns it in O(phase) from O(now) on, with the phase it leaves ended at O(now).
  - The rolling_maintenance role uses it between the steps of a node; the phases end up in the node's record and
    the report.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The node's entry, with C(phase), C(phase_start) and C(phases).
    type: dict
    required: true
  phase:
    description: The phase the node enters.
    type: str
    choices: [drain, tasks, ready, uncordon, verify]
    required: true
  now:
    description: The time of the move (an ISO 8601 UTC timestamp).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The node is drained; its tasks start
  ansible.builtin.set_fact:
    current: "{{ current | kubevirt_ops.maintenance.run_phase('tasks', now(utc=true, fmt='%Y-%m-%dT%H:%M:%S.%fZ')) }}"
"""

RETURN = r"""
_value:
  description: The node's entry in its new phase; C(phases) gains the phase it left, with C(start) and C(end).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import advance


def run_phase(current, phase, now):
    if not isinstance(current, dict):
        raise AnsibleFilterError("run_phase: the input must be the entry of the node in flight (a dictionary).")
    try:
        return advance(current, phase, now)
    except ValueError as exc:
        raise AnsibleFilterError("run_phase: %s." % exc)


class FilterModule:
    def filters(self):
        return {"run_phase": run_phase}
