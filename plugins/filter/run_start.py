# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_start
short_description: Decide whether the next node (or batch) of a rolling maintenance run starts
version_added: 0.1.0
description:
  - Takes the state of a rolling maintenance run and decides whether O(node) starts now. It does not when the run
    has stopped, when the maintenance window (O(window), a status from
    P(kubevirt_ops.maintenance.maintenance_window#filter)) is closed, or when the node is predicted to outlast the
    window, as P(kubevirt_ops.maintenance.node_fits_window#filter) predicts it.
  - Given O(now) and one node, it also returns the node's entry in flight, which
    P(kubevirt_ops.maintenance.run_phase#filter) moves through its phases and
    P(kubevirt_ops.maintenance.record_outcomes#filter) records.
  - The rolling_maintenance role uses it before each node and each batch.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The run's state, with C(stop), C(order), C(records) and C(preflight.details).
    type: dict
    required: true
  node:
    description: The node, or a list of nodes in maintenance at the same time (a batch of
      C(rolling_maintenance_max_parallel)).
    type: raw
    required: true
  window:
    description:
      - The window's status, as returned by P(kubevirt_ops.maintenance.maintenance_window#filter).
      - V(null) for a node whose drain already ran with its batch, which goes on whatever the window.
    type: dict
    required: true
  now:
    description: When the node starts (an ISO 8601 UTC timestamp). Without it, only the decision is returned.
    type: str
  started:
    description: When the node's drain started, if earlier than O(now) (with its batch).
    type: str
  position:
    description: The node's place after the records of the run, for the nodes of a batch recorded together.
    type: int
    default: 0
  host:
    description: The node's inventory host, if it has one.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Start the node, or stop the run before it
  ansible.builtin.set_fact:
    current: >-
      {{ run_state | kubevirt_ops.maintenance.run_start('worker-3',
           {'days': ['sat'], 'start': '22:00', 'end': '06:00'} | kubevirt_ops.maintenance.maintenance_window,
           now(utc=true, fmt='%Y-%m-%dT%H:%M:%S.%fZ')) }}
"""

RETURN = r"""
_value:
  description: The decision and, given O(now) and one node, the node's entry in flight.
  type: dict
  contains:
    go:
      description: Whether the node starts.
      type: bool
    window_stop:
      description: The window's status as the run records a stop before the node (with the prediction's C(message)
        when the window is open but closes too early); V(null) when the node starts or the run had stopped already.
      type: dict
    predicted_seconds:
      description: The node's predicted duration; V(null) before any node of the run is done.
      type: int
    index:
      description: The node's number in the run.
      type: int
    total:
      description: The number of nodes of the run.
      type: int
    label:
      description: C([index/total node]), as progress lines begin.
      type: str
    started:
      description: When the node started.
      type: str
    phase:
      description: The phase it is in, V(drain).
      type: str
    detail:
      description: The preflight's entry of the node.
      type: dict
    host:
      description: The node's inventory host, or an empty string.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import start


def run_start(state, node, window, now=None, started=None, position=0, host=""):
    if not isinstance(state, dict) or not (window is None or isinstance(window, dict)):
        raise AnsibleFilterError("run_start: the input must be the run's state and 'window' the window's status "
                                 "(dictionaries), or null for a node already drained with its batch.")
    nodes = [str(n) for n in node] if isinstance(node, (list, tuple)) else str(node)
    return start(state, nodes, window, now=now, started=started or None, position=int(position or 0),
                 host=host or "")


class FilterModule:
    def filters(self):
        return {"run_start": run_start}
