# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying the cluster.
  diff_mode:
    description: Will return details on what has changed (or would change in check mode) when in diff mode.
  idempotent:
    description: When run twice in a row with the same arguments, the second run reports no change.
"""

    ACTIONGROUP = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/kubevirt_ops.maintenance.all) in C(module_defaults) to set the auth options once.
    support: full
    membership:
      - kubevirt_ops.maintenance.all
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module only reads from the cluster.
  diff_mode:
    support: N/A
    details: This module only reads from the cluster.
  idempotent:
    support: full
"""
