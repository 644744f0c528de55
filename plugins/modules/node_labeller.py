#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_labeller
short_description: Pause or resume KubeVirt's CPU-model labelling of a node
version_added: 0.1.0
description:
  - Sets or removes the annotation C(node-labeller.kubevirt.io/skip-node) on a node. While it is set,
    KubeVirt's node-labeller leaves the node's CPU-model labels alone; removing it resumes labelling on the
    next cycle.
  - Useful before maintenance that changes a node's CPU or firmware, or for a node with an obsolete CPU model.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  skip:
    description: V(true) stops labelling of the node; V(false) resumes it.
    type: bool
    required: true
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
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
- name: Stop CPU-model labelling of a node before a CPU swap
  kubevirt_ops.maintenance.node_labeller:
    name: worker-3
    skip: true

- name: Resume labelling
  kubevirt_ops.maintenance.node_labeller:
    name: worker-3
    skip: false
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-3
skip:
  description: Whether labelling of the node is skipped after the task.
  returned: always
  type: bool
  sample: true
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.node_labeller import set_skip_node


def main():
    module = MaintenanceModule(
        argument_spec=dict(name=dict(type="str", required=True), skip=dict(type="bool", required=True)),
    )
    module.run(set_skip_node)


if __name__ == "__main__":
    main()
