# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pods a drain follows until they are gone (``DrainTarget``: each one's state, attempts
and backoff), how a look at the node's pods moves them on, and what a drain returns
(``DrainResult``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import FINISHED_LAUNCHER, is_failed, is_finished
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import percent


class DrainTarget:
    """One pod the drain must see gone."""

    def __init__(self, pod, wait_only=False):
        meta = pod["metadata"]
        self.key = object_name(pod)
        self.namespace = meta.get("namespace")
        self.name = meta.get("name")
        self.uid = meta.get("uid")
        self.pod = pod
        self.launcher = kubevirt.is_launcher_pod(pod)
        self.wait_only = wait_only or bool(meta.get("deletionTimestamp"))
        self.vm = None  # namespace/name of the VM of a launcher pod whose migrations keep failing
        # todo|inflight|blocked|granted|waiting|ended (a failed launcher whose VMI may still claim the node)|gone
        self.state = "waiting" if self.wait_only else "todo"
        self.attempts = 0
        self.next_try = 0.0
        self.reason = None
        self.pdb_versions = {}  # PDB key -> resourceVersion seen when the last attempt was refused


class DrainResult:
    def __init__(self):
        self.total = 0
        self.eviction = 0
        self.targets = []
        self.refused = []  # (pod key, reason) the drain cannot evict with these options
        self.timed_out = False
        self.fatal = None
        self.evicted = 0
        self.pdbs = []
        self.gave_up = {}  # pod key -> why its VM cannot leave (its live migrations keep failing)
        self.shut_down = []  # (namespace, VMI name) shut down: their migrations kept failing, or stranded
        self.stranded = {}  # pod key -> why its VM, whose guest died during its migration, is restarted

    @property
    def pending(self):
        return [t for t in self.targets if t.state != "gone"]

    @property
    def pending_keys(self):
        return [t.key for t in self.pending]

    @property
    def progress(self):
        return percent(self.eviction, len(self.pending))

    @property
    def done(self):
        return not self.pending and not self.refused and self.fatal is None


def refresh_targets(targets, pods):
    """Mark targets gone that left the node's pod list (or were replaced by a new pod), finished or
    being deleted, from ``pods`` (the Informer of the node's pods)."""
    for target in targets:
        if target.state == "gone":
            continue
        current = pods.get(target.name, target.namespace)
        if current is None or current["metadata"].get("uid") != target.uid:
            target.state = "gone"
        else:
            finished_now = is_finished(current) and not is_finished(target.pod)
            target.pod = current
            if target.launcher and is_failed(current):
                # A failed launcher: its VM has left the node once its VMI says so (the drain reads it:
                # engine.py, migrations.stranded).
                if target.state not in ("ended", "inflight"):
                    target.state = "ended"
                    target.reason = None
                    target.next_try = 0.0
            elif target.launcher and is_finished(current):
                # This is how a migrated VM's source pod ends: virt-launcher exits and the
                # pod stays, Succeeded; the VM has left the node (FINISHED_LAUNCHER).
                target.state = "gone"
                target.reason = FINISHED_LAUNCHER
            elif current["metadata"].get("deletionTimestamp") and target.state in ("todo", "blocked"):
                target.state = "waiting"  # someone (KubeVirt, a controller) is deleting it already
            elif finished_now and target.state == "blocked":
                # A finished pod is evicted at once: no budget counts it.
                target.next_try = time.monotonic()
