# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: machine_roads
short_description: The roads to the nodes' machines that an inventory names, for the preflight's machines option
version_added: 0.1.0
description:
  - Takes a mapping of node names to their inventory hosts and returns, for each node whose host has the variable
    C(bmc) (its BMC) or C(bmh) (its BareMetalHost), C({name, bmc}) or C({name, bmh}) -
    O(kubevirt_ops.maintenance.maintenance_preflight#module:machines.roads). Nodes whose hosts name neither are
    left out (their BareMetalHost is the one their providerID names).
  - The rolling_maintenance role checks every machine of a run with it in its preflight.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: Node name to inventory host name.
    type: dict
    required: true
  hostvars:
    description: The inventory's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the machines of two nodes, each host with its bmc variable
  kubevirt_ops.maintenance.maintenance_preflight:
    nodes: [worker-1, worker-2]
    machines:
      reboot: true
      roads: "{{ {'worker-1': 'worker-1', 'worker-2': 'worker-2'} | kubevirt_ops.maintenance.machine_roads(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One C({name, bmc}) or C({name, bmh}) per node whose host names its road, by node name.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError


def machine_roads(host_of, hostvars):
    if not isinstance(host_of, dict):
        raise AnsibleFilterError("machine_roads: the input must map node names to their inventory hosts.")
    roads = []
    for node in sorted(host_of):
        host = host_of[node]
        variables = hostvars[host] if host in hostvars else {}
        # Both given is the host's mistake: the preflight refuses it as node_machine does.
        road = dict((key, variables[key]) for key in ("bmc", "bmh") if variables.get(key))
        if road:
            roads.append(dict(road, name=node))
    return roads


class FilterModule(object):
    def filters(self):
        return {"machine_roads": machine_roads}
