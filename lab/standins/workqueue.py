"""Work queues and the controller loop around them.

A key is queued at most once however many events arrive for it, and is never
handled by two workers at once: the controller always reconciles the latest cached
state instead of replaying events. Failed keys come back with exponential backoff;
a reconcile may also ask to be called again after a delay (timers such as "this
migration finishes in 2 s").
"""

import heapq
import itertools
import logging
import threading
import time
from collections import deque

from lab.standins.kube import ApiError

log = logging.getLogger(__name__)


class WorkQueue:
    def __init__(self, name):
        self.name = name
        self._cond = threading.Condition()
        self._queue = deque()
        self._dirty = set()
        self._processing = set()
        self._delayed = []  # heap of (due, seq, key)
        self._seq = itertools.count()
        self._failures = {}

    def add(self, key):
        with self._cond:
            if key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key, delay):
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key):
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        self.add_after(key, min(0.05 * (2**failures), 30.0))

    def forget(self, key):
        with self._cond:
            self._failures.pop(key, None)

    def get(self):
        with self._cond:
            while True:
                now = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now:
                    _, _, key = heapq.heappop(self._delayed)
                    if key not in self._dirty:
                        self._dirty.add(key)
                        if key not in self._processing:
                            self._queue.append(key)
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    return key
                timeout = self._delayed[0][0] - now if self._delayed else None
                self._cond.wait(timeout)

    def done(self, key):
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()


class Controller:
    """Base for every controller: subclasses implement ``reconcile(key)``.

    ``reconcile`` returns None when the key is settled, or a number of seconds after
    which it wants to look again. Conflicts and other errors requeue with backoff.
    """

    name = "controller"
    workers = 1
    resync_seconds = 60.0

    def __init__(self, sim):
        self.sim = sim
        self.kube = sim.kube
        self.queue = WorkQueue(self.name)
        self.log = logging.getLogger(f"lab.standins.{self.name}")

    def enqueue(self, key):
        self.queue.add(key)

    def all_keys(self):
        """Keys for the periodic resync: every object the controller is responsible for."""
        return []

    def start(self):
        for i in range(self.workers):
            threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True).start()
        if self.resync_seconds:
            threading.Thread(target=self._resync, name=f"{self.name}-resync", daemon=True).start()

    def _resync(self):
        while True:
            time.sleep(self.resync_seconds)
            try:
                for key in self.all_keys():
                    self.queue.add(key)
            except Exception:
                self.log.exception("resync failed")

    def _work(self):
        while True:
            key = self.queue.get()
            try:
                again = self.reconcile(key)
                self.queue.forget(key)
                if again is not None:
                    self.queue.add_after(key, again)
            except ApiError as e:
                if e.status == 403 and "is being terminated" in e.message:
                    # The namespace is going away with everything in it: nothing to do.
                    self.log.debug("%s: %s", key, e.message)
                    self.queue.forget(key)
                    continue
                if e.conflict or e.not_found or e.already_exists:
                    self.log.debug("%s: %s, retrying", key, e)
                else:
                    self.log.warning("%s: %s", key, e)
                self.queue.add_rate_limited(key)
            except Exception as e:
                if _is_connection_error(e):
                    self.log.warning("%s: apiserver unreachable (%s)", key, type(e).__name__)
                else:
                    self.log.exception("%s: reconcile failed", key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def reconcile(self, key):
        raise NotImplementedError


def _is_connection_error(exc):
    import urllib3.exceptions

    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


class Expectations:
    """Objects this controller created or deleted that its cache has not shown yet.

    Without it a reconcile that runs before the watch delivers our own write would
    create a second launcher pod or a second migration.
    """

    def __init__(self, ttl=30.0):
        self._ttl = ttl
        self._pending = {}
        self._lock = threading.Lock()

    def expect(self, key, what):
        with self._lock:
            self._pending[key] = (what, time.monotonic() + self._ttl)

    def pending(self, key):
        """What was expected under ``key``, while the expectation is fresh."""
        with self._lock:
            entry = self._pending.get(key)
            if entry is None:
                return None
            if entry[1] < time.monotonic():
                del self._pending[key]
                return None
            return entry[0]

    def observed(self, key):
        with self._lock:
            self._pending.pop(key, None)
