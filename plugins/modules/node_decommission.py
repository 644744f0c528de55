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
  - A node is deleted only once its machine is off, since a kubelet that still runs registers its deleted node
    again, schedulable, seconds later. The kubelet's heartbeat (its Lease in C(kube-node-lease) and its Ready
    condition's C(lastHeartbeatTime)) counts as stopped when the newer of the two is older than the node lifecycle
    controller's default grace period (40 s, judged by the clock of the host running the module) or when that
    controller already set Ready to C(Unknown).
  - A node that still heartbeats is refused, before anything changes, unless O(power_off) or O(assume_powered_off)
    says how its machine is powered off. With O(power_off=bmh) the node is drained, its Metal3 BareMetalHost is set
    C(spec.online=false), and the node is deleted once the host reports C(status.poweredOn=false) and the heartbeat
    stopped. With O(power_off=manual) the node is drained, then the module waits (within O(wait_timeout), showing
    progress) for the user to power the machine off and the heartbeat to stop. A node whose heartbeat does not
    stop is not deleted; it stays drained and cordoned.
  - After deleting the node the module watches its name for O(reregistration_watch) seconds and fails if a Node of
    that name registers again.
  - >-
    Node remediation is paused for the time of the decommission (O(pause_remediation)), so that no health check
    reboots, powers on or reprovisions the machine while it is drained, powered off and deleted: the same pauses as
    M(kubevirt_ops.maintenance.node_maintenance) (an entry in C(spec.pauseRequests) of the medik8s NodeHealthChecks
    that select the node, the annotation C(cluster.x-k8s.io/paused) on the MachineHealthChecks that select its
    Machine, the label C(remediation.medik8s.io/exclude-from-remediation=true) on the node). They are restored once the
    node is deleted, and when the decommission fails before that. A MachineHealthCheck then remediates the Machine
    whose Node is gone (it replaces it); the module warns when the node has such a Machine. To remove the machine for
    good, delete its Machine or scale its MachineSet down.
  - A node that no longer exists is reported unchanged.
  - Respects the cluster lock O(lock) (by default the one the C(rolling_maintenance) and C(node_decommission) roles
    take); while another run holds it, the module refuses and changes nothing (a node that no longer exists is still
    reported unchanged).
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  assume_powered_off:
    description:
      - The machine is powered off for certain (or will be before its kubelet could register the node again).
      - A NotReady node's pods are then force-deleted; a Ready node is drained and deleted without waiting for its
        heartbeat to stop.
      - Wrong use can run a VM twice on shared storage and corrupt it, or let the node register again.
    type: bool
    default: false
  power_off:
    description:
      - How the machine is powered off before its Node is deleted.
      - V(bmh) sets C(spec.online=false) on the node's Metal3 BareMetalHost (metal3.io/v1alpha1), waits for
        C(status.poweredOn=false), then for the heartbeat to stop. The host is the one O(bmh) names, else the one
        the node's C(spec.providerID) names (C(metal3://<namespace>/<host>/<machine>) or C(metal3://<host uid>) of
        Cluster API Provider Metal3, C(baremetalhost:///<namespace>/<host>/<uid>) of OpenShift's machine API).
        A NotReady node is powered off this way before its pods are force-deleted.
      - V(redfish) powers the machine off through its BMC (O(bmc)), with C(ComputerSystem.Reset) - after the drain
        C(GracefulShutdown), then C(ForceOff) if the machine is not off within half of the time left; a NotReady node
        C(ForceOff) at once, before its pods are force-deleted. Then it waits for the BMC to report C(PowerState Off)
        and for the heartbeat to stop.
      - V(manual) waits, after the drain and within O(wait_timeout), for the heartbeat to stop while the user
        powers the machine off.
      - Unset, a node that still heartbeats is refused unless O(assume_powered_off=true).
    type: str
    choices: [bmh, manual, redfish]
  bmh:
    description:
      - The BareMetalHost of the node, for O(power_off=bmh) when the node's providerID does not name it.
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
  reregistration_watch:
    description:
      - Seconds to watch, after deleting the node, for a Node of the same name registering again (its kubelet still
        runs); one that does fails the task. V(0) does not watch.
    type: int
    default: 30
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
  pause_remediation:
    description:
      - Pause the NodeHealthChecks and MachineHealthChecks that cover the node until it is deleted (see the
        description); V(false) leaves them alone. Pauses of this collection for the node (an earlier run's) are
        restored once the node is deleted either way.
    type: bool
    default: true
  progress_file:
    description:
      - A file to append progress lines to (they also go to the system log of the host that runs the module).
      - When the module runs on the controller (connection C(local)), its action plugin prints the drain's progress
        in the job output while it runs, each change and the latest status at least every 10 seconds; this option is
        not needed for that. Started as an async job (C(async) with C(poll=0)),
        M(kubevirt_ops.maintenance.wait_for_drains) prints it while it waits for the job.
    type: path
  wait_timeout:
    description: How many seconds the whole task may take at most (drain and VM restarts included).
    type: int
    default: 1800
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.drain
  - kubevirt_ops.maintenance.drain.grouped
  - kubevirt_ops.maintenance.drain.owner
  - kubevirt_ops.maintenance.lock
  - kubevirt_ops.maintenance.bmc
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

- name: Retire worker-9, powering it off through its Metal3 BareMetalHost
  kubevirt_ops.maintenance.node_decommission:
    name: worker-9
    power_off: bmh
    bmh:
      name: rack2-host9
      namespace: openshift-machine-api

- name: Retire worker-11, powering it off through its BMC (Redfish)
  kubevirt_ops.maintenance.node_decommission:
    name: worker-11
    power_off: redfish
    bmc:
      address: https://bmc-worker-11.example.com/redfish/v1/Systems/1
      username: "{{ bmc_user }}"
      password: "{{ bmc_password }}"
      ca_path: /etc/pki/bmc-ca.pem

- name: Retire worker-10; the operator powers it off while the task waits
  kubevirt_ops.maintenance.node_decommission:
    name: worker-10
    power_off: manual
    wait_timeout: 3600

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
powered_off_by:
  description:
    - How the machine was found powered off before the Node was deleted (in check mode, how it would be).
    - C(bmh) (its BareMetalHost reported C(poweredOn=false) and the heartbeat stopped), C(redfish) (its BMC reported
      C(PowerState Off) and the heartbeat stopped), C(heartbeat_stopped) (the
      heartbeat stopped while the module waited), C(assumed) (O(assume_powered_off=true)); null when nothing was
      deleted.
  returned: always
  type: str
  sample: bmh
power_off:
  description: How the power-off was established.
  returned: always
  type: dict
  contains:
    method:
      description: C(bmh), C(redfish), C(manual) or C(assumed) (null when the node was already gone).
      type: str
      sample: bmh
    bmh:
      description: C(namespace/name) of the BareMetalHost powered off (null without O(power_off=bmh)).
      type: str
      sample: openshift-machine-api/rack2-host9
    bmc:
      description:
        - The BMC of O(power_off=redfish) (null otherwise), never its credentials; C(power_state) as it last read,
          C(resets) the C(ComputerSystem.Reset) types sent (empty when the machine was off already).
      type: dict
      sample: {road: redfish, address: "https://bmc-worker-11.example.com/redfish/v1/Systems/1", power_state: "Off",
               resets: [GracefulShutdown]}
    heartbeat:
      description: The kubelet's heartbeat when last looked at.
      type: dict
      contains:
        alive:
          description: Whether the kubelet still heartbeated.
          type: bool
        last:
          description: Time of the newest heartbeat (Lease renewal or Ready heartbeat), null when none is known.
          type: str
          sample: "2026-11-25T01:38:19Z"
        source:
          description: C(node Lease) or C(Ready condition heartbeat), whichever was newer.
          type: str
reregistration:
  description: The watch for the node registering again after its deletion.
  returned: always
  type: dict
  contains:
    watch_seconds:
      description: How long the name was (or would be) watched.
      type: int
      sample: 30
    reregistered:
      description: Whether a Node of the same name registered again (the task then fails).
      type: bool
      sample: false
remediation_paused:
  description:
    - What was paused of node remediation for the time of the decommission (in check mode, would be), in the shape of
      RV(kubevirt_ops.maintenance.node_maintenance#module:remediation_paused).
  returned: always
  type: list
  elements: dict
  sample: [{kind: NodeHealthCheck, api_version: remediation.medik8s.io/v1alpha1, namespace: null, name: nhc-workers,
            how: pauseRequests}]
remediation_restored:
  description:
    - The pauses of this collection for the node that were undone once the node was deleted (or because the
      decommission failed), in the shape of RV(remediation_paused).
  returned: always
  type: list
  elements: dict
  sample: []
lock:
  description:
    - The cluster lock that another run holds, as M(kubevirt_ops.maintenance.cluster_lock) returns it in RV(kubevirt_ops.maintenance.cluster_lock#module:lock).
  returned: when the task fails because another run holds O(lock)
  type: dict
  sample: {namespace: kube-system, name: kubevirt-ops-maintenance, holder: "alice@bastion pid 4242 #1a2b", ttl: 3600}
plan:
  description: The plan of the drain, as M(kubevirt_ops.maintenance.node_maintenance_info) reports it.
  returned: in check mode, when the node exists
  type: dict
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.decommission.runner import run
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.DRAIN,
            args.DRAIN_GROUPED,
            args.DRAIN_OWNER,
            args.LOCK,
            args.BMC,
            args.BMH,
            dict(
                name=dict(type="str", required=True),
                assume_powered_off=dict(type="bool", default=False),
                power_off=dict(type="str", choices=["bmh", "manual", "redfish"]),
                reregistration_watch=dict(type="int", default=30),
                wait_for_vms=dict(type="bool", default=True),
                allow_last_schedulable_node=dict(type="bool", default=False),
                allow_control_plane=dict(type="bool", default=False),
                pause_remediation=dict(type="bool", default=True),
                progress_file=dict(type="path"),
                wait_timeout=dict(type="int", default=1800),
            ),
        ),
    )
    module.run(run)


if __name__ == "__main__":
    main()
