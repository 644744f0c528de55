# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_summary
short_description: The status, closing message and resume command of a rolling maintenance run
version_added: 0.1.0
description:
  - Takes the state of a rolling maintenance run at its end and returns its status, what remains to do, the command
    that finishes the job and the closing message.
  - The status is V(failed) when a node failed; else V(window_closed) or V(health_gate_failed) when the maintenance
    window or the health gate stopped the run; else V(succeeded) when every node of the run is recorded; else
    V(not_started) (the run stopped before its nodes, for example at the preflight).
  - The message says which nodes are done, which failed and are left cordoned, which were not started, whether the
    cluster lock was released, why the run stopped, and the command that finishes the job.
  - The rolling_maintenance role uses it once at the end of every run, also after a failure; the report and the
    job's artifacts carry its status and message.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(id), C(order), C(records) (each with C(node) and C(status)),
      C(stop_reason), C(holder) (the lock's holder, empty when the run took no lock), C(window) (the maintenance
      window's status, with C(message)) and C(health_gate) (with C(message), after the gate failed).
    type: dict
    required: true
  resume_command:
    description: The command users run to finish the job; the resume command is it with the nodes that remain
      (C(rolling_maintenance_nodes)) and no selector.
    type: str
    required: true
  lock_ttl:
    description: The cluster lock's TTL in seconds, which the message names when the lock could not be released.
    type: int
    required: true
  release:
    description: The result of the lock's release (M(kubevirt_ops.maintenance.cluster_lock) with C(state=absent));
      released when C(changed), else C(msg) says why not. Unused when the run took no lock.
    type: dict
"""

EXAMPLES = r"""
- name: Work out what is done and what remains
  ansible.builtin.set_fact:
    run_state: >-
      {{ run_state | combine(run_state | kubevirt_ops.maintenance.run_summary('ansible-playbook site.yml',
                                                                                lock_ttl=3600, release=released)) }}
"""

RETURN = r"""
_value:
  description: The end of the run.
  type: dict
  contains:
    status:
      description: V(succeeded), V(failed), V(window_closed), V(health_gate_failed) or V(not_started).
      type: str
    message:
      description:
        - The closing message, one line.
        - "For example C(Rolling maintenance 20240504T220000Z stopped. Done: worker-1. Failed and left cordoned (in
          maintenance): worker-2. Not started: worker-3. The cluster lock was released. After fixing worker-2, finish
          the job with: ansible-playbook site.yml -e '...')."
      type: str
    remaining:
      description: The nodes left to do, the failed ones first, then those not started.
      type: list
      elements: str
    resume:
      description: The command that finishes the job; an empty string when nothing remains.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_summary import summary


def run_summary(state, resume_command, lock_ttl, release=None):
    if not isinstance(state, dict):
        raise AnsibleFilterError("run_summary: the input must be the run's state (a dictionary).")
    if not (release is None or isinstance(release, dict)):
        raise AnsibleFilterError("run_summary: release must be the result of the lock's release (a dictionary).")
    return summary(state, resume_command, lock_ttl, release=release)


class FilterModule:
    def filters(self):
        return {"run_summary": run_summary}
