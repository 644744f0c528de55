# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What draining a node does to each VM running there: the one place that decides it.

The plan, check mode, the result buckets of node_maintenance and node_decommission, the
role's preflight and its verify step all read a VM's ``Fate``; none re-derives it.

It follows what KubeVirt (1.6 and later) does, read from its code:

* The eviction strategy in force is the VMI's own ``spec.evictionStrategy``: since 1.1
  virt-api's defaulting copies the VM's or the cluster's strategy into every new VMI
  (pkg/defaults/defaults.go, setDefaultEvictionStrategy). Only a VMI without one (created
  before that) follows the cluster default at eviction time
  (pkg/util/migrations/migrations.go, VMIEvictionStrategy).
* virt-api's eviction webhook decides (pkg/virt-api/webhooks/validating-webhook/admitters/
  pod-eviction-admitter.go): LiveMigrate marks the VMI for evacuation and answers 429 if it
  is live-migratable, else refuses with 429 for good; LiveMigrateIfPossible marks it when
  migratable, else lets the eviction through; External marks it and answers 429, and only an
  external controller acts on the mark; None (or no strategy) lets the eviction through.
* A launcher pod that is evicted shuts its guest down: the VMI ends ``Succeeded``. The VM
  controller starts a new VMI for ``Always`` only; ``RerunOnFailure`` restarts failed VMIs,
  not succeeded ones, so the collection asks KubeVirt to start it again (the VM's ``start``
  subresource) to keep the promise that such VMs run on another node; ``Manual``, ``Halted``
  and ``Once`` stay stopped.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The documented ``outcome`` values (node_maintenance_info plan; extended, never renamed).
MIGRATE = "migrate"
SHUTDOWN = "shutdown"  # a VMI without a VM: shut down, nothing brings it back
RESTART_ELSEWHERE = "restart_elsewhere"
STAY_STOPPED = "stay_stopped"
BLOCK = "block"
EXTERNAL = "external"  # eviction strategy External: waits for an external controller

OUTCOMES = (MIGRATE, SHUTDOWN, RESTART_ELSEWHERE, STAY_STOPPED, BLOCK, EXTERNAL)
# The VM is shut down when it leaves the node ...
SHUT_DOWN_OUTCOMES = (RESTART_ELSEWHERE, STAY_STOPPED, SHUTDOWN)
# ... and nothing starts it again.
STOPPED_OUTCOMES = (STAY_STOPPED, SHUTDOWN)
# Expected to run on another node afterwards.
MOVING_OUTCOMES = (MIGRATE, RESTART_ELSEWHERE)

# Who brings a shut-down VM back.
BY_KUBEVIRT = "kubevirt"  # run strategy Always: the VM controller starts a new VMI
BY_US = "collection"  # RerunOnFailure after a clean shutdown: we ask KubeVirt to start it

# Policies of the ``non_migratable`` option.
FAIL = "fail"
SHUT_DOWN_POLICY = "shutdown"
WAIT = "wait"

RESTARTING = ("Always", "RerunOnFailure")


class Fate(object):
    """One VM's fate when its node is drained."""

    def __init__(self, outcome, sentence, strategy, migratable, run_strategy, restart_by=None,
                 shut_down_by_us=False, blocks=False, waits=False, obstacle=None):
        self.outcome = outcome
        self.sentence = sentence
        self.strategy = strategy
        self.migratable = migratable
        self.run_strategy = run_strategy
        self.restart_by = restart_by
        self.shut_down_by_us = shut_down_by_us  # the non_migratable=shutdown policy acts on it
        self.blocks = blocks  # a blocker that fails the task before anything changes
        self.waits = waits  # the drain keeps waiting for it (policy wait, External)
        # The sentence of a VM that cannot leave by eviction (a plan blocker; fatal under
        # non_migratable=fail, acted on under shutdown, waited for under wait).
        self.obstacle = obstacle

    @property
    def moves(self):
        """True when the VM is expected to run on another node afterwards."""
        return self.outcome in MOVING_OUTCOMES

    @property
    def stays_stopped(self):
        return self.outcome in STOPPED_OUTCOMES

    def as_dict(self):
        return {"outcome": self.outcome, "explanation": self.sentence, "restart_by": self.restart_by,
                "shut_down_by_us": self.shut_down_by_us}


def effective_strategy(vmi, cluster_default):
    """The eviction strategy KubeVirt applies to this VMI: its own, else the cluster's."""
    return ((vmi or {}).get("spec") or {}).get("evictionStrategy") or cluster_default or None


def _after_shutdown(run_strategy, display, why, shut_down_by_us=False):
    if run_strategy == "Always":
        return Fate(RESTART_ELSEWHERE, "%s: %s; run strategy Always, so KubeVirt starts it again on another node."
                    % (display, why), None, None, run_strategy, restart_by=BY_KUBEVIRT,
                    shut_down_by_us=shut_down_by_us)
    if run_strategy == "RerunOnFailure":
        return Fate(RESTART_ELSEWHERE, "%s: %s; run strategy RerunOnFailure does not restart a VM that shut down "
                    "cleanly, so it is started again on another node once it is down." % (display, why),
                    None, None, run_strategy, restart_by=BY_US, shut_down_by_us=shut_down_by_us)
    if run_strategy is None:
        return Fate(SHUTDOWN, "%s: %s; it has no VirtualMachine, so nothing starts it again." % (display, why),
                    None, None, run_strategy, shut_down_by_us=shut_down_by_us)
    return Fate(STAY_STOPPED, "%s: %s; run strategy %s, so it stays stopped until someone starts it."
                % (display, why, run_strategy), None, None, run_strategy, shut_down_by_us=shut_down_by_us)


def decide(vmi, run_strategy, cluster_default, policy, display, node, not_migratable_reason=None):
    """The Fate of one active VMI on ``node`` under the ``non_migratable`` ``policy``.

    ``run_strategy`` is the VM's (None for a VMI without a VM); ``not_migratable_reason``
    the readable reason the VMI's LiveMigratable condition gives (when it is False).
    """
    strategy = effective_strategy(vmi, cluster_default)
    migratable = live_migratable(vmi)
    why_not = not_migratable_reason or "not live-migratable"
    if strategy == "LiveMigrate" and migratable:
        fate = Fate(MIGRATE, "%s: eviction strategy LiveMigrate; KubeVirt live-migrates it." % display,
                    strategy, migratable, run_strategy)
    elif strategy == "LiveMigrateIfPossible" and migratable:
        fate = Fate(MIGRATE, "%s: eviction strategy LiveMigrateIfPossible and live-migratable; KubeVirt "
                    "live-migrates it." % display, strategy, migratable, run_strategy)
    elif strategy == "LiveMigrate":
        fate = _blocking(display, node, strategy, migratable, run_strategy, policy,
                         "its eviction strategy is LiveMigrate but it is not live-migratable (%s)" % why_not,
                         "give it LiveMigrateIfPossible or None, or use non_migratable=shutdown")
    elif strategy == "External":
        fate = _blocking(display, node, strategy, migratable, run_strategy, policy,
                         "its eviction strategy is External: KubeVirt only marks it for evacuation and waits for "
                         "an external controller to move or stop it",
                         "make sure that controller runs, or use non_migratable=wait or shutdown")
        if fate.outcome == BLOCK:
            fate.outcome = EXTERNAL
    else:
        if strategy == "LiveMigrateIfPossible":
            why = "eviction strategy LiveMigrateIfPossible but not live-migratable (%s): the eviction shuts it down" \
                % why_not
        else:
            why = "eviction strategy %s: the eviction shuts it down" % (strategy or "None (none set)")
        fate = _after_shutdown(run_strategy, display, why)
    fate.strategy, fate.migratable = strategy, migratable
    return fate


def _blocking(display, node, strategy, migratable, run_strategy, policy, why, advice):
    obstacle = "VM %s cannot leave node %s: %s; %s." % (display, node, why, advice)
    fate = _blocking_fate(display, node, strategy, migratable, run_strategy, policy, why, obstacle)
    fate.obstacle = obstacle
    return fate


def _blocking_fate(display, node, strategy, migratable, run_strategy, policy, why, obstacle):
    if policy == SHUT_DOWN_POLICY:
        fate = _after_shutdown(run_strategy, display, "%s; non_migratable=shutdown shuts it down" % why,
                               shut_down_by_us=True)
    elif policy == WAIT:
        fate = Fate(BLOCK, "%s cannot leave node %s: %s; the drain waits (non_migratable=wait)."
                    % (display, node, why), strategy, migratable, run_strategy, waits=True)
    else:
        fate = Fate(BLOCK, obstacle, strategy, migratable, run_strategy, blocks=True)
    return fate


def live_migratable(vmi):
    """True/False from the VMI's LiveMigratable condition; None while it has none."""
    for cond in ((vmi or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "LiveMigratable":
            return cond.get("status") == "True"
    return None
