# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py WAIT.
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - Wait until the change has taken effect in the cluster before returning.
      - Waiting watches the objects involved; it does not poll them one by one.
    type: bool
    default: true
  wait_timeout:
    description:
      - How many seconds to wait at most when O(wait=true).
    type: int
    default: 300
"""
