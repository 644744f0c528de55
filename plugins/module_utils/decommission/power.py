# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node's machine is off: its kubelet's heartbeat, and how its power-off is established.

A deleted Node whose kubelet still runs comes back: the kubelet registers it again, schedulable,
seconds later. So node_decommission deletes a node only once its machine is known to be off:

- ``heartbeat``: is the kubelet still heartbeating? The node lifecycle controller
  (kubernetes ``pkg/controller/nodelifecycle/node_lifecycle_controller.go``, ``tryUpdateNodeHealth``)
  counts a node as alive while either its Lease in ``kube-node-lease`` is renewed or its Ready
  condition's ``lastHeartbeatTime`` moves, and sets Ready to ``Unknown`` once neither happened
  for ``--node-monitor-grace-period`` (40 s by default,
  ``cmd/kube-controller-manager/app/options/nodelifecyclecontroller.go``). The same rule is
  applied here against this host's clock: alive while the newest of the two is younger than
  the grace period, dead at once when the controller already set Ready ``Unknown``.
- ``decide``: the one decision of how a node's power-off is established (its BareMetalHost or its BMC,
  machine/, the user powering it off while the module waits, or the user's word), or why it is refused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import BlockedError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import format_epoch, parse_epoch

NODE_LEASE_NAMESPACE = "kube-node-lease"
# kube-controller-manager --node-monitor-grace-period default (see the module docstring).
NODE_MONITOR_GRACE_SECONDS = 40

# How the node's power-off was established (the result's powered_off_by).
BY_BMH = "bmh"
BY_REDFISH = "redfish"
BY_HEARTBEAT = "heartbeat_stopped"
BY_ASSUMPTION = "assumed"


class Heartbeat:
    """What a node's kubelet last said: ``alive``, when (``last``, epoch seconds) and how."""

    def __init__(self, alive, last=None, source=None, unknown=False, age=None):
        self.alive = alive
        self.last = last
        self.source = source
        self.unknown = unknown
        self.age = age

    def describe(self):
        if self.unknown:
            text = "its Ready condition is Unknown (the node lifecycle controller no longer hears its kubelet)"
        elif self.last is None:
            text = "it reports no heartbeat (no node Lease, no Ready heartbeat time)"
        else:
            text = "its %s was renewed %ds ago" % (self.source, max(0, round(self.age)))
        return text

    def as_dict(self):
        return {"alive": self.alive, "last": format_epoch(self.last), "source": self.source}


def heartbeat(node, lease, now=None, grace=NODE_MONITOR_GRACE_SECONDS):
    """The kubelet's heartbeat as the node lifecycle controller judges it (see the module docstring)."""
    now = time.time() if now is None else now
    ready = nodes_mod.condition(node, "Ready") or {}
    stamps = []
    renewed = parse_epoch(((lease or {}).get("spec") or {}).get("renewTime"))
    if renewed is not None:
        stamps.append((renewed, "node Lease"))
    beat = parse_epoch(ready.get("lastHeartbeatTime"))
    if beat is not None:
        stamps.append((beat, "Ready condition heartbeat"))
    last, source = max(stamps) if stamps else (None, None)
    age = None if last is None else now - last
    if ready.get("status") == "Unknown":
        return Heartbeat(False, last, source, unknown=True, age=age)
    if last is None:
        # Nothing to judge by: a Ready node is taken at its word.
        return Heartbeat(ready.get("status") == "True", None, None)
    return Heartbeat(age < grace, last, source, age=age)


# -- the decision -----------------------------------------------------------------------------

class PowerDecision:
    """How node_decommission establishes that the machine is off.

    ``method``: ``bmh`` (power it off through its BareMetalHost, then see the heartbeat stop), ``redfish``
    (the same straight through its BMC, machine/redfish.py),
    ``manual`` (the user powers it off; wait for the heartbeat to stop) or ``assumed`` (the
    user's word). ``before_drain``: the machine is powered off before its pods are removed
    (a NotReady node cannot be drained; its pods are force-deleted once it is off).
    ``force_delete``: its pods are force-deleted instead of evicted.
    """

    def __init__(self, method, before_drain=False, force_delete=False):
        self.method = method
        self.before_drain = before_drain
        self.force_delete = force_delete

    @property
    def powered_off_by(self):
        return {"bmh": BY_BMH, "redfish": BY_REDFISH, "manual": BY_HEARTBEAT, "assumed": BY_ASSUMPTION}[self.method]

    @property
    def waits_for_heartbeat(self):
        return self.method in ("bmh", "redfish", "manual")


def decide(name, node, beat, power_off=None, assume_powered_off=False):
    """The PowerDecision for a node, or BlockedError (one sentence) when nothing says it will be off."""
    if not nodes_mod.is_ready(node):
        if power_off in ("bmh", "redfish"):
            return PowerDecision(power_off, before_drain=True, force_delete=True)
        if assume_powered_off:
            return PowerDecision("manual" if power_off == "manual" else "assumed", before_drain=True,
                                 force_delete=True)
        raise BlockedError(
            "Node %s is not Ready (%s), so its pods cannot be drained and its VMs may still run; make sure the "
            "machine is powered off, then re-run with assume_powered_off=true to force-delete its pods (or with "
            "power_off=bmh or power_off=redfish to power it off through its BareMetalHost or its BMC first)."
            % (name, nodes_mod.not_ready_reason(node)), node=name)
    if power_off in ("bmh", "redfish", "manual"):
        return PowerDecision(power_off)
    if assume_powered_off or not beat.alive:
        return PowerDecision("assumed" if assume_powered_off else "manual")
    raise BlockedError(
        "Node %s still heartbeats (%s): deleted now, its kubelet would register it again, schedulable, seconds "
        "later; say how the machine is powered off: power_off=bmh (through its Metal3 BareMetalHost), "
        "power_off=redfish (through its BMC, given as bmc), "
        "power_off=manual (you power it off while the module waits for the heartbeat to stop) or "
        "assume_powered_off=true (it is off, or will be, for certain)." % (name, beat.describe()),
        node=name, heartbeat=beat.as_dict())
