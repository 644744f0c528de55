#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: wait_for_drains
short_description: Wait for drains started as async jobs, with their live progress
version_added: 0.1.0
description:
  - Waits for M(kubevirt_ops.maintenance.node_maintenance) (or M(kubevirt_ops.maintenance.node_decommission)) runs
    started as async jobs (C(async) with C(poll=0)), for example the drains of several nodes at once, and returns
    each job's result.
  - While they run, each drain's progress reaches the job output (C(ansible-playbook), ansible-runner, AWX / AAP),
    every change and the latest status at least every 10 seconds, with the node, the pods left, the VMs still
    migrating by name and the last error, as a drain run without C(async) shows it. This needs the drains to run
    on the controller (connection C(local), as with C(delegate_to=localhost)); otherwise a line every 10 seconds
    names the drains still running.
  - Each job's state is read with Ansible's own C(async_status) module, once every O(poll) seconds per job still
    running. With connection C(local) the jobs' results files are on the controller, and between two reads the
    wait looks at them every 0.2 seconds, reading a job's state as soon as its file says it ended, so the task ends
    with the last drain, not up to O(poll) seconds after it.
  - The task fails when any drain failed, with every job's result in RV(results); use C(ignore_errors) to go on
    with the drains that succeeded.
  - This is an action plugin; it runs on the controller and reaches the jobs through the task's connection.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  jobs:
    description:
      - The registered result of the task that started the drains as async jobs, its C(results) when the task
        looped over the nodes, or a single job's result in a list.
      - A job's node is the one its drain was started for (the loop item when it is a node's name).
      - A job that was skipped or refused at its start is returned as it is.
    type: list
    elements: dict
    required: true
  timeout:
    description:
      - Seconds to wait for all jobs. Give the jobs' C(async) value or a little more; jobs still running then
        are returned failed, and go on running.
    type: int
    default: 3600
  poll:
    description:
      - Seconds between two reads of a job's state.
    type: float
    default: 5
notes:
  - The drain modules' action plugins give an async drain a progress file of its own when none is given (in the
    system's temporary directory) and say so in the job's start result (C(live_progress)); this module follows
    it and removes it once the job ended. Drains waited for with C(async_status) instead leave that file behind.
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance
  - module: ansible.builtin.async_status
extends_documentation_fragment:
  - kubevirt_ops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: It only reads the jobs' state.
  diff_mode:
    support: N/A
    details: It only reads the jobs' state.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Drain two nodes at once
  kubevirt_ops.maintenance.node_maintenance:
    name: "{{ item }}"
    wait: true
    wait_timeout: 1800
  loop: [worker-1, worker-2]
  async: 2100
  poll: 0
  register: drains
  delegate_to: localhost

- name: Wait for both drains, showing their progress
  kubevirt_ops.maintenance.wait_for_drains:
    jobs: "{{ drains.results }}"
    timeout: 2160
  register: drained
  delegate_to: localhost

- name: The nodes drained
  ansible.builtin.debug:
    msg: "{{ drained.results | rejectattr('failed', 'true') | map(attribute='node') | list }}"
"""

RETURN = r"""
results:
  description:
    - One entry per job, in the order of O(jobs), the job's result as C(async_status) returns it once the job
      ended (the drain module's result, with C(failed) and C(msg) when it failed), with the keys below.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node the drain was started for; null when it is not known.
      type: str
      returned: always
      sample: worker-1
    ansible_job_id:
      description: The async job's id; absent for a job that never started.
      type: str
      returned: when the job started
      sample: j480217659254.1234
    failed:
      description: Whether the drain failed (or was still running at O(timeout)).
      type: bool
      returned: always
      sample: false
    changed:
      description: Whether the drain changed the node.
      type: bool
      returned: always
      sample: true
    finished:
      description: Whether the job ended; false only for a job still running at O(timeout).
      type: bool
      returned: always
      sample: true
  sample:
    - node: worker-1
      ansible_job_id: j480217659254.1234
      finished: true
      failed: false
      changed: true
      phase: Succeeded
msg:
  description: Which drains failed, when any did.
  returned: failure
  type: str
  sample: "The drain of 1 of 2 nodes failed: worker-2."
"""
