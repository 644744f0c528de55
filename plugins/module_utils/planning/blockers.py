# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The blockers a plan names: their kinds, how each non_migratable policy treats them, and the
record of one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Blocker kinds, and how each non_migratable policy treats them.
SAFETY = "safety"        # refusals: last schedulable node, etcd quorum, another NodeMaintenance
PODS = "pods"            # pods the drain options forbid evicting (kubectl fails the same way)
VM = "vm"                # a VM that can neither migrate nor be shut down by eviction
PLACEMENT = "placement"  # a VM that no other node can take
CAPACITY = "capacity"    # the other nodes lack room for everything
PDB = "pdb"              # a budget that never allows a disruption
NODE = "node"            # the node itself cannot complete a drain (NotReady)

ALWAYS_FATAL = (SAFETY, PODS)


class Blocker:
    def __init__(self, kind, text, vmi_uid=None):
        self.kind = kind
        self.text = text
        self.vmi_uid = vmi_uid
