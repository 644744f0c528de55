#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: pending_nodes
short_description: Make VMs leaving a node prefer nodes already maintained
version_added: 0.1.0
description:
  - Marks the nodes of a rolling maintenance run that are still to be maintained with the taint
    C(kubevirt-ops.io/maintenance-pending) of effect C(PreferNoSchedule), the run's mark as its value.
  - The kube-scheduler then places the target pods of live migrations, and the pods of VMs started again,
    on nodes already done or not part of the run whenever they have room; a node still to do only takes
    a VM when nothing else can. The taint prefers, it never blocks, and it never bypasses a VM's own node
    selector, affinity or tolerations.
  - With O(state=present) exactly the nodes in O(nodes) carry the taint afterwards; it is taken off every
    other node, also where an earlier run with another mark left it (a resumed run cleans up).
    With O(state=absent) it is taken off every node.
  - Scheduler profiles that score nodes (the Kubernetes defaults, OpenShift's V(LowNodeUtilization) and
    V(HighNodeUtilization)) honour the preference; V(NoScoring) turns every score plugin off and ignores it.
  - M(kubevirt_ops.maintenance.node_maintenance) takes the taint off a node when it enters maintenance. The
    rolling_maintenance role calls this module before the first node and at the end.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  nodes:
    description:
      - Names of the nodes still to maintain, with O(state=present). Not taken with O(state=absent).
    type: list
    elements: str
    default: []
  mark:
    description:
      - The run's mark, the value of the taint (a label value), for example the run's id. Required with
        O(state=present).
    type: str
  state:
    description:
      - V(present) leaves the taint on exactly O(nodes); V(absent) takes it off every node.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.run
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Before the first node, every node of the run is still to do
  kubevirt_ops.maintenance.pending_nodes:
    nodes: [worker-1, worker-2, worker-3]
    mark: "20261125T020000Z"

- name: After worker-1, VMs leaving worker-2 prefer worker-1
  kubevirt_ops.maintenance.pending_nodes:
    nodes: [worker-3]
    mark: "20261125T020000Z"

- name: At the end, on failure too
  kubevirt_ops.maintenance.pending_nodes:
    state: absent
"""

RETURN = r"""
pending:
  description: Nodes that carry the taint after the task.
  returned: always
  type: list
  elements: str
  sample: [worker-2, worker-3]
added:
  description: Nodes that got the taint.
  returned: always
  type: list
  elements: str
  sample: [worker-3]
removed:
  description: Nodes the taint was taken off.
  returned: always
  type: list
  elements: str
  sample: [worker-1]
stale:
  description: Nodes that carried the taint with another run's mark (left by a run that did not finish).
  returned: always
  type: list
  elements: str
  sample: []
taint:
  description: The taint, with the mark as value (null with O(state=absent)).
  returned: always
  type: dict
  sample: {key: kubevirt-ops.io/maintenance-pending, value: "20261125T020000Z", effect: PreferNoSchedule}
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.pending_nodes import set_pending


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(args.RUN, dict(
            nodes=dict(type="list", elements="str", default=[]),
            mark=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        )),
    )
    module.run(set_pending)


if __name__ == "__main__":
    main()
