#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_fence
short_description: Fence a failed node - power its machine off through its BMC, then mark it out of service
version_added: 0.1.0
description:
  - For a node that died (kernel panic, dead NIC, lost power supply) whose VMs must run elsewhere now. Without
    fencing, KubeVirt keeps such a node's VMIs C(Running) in the API until the node is deleted or boots again,
    since it cannot confirm that their guests stopped.
  - With O(state=present) the machine is powered off through its BMC (C(ComputerSystem.Reset ForceOff) over
    Redfish with O(bmc), or C(spec.online=false) on its Metal3 BareMetalHost), the module waits until the BMC
    reports it off, and only then taints the node C(node.kubernetes.io/out-of-service=nodeshutdown:NoExecute)
    (Kubernetes non-graceful node shutdown), so that its pods are force-deleted and its volumes detached, and VMs with run
    strategy C(Always) or C(RerunOnFailure) start on other nodes at once. The module waits for them
    (O(wait_for_vms)) and reports the others in RV(vms.not_restarted) with the reason.
  - A node whose kubelet still heartbeats is refused with nothing changed (a live node is drained with
    M(kubevirt_ops.maintenance.node_maintenance), never fenced); so is a BareMetalHost with
    C(spec.disablePowerOff). The taint is never set before the BMC reads the power off.
  - The machine's road is its BMC when O(bmc) is given, else its BareMetalHost (O(bmh), or the one the node's
    C(spec.providerID) names). The BMC or the host is read before anything changes.
  - Node remediation is paused while the node is fenced, as M(kubevirt_ops.maintenance.node_decommission) does (the
    medik8s NodeHealthChecks and the MachineHealthChecks that cover it), so that nothing powers the machine on
    meanwhile; O(state=absent) restores it.
  - With O(state=absent) the machine is powered on, the module waits for the node to be Ready again (a new boot ID),
    then removes the taint.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  state:
    description: V(present) fences the node; V(absent) powers its machine on and lifts the fence.
    type: str
    choices: [present, absent]
    default: present
  bmh:
    description:
      - The node's BareMetalHost, when its providerID does not name it and O(bmc) is not given.
    type: dict
    suboptions:
      name:
        description: Name of the BareMetalHost.
        type: str
        required: true
      namespace:
        description: Namespace of the BareMetalHost.
        type: str
        required: true
  wait_for_vms:
    description: With O(state=present), wait until the VMs that restart by themselves run on other nodes.
    type: bool
    default: true
  pause_remediation:
    description: Pause the node's remediation while it is fenced (restored by O(state=absent)).
    type: bool
    default: true
  progress_file:
    description: A file to append progress lines to (they also go to the system log of the host that runs the module).
    type: path
  wait_timeout:
    description: How many seconds the whole task may take at most (power, node Ready, VM restarts).
    type: int
    default: 900
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.lock
  - kubevirt_ops.maintenance.bmc
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Reads the BMC (or BareMetalHost) and the node, and returns the same keys, predicted.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A fenced node whose machine is off (or an unfenced, Ready one) reports no change.
seealso:
  - module: kubevirt_ops.maintenance.node_decommission
  - module: kubevirt_ops.maintenance.node_maintenance
  - name: Non-graceful node shutdown
    description: The out-of-service taint in Kubernetes.
    link: https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/#non-graceful-node-shutdown
"""

EXAMPLES = r"""
- name: Worker-8 hangs; power it off through its BMC and restart its VMs elsewhere
  kubevirt_ops.maintenance.node_fence:
    name: worker-8
    bmc:
      address: https://bmc-worker-8.example.com/redfish/v1/Systems/1
      username: "{{ bmc_user }}"
      password: "{{ bmc_password }}"
      ca_path: /etc/pki/bmc-ca.pem
  register: fenced

- name: The same through its Metal3 BareMetalHost (named by the node's providerID)
  kubevirt_ops.maintenance.node_fence:
    name: worker-9

- name: Repaired; power it on and give it back to the cluster
  kubevirt_ops.maintenance.node_fence:
    name: worker-8
    state: absent
    bmc: "{{ hostvars['worker-8'].bmc }}"
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-8
state:
  description: O(state).
  returned: always
  type: str
  sample: present
fenced:
  description: Whether the node carries the out-of-service taint after this run (in check mode, would).
  returned: always
  type: bool
  sample: true
machine:
  description: The machine, as its BMC or BareMetalHost reported it; never credentials.
  returned: always
  type: dict
  sample: {road: redfish, address: "https://bmc-worker-8.example.com/redfish/v1/Systems/1", power_state: "Off",
           actions: [ForceOff]}
  contains:
    road:
      description: C(redfish) or C(metal3).
      type: str
    address:
      description: The Redfish System's URL (road C(redfish)).
      type: str
    bmh:
      description: C(namespace/name) of the BareMetalHost (road C(metal3)).
      type: str
    power_state:
      description: C(On) or C(Off), as last read (null while a BareMetalHost has not reported it).
      type: str
    actions:
      description: What this run sent (C(ForceOff), C(On), C(spec.online=false)...); empty when nothing was needed.
      type: list
      elements: str
vms:
  description: The VMs whose VMIs ran on the node (O(state=present)).
  returned: always
  type: dict
  contains:
    restarted:
      description: VMs that start again by themselves, with the node they run on now (null when not yet, or in check
        mode).
      type: list
      elements: dict
      sample: [{namespace: vms, name: web-1, node: worker-2}]
    not_restarted:
      description: VMs left stopped, with their run strategy and the reason.
      type: list
      elements: dict
      sample: [{namespace: vms, name: lab-1, run_strategy: Manual,
                reason: "run strategy Manual: KubeVirt does not start it again by itself"}]
boot_id:
  description: The node's boot ID before and after the power-on (O(state=absent), when the machine was powered on).
  returned: when the machine was powered on
  type: dict
  sample: {before: 0b1e..., after: 7c2f...}
remediation_paused:
  description: The remediation pauses this run set (as in M(kubevirt_ops.maintenance.node_decommission)).
  returned: always
  type: list
  elements: dict
remediation_restored:
  description: The remediation pauses this run lifted.
  returned: always
  type: list
  elements: dict
duration_seconds:
  description: Wall time of the task, when it changed something.
  returned: when changed
  type: float
  sample: 21.4
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.fence.runner import run


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.LOCK,
            args.BMC,
            args.BMH,
            dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                wait_for_vms=dict(type="bool", default=True),
                pause_remediation=dict(type="bool", default=True),
                progress_file=dict(type="path"),
                wait_timeout=dict(type="int", default=900),
            ),
        ),
    )
    module.run(run)


if __name__ == "__main__":
    main()
