# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py VM_SELECTION.
    DOCUMENTATION = r"""
options:
  name:
    description:
      - Name of one VirtualMachine. Requires O(namespace).
    type: str
  namespace:
    description:
      - Namespace of the VirtualMachines. With O(name), one VM; without, every VM of the namespace matching O(label_selector).
    type: str
  label_selector:
    description:
      - Label selector the VirtualMachines must match, for example C(tier=db,env!=test).
    type: str
  all_namespaces:
    description:
      - Select VirtualMachines in every namespace (narrow with O(label_selector)).
    type: bool
    default: false
"""
