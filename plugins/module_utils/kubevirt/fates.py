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

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt

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
    """One VM's fate when its node is drained.

    ``outcome`` is what the eviction itself does (the plan's documented value, the same under
    every policy); ``result`` is what happens once the ``non_migratable`` policy has acted on
    a VM that cannot leave by eviction (equal to ``outcome`` for every other VM).
    """

    def __init__(self, outcome, sentence, strategy=None, migratable=None, run_strategy=None, restart_by=None,
                 obstacle=None, policy=FAIL):
        self.outcome = outcome
        self.sentence = sentence
        self.strategy = strategy
        self.migratable = migratable
        self.run_strategy = run_strategy
        self.restart_by = restart_by
        # The sentence of a VM that cannot leave by eviction (a plan blocker: fatal under
        # non_migratable=fail, acted on under shutdown, waited for under wait).
        self.obstacle = obstacle
        self.policy = policy

    @property
    def result(self):
        """What happens once the non_migratable policy has acted (derived, never stored)."""
        return under_policy(self.outcome, self.run_strategy, self.policy)

    @property
    def shut_down_by_us(self):
        """True when the non_migratable=shutdown policy shuts this VM down before the drain."""
        return self.obstacle is not None and self.policy == SHUT_DOWN_POLICY

    @property
    def restarted_by(self):
        """Who starts the VM again once it is down: KubeVirt (Always, and every VM the shutdown
        policy restarts through its ``restart`` subresource), the collection, or nobody."""
        if self.shut_down_by_us:
            return BY_KUBEVIRT if self.run_strategy in RESTARTING else None
        return self.restart_by

    @property
    def after_shutdown(self):
        """(outcome, restarted_by) once the VM is down. A VM the plan meant to move but whose
        live migrations kept failing is shut down by the shutdown policy like a blocker."""
        if self.result in SHUT_DOWN_OUTCOMES:
            return self.result, self.restarted_by
        return (under_policy(BLOCK, self.run_strategy, SHUT_DOWN_POLICY),
                BY_KUBEVIRT if self.run_strategy in RESTARTING else None)

    @property
    def blocks(self):
        """A blocker that fails the task before anything changes."""
        return self.obstacle is not None and self.policy == FAIL

    @property
    def moves(self):
        """True when the VM is expected to run on another node afterwards."""
        return self.result in MOVING_OUTCOMES

    @property
    def stays_stopped(self):
        return self.result in STOPPED_OUTCOMES


def under_policy(outcome, run_strategy, policy):
    """What happens to a VM whose eviction ``outcome`` is known, once ``policy`` acts: a VM that
    cannot leave by eviction (block, external) is shut down under ``shutdown`` - through its
    subresources, so Always and RerunOnFailure start again elsewhere - and waited for otherwise."""
    if outcome not in (BLOCK, EXTERNAL) or policy != SHUT_DOWN_POLICY:
        return outcome
    if run_strategy in RESTARTING:
        return RESTART_ELSEWHERE
    return SHUTDOWN if run_strategy is None else STAY_STOPPED


def effective_strategy(vmi, cluster_default):
    """The eviction strategy KubeVirt applies to this VMI: its own, else the cluster's."""
    return ((vmi or {}).get("spec") or {}).get("evictionStrategy") or cluster_default or None


def _shutdown_fate(run_strategy, display, why):
    if run_strategy == "Always":
        return Fate(RESTART_ELSEWHERE, "%s: %s; run strategy Always, so KubeVirt starts it again on another node."
                    % (display, why), run_strategy=run_strategy, restart_by=BY_KUBEVIRT)
    if run_strategy == "RerunOnFailure":
        return Fate(RESTART_ELSEWHERE, "%s: %s; run strategy RerunOnFailure does not restart a VM that shut down "
                    "cleanly, so it is started again on another node once it is down." % (display, why),
                    run_strategy=run_strategy, restart_by=BY_US)
    if run_strategy is None:
        return Fate(SHUTDOWN, "%s: %s; it has no VirtualMachine, so nothing starts it again." % (display, why),
                    run_strategy=run_strategy)
    return Fate(STAY_STOPPED, "%s: %s; run strategy %s, so it stays stopped until someone starts it."
                % (display, why, run_strategy), run_strategy=run_strategy)


def decide(vmi, run_strategy, cluster_default, policy, display, node, not_migratable_reason=None):
    """The Fate of one active VMI on ``node`` under the ``non_migratable`` ``policy``.

    ``run_strategy`` is the VM's (None for a VMI without a VM); ``not_migratable_reason``
    the readable reason the VMI's LiveMigratable condition gives (when it is False).
    """
    strategy = effective_strategy(vmi, cluster_default)
    migratable = kubevirt.live_migratable(vmi)[0]
    why_not = not_migratable_reason or "not live-migratable"
    if strategy == "LiveMigrate" and migratable:
        fate = Fate(MIGRATE, "%s: eviction strategy LiveMigrate; KubeVirt live-migrates it." % display)
    elif strategy == "LiveMigrateIfPossible" and migratable:
        fate = Fate(MIGRATE, "%s: eviction strategy LiveMigrateIfPossible and live-migratable; KubeVirt "
                    "live-migrates it." % display)
    elif strategy == "LiveMigrate":
        obstacle = ("VM %s cannot leave node %s: its eviction strategy is LiveMigrate but it is not live-migratable "
                    "(%s); give it LiveMigrateIfPossible or None, or use non_migratable=shutdown."
                    % (display, node, why_not))
        fate = Fate(BLOCK, obstacle, obstacle=obstacle)
    elif strategy == "External":
        obstacle = ("VM %s cannot leave node %s: its eviction strategy is External: KubeVirt only marks it for "
                    "evacuation and waits for an external controller to move or stop it; make sure that controller "
                    "runs, or use non_migratable=wait or shutdown." % (display, node))
        fate = Fate(EXTERNAL, obstacle, obstacle=obstacle)
    else:
        if strategy == "LiveMigrateIfPossible":
            why = "eviction strategy LiveMigrateIfPossible but not live-migratable (%s): the eviction shuts it down" \
                % why_not
        else:
            why = "eviction strategy %s: the eviction shuts it down" % (strategy or "None (none set)")
        fate = _shutdown_fate(run_strategy, display, why)
    fate.strategy, fate.migratable, fate.run_strategy, fate.policy = strategy, migratable, run_strategy, policy
    return fate
