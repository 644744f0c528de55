# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: node_fits_window
short_description: Whether the next node of a rolling run can finish before the maintenance window closes
version_added: 0.1.0
description:
  - Takes the state of a rolling maintenance run (the records of the nodes it has done and the preflight's plan of
    every node) and predicts how long O(node) will take - its drain from the guest memory of the VMs that migrate
    off it, at the rate (seconds per byte of guest memory) this run's drains achieved, or the run's mean drain when
    nothing migrates; plus the run's mean time for the rest of a node (node tasks, reboot, Ready, leaving
    maintenance, verification).
  - Compares the prediction with the time left before the window (a status from
    P(kubevirt_ops.maintenance.maintenance_window#filter)) closes. Before any node is done there is no prediction,
    and without a window that closes the node always fits.
  - The rolling_maintenance role uses it before each node.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(records) (each with C(node), C(status), C(started), C(finished) and
      C(phases.drain)) and C(preflight.details) (the preflight's entry of each node, with C(plan.vms)).
    type: dict
    required: true
  node:
    description:
      - The node to predict, or a list of nodes in maintenance at the same time (a batch of
        C(rolling_maintenance_max_parallel)). A batch drains as long as its longest drain; the rest of each node
        follows one node after the other.
    type: raw
    required: true
  window:
    description: The window's status, as returned by P(kubevirt_ops.maintenance.maintenance_window#filter).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Stop before a node that would not finish inside the window
  ansible.builtin.assert:
    that: fit.fits
    fail_msg: "{{ fit.message }}"
  vars:
    fit: >-
      {{ run_state | kubevirt_ops.maintenance.node_fits_window('worker-3',
           {'days': ['sat'], 'start': '22:00', 'end': '06:00'} | kubevirt_ops.maintenance.maintenance_window) }}
"""

RETURN = r"""
_value:
  description: The prediction and the verdict.
  type: dict
  contains:
    fits:
      description: Whether the node is predicted to finish before the window closes (V(true) without a prediction
        or without a window that closes).
      type: bool
    predicted_seconds:
      description: The predicted duration of the node in seconds; V(null) before any node of the run is done.
      type: int
    closes_at:
      description: When the window closes, V(null) when no window closes.
      type: str
    basis:
      description: What the prediction is made of, in words; V(null) without a prediction.
      type: str
    message:
      description: One sentence saying why the node is not started; V(null) when it fits.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import fit


def node_fits_window(state, node, window):
    if not isinstance(state, dict) or not isinstance(window, dict):
        raise AnsibleFilterError("node_fits_window: the input must be the run's state and 'window' the window's "
                                 "status (both dictionaries).")
    return fit(state, node, window)


class FilterModule:
    def filters(self):
        return {"node_fits_window": node_fits_window}
