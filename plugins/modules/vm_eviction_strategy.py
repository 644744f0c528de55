#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vm_eviction_strategy
short_description: Set the eviction strategy of virtual machines or of the whole cluster
version_added: 0.1.0
description:
  - Sets or removes the eviction strategy of one, many or all KubeVirt virtual machines
    (C(spec.template.spec.evictionStrategy)), or the cluster default in the HyperConverged resource
    (C(spec.evictionStrategy), or C(spec.virtualization.evictionStrategy) in C(hco.kubevirt.io/v1)), or in the
    KubeVirt resource (C(spec.configuration.evictionStrategy)) when no HyperConverged resource exists.
  - The eviction strategy decides what draining a node does to a running VM. C(LiveMigrate) migrates it, and
    blocks the drain when the VM cannot migrate (for example a disk on a PVC without ReadWriteMany access).
    C(LiveMigrateIfPossible) migrates it when it can and shuts it down otherwise. C(None) shuts it down.
    C(External) leaves the eviction to an external controller.
  - The usual remedy for VMs that block drains is O(only_non_migratable=true) with O(strategy=LiveMigrateIfPossible).
  - The VMs are listed once and changed concurrently. Each change is a patch of that one field that the API server
    refuses if someone changed the field in the meantime; the VM is then read again and the change recomputed.
  - KubeVirt (1.1 and later) copies the VM's eviction strategy, or the cluster default, into each VMI when it is
    created, and an eviction follows the VMI's own value. So a new value, of a VM or of the cluster default,
    reaches a running VM only when its VMI is re-created. RV(restart_required) lists the running VMIs that still
    follow another strategy; O(restart=true) restarts exactly those.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  scope:
    description:
      - V(vm) changes the selected virtual machines.
      - V(cluster) changes the cluster default; VM selection options and O(only_non_migratable) do not apply.
        O(restart=true) restarts the running VMs without a strategy of their own whose VMI still follows the old
        default.
    type: str
    choices: [vm, cluster]
    default: vm
  strategy:
    description:
      - The eviction strategy to set. Required with O(state=present).
    type: str
    choices: [LiveMigrate, LiveMigrateIfPossible, None, External]
  state:
    description:
      - V(present) sets O(strategy).
      - V(absent) removes the value, so that the cluster default applies to the VMs (O(scope=vm)), or the
        operator's own default applies to the cluster (O(scope=cluster)).
    type: str
    choices: [present, absent]
    default: present
  only_non_migratable:
    description:
      - Act only on the selected VMs that cannot live-migrate, those a drain would block on with C(LiveMigrate).
      - A running VM is judged by its VMI's C(LiveMigratable) condition. A stopped VM is judged as virt-handler of
        the installed KubeVirt release (read from the KubeVirt resource) would judge it once it runs. A PVC (or
        DataVolume) without ReadWriteMany access, a non-shared hostDisk, a PCI host device, a GPU (KubeVirt 1.9
        migrates one mediated GPU when the C(VGPULiveMigration) feature gate is on), SEV, TDX or Secure Execution,
        SCSI persistent reservation (before 1.9), Hyper-V passthrough, or a pod-network interface that is neither
        masquerade, nor bridge with the C(kubevirt.io/allow-pod-bridge-network-live-migration) annotation, nor a
        binding plugin with migration (a VM without interfaces gets the cluster's C(defaultNetworkInterface)) makes it
        non-migratable.
      - As in KubeVirt, these do not block - host-passthrough CPU, virtiofs shares of ConfigMaps and Secrets, SR-IOV and
        other secondary interfaces, container and cloud-init disks.
      - VMs whose PVC does not exist cannot be judged; they are left out with a warning.
    type: bool
    default: false
  restart:
    description:
      - Restart the running VMIs whose effective eviction strategy changes, so that the new strategy takes effect
        now. VMs with run strategy C(Once) or C(Halted) are not restarted (they would not start again); a warning
        names them.
      - Restarts use the C(subresources.kubevirt.io) API when the cluster serves it, otherwise the equivalent
        change of the VM object.
    type: bool
    default: false
  wait:
    description:
      - With O(restart=true), wait until the restarted VMs run again.
      - With O(scope=cluster) and a HyperConverged resource, wait until its operator has copied the new default
        into the KubeVirt resource, which is what KubeVirt reads.
  wait_timeout:
    description:
      - How many seconds to wait at most when O(wait=true).
extends_documentation_fragment:
  - kubevirt_ops.maintenance.vm_selection
  - kubevirt_ops.maintenance.wait
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Reports which VMs would change and which would be restarted, without writing anything.
  diff_mode:
    support: full
    details: The diff holds the eviction strategy of each changed VM (or of the cluster) before and after.
  idempotent:
    support: full
notes:
  - Selecting by name needs O(namespace). A named VM or a namespace that does not exist is an error; a label
    selector that matches nothing is not (the task reports no change and a warning).
seealso:
  - module: kubevirt_ops.maintenance.vm_run_strategy
  - module: kubevirt_ops.maintenance.node_maintenance
"""

EXAMPLES = r"""
- name: Let non-migratable VMs be shut down instead of blocking drains
  kubevirt_ops.maintenance.vm_eviction_strategy:
    all_namespaces: true
    only_non_migratable: true
    strategy: LiveMigrateIfPossible
    restart: true

- name: Give the VMs of one team LiveMigrate
  kubevirt_ops.maintenance.vm_eviction_strategy:
    namespace: team-a
    label_selector: tier=db
    strategy: LiveMigrate

- name: Remove the VM's own value so that the cluster default applies
  kubevirt_ops.maintenance.vm_eviction_strategy:
    name: db-1
    namespace: team-a
    state: absent

- name: Set the cluster default (HyperConverged, or KubeVirt without HCO)
  kubevirt_ops.maintenance.vm_eviction_strategy:
    scope: cluster
    strategy: LiveMigrate
"""

RETURN = r"""
vms:
  description:
    - One entry per selected VM (after O(only_non_migratable) filtering), sorted by namespace and name.
    - Empty with O(scope=cluster).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VM.
      type: str
      sample: team-a
    name:
      description: Name of the VM.
      type: str
      sample: db-1
    before:
      description: The VM's own eviction strategy before the task; V(null) when it had none.
      type: str
      sample: LiveMigrate
    after:
      description: The VM's own eviction strategy after the task (in check mode, what it would be).
      type: str
      sample: LiveMigrateIfPossible
    effective:
      description: The strategy its VMI gets once (re)started, the VM's own value or else the cluster default.
      type: str
      sample: LiveMigrateIfPossible
    changed:
      description: Whether this VM was changed (or restarted).
      type: bool
      sample: true
    restarted:
      description: Whether its VMI was restarted (in check mode, would be).
      type: bool
      sample: false
  sample:
    - namespace: team-a
      name: db-1
      before: LiveMigrate
      after: LiveMigrateIfPossible
      effective: LiveMigrateIfPossible
      changed: true
      restarted: true
cluster:
  description:
    - The cluster default eviction strategy.
    - With O(scope=cluster), the value in the resource that was edited, before and after.
    - With O(scope=vm), the default KubeVirt applies now (from its KubeVirt resource); before and after are equal.
  returned: always
  type: dict
  contains:
    before:
      description: Before the task; V(null) when unset.
      type: str
      sample: LiveMigrate
    after:
      description: After the task; V(null) when unset.
      type: str
      sample: LiveMigrateIfPossible
    resource:
      description: The resource edited, as C(Kind namespace/name).
      type: str
      returned: when O(scope=cluster)
      sample: HyperConverged openshift-cnv/kubevirt-hyperconverged
  sample:
    before: LiveMigrate
    after: LiveMigrate
restart_required:
  description:
    - C(namespace/name) of every running VM whose VMI still follows another eviction strategy than the one now set
      (its VMI's own, frozen when it was created); it takes the new one when its VMI is re-created. Empty after
      O(restart=true) restarted them.
    - With O(scope=cluster), among the VMs without a strategy of their own.
  returned: always
  type: list
  elements: str
  sample: [team-a/db-1]
diff:
  description: Eviction strategies before and after, by C(namespace/name) of each changed VM, or by resource.
  returned: when diff mode is on
  type: dict
  sample:
    before:
      team-a/db-1:
        evictionStrategy: LiveMigrate
    after:
      team-a/db-1:
        evictionStrategy: LiveMigrateIfPossible
        restarted: true
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.eviction_strategy import run
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.kubevirt import EVICTION_STRATEGIES
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.VM_SELECTION,
            args.WAIT,
            scope=dict(type="str", default="vm", choices=["vm", "cluster"]),
            strategy=dict(type="str", choices=list(EVICTION_STRATEGIES)),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            only_non_migratable=dict(type="bool", default=False),
            restart=dict(type="bool", default=False),
        ),
        required_if=[("state", "present", ["strategy"])],
    )
    module.run(run)


if __name__ == "__main__":
    main()
