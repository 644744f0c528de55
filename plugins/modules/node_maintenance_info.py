#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_maintenance_info
short_description: Tell, for each node, whether it is in maintenance and what maintenance of it would do
version_added: 0.1.0
description:
  - For one node or many, reports readiness, schedulability, maintenance state and the plan of a drain - the same
    plan M(kubevirt_ops.maintenance.node_maintenance) computes before it changes anything, so the blockers found here
    are the blockers maintenance would hit.
  - The plan says which pods would be evicted and which stay (and why), each VM's effective eviction strategy,
    live-migratability and predicted outcome, whether another node can take each VM (cordons, taints and
    tolerations, nodeSelector, required node affinity, allocatable CPU and memory minus requests), which
    PodDisruptionBudgets allow no disruption, and every blocker as a sentence saying what to do.
  - The cluster is read once (a handful of list requests), whatever the number of nodes.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: One node. Mutually exclusive with O(label_selector).
    type: str
  label_selector:
    description:
      - Nodes matching this label selector, for example C(node-role.kubernetes.io/worker). Without O(name) and
        O(label_selector), every node. A selector that matches no node is an error.
    type: str
  ignore_daemonsets:
    description: Plan as O(kubevirt_ops.maintenance.node_maintenance#module:ignore_daemonsets) would drain.
    type: bool
    default: true
  delete_emptydir_data:
    description: Plan as O(kubevirt_ops.maintenance.node_maintenance#module:delete_emptydir_data) would drain.
    type: bool
    default: true
  force:
    description: Plan as O(kubevirt_ops.maintenance.node_maintenance#module:force) would drain.
    type: bool
    default: true
  pod_selector:
    description: Plan as O(kubevirt_ops.maintenance.node_maintenance#module:pod_selector) would drain.
    type: str
  disable_eviction:
    description: Plan a drain that deletes pods instead of evicting them (PodDisruptionBudgets then do not block).
    type: bool
    default: false
  allow_last_schedulable_node:
    description: Do not report the last schedulable node as a blocker.
    type: bool
    default: false
  allow_control_plane:
    description: Do not report the etcd-quorum risk of a control-plane node as a blocker.
    type: bool
    default: false
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
  - kubevirt_ops.maintenance.attributes.info_module
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance
"""

EXAMPLES = r"""
- name: Plan maintenance of every worker
  kubevirt_ops.maintenance.node_maintenance_info:
    label_selector: node-role.kubernetes.io/worker
  register: workers

- name: Stop if maintenance of any worker would be blocked
  ansible.builtin.assert:
    that: workers.nodes | map(attribute='plan.blockers') | flatten | length == 0
    fail_msg: "{{ workers.nodes | map(attribute='plan.blockers') | flatten | join(' ') }}"

- name: One node
  kubevirt_ops.maintenance.node_maintenance_info:
    name: worker-3
"""

RETURN = r"""
nodes:
  description: One entry per node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Name of the node.
      type: str
      sample: worker-3
    ready:
      description: The node's Ready condition is True.
      type: bool
    schedulable:
      description: The node is not cordoned.
      type: bool
    control_plane:
      description: The node carries a control-plane (or master) role label.
      type: bool
    in_maintenance:
      description: A NodeMaintenance exists for the node, or it carries the C(medik8s.io/drain) taint or this collection's record.
      type: bool
    maintenance_phase:
      description: Phase of that maintenance (V(Running), V(Succeeded), V(Failed)); null when not in maintenance.
      type: str
    plan:
      description: What maintenance of the node would do.
      type: dict
      contains:
        evict:
          description: Pods that would be evicted, as C(namespace/name).
          type: list
          elements: str
        skip:
          description: Pods left on the node, with why.
          type: list
          elements: dict
          contains:
            pod:
              description: The pod, as C(namespace/name).
              type: str
            reason:
              description: Why it stays (or, starting with C(blocks the drain), why it stops the drain).
              type: str
        vms:
          description: Each VM on the node and what the drain does to it.
          type: list
          elements: dict
          contains:
            namespace:
              description: Namespace of the VM.
              type: str
            name:
              description: Name of the VM (of the VMI when no VM owns it).
              type: str
            eviction_strategy:
              description: Effective eviction strategy (the VMI's own, else the cluster default; null when none).
              type: str
            live_migratable:
              description: The VMI's C(LiveMigratable) condition.
              type: bool
            reason:
              description: Why it is not live-migratable (null when it is).
              type: str
            outcome:
              description:
                - V(migrate) (live migration), V(restart_elsewhere) (shut down, then started on another node by its run
                  strategy), V(stay_stopped) (shut down, run strategy C(Manual) or C(Once)), V(shutdown) (a VMI without a
                  VM, gone for good), V(block) (eviction strategy C(LiveMigrate) but not live-migratable, so the drain
                  cannot finish) or V(external) (eviction strategy C(External), for which KubeVirt only marks the VMI and an
                  external controller has to move or stop it).
              type: str
            run_strategy:
              description: The VM's run strategy.
              type: str
            memory:
              description: Bytes of guest memory a live migration of the VM copies (0 when unknown).
              type: int
            explanation:
              description: One sentence saying what happens to the VM and why (eviction strategy, live-migratability,
                run strategy).
              type: str
            restart_by:
              description:
                - Who starts a shut-down VM again on another node, V(kubevirt) (run strategy C(Always)) or
                  V(collection) (C(RerunOnFailure), which KubeVirt does not restart after a clean shutdown, so the
                  collection asks it to start the VM once its old VMI has ended); null when nobody does.
              type: str
            target:
              description:
                - The node the plan expects the VM to run on afterwards (the scheduler's rules applied to what runs there and
                  to what the plan moves first); null when it stays stopped or no node would take it.
              type: str
        blockers:
          description: What stops maintenance, one sentence each, saying what to do.
          type: list
          elements: str
        capacity_ok:
          description:
            - Whether the other nodes can take everything that would move by the scheduler's rules (node selection,
              taints and tolerations, every requested resource (CPU, memory, pod slots, hugepages, extended resources
              such as GPUs and C(devices.kubevirt.io/kvm)), required pod affinity and anti-affinity (both ways) and
              topology spread constraints (C(DoNotSchedule); the node being drained counts as a domain, as it does for
              the scheduler)).
          type: bool
        pdbs:
          description: PodDisruptionBudgets over pods to evict that allow no disruption now.
          type: list
          elements: dict
          contains:
            namespace:
              description: Namespace of the budget.
              type: str
            name:
              description: Name of the budget.
              type: str
            disruptions_allowed:
              description: C(status.disruptionsAllowed).
              type: int
            pods:
              description: The node's pods it covers.
              type: list
              elements: str
            never_allows:
              description: True when the budget can never allow a disruption at the current scale (a blocker).
              type: bool
        pending:
          description:
            - Pods that would leave the node and that no other node would take (their own node selection,
              affinity or topology spread rules allow none); they stay C(Pending) after the drain, which still
              completes. VMs that no node would take are blockers instead.
          type: list
          elements: dict
          contains:
            pod:
              description: The pod, C(namespace/name).
              type: str
            reason:
              description: Why no node would take it.
              type: str
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.runner import info


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            name=dict(type="str"),
            label_selector=dict(type="str"),
            ignore_daemonsets=dict(type="bool", default=True),
            delete_emptydir_data=dict(type="bool", default=True),
            force=dict(type="bool", default=True),
            pod_selector=dict(type="str"),
            disable_eviction=dict(type="bool", default=False),
            allow_last_schedulable_node=dict(type="bool", default=False),
            allow_control_plane=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("name", "label_selector")],
    )
    module.run(info)


if __name__ == "__main__":
    main()
