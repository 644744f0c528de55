# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_records
short_description: Record the nodes of a batch, done or failed, in the state of a rolling maintenance run
version_added: 0.1.0
description:
  - Takes the state of a rolling maintenance run and returns it with the nodes of O(order) added to its C(records),
    in that order, each as P(kubevirt_ops.maintenance.run_record#filter) records one node.
  - Each node comes as its outcome, a dictionary with C(node), C(current) (its entry in flight), C(now) (when it
    ended), C(method), and C(verify) when it is done, or C(failed_task) and C(failed_result) when it failed.
  - The rolling_maintenance role uses it in the host-based style with C(rolling_maintenance_max_parallel) above
    1, where the hosts of a batch finish their nodes at the same time, each keeping its outcome, and the batch
    writes the records once all are finished.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(records), C(failures), C(stop) and C(stop_reason).
    type: dict
    required: true
  outcomes:
    description: The outcomes of the nodes. Outcomes of nodes not in O(order) are ignored.
    type: list
    elements: dict
    required: true
  order:
    description: The nodes to record, in this order. A node without an outcome is not recorded.
    type: list
    elements: str
    required: true
  max_failures:
    description: How many failed nodes the run goes on after.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Record the nodes of the batch
  ansible.builtin.set_fact:
    run_state: >-
      {{ run_state | kubevirt_ops.maintenance.run_records(ansible_play_batch | map('extract', hostvars, 'outcome') | list,
                                                          ['worker-1', 'worker-3'], max_failures=1) }}
"""

RETURN = r"""
_value:
  description: The run's state with the nodes' records appended (and C(failures), C(stop), C(stop_reason) updated
    for failures).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import record_all


def run_records(state, outcomes, order, max_failures=0):
    if not isinstance(state, dict):
        raise AnsibleFilterError("run_records: the input must be the run's state (a dictionary).")
    if not isinstance(outcomes, list) or not isinstance(order, list):
        raise AnsibleFilterError("run_records: outcomes and order must be lists.")
    return record_all(state, outcomes, [str(node) for node in order], max_failures=int(max_failures))


class FilterModule:
    def filters(self):
        return {"run_records": run_records}
