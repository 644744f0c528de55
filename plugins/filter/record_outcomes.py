# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: record_outcomes
short_description: Record nodes, done or failed, in the state of a rolling maintenance run from their outcomes
version_added: 0.1.0
description:
  - Takes the state of a rolling maintenance run and returns it with nodes added to its C(records), each from its
    outcome, one node's or a batch's.
  - An outcome is a dictionary with C(node), C(current) (the node's entry in flight, from
    P(kubevirt_ops.maintenance.run_start#filter) and P(kubevirt_ops.maintenance.run_phase#filter)), C(now) (when
    it ended) and C(method) (recorded when the node's drain did not say which one it used); and C(verify) (the
    result of M(kubevirt_ops.maintenance.maintenance_verify)) when the node is done, or C(failed_task) and
    C(failed_result) (C(ansible_failed_task) and C(ansible_failed_result) in a rescue) when it failed in the phase
    it was in.
  - A failure is counted, and the run stops once there are more than O(max_failures), or at once when the failed
    task renewed the cluster lock. A stop stays a stop.
  - The rolling_maintenance role uses it at the end of every node; in the host-based style with
    C(rolling_maintenance_max_parallel) above 1, where the hosts of a batch finish their nodes at the same time,
    each keeps its outcome and the batch records them together once all are finished. The report is written from
    the records.
  - Replaces the deprecated filters P(kubevirt_ops.maintenance.run_record#filter) and C(run_records) (now a redirect
    to this filter, which takes its calls unchanged).
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(records), C(failures), C(stop) and C(stop_reason).
    type: dict
    required: true
  outcomes:
    description: The outcome of one node, or a list of outcomes (entries that are not dictionaries are ignored).
    type: raw
    required: true
  order:
    description:
      - The nodes to record, in this order. A node without an outcome is not recorded; outcomes of nodes not in
        it are ignored.
      - Without it, the nodes of O(outcomes) in the order they come.
    type: list
    elements: str
  max_failures:
    description: How many failed nodes the run goes on after.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Record the node
  ansible.builtin.set_fact:
    run_state: >-
      {{ run_state | kubevirt_ops.maintenance.record_outcomes({'node': 'worker-1', 'current': current,
           'now': now(utc=true, fmt='%Y-%m-%dT%H:%M:%S.%fZ'), 'method': 'auto', 'verify': verify_result}) }}

- name: Record the nodes of the batch, in the batch's order
  ansible.builtin.set_fact:
    run_state: >-
      {{ run_state | kubevirt_ops.maintenance.record_outcomes(ansible_play_batch | map('extract', hostvars, 'outcome')
                                                                | list, ['worker-1', 'worker-3'], max_failures=1) }}
"""

RETURN = r"""
_value:
  description: The run's state with the nodes' records appended (and C(failures), C(stop), C(stop_reason) updated
    for failures).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import record_outcomes as record


def record_outcomes(state, outcomes, order=None, max_failures=0):
    if not isinstance(state, dict):
        raise AnsibleFilterError("record_outcomes: the input must be the run's state (a dictionary).")
    if not isinstance(outcomes, (dict, list)):
        raise AnsibleFilterError("record_outcomes: outcomes must be a node's outcome (a dictionary) or a list of them.")
    if not (order is None or isinstance(order, list)):
        raise AnsibleFilterError("record_outcomes: order must be a list of nodes.")
    return record(state, outcomes, None if order is None else [str(node) for node in order],
                  max_failures=int(max_failures))


class FilterModule:
    def filters(self):
        return {"record_outcomes": record_outcomes}
