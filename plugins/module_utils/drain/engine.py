# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain engine: classify a node's pods as kubectl does, evict them concurrently,
and follow them until they are gone - driven by watches, not by polling.

One watch on the node's pods tells when a pod is gone; one watch on
PodDisruptionBudgets tells when a budget allows a disruption again, and exactly that
many blocked pods are retried at once. A 429 without such news is retried with
exponential backoff (there is no per-pod polling and no fixed sleep). Progress is kept
as the NodeMaintenance operator keeps it (total, eviction, pending, percent).

This file is the loop; the pods it follows and its result are targets.py's, the eviction of
one pod pod_eviction.py's, the budgets' allowances budgets.py's, and the VMs whose live
migrations keep failing migrations.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.budgets import Allowances, due_targets, hold_back
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.migrations import (
    FailingMigrations,
    shut_down_vm,
    stranded,
    vmi_claims_node,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.targets import (
    DrainResult,
    DrainTarget,
    refresh_targets,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import VIRT_API_DOWN_START
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pod_eviction import evict_pod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import (
    EVICT,
    FINISHED_LAUNCHER,
    REFUSE,
    classify_pod,
    is_failed,
    matching_pdbs,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Informer

WORKERS = 8
# 429 retry backoff: first retry after BACKOFF_START s, doubling up to the cap. A PDB
# change wakes a blocked pod earlier; a virt-launcher pod waits for its migration, which
# its first eviction already asked for, so it is re-asked less often.
BACKOFF_START = 1.0
BACKOFF_CAP = 8.0
LAUNCHER_BACKOFF_CAP = 30.0
# A virt-launcher pod refused with "Eviction triggered evacuation of VMI ..." (virt-api's
# webhook, KubeVirt >= 1.5) or by its VMI's own budget (older KubeVirt) has been marked for
# evacuation: KubeVirt migrates it, retries failed migrations itself, and the pod goes away
# when done. Asking again is only a safety net.
EVACUATION_RECHECK = 60.0
# KubeVirt retries a failed evacuation migration by itself, with backoff. After this many
# failed live migrations of one VM during a drain, the VM counts as unable to leave the
# node, and the non_migratable policy decides: fail the drain, shut the VM down, or wait.
MIGRATION_ATTEMPTS = 3
# VMs leave the node in waves of at most "lanes" live migrations (kubevirt_settings.migration_lanes: the
# lesser of parallelOutboundMigrationsPerNode and parallelMigrationsPerCluster). Evicting a
# virt-launcher pod only marks its VMI for evacuation; virt-controller's evacuation controller
# creates a migration for every marked VMI whenever it counts a free slot, but it counts only
# migrations past Pending (FilterRunningMigrations in pkg/util/migrations/migrations.go,
# VirtualMachineInstanceMigration.IsRunning in kubevirt.io/api core/v1), so marking every VM at
# once piles up Pending migrations, and the migration controller looks again at a Pending
# migration over the limits only 5 s later (handleTargetPodCreation in
# pkg/virt-controller/watch/migration/migration.go, without the MigrationPriorityQueue gate).
# So the drain asks for a VM's evacuation only when fewer than "lanes" of its VMs are still
# evacuating: the next migration is created as a slot frees and starts at once.
NODE_CHECK_INTERVAL = 5.0  # seconds between two looks at the node's readiness during a drain
NOT_READY_GRACE = 60  # seconds a node may be NotReady during node_maintenance's drain before it stops
OWNER_CHECK_INTERVAL = 2.0  # seconds between two looks at the run's process (run_owner.py) during a drain
# A failed virt-launcher pod whose VMI still says it runs on the node (KubeVirt fails the VMI, or, when the guest
# died during a live migration, never does: migrations.stranded) is looked at again this often.
ENDED_RECHECK = 5.0


def _evacuating(target):
    """A VM of the node asked to evacuate whose launcher pod is still there (or whose answer is out)."""
    if not target.launcher or target.wait_only or target.state in ("gone", "todo", "granted", "ended"):
        return False
    return target.state == "inflight" or kubevirt_settings.evacuation_under_way(target.reason)


class Drainer:
    """Evict every evictable pod of a node and wait until they are gone.

    ``wait_only``: pod keys not to evict but to wait for (their VMI is being shut down).
    ``deadline``: a waiter.Deadline shared with the caller.
    ``watch_budgets``: False when the caller knows no PodDisruptionBudget but a VMI's own
    covers these pods (then a refusal is retried on its backoff alone, and the watch on
    budgets is saved).
    ``non_migratable``: what to do about a VM whose live migrations keep failing
    (MIGRATION_ATTEMPTS of them during this drain): ``fail`` the drain naming the VM and
    KubeVirt's reason, ``shutdown`` (delete its VMI, so its run strategy restarts it
    elsewhere, and wait for its pod), or ``wait`` (KubeVirt keeps retrying, until the deadline).
    ``not_ready_grace``: seconds the node may stay NotReady during the drain before it stops
    (its pods can no longer confirm termination, so nothing would finish); None never stops.
    ``migration_lanes``: VMs asked to evacuate at once (None: KubeVirt's limits, read from its CR
    when the node runs VMs; a drain that does not wait, or deletes pods, takes every VM at once).
    ``owner``: the run_owner.RunOwner of the run the drain belongs to; once its process is gone the
    drain stops (nothing more is evicted), as after a fatal error. None: never.
    """

    def __init__(self, client, node, options, deadline, progress=None, wait_only=(), workers=WORKERS,
                 watch_budgets=True, non_migratable="wait", not_ready_grace=None, migration_lanes=None,
                 owner=None):
        self.client = client
        self.node = node
        self.options = options
        self.deadline = deadline
        self.progress = progress
        self.wait_only = set(wait_only)
        self.workers = workers
        self.changed = threading.Condition()
        self.events = 0
        self.pods = Informer(client, "Pod", field_selector="spec.nodeName=%s" % node, changed=self.changed)
        self.pdbs = None
        self.watch_budgets = watch_budgets
        self.allowances = Allowances()  # what each PodDisruptionBudget allows (budgets.py)
        self.non_migratable = non_migratable
        self.failing = FailingMigrations(client, self.changed, MIGRATION_ATTEMPTS)  # migrations.py
        self._virt_api_down = False  # the last answer to a launcher pod's eviction came without virt-api
        self.last_error = None  # the last refusal (but KubeVirt's "evacuation under way") or failure, for progress
        self.result = DrainResult()
        self.not_ready_grace = not_ready_grace
        self._not_ready_since = None  # monotonic time the node was first seen NotReady (in a row)
        self._next_node_check = 0.0
        self.migration_lanes = migration_lanes
        self.owner = owner
        self._next_owner_check = 0.0

    # -- informers ---------------------------------------------------------------------------

    @property
    def migrations(self):
        """One Informer per namespace of the VMs being migrated (migrations.py)."""
        return self.failing.informers

    def _generation(self):
        gen = self.pods.generation + self.events
        if self.pdbs is not None:
            gen += self.pdbs.generation
        return gen + self.failing.generation

    def _await_sync(self, informer):
        if not informer.wait_synced(self.deadline):
            if informer.error is not None:
                raise informer.error
            raise MaintenanceError("Timed out listing %ss for the drain of node %s." % (informer.kind, self.node))

    def _stop(self):
        self.pods.stop()
        if self.pdbs is not None:
            self.pdbs.stop()
        self.failing.stop()

    # -- one eviction -------------------------------------------------------------------------

    def _evict(self, target):
        outcome, reason = evict_pod(self.client, target.name, target.namespace, self.options)
        with self.changed:
            self._settle(target, outcome, reason)
            self.events += 1
            self.changed.notify_all()

    def _settle(self, target, outcome, reason):
        if outcome == "granted":
            self.result.evicted += 1  # the watch may have seen the pod go before this answer arrived
        if target.launcher and outcome != "fatal":
            self._virt_api(outcome == "blocked" and reason is not None and reason.startswith(VIRT_API_DOWN_START))
        if outcome == "fatal" or (outcome == "blocked" and not (
                target.launcher and kubevirt_settings.evacuation_under_way(reason))):
            # KubeVirt refusing a launcher pod's eviction because it is migrating the VM is
            # the normal course, not an error.
            self.last_error = "%s: %s" % (target.key, reason)
        if target.state == "gone":
            return
        if outcome == "granted":
            target.state = "granted"
        elif outcome == "gone":
            target.state = "gone"
        elif outcome == "blocked":
            target.state = "blocked"
            target.reason = reason
            cap = LAUNCHER_BACKOFF_CAP if target.launcher else BACKOFF_CAP
            delay = min(cap, BACKOFF_START * (2 ** max(0, target.attempts - 1)))
            if target.launcher and kubevirt_settings.evacuation_under_way(reason):
                delay = EVACUATION_RECHECK
            target.next_try = time.monotonic() + delay * (0.9 + 0.2 * random.random())
            if self.pdbs is not None:
                target.pdb_versions = dict(
                    (pdb_key, (pdb.get("metadata") or {}).get("resourceVersion"))
                    for pdb_key, pdb in self._pdbs_of(target))
        else:
            target.state = "blocked"
            target.reason = str(reason)
            self.result.fatal = reason

    def _virt_api(self, down):
        """Say in the progress when virt-api stops answering evictions, and when it answers again."""
        if down == self._virt_api_down:
            return
        self._virt_api_down = down
        if self.progress is not None:
            self.progress.line("virt-api is not answering: evictions of virt-launcher pods are refused until it is "
                               "back; waiting" if down else "virt-api answers evictions again")

    def _pdbs_of(self, target):
        items = self.pdbs.items() if self.pdbs is not None else []
        return [("%s/%s" % (p["metadata"].get("namespace"), p["metadata"].get("name")), p)
                for p in matching_pdbs(target.pod, items)]

    # -- live migrations that keep failing (migrations.py) ---------------------------------

    def _stuck_vms(self):
        """Launcher pods whose VM cannot leave the node (its live migrations keep failing), new
        since the last look; said in the progress."""
        stuck = self.failing.stuck(self.result.targets, self.result.gave_up)
        for target in stuck:
            self.last_error = "VM %s: %s" % (target.vm, self.result.gave_up[target.key])
            if self.progress is not None:
                self.progress.line("VM %s cannot leave the node: %s; non_migratable=%s" % (
                    target.vm, self.result.gave_up[target.key], self.non_migratable))
        return stuck

    def _shut_down(self, target):
        """Shut down a VM that cannot migrate (or restart one stranded on the node), and wait for its launcher
        pod like any other."""
        namespace, name = target.vm.split("/", 1)
        outcome = shut_down_vm(self.client, target)
        with self.changed:
            if outcome is None:
                self.result.shut_down.append((namespace, name))
                target.wait_only = True
                if target.state != "gone":
                    target.state = "waiting"
            else:
                target.state = "blocked"
                target.reason = str(outcome)
                self.result.fatal = outcome
            self.events += 1
            self.changed.notify_all()

    # -- the loop -------------------------------------------------------------------------------

    def _node_not_ready(self, now):
        """A MaintenanceError once the node has been NotReady for ``not_ready_grace`` seconds
        with pods still on it (read at most every NODE_CHECK_INTERVAL seconds), else None."""
        if now < self._next_node_check or not self.result.pending:
            return None  # nothing left on the node: the drain is done whatever its state
        self._next_node_check = now + NODE_CHECK_INTERVAL
        try:
            node = self.client.get_or_none("Node", self.node)
        except MaintenanceError:
            return None  # the API server's trouble is not the node's; the next look decides
        if node is None or nodes_mod.is_ready(node):
            self._not_ready_since = None
            return None
        if self._not_ready_since is None:
            self._not_ready_since = now
        if now - self._not_ready_since < self.not_ready_grace:
            return None
        pending = self.result.pending
        return MaintenanceError(
            "Node %s went NotReady during the drain (%s) with %d pod%s still on it (%s): they cannot confirm "
            "that they stopped, so the drain cannot finish; the node stays cordoned and in maintenance. Bring it "
            "back and run again, or, if it is dead, use node_decommission with assume_powered_off=true." % (
                self.node, nodes_mod.not_ready_reason(node), len(pending), "" if len(pending) == 1 else "s",
                ", ".join(t.key for t in pending[:3]) + (" and %d more" % (len(pending) - 3) if len(pending) > 3 else "")),
            node=self.node)

    def _owner_gone(self, now):
        """A MaintenanceError once the run's process is gone (looked at every OWNER_CHECK_INTERVAL
        seconds), else None."""
        if now < self._next_owner_check or not self.result.pending:
            return None  # nothing left on the node: the drain is done whoever waits for it
        self._next_owner_check = now + OWNER_CHECK_INTERVAL
        if not self.owner.gone():
            return None
        pending = self.result.pending
        return self.owner.ended(self.node, "the drain stopped with %d pod%s still on the node; the node stays cordoned "
                                           "and in maintenance, and KubeVirt finishes the live migrations already "
                                           "under way" % (len(pending), "" if len(pending) == 1 else "s"))

    def _report(self):
        if self.progress is None:
            return
        pending = self.result.pending
        self.progress.update(self.result.total, self.result.eviction, len(pending),
                             sum(1 for t in pending if t.launcher), vms=self.pending_vms(),
                             error=self.last_error)

    def pending_vms(self):
        """namespace/name of the VMs whose virt-launcher pods are still on the node."""
        return sorted("%s/%s" % (t.namespace, kubevirt.launcher_vmi_name(t.pod) or t.name)
                      for t in self.result.pending if t.launcher)

    def run(self, wait=True):
        """Drain; returns a DrainResult (``timed_out`` / ``fatal`` tell how it ended)."""
        result = self.result
        self.pods.start()
        try:
            self._await_sync(self.pods)
            self._classify()
            if result.refused:
                return result
            self._prepare_watches(wait)
            return self._loop(wait)
        finally:
            self._stop()

    def _classify(self):
        """Sort the node's pods into the drain's targets and the pods that refuse the drain."""
        result = self.result
        for pod in sorted(self.pods.items(), key=object_name):
            verdict, reason = classify_pod(pod, self.options)
            result.total += 1
            if verdict == EVICT:
                result.targets.append(DrainTarget(pod, wait_only=object_name(pod) in self.wait_only))
            elif reason == FINISHED_LAUNCHER and is_failed(pod) \
                    and vmi_claims_node(self._vmi_of(pod), pod, self.node, self.pods.items()):
                # Failed, but its VMI still says it runs here: the VM has not left (_resolve_ended).
                target = DrainTarget(pod)
                target.state = "ended"
                result.targets.append(target)
            elif verdict == REFUSE:
                result.refused.append((object_name(pod), reason))
        result.eviction = len(result.targets)

    def _prepare_watches(self, wait):
        """The migration lanes, and the watches of migrations and budgets the loop paces itself by."""
        targets = self.result.targets
        if not wait or self.options.disable_eviction:
            # Asked once and left to KubeVirt, or deleted (no evacuation): every VM at once.
            self.migration_lanes = 0
        elif self.migration_lanes is None and any(t.launcher and not t.wait_only for t in targets):
            self.migration_lanes = self._read_migration_lanes()
        if wait and (self.non_migratable in ("fail", "shutdown") or self.migration_lanes):
            self.failing.start(sorted(set(t.namespace for t in targets if t.launcher and not t.wait_only)),
                               self.deadline)
        if self.watch_budgets and any(not t.wait_only for t in targets) and not self.options.disable_eviction:
            self.pdbs = Informer(self.client, "PodDisruptionBudget", changed=self.changed)
            self.pdbs.start()
            self._await_sync(self.pdbs)
            if wait:
                hold_back(targets, self.pdbs, self.allowances, BACKOFF_CAP)

    def _read_migration_lanes(self):
        """KubeVirt's limit on live migrations off one node (its defaults when the CR cannot be read)."""
        try:
            return kubevirt_settings.migration_lanes(kubevirt_settings.kubevirt_cr(self.client))
        except MaintenanceError:
            return kubevirt_settings.migration_lanes(None)

    def _loop(self, wait):
        result = self.result
        inflight = set()
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(result.targets) or 1))) as pool:
            while True:
                with self.changed:
                    seen = self._generation()
                    refresh_targets(result.targets, self.pods)
                    self._forget_finished(inflight)
                    self._shut_down_stuck_vms(pool, inflight)
                    self._resolve_ended(pool, inflight, time.monotonic())
                    if result.fatal is None and self.not_ready_grace is not None:
                        result.fatal = self._node_not_ready(time.monotonic())
                    if result.fatal is None and self.owner is not None:
                        result.fatal = self._owner_gone(time.monotonic())
                    if result.fatal is not None:
                        break
                    now = time.monotonic()
                    self._start_due_evictions(pool, inflight, now)
                    self._report()
                    pending = result.pending
                    if self._done(wait, inflight, pending):
                        break
                    if self._generation() == seen:
                        self.changed.wait(max(0.01, min(self._wake_in(now, pending), 30.0)))
            self._abandon_inflight()
        self._report()
        return result

    def _forget_finished(self, inflight):
        """Drop from ``inflight`` the targets whose eviction or shutdown has come back."""
        for target in [t for t in self.result.targets if t.key in inflight and t.state != "inflight"]:
            inflight.discard(target.key)

    def _shut_down_stuck_vms(self, pool, inflight):
        """Shut down the VMs that cannot migrate (or, with non_migratable=fail, record the failure)."""
        result = self.result
        if self.non_migratable not in ("fail", "shutdown"):
            return
        for target in self._stuck_vms():
            if self.non_migratable == "fail":
                result.fatal = MaintenanceError(
                    "VM %s cannot leave node %s: %s (non_migratable=fail; shutdown would shut it down "
                    "so that its run strategy restarts it elsewhere)."
                    % (target.vm, self.node, result.gave_up[target.key]), node=self.node)
                return
            target.state = "inflight"
            inflight.add(target.key)
            pool.submit(self._shut_down, target)

    def _vmi_of(self, pod):
        """The VMI of a launcher pod, None when gone (or unreadable now: looked at again later)."""
        try:
            return self.client.get_or_none("VirtualMachineInstance", kubevirt.launcher_vmi_name(pod),
                                           pod["metadata"].get("namespace"))
        except MaintenanceError:
            return None

    def _resolve_ended(self, pool, inflight, now):
        """Failed launcher pods: gone once their VMI no longer says it runs here; a VM stranded by a guest that
        died during its live migration (migrations.stranded) is restarted as its run strategy says, whatever
        non_migratable says (nothing alive is shut down); any other waits for KubeVirt to fail its VMI."""
        result = self.result
        due = [t for t in result.targets if t.state == "ended" and t.next_try <= now]
        pods_on_node = self.pods.items() if due else []
        for target in due:
            vmi = self._vmi_of(target.pod)
            if not vmi_claims_node(vmi, target.pod, self.node, pods_on_node):
                target.state = "gone"
                target.reason = FINISHED_LAUNCHER
                continue
            target.next_try = now + ENDED_RECHECK
            why = stranded(vmi, target.pod, self.node)
            if why is None or target.key in result.stranded:
                continue
            target.vm = "%s/%s" % (target.namespace, kubevirt.launcher_vmi_name(target.pod))
            result.stranded[target.key] = why
            self.last_error = "VM %s: %s" % (target.vm, why)
            if self.progress is not None:
                self.progress.line("VM %s: %s" % (target.vm, why))
            target.state = "inflight"
            inflight.add(target.key)
            pool.submit(self._shut_down, target)

    def _start_due_evictions(self, pool, inflight, now):
        """Submit the evictions that are due, as many as there are free workers."""
        room = self.workers - len(inflight)
        due = due_targets(self._paced(self.result.targets), self.pdbs, self.allowances, now, room,
                          BACKOFF_CAP) if room > 0 else []
        for target in due:
            target.state = "inflight"
            target.attempts += 1
            inflight.add(target.key)
            pool.submit(self._evict, target)

    def _paced(self, targets):
        """``targets`` without the virt-launcher pods not asked yet beyond the free migration
        lanes (the comment above NODE_CHECK_INTERVAL): a VM counts as evacuating from its first
        eviction until its migration has ended (or, unwatched, its pod has left the node); one that
        KubeVirt waits to migrate again after a failure holds no slot."""
        if not self.migration_lanes:
            return targets
        not_migrating = self.failing.not_migrating()
        free = self.migration_lanes - sum(1 for t in targets if _evacuating(t) and (
            t.namespace, kubevirt.launcher_vmi_name(t.pod)) not in not_migrating)
        paced = []
        for target in targets:
            if target.launcher and target.state == "todo":
                if free <= 0:
                    continue
                free -= 1
            paced.append(target)
        return paced

    def _done(self, wait, inflight, pending):
        """True when the loop ends: nothing pending, a fatal error, every try made (no wait), or time up."""
        result = self.result
        if not pending or result.fatal is not None:
            return True
        if not wait and not inflight and all(t.attempts or t.wait_only or t.state == "ended" for t in pending):
            return True
        if self.deadline.expired():
            result.timed_out = True
            return True
        return False

    def _wake_in(self, now, pending):
        """Seconds until the loop must look again even without a change: a retry, a re-list or a node check."""
        wake = self.deadline.remaining()
        retries = [t.next_try - now for t in pending if t.state in ("blocked", "ended")]
        if retries:
            wake = min(wake, max(0.0, min(retries)))
        if self.pods.error is not None and self.pods.synced.is_set():
            wake = min(wake, 5.0)  # the informer is re-listing; look again soon
        if self.not_ready_grace is not None:
            wake = min(wake, max(0.01, self._next_node_check - now))
        if self.owner is not None:
            wake = min(wake, max(0.01, self._next_owner_check - now))
        return wake

    def _abandon_inflight(self):
        """Leave no eviction running behind the caller's back."""
        for target in self.result.targets:
            if target.state == "inflight":
                target.state = "blocked"

    def pdb_items(self):
        """The PodDisruptionBudgets as last seen (read now when they were not watched)."""
        if self.pdbs is not None:
            return self.pdbs.items()
        try:
            return self.client.list("PodDisruptionBudget")[0]
        except MaintenanceError:
            return []
