# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_progress
short_description: The progress lines of a rolling maintenance run's node
version_added: 0.1.0
description:
  - Takes the entry of the node a rolling maintenance run is working on (from
    P(kubevirt_ops.maintenance.run_start#filter) and P(kubevirt_ops.maintenance.run_phase#filter)) and returns the
    line the run prints after O(step).
  - The rolling_maintenance role prints them as it goes, so a job's output says where the run is.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The node's entry in flight, with C(label), C(detail) (its preflight entry), C(host), and C(drain)
      (the drain's result) from the drain on.
    type: dict
    required: true
  step:
    description:
      - V(enter), the node enters maintenance; V(drained), its drain ended; V(done), it is back in service and
        verified; V(failed), it failed (what the run says - it stops, or goes on).
    type: str
    choices: [enter, drained, done, failed]
    required: true
  state:
    description: The run's state (V(done) counts the nodes left; V(failed) reads the node's record).
    type: dict
  verify:
    description: The verification's result (V(done)).
    type: dict
  outcome:
    description: The node's outcome with C(node), C(failed_task) and C(failed_result) (V(failed)).
    type: dict
  with_batch:
    description: The node was drained with its batch.
    type: bool
    default: false
  node_tasks:
    description: Node tasks run next (V(drained)).
    type: bool
    default: false
  reboot:
    description: The node's host reboots next (V(drained)).
    type: bool
    default: false
  machine:
    description: The node's machine is serviced through its BMC next (V(drained)).
    type: bool
    default: false
  recorded_later:
    description: How many nodes of the node's batch are recorded after it, together (the host-based style; V(done),
      and for V(failed) whether the node is one of them).
    type: int
    default: 0
  max_failures:
    description: How many failed nodes the run goes on after (V(failed)).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Progress
  ansible.builtin.debug:
    msg: "{{ current | kubevirt_ops.maintenance.run_progress('drained', node_tasks=true) }}"
"""

RETURN = r"""
_value:
  description: The line, for example C([2/4 worker-2] drained in 31s (drain) - 12 pods evicted, 10 VMs migrated, 0 shut
    down; left on the node - 0 pods, 0 VMs.) (with colons in place of the dashes).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import failure, progress


def run_progress(current, step, state=None, verify=None, outcome=None, with_batch=False, node_tasks=False,
                 reboot=False, recorded_later=0, max_failures=0, machine=False):
    if not isinstance(current, dict):
        raise AnsibleFilterError("run_progress: the input must be the entry of the node in flight (a dictionary).")
    if step == "failed":
        if not isinstance(state, dict) or not isinstance(outcome, dict):
            raise AnsibleFilterError("run_progress: step 'failed' needs the run's state and the node's outcome.")
        return failure(state, outcome, max_failures=int(max_failures), with_batch=bool(with_batch),
                       recorded_later=bool(int(recorded_later or 0)))
    try:
        return progress(current, step, state=state, verify=verify, with_batch=bool(with_batch),
                        node_tasks=bool(node_tasks), reboot=bool(reboot), recorded_later=int(recorded_later or 0),
                        machine=bool(machine))
    except ValueError as exc:
        raise AnsibleFilterError("run_progress: %s." % exc)


class FilterModule:
    def filters(self):
        return {"run_progress": run_progress}
