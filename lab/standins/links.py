"""The migration network: a link per node, shared by the live migrations from and to it.

On real hardware each node's migrations go over its link (a dedicated migration network of, say,
25 Gbit/s), KubeVirt caps each migration at ``bandwidthPerMigration`` (libvirt's migration speed, set by
virt-launcher) and limits how many run at once (``parallelOutboundMigrationsPerNode``,
``parallelMigrationsPerCluster``): more migrations at once help until a node's link is full, then each
gets a share of it.

No bytes move in the lab: a transfer is a count of bytes left that drains at its rate, recomputed
whenever a transfer starts, ends or finishes copying: each transfer that still copies gets the least of
its cap, its source's link divided among the transfers copying over it, and its target's likewise. The
link's speed is the annotation ``kubevirt-ops.lab/migration-link`` of the KubeVirt CR (bytes per second, a
quantity such as ``4Gi``; read at every step, so a test or the benchmark sets it on a running lab); none,
or ``0``: no link limit, every migration at its cap, as before links were modelled.
"""

import math
import threading
import time

from kubernetes.utils import parse_quantity

LINK_ANNOTATION = "kubevirt-ops.lab/migration-link"


def link_bytes_per_second(kubevirt):
    """The link speed the KubeVirt CR's annotation names, 0 for none."""
    value = ((kubevirt.get("metadata") or {}).get("annotations") or {}).get(LINK_ANNOTATION)
    if value in (None, ""):
        return 0.0
    try:
        return max(0.0, float(parse_quantity(str(value))))
    except ValueError:
        return 0.0


class _Transfer:
    __slots__ = ("key", "source", "target", "left", "cap", "rate")

    def __init__(self, key, source, target, left, cap):
        self.key, self.source, self.target, self.left, self.cap = key, source, target, left, cap
        self.rate = 0.0


class Links:
    """The transfers under way, by migration UID; thread-safe (the controller's workers share it)."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._transfers = {}
        self._at = clock()

    def known(self, uid):
        with self._lock:
            return uid in self._transfers

    def start(self, uid, key, source, target, total_bytes, cap, link, elapsed=0.0):
        """A transfer of ``total_bytes`` from ``source`` to ``target`` capped at ``cap`` bytes/s (0: none);
        ``elapsed``: seconds it already ran (a stand-in that restarted mid-transfer counts them at its cap)."""
        with self._lock:
            self._advance(link)
            done = cap * elapsed if cap > 0 else (total_bytes if elapsed > 0 else 0.0)
            self._transfers[uid] = _Transfer(key, source, target, max(0.0, total_bytes - done), cap)
            self._share(link)

    def seconds_left(self, uid, link):
        """Seconds until the transfer ends at today's rates (0: done), None for one not started here."""
        with self._lock:
            self._advance(link)
            transfer = self._transfers.get(uid)
            if transfer is None:
                return None
            if transfer.left <= 0:
                return 0.0
            return transfer.left / transfer.rate if transfer.rate > 0 else math.inf

    def end(self, uid, link):
        """Forget the transfer; returns the keys of the transfers that shared a link with it (their rates
        grew: to be looked at again), none without a link."""
        with self._lock:
            self._advance(link)
            transfer = self._transfers.pop(uid, None)
            if transfer is None:
                return []
            self._share(link)
            if link <= 0:
                return []  # every transfer runs at its cap: nobody's rate changed
            nodes = {transfer.source, transfer.target}
            return sorted({t.key for t in self._transfers.values()
                           if t.left > 0 and nodes & {t.source, t.target}})

    def _advance(self, link):
        now = self._clock()
        elapsed, self._at = now - self._at, now
        for transfer in self._transfers.values():
            if transfer.left > 0:
                moved = transfer.left if math.isinf(transfer.rate) else transfer.rate * elapsed
                transfer.left = max(0.0, transfer.left - moved)
        self._share(link)

    def _share(self, link):
        copying = [t for t in self._transfers.values() if t.left > 0]
        over = {}
        for transfer in copying:
            for node in {transfer.source, transfer.target}:
                over[node] = over.get(node, 0) + 1
        for transfer in copying:
            limits = [transfer.cap] if transfer.cap > 0 else []
            if link > 0:
                limits += [link / over[transfer.source], link / over[transfer.target]]
            transfer.rate = min(limits) if limits else math.inf
