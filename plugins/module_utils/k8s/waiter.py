# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one waiter: watch-driven, with a monotonic deadline.

An ``Informer`` keeps a live copy of a set of objects (list once, then watch; re-list
when the watch expires or the connection drops). ``wait_until`` re-evaluates a check
each time any of its informers sees a change, so callers react to the cluster at once
instead of sleeping and polling object by object.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_key
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    MaintenanceError,
    WaitTimeoutError,
)


class Deadline:
    """A point in monotonic time; immune to wall-clock jumps."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = self.start + seconds

    def remaining(self):
        return max(0.0, self.end - time.monotonic())

    def expired(self):
        return time.monotonic() >= self.end

    def elapsed(self):
        return time.monotonic() - self.start


class Informer:
    """A live, thread-maintained view of the objects of one kind matching selectors."""

    def __init__(self, client, kind, namespace=None, label_selector=None, field_selector=None,
                 changed=None, watch_seconds=50, on_version=None):
        """``on_version(obj)``: called (in the informer's thread, before the waiters are woken) with every
        version of an object it sees, in order: each one a list returns, each one an event brings."""
        self.client = client
        self.on_version = on_version
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.changed = changed or threading.Condition()
        self.watch_seconds = watch_seconds
        self.objects = {}
        self.synced = threading.Event()
        self.error = None
        self.generation = 0
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        self._thread = threading.Thread(target=self._run, name="informer-%s" % self.kind)
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    @property
    def started(self):
        return self._thread is not None

    def wait_synced(self, deadline):
        """Wait (on ``changed``) for the first list: True once it arrived, False when the informer
        failed before it or ``deadline`` passed."""
        with self.changed:
            while not self.synced.is_set():
                if self.error is not None or deadline.expired():
                    return False
                self.changed.wait(min(1.0, max(0.01, deadline.remaining())))
        return True

    def get(self, name, namespace=None):
        return self.objects.get((namespace or "", name))

    def items(self):
        return list(self.objects.values())

    def _notify(self):
        with self.changed:
            self.generation += 1
            self.changed.notify_all()

    def _relist(self):
        items, rv = self.client.list(self.kind, namespace=self.namespace,
                                     label_selector=self.label_selector, field_selector=self.field_selector)
        self.objects = dict((object_key(o), o) for o in items)
        if self.on_version is not None:
            for obj in items:
                self.on_version(obj)
        self.error = None
        self.synced.set()
        self._notify()
        return rv

    def _run(self):
        failures = 0
        while not self._stop.is_set():
            try:
                rv = self._relist()
                failures = 0
                while not self._stop.is_set():
                    expired = False
                    for event in self.client.watch(self.kind, namespace=self.namespace,
                                                   label_selector=self.label_selector,
                                                   field_selector=self.field_selector,
                                                   resource_version=rv, timeout_seconds=self.watch_seconds):
                        if self._stop.is_set():
                            return
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype == "ERROR":
                            expired = True  # usually 410 Gone: our resourceVersion is too old
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if etype == "BOOKMARK":
                            continue
                        objects = dict(self.objects)
                        if etype == "DELETED":
                            objects.pop(object_key(obj), None)
                        else:
                            objects[object_key(obj)] = obj
                            if self.on_version is not None:
                                self.on_version(obj)
                        self.objects = objects
                        self._notify()
                    if expired:
                        break
            except MaintenanceError as exc:
                failures += 1
                self.error = exc
                self._notify()
                self._stop.wait(min(5.0, 0.5 * failures))


def wait_until(check, informers, timeout, what, describe_pending=None, recheck_every=None, deadline=None):
    """Return the first truthy ``check()`` result; raise WaitTimeoutError at the deadline.

    ``check`` runs after the informers' first sync and after every change they see (and
    every ``recheck_every`` seconds, for checks that also depend on time or on work the
    caller does inside ``check``). ``describe_pending()`` explains, on timeout, what was
    still missing. An informer that keeps failing (for example RBAC denied) ends the wait
    with its error.
    """
    deadline = deadline or Deadline(timeout)
    changed = informers[0].changed if informers else threading.Condition()
    for informer in informers:
        if not informer.started:
            informer.changed = changed  # one condition wakes the wait for any informer
            informer.start()
    seen = -1
    while True:
        for informer in informers:
            if informer.error is not None and not informer.synced.is_set():
                raise informer.error
        if all(i.synced.is_set() for i in informers):
            with changed:
                seen = sum(i.generation for i in informers)
            result = check()
            if result:
                return result
        if deadline.expired():
            pending = describe_pending() if describe_pending else None
            msg = "Timed out after %ds waiting for %s" % (round(deadline.seconds), what)
            msg += (": %s." % pending.rstrip(".")) if pending else "."
            raise WaitTimeoutError(msg, pending=pending)
        wait_for = deadline.remaining()
        if recheck_every:
            wait_for = min(wait_for, recheck_every)
        with changed:
            if sum(i.generation for i in informers) == seen:
                changed.wait(max(0.01, min(wait_for, 5.0)))


def wait_for_object(client, kind, name, predicate, timeout, what, namespace=None, describe_pending=None,
                    stable_for=0.0, settles=None):
    """Wait until ``predicate(obj_or_None)`` is truthy for one object; returns the object.

    ``stable_for``: seconds the predicate must stay true, every change of the object in between
    seen through the same watch; a change that makes it false starts the wait for it again.
    ``settles(obj)``: given every version of the object the watch sees, in order; once it returned
    True, what made the wait for ``stable_for`` needed is known to be over, and the predicate is
    enough."""
    settled = []

    def see(obj):
        if not settled and settles(obj):
            settled.append(True)

    with Informer(client, kind, namespace=namespace, field_selector="metadata.name=%s" % name,
                  on_version=see if settles is not None else None) as informer:
        found = []
        since = []  # monotonic time since which the predicate has held, when it holds

        def check():
            obj = informer.get(name, namespace)
            if not predicate(obj):
                del since[:]
                return False
            if not since:
                since.append(time.monotonic())
            if time.monotonic() - since[0] < stable_for and not settled:
                return False
            found.append(obj)
            return True

        wait_until(check, [informer], timeout, what, describe_pending=describe_pending,
                   recheck_every=(stable_for / 4.0) if stable_for else None)
        return found[0]
