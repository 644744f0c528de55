#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: maintenance_preflight
short_description: Check every node of a rolling maintenance before anything changes
version_added: 0.1.0
description:
  - Selects the nodes of a rolling maintenance (a list or a label selector), orders them, and checks all of them
    before any change, reporting every problem at once.
  - "Problems: a node that does not exist or is not Ready; a node already in maintenance that an earlier rolling
    run did not leave there, or cordoned by someone else; every blocker the maintenance plan finds (the same plan
    as M(kubevirt_ops.maintenance.node_maintenance_info) and check mode of
    M(kubevirt_ops.maintenance.node_maintenance)), under the O(non_migratable) policy: VMs that cannot leave,
    no room on the other nodes, PodDisruptionBudgets that never allow a disruption, pods the drain options
    forbid to evict, the last schedulable node, etcd quorum; a live migration still in flight anywhere in the
    cluster after O(settle_timeout); and, with O(lock), another run holding the cluster lock."
  - Before planning, the preflight waits (watching, up to O(settle_timeout)) until no live migration is in flight
    anywhere in the cluster, also those that start meanwhile, so that the plan sees where the migrating VMs end up.
    This matters above all when a run is started again after a run was killed during a drain, since KubeVirt goes
    on with that run's evacuations. The migrations it waited for are returned in RV(migrations_settled) and named
    in RV(notices); only those still in flight at the timeout are problems. It waits in check mode too, since
    waiting writes nothing.
  - A node left in maintenance by an earlier run (its maintenance reason starts with O(run_mark)) is not a
    problem; it comes first in the order, so that a re-run finishes it.
  - The nodes are planned in the order of the run and cumulatively, with the scheduler's rules (node selection,
    taints, every requested resource including hugepages and extended resources, required pod affinity and
    anti-affinity, topology spread constraints) - when a node is planned, what the nodes before it sent away runs
    where their plans put it, and with O(prefer_done_nodes) the nodes already done are tried first.
  - Returns the VMs running now, which M(kubevirt_ops.maintenance.maintenance_verify) later checks are all running
    again.
  - Used by the C(kubevirt_ops.maintenance.rolling_maintenance) role.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  nodes:
    description: Names of the nodes, in the order to maintain them. Mutually exclusive with O(label_selector).
    type: list
    elements: str
  label_selector:
    description: Label selector choosing the nodes (ordered by name). Mutually exclusive with O(nodes).
    type: str
  order:
    description:
      - V(given) keeps the order of O(nodes) (or node names for O(label_selector)).
      - V(fewest_vms_first) starts with the nodes running the fewest VMs, so that early failures touch few VMs.
      - Either way, nodes left in maintenance by an earlier run come first.
    type: str
    choices: [given, fewest_vms_first]
    default: given
  allow_control_plane:
    description: Do not refuse a control-plane node whose maintenance would cost etcd quorum.
    type: bool
    default: false
  allow_last_schedulable_node:
    description: Do not refuse the last node that can take workloads.
    type: bool
    default: false
  run_mark:
    description: Maintenance reason prefix that marks a node left in maintenance by an earlier rolling run.
    type: str
    default: rolling_maintenance
  lock:
    description:
      - When given, a cluster lock (see M(kubevirt_ops.maintenance.cluster_lock)) held by another holder is a
        problem.
    type: dict
    suboptions:
      name:
        description: Name of the Lease.
        type: str
        default: kubevirt-ops-maintenance
      namespace:
        description: Namespace of the Lease.
        type: str
        default: kube-system
      holder:
        description: The caller's own holder identity, which is not a problem.
        type: str
  settle_timeout:
    description:
      - Seconds to wait at most for the live migrations in flight to end before planning.
      - V(0) does not wait; every migration in flight is then a problem at once.
    type: int
    default: 300
  prefer_done_nodes:
    description:
      - Plan what leaves a node onto the nodes the run has already done first, as the scheduler does when the
        role's C(rolling_maintenance_prefer_done_nodes) marks the nodes still to do (module
        M(kubevirt_ops.maintenance.pending_nodes)). With V(false), the nodes with the most free memory come first.
    type: bool
    default: true
  max_parallel:
    description:
      - How many nodes the run maintains at the same time. The nodes are grouped into RV(batches) of at most this
        many, in the run's order; each node of a batch is planned with the other nodes of its batch out as well, so
        the capacity checked is the capacity for the whole batch out at once.
      - KubeVirt's own limits on live migrations (RV(migration_limits)) still apply; a batch that would start more
        migrations than they allow is named in RV(notices).
    type: int
    default: 1
  failure_domain:
    description:
      - A node label (such as C(topology.kubernetes.io/zone) or a rack label) whose value is the node's failure
        domain. The nodes of one batch always share the value; a selected node without the label is a problem.
      - Without it, any nodes may share a batch.
    type: str
  fail_on_problems:
    description: Fail when there is any problem. With V(false), the problems are returned and the task succeeds.
    type: bool
    default: true
  machines:
    description:
      - The machine work the run will do on every selected node (what M(kubevirt_ops.maintenance.node_machine) is
        then given), checked on every node's machine now, as that module checks it before it changes anything -
        its road answers (the BMC of O(machines.roads), else the node's BareMetalHost) and takes the credentials,
        every firmware component and BIOS attribute exists, and the road would take the changes (a BareMetalHost's
        FirmwareSchema and HostUpdatePolicy). Nothing is sent that changes a machine.
      - Each machine that cannot be serviced is a problem, the node's name and why, beside the others; each node's
        entry of RV(details) gains C(machine).
    type: dict
    suboptions:
      firmware:
        description: As O(kubevirt_ops.maintenance.node_machine#module:firmware).
        type: list
        elements: dict
        default: []
        suboptions:
          component:
            description: The firmware component.
            type: str
            required: true
          url:
            description: The URL of its image.
            type: str
            required: true
          version:
            description: The version the machine must report afterwards.
            type: str
            required: true
      bios:
        description: As O(kubevirt_ops.maintenance.node_machine#module:bios).
        type: dict
        default: {}
      reboot:
        description: As O(kubevirt_ops.maintenance.node_machine#module:reboot).
        type: bool
        default: false
      roads:
        description:
          - The road to a node's machine where its BareMetalHost is not it - O(machines.roads[].bmc) or
            O(machines.roads[].bmh), as node_machine takes them. A selected node without an entry goes through the
            BareMetalHost its providerID names; entries of nodes not selected are left alone.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: The node.
            type: str
            required: true
          bmc:
            description: As O(kubevirt_ops.maintenance.node_machine#module:bmc).
            type: dict
            suboptions:
              address:
                description: The URL of the machine's Redfish System.
                type: str
                required: true
              username:
                description: The BMC user.
                type: str
                required: true
              password:
                description: The BMC user's password. Never shown in results, messages or problems.
                type: str
                required: true
              ca_path:
                description: A PEM file of the CA that signed the BMC's certificate.
                type: path
              validate_certs:
                description: Whether the BMC's certificate is verified.
                type: bool
                default: true
          bmh:
            description: As O(kubevirt_ops.maintenance.node_machine#module:bmh).
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
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.drain
  - kubevirt_ops.maintenance.drain.grouped
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
  - kubevirt_ops.maintenance.attributes.info_module
"""

EXAMPLES = r"""
- name: Check all workers before a rolling maintenance, fewest VMs first
  kubevirt_ops.maintenance.maintenance_preflight:
    label_selector: node-role.kubernetes.io/worker
    order: fewest_vms_first
    non_migratable: shutdown
  register: preflight

- name: Two nodes of one zone at a time, with capacity checked for both out at once
  kubevirt_ops.maintenance.maintenance_preflight:
    label_selector: node-role.kubernetes.io/worker
    max_parallel: 2
    failure_domain: topology.kubernetes.io/zone
  register: preflight

- name: List the problems without failing
  kubevirt_ops.maintenance.maintenance_preflight:
    nodes: [worker-1, worker-2]
    fail_on_problems: false
  register: preflight_report

- name: Also check the machines a firmware update will touch (worker-1 through its BMC, worker-2 its BareMetalHost)
  kubevirt_ops.maintenance.maintenance_preflight:
    nodes: [worker-1, worker-2]
    machines:
      firmware:
        - component: bios
          url: https://firmware.example.com/r740/bios-2.19.1.exe
          version: 2.19.1
      reboot: true
      roads:
        - name: worker-1
          bmc: "{{ hostvars['worker-1'].bmc }}"
  register: preflight
"""

RETURN = r"""
nodes:
  description: The selected node names in the order to maintain them.
  returned: always
  type: list
  elements: str
  sample: [worker-3, worker-1, worker-2]
batches:
  description: The nodes grouped into the sets in maintenance at the same time, in order (one node each with
    O(max_parallel=1)). RV(nodes) is these batches one after the other.
  returned: always
  type: list
  elements: list
  sample: [[worker-1, worker-3], [worker-2, worker-4]]
max_parallel:
  description: The O(max_parallel) the batches were built with.
  returned: always
  type: int
  sample: 2
failure_domain:
  description: The O(failure_domain) label the batches were built with, or V(null).
  returned: always
  type: str
  sample: topology.kubernetes.io/zone
migration_limits:
  description: KubeVirt's live-migration limits, from the KubeVirt CR (KubeVirt's defaults where it sets none).
  returned: always
  type: dict
  contains:
    parallel_migrations_per_cluster:
      description: C(spec.configuration.migrations.parallelMigrationsPerCluster) (default 5).
      type: int
    parallel_outbound_migrations_per_node:
      description: C(spec.configuration.migrations.parallelOutboundMigrationsPerNode) (default 2).
      type: int
  sample: {parallel_migrations_per_cluster: 5, parallel_outbound_migrations_per_node: 2}
resumed:
  description: Nodes left in maintenance by an earlier run, which come first.
  returned: always
  type: list
  elements: str
  sample: []
problems:
  description: Every problem found, one sentence each (the task fails when there is one, unless O(fail_on_problems=false)).
  returned: always
  type: list
  elements: str
  sample: ["VM prod/db-1 cannot leave node worker-3: its eviction strategy is LiveMigrate but it is not live-migratable (...)."]
notices:
  description: Things worth knowing that do not stop the run (VMs that will stay stopped, nodes resumed).
  returned: always
  type: list
  elements: str
migration_limits_left_raised:
  description: Whether a stopped run left the live-migration limits it raised recorded where the cluster keeps them
    (M(kubevirt_ops.maintenance.migration_limits) with O(kubevirt_ops.maintenance.migration_limits#module:state=restored)
    puts them back); V(null) when that cannot be read (no right to read the HyperConverged or KubeVirt resource).
  returned: always
  type: bool
details:
  description: Per node, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    ready:
      description: Whether the node is Ready.
      type: bool
    schedulable:
      description: Whether the node is not cordoned.
      type: bool
    in_maintenance:
      description: Whether the node is in maintenance.
      type: bool
    resume:
      description: Whether an earlier run left the node in maintenance.
      type: bool
    control_plane:
      description: Whether the node is a control-plane node.
      type: bool
    simulated:
      description: Whether the node is a KWOK node without a machine behind it (a lab).
      type: bool
    internal_ip:
      description: The node's InternalIP.
      type: str
    failure_domain:
      description: The value of the node's O(failure_domain) label; V(null) without O(failure_domain).
      type: str
    pods:
      description: Pods the drain will evict.
      type: int
    vms:
      description: VMs running on the node.
      type: int
    vms_migrating:
      description: VMs expected to live-migrate.
      type: int
    vms_shut_down:
      description: VMs expected to be shut down (re-created elsewhere or left stopped, by run strategy).
      type: int
    expected_stopped:
      description: VMs that will stay stopped after leaving the node.
      type: list
      elements: dict
    plan:
      description: The node's maintenance plan (as M(kubevirt_ops.maintenance.node_maintenance_info) returns it).
      type: dict
    machine:
      description:
        - With O(machines), the node's machine as read (RV(kubevirt_ops.maintenance.node_machine#module:machine) of
          a check - road, address or BareMetalHost, power state, firmware versions, the BIOS settings that would
          change) and C(changes), whether servicing it would touch it; V(null) when it cannot be serviced (see
          RV(problems)). Never credentials.
      type: dict
      returned: with O(machines)
running_vms:
  description: Every VM running now (namespace, name, node, and whether a VirtualMachine owns it).
  returned: always
  type: list
  elements: dict
  sample: [{namespace: prod, name: db-1, node: worker-1, vm: true}]
expected_stopped:
  description: VMs that the drains will leave stopped, by their run strategy.
  returned: always
  type: list
  elements: dict
migrations_settled:
  description: The live migrations that were in flight when the preflight started (or started while it waited) and
    ended before planning.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VirtualMachineInstanceMigration.
      type: str
    name:
      description: Name of the VirtualMachineInstanceMigration.
      type: str
    vmi:
      description: Name of the VMI it migrated.
      type: str
    phase:
      description: Its final phase (C(Succeeded) or C(Failed)), or C(Deleted) when it was deleted meanwhile.
      type: str
  sample: [{namespace: prod, name: kubevirt-evacuation-x7k2p, vmi: db-1, phase: Succeeded}]
settle_seconds:
  description: Seconds the preflight waited for live migrations in flight to end (0 when none was in flight).
  returned: always
  type: float
  sample: 12.4
kubevirt:
  description: Whether KubeVirt is installed.
  returned: always
  type: bool
selection:
  description: How the nodes were selected, in words.
  returned: always
  type: str
  sample: label selector node-role.kubernetes.io/worker
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.preflight import DEFAULT_SETTLE_TIMEOUT, preflight


def run(module):
    return preflight(module.client, module.params)


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(args.DRAIN, args.DRAIN_GROUPED, dict(
            nodes=dict(type="list", elements="str"),
            label_selector=dict(type="str"),
            order=dict(type="str", default="given", choices=["given", "fewest_vms_first"]),
            allow_control_plane=dict(type="bool", default=False),
            allow_last_schedulable_node=dict(type="bool", default=False),
            run_mark=dict(type="str", default="rolling_maintenance"),
            lock=args.lock_option(apply_defaults=False),
            settle_timeout=dict(type="int", default=DEFAULT_SETTLE_TIMEOUT),
            prefer_done_nodes=dict(type="bool", default=True),
            max_parallel=dict(type="int", default=1),
            failure_domain=dict(type="str"),
            fail_on_problems=dict(type="bool", default=True),
            machines=dict(type="dict", options=args.spec(args.MACHINE_WORK, dict(
                roads=dict(type="list", elements="dict", default=[], options=args.spec(args.BMC, args.BMH, dict(
                    name=dict(type="str", required=True),
                ))),
            ))),
        )),
        mutually_exclusive=[("nodes", "label_selector")],
        required_one_of=[("nodes", "label_selector")],
    )
    module.run(run)


if __name__ == "__main__":
    main()
