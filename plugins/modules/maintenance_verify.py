#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: maintenance_verify
short_description: Wait until a node is back and every VM that ran before runs again
version_added: 0.1.0
description:
  - Waits, by watching the node and the VirtualMachineInstances, until the node is Ready (and, with
    O(schedulable=true), schedulable and out of maintenance) and every VM in O(running_vms) has a Running
    and Ready VMI again, wherever it runs.
  - A VM whose VirtualMachine was deleted meanwhile (by its owner) is not lost; it is reported in
    RV(vms.deleted) and not waited for.
  - Fails at O(timeout) with one sentence saying what is still missing (the node's condition, the VMs not
    running).
  - Reports the live migrations that left the node since O(migrations_since), with their source, target, start
    and end, for the maintenance report.
  - Used by the C(kubevirt_ops.maintenance.rolling_maintenance) role after each node, and to wait for a node to
    be Ready after a reboot.
  - Once the node is back it records an Event on it (C(NodeReady), or C(BackInService) with O(schedulable=true)),
    the end of its maintenance in C(kubectl describe node).
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description:
      - The node. Without it, only the VMs are checked (for example after a node was deleted).
      - One of O(name) and O(running_vms) is required.
    type: str
  schedulable:
    description:
      - Also wait until the node is uncordoned and carries no maintenance mark.
      - V(false) only waits for the node to be Ready (while it is still in maintenance).
    type: bool
    default: true
  running_vms:
    description:
      - VMs that must be running, as C(namespace/name) strings or dictionaries with C(namespace) and C(name)
        (for example the RV(kubevirt_ops.maintenance.maintenance_preflight#module:running_vms) of the preflight).
      - A VM counts as running (back in service) when a VMI of it is in phase Running, with its Ready condition
        True, on any node.
    type: list
    elements: raw
    default: []
  expected_stopped:
    description: VMs allowed not to run (their run strategy leaves them stopped after a drain).
    type: list
    elements: raw
    default: []
  migrations_since:
    description: Report completed live migrations out of the node that started at or after this ISO 8601 time.
    type: str
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 600
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.run
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
  - kubevirt_ops.maintenance.attributes.info_module
"""

EXAMPLES = r"""
- name: Wait until worker-2 is Ready after its reboot (still in maintenance)
  kubevirt_ops.maintenance.maintenance_verify:
    name: worker-2
    schedulable: false
    timeout: 900

- name: Verify worker-2 is back and no VM was lost
  kubevirt_ops.maintenance.maintenance_verify:
    name: worker-2
    running_vms: "{{ preflight.running_vms }}"
    expected_stopped: "{{ preflight.expected_stopped }}"
    migrations_since: "{{ node_started }}"
"""

RETURN = r"""
node:
  description: The node after the wait (V(null) without O(name)).
  returned: always
  type: dict
  contains:
    name:
      description: Node name.
      type: str
    ready:
      description: Whether it is Ready.
      type: bool
    schedulable:
      description: Whether it is uncordoned.
      type: bool
    in_maintenance:
      description: Whether it still carries a maintenance mark.
      type: bool
vms:
  description: The VMs checked.
  returned: always
  type: dict
  contains:
    expected:
      description: How many VMs had to run.
      type: int
    running:
      description: How many of them run.
      type: int
    stopped_as_expected:
      description: VMs in O(expected_stopped) that are not running.
      type: list
      elements: str
    deleted:
      description: Expected VMs whose VirtualMachine was deleted meanwhile (by its owner); they are not waited for.
      type: list
      elements: str
    not_running:
      description: VMs that should run and do not (always empty on success; listed in the failure otherwise).
      type: list
      elements: str
    on_node:
      description: VMs running on the node now.
      type: list
      elements: str
    where:
      description: The node each expected VM runs on now, by C(namespace/name).
      type: dict
migrations:
  description: Completed live migrations out of the node since O(migrations_since).
  returned: always
  type: list
  elements: dict
  sample: [{namespace: prod, name: db-1, source: worker-1, target: worker-3,
            start: "2024-05-04T22:00:10Z", end: "2024-05-04T22:00:48Z"}]
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.verification import run


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(args.RUN, dict(
            name=dict(type="str"),
            schedulable=dict(type="bool", default=True),
            running_vms=dict(type="list", elements="raw", default=[]),
            expected_stopped=dict(type="list", elements="raw", default=[]),
            migrations_since=dict(type="str"),
            timeout=dict(type="int", default=600),
        )),
    )
    module.run(run)


if __name__ == "__main__":
    main()
