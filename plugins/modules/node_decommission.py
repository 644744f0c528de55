#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_decommission
short_description: Drain a node for good, delete it, and check that its VMs run elsewhere
version_added: 0.1.0
description:
  - Drains the node with the same plan and drain engine as M(kubevirt_ops.maintenance.node_maintenance) (so the
    same blockers, safety refusals and O(non_migratable) policy apply), deletes the Node object, then waits until
    every VM that ran there and restarts by itself (run strategy C(Always) or C(RerunOnFailure), or live-migrated)
    is Running on another node. VMs with run strategy C(Manual) or C(Once) that were shut down are reported in
    RV(vms.not_restarted), not started.
  - A node that is not Ready cannot confirm that its pods stopped. It is refused unless O(assume_powered_off=true),
    by which the operator states the machine is off; its pods are then force-deleted (grace period 0), so that
    their VMs can start elsewhere without running twice on the same disks.
  - A node that no longer exists is reported unchanged.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  assume_powered_off:
    description:
      - The node is NotReady and the machine is powered off for certain. Its pods are force-deleted.
      - Wrong use can run a VM twice on shared storage and corrupt it.
    type: bool
    default: false
  wait_for_vms:
    description: Wait until the VMs that ran on the node run on other nodes before returning.
    type: bool
    default: true
  allow_last_schedulable_node:
    description: Allow decommissioning the only node that is Ready, uncordoned and untainted.
    type: bool
    default: false
  allow_control_plane:
    description: Allow decommissioning a control-plane node even when etcd quorum would be at risk.
    type: bool
    default: false
  progress_file:
    description:
      - A file to append progress lines to (they also go to the system log of the host that runs the module).
      - When the module runs on the controller (connection C(local)), its action plugin prints the drain's progress
        in the job output while it runs, each change and the latest status at least every 10 seconds; this option is
        not needed for that.
    type: path
  wait_timeout:
    description: How many seconds the whole task may take at most (drain and VM restarts included).
    type: int
    default: 1800
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.drain
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Returns the same keys, predicted, and the plan of the drain in RV(plan).
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Once the node is gone, a second run reports no change.
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance
"""

EXAMPLES = r"""
- name: Retire worker-7
  kubevirt_ops.maintenance.node_decommission:
    name: worker-7

- name: Worker-8 died and its power is cut; restart its VMs elsewhere
  kubevirt_ops.maintenance.node_decommission:
    name: worker-8
    assume_powered_off: true
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-7
deleted:
  description: Whether this run deleted the Node (in check mode, whether it would).
  returned: always
  type: bool
  sample: true
evicted_pods:
  description: Pods evicted (or force-deleted) by this run.
  returned: always
  type: int
  sample: 12
vms:
  description: The VMs that ran on the node.
  returned: always
  type: dict
  contains:
    rescheduled:
      description: VMs running on another node now (in check mode, a node with room; the scheduler decides).
      type: list
      elements: dict
      sample: [{namespace: vms, name: web-1, node: worker-2}]
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        node:
          description: Where it runs (null when O(wait_for_vms=false) and it has not started yet).
          type: str
    not_restarted:
      description: VMs left stopped because of their run strategy.
      type: list
      elements: dict
      sample: [{namespace: vms, name: lab-1, run_strategy: Manual}]
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        run_strategy:
          description: The VM's run strategy.
          type: str
duration_seconds:
  description: Wall time of the task.
  returned: always
  type: float
  sample: 61.2
plan:
  description: The plan of the drain, as M(kubevirt_ops.maintenance.node_maintenance_info) reports it.
  returned: in check mode, when the node exists
  type: dict
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission import run
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.module import MaintenanceModule


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.DRAIN,
            dict(
                name=dict(type="str", required=True),
                assume_powered_off=dict(type="bool", default=False),
                wait_for_vms=dict(type="bool", default=True),
                allow_last_schedulable_node=dict(type="bool", default=False),
                allow_control_plane=dict(type="bool", default=False),
                progress_file=dict(type="path"),
                wait_timeout=dict(type="int", default=1800),
            ),
        ),
    )
    module.run(run)


if __name__ == "__main__":
    main()
