# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The blockers a plan names: their kinds, how each non_migratable policy treats them, the
record of one, and the sentence that refuses a node over them."""

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


def blocked_message(name, blockers, policy, task="enter maintenance"):
    """The sentence that refuses node ``name`` over its fatal blockers (one, or numbered)."""
    texts = [b.text.rstrip(".") for b in blockers]
    if len(texts) == 1:
        return "Node %s cannot %s (non_migratable=%s): %s." % (name, task, policy, texts[0])
    return "Node %s cannot %s (non_migratable=%s), %d blockers: %s." % (
        name, task, policy, len(texts), "; ".join("(%d) %s" % (i + 1, t) for i, t in enumerate(texts)))
