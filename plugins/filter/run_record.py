# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_record
short_description: Record a node, done or failed, in the state of a rolling maintenance run
version_added: 0.1.0
deprecated:
  removed_in: 1.0.0
  why: One filter records nodes, one node or a batch, from their outcomes.
  alternative: Use P(kubevirt_ops.maintenance.record_outcomes#filter) with the node's outcome.
description:
  - Takes the state of a rolling maintenance run and returns it with O(node) added to its C(records), built from
    the node's entry in flight (O(current)).
  - With O(verify) (the result of M(kubevirt_ops.maintenance.maintenance_verify)) the node is done. Without it
    the node failed in the phase it was in, as O(failed_task) and O(failed_result) say (C(ansible_failed_task)
    and C(ansible_failed_result) in a rescue); the failure is counted, and the run stops once there are more
    than O(max_failures), or at once when the failed task renewed the cluster lock. A stop stays a stop.
  - A wrapper of P(kubevirt_ops.maintenance.record_outcomes#filter), which takes the node's outcome as one dictionary.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(records), C(failures), C(stop) and C(stop_reason).
    type: dict
    required: true
  node:
    description: The node to record.
    type: str
    required: true
  current:
    description: The node's entry in flight (C(index), C(started), C(predicted_seconds), C(phase),
      C(phase_start), C(phases), C(drain)).
    type: dict
    required: true
  now:
    description: When the node ended (an ISO 8601 UTC timestamp).
    type: str
    required: true
  method:
    description: The method to record when the node's drain did not say which one it used.
    type: str
    required: true
  verify:
    description: The verification's result; given, the node is done.
    type: dict
  failed_task:
    description: The task that failed (C(ansible_failed_task)).
    type: dict
  failed_result:
    description: Its result (C(ansible_failed_result)).
    type: dict
  max_failures:
    description: How many failed nodes the run goes on after.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Record the node as done
  ansible.builtin.set_fact:
    run_state: >-
      {{ run_state | kubevirt_ops.maintenance.run_record('worker-1', current, now(utc=true, fmt='%Y-%m-%dT%H:%M:%S.%fZ'),
                                                         'auto', verify=verify_result) }}
"""

RETURN = r"""
_value:
  description: The run's state with the node's record appended (and C(failures), C(stop), C(stop_reason) updated for
    a failure).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import record_outcomes

# Said when the filter is used, not through meta/runtime.yml: ansible-core loads every filter file of a collection
# to find any one of its filters (Jinja2Loader.get_with_context), so a deprecation there would be printed in every
# play that uses one of this collection's filters.
DEPRECATION = ("The kubevirt_ops.maintenance.run_record filter is deprecated: use "
               "kubevirt_ops.maintenance.record_outcomes with the node's outcome, a dictionary with node, current, "
               "now, method, and verify (done) or failed_task and failed_result (failed).")


def run_record(state, node, current, now, method, verify=None, failed_task=None, failed_result=None, max_failures=0):
    Display().deprecated(DEPRECATION, version="1.0.0",  # pylint: disable=ansible-deprecated-unnecessary-collection-name
                         collection_name="kubevirt_ops.maintenance")
    if not isinstance(state, dict):
        raise AnsibleFilterError("run_record: the input must be the run's state (a dictionary).")
    if verify is None and failed_task is None:
        raise AnsibleFilterError("run_record: give verify (the node is done) or failed_task (the node failed).")
    outcome = {"node": str(node), "current": current if isinstance(current, dict) else {}, "now": now,
               "method": method, "verify": verify, "failed_task": failed_task, "failed_result": failed_result}
    return record_outcomes(state, outcome, max_failures=int(max_failures))


class FilterModule:
    def filters(self):
        return {"run_record": run_record}
