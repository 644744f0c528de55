#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vm_run_strategy
short_description: Set the run strategy of virtual machines, or start, stop or restart them
version_added: 0.1.0
description:
  - Sets the run strategy (C(spec.runStrategy)) of one, many or all KubeVirt virtual machines, or applies the
    C(virtctl) actions start, stop and restart to them.
  - "The actions follow KubeVirt's transition table: with C(Always), start does nothing, stop sets C(Halted) and
    restart re-creates the VMI; with C(RerunOnFailure), stop stops the VMI and keeps C(RerunOnFailure) (as
    KubeVirt 1.2 and later do; the table of older releases, and of the product documentation, says C(Halted))
    and restart re-creates the VMI;
    with C(Manual), start, stop and restart act on the VMI and the strategy stays C(Manual); with C(Halted), start
    sets C(Always) and stop and restart do nothing. With C(Once), stop sets C(Halted); start (of a VM that is not
    running) and restart are refused, as KubeVirt refuses them."
  - A VM that still uses the deprecated C(spec.running) gets the equivalent run strategy in the same write
    (C(running=true) is C(Always), C(running=false) is C(Halted)).
  - Run strategy changes are patches of the VM spec that the API server refuses if someone changed the field in
    the meantime; the VM is then read again and the change recomputed. Start, stop and restart of a VM whose run
    strategy stays the same use the C(subresources.kubevirt.io) API (as C(virtctl) does) when the cluster serves it,
    otherwise the equivalent change of the VM object, as KubeVirt's own handlers make it (start and stop requests in
    C(status.stateChangeRequests) for C(Manual) and C(RerunOnFailure) VMs, deletion of the VMI to restart an
    C(Always) VM).
  - The VMs are listed once and changed concurrently.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  run_strategy:
    description:
      - The run strategy to set. Exactly one of O(run_strategy) and O(action) is required.
    type: str
    choices: [Always, RerunOnFailure, Manual, Halted, Once]
  action:
    description:
      - The action to apply, following the transition table above.
    type: str
    choices: [start, stop, restart]
  wait:
    description:
      - Wait until the VMI of each changed VM is C(Running) (after run strategy C(Always) or C(RerunOnFailure),
        start, or restart, which waits for a new VMI), has started (C(Once)), or is gone (C(Halted), stop).
      - C(Manual) does not change the VMI, so setting it waits for nothing.
extends_documentation_fragment:
  - kubevirt_ops.maintenance.vm_selection
  - kubevirt_ops.maintenance.wait
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Reports the run strategy each VM would get and the action it would receive, without writing anything.
  diff_mode:
    support: full
    details: The diff holds, for each changed VM, its run strategy (or C(running)) before and after, and the VMI action.
  idempotent:
    support: full
    details: Setting a run strategy is idempotent; start and stop are no-ops on VMs already running or stopped.
      Restart re-creates the VMI each time, as asked.
notes:
  - Selecting by name needs O(namespace). A named VM or a namespace that does not exist is an error; a label
    selector that matches nothing is not (the task reports no change and a warning).
  - Nothing is changed when any selected VM refuses the action (for example restart of a C(Once) VM).
seealso:
  - module: kubevirt_ops.maintenance.vm_eviction_strategy
"""

EXAMPLES = r"""
- name: Make sure a VM runs, and is restarted whenever it stops
  kubevirt_ops.maintenance.vm_run_strategy:
    name: db-1
    namespace: team-a
    run_strategy: Always

- name: Stop every VM of a namespace (Always VMs become Halted, RerunOnFailure and Manual VMs keep their strategy)
  kubevirt_ops.maintenance.vm_run_strategy:
    namespace: team-a
    action: stop
    wait_timeout: 600

- name: Restart the VMs of a tier without waiting
  kubevirt_ops.maintenance.vm_run_strategy:
    all_namespaces: true
    label_selector: tier=web
    action: restart
    wait: false

- name: Replace the deprecated spec.running in every VM
  kubevirt_ops.maintenance.vm_run_strategy:
    all_namespaces: true
    label_selector: legacy=true
    run_strategy: Always
"""

RETURN = r"""
vms:
  description: One entry per selected VM, sorted by namespace and name.
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
      description: Run strategy before the task (C(spec.running) translated).
      type: str
      sample: Halted
    after:
      description: Run strategy after the task (in check mode, what it would be).
      type: str
      sample: Always
    action:
      description:
        - The action carried out on this VM (V(start), V(stop) or V(restart)); V(null) when the action was a no-op
          for it or when O(run_strategy) was given.
      type: str
      sample: start
    vmi_phase:
      description:
        - Phase of the VM's VMI when the task ended (after waiting, when O(wait=true)); V(null) when it has none.
        - Without waiting, or in check mode, the phase seen before the change.
      type: str
      sample: Running
    changed:
      description: Whether this VM was changed.
      type: bool
      sample: true
  sample:
    - namespace: team-a
      name: db-1
      before: Halted
      after: Always
      action: start
      vmi_phase: Running
      changed: true
diff:
  description: Run strategy (and VMI action) before and after, by C(namespace/name) of each changed VM.
  returned: when diff mode is on
  type: dict
  sample:
    before:
      team-a/db-1:
        running: false
    after:
      team-a/db-1:
        runStrategy: Always
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.kubevirt import RUN_STRATEGIES
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.run_strategy import ACTIONS, run


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.VM_SELECTION,
            args.WAIT,
            run_strategy=dict(type="str", choices=list(RUN_STRATEGIES)),
            action=dict(type="str", choices=list(ACTIONS)),
        ),
        mutually_exclusive=[("run_strategy", "action")],
        required_one_of=[("run_strategy", "action")],
    )
    module.run(run)


if __name__ == "__main__":
    main()
