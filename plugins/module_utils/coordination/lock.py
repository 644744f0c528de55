# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster lock: a coordination.k8s.io Lease that one maintenance run holds at a time.

The Lease records who holds it (``holderIdentity``), since when (``acquireTime``), when the
holder last proved it is alive (``renewTime``) and for how long that proof counts
(``leaseDurationSeconds``, the TTL). Every write carries the ``resourceVersion`` that was
read, so of two runs racing for the same Lease exactly one write succeeds; the other gets
a conflict, reads again and sees the winner.

A Lease whose ``renewTime + leaseDurationSeconds`` lies in the past is expired: its holder
stopped renewing (its run crashed or was killed), and the next run takes it over, saying
so. Expiry is judged on the local clock against the holder's timestamps, so the TTL must
be much longer than any clock skew between the machines that run maintenance.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import getpass
import json
import os
import random
import socket

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ApiError,
    BlockedError,
    InvalidInputError,
    NotFoundError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    DEFAULT_LOCK_NAME,
    DEFAULT_LOCK_NAMESPACE,
    LOCK_LAST_HOLDER_ANNOTATION,
    LOCK_PURPOSE_ANNOTATION,
    LOCK_RUN_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import (
    format_micro,
    format_seconds,
    parse_time,
    utc_now,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import RunOwner
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import annotation_json
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Informer, wait_until

DEFAULT_TTL = 3600

# A write that loses a race re-reads and decides again; more losses than this in a row
# mean something keeps rewriting the Lease, which is worth reporting rather than looping.
_MAX_CONFLICTS = 20


def default_holder():
    """A holder identity naming who runs the maintenance and from where, unique per run."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    who = "%s@%s" % (user, socket.gethostname())
    # Automation controller (AWX/AAP) exports the job id; naming it tells an operator which job to look at.
    job = os.environ.get("JOB_ID") if (os.environ.get("AWX_HOST") or os.environ.get("TOWER_HOST")) else None
    if job:
        who += " (AWX job %s)" % job
    return "%s pid %d #%04x" % (who, os.getpid(), random.randint(0, 0xFFFF))


def _age(seconds):
    seconds = int(max(0, round(seconds)))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


class LeaseState:
    """What a Lease object says, at a given moment."""

    def __init__(self, lease, now=None):
        self.lease = lease
        self.now = now or utc_now()
        meta = (lease or {}).get("metadata") or {}
        spec = (lease or {}).get("spec") or {}
        self.exists = lease is not None
        self.resource_version = meta.get("resourceVersion")
        self.holder = spec.get("holderIdentity") or None
        self.ttl = spec.get("leaseDurationSeconds")
        self.acquired_at = parse_time(spec.get("acquireTime"))
        self.renewed_at = parse_time(spec.get("renewTime")) or self.acquired_at
        self.transitions = spec.get("leaseTransitions") or 0
        self.purpose = (meta.get("annotations") or {}).get(LOCK_PURPOSE_ANNOTATION)
        # The run process the holder bound the lock to (cluster_lock owner_pid), when it did.
        self.run = annotation_json(lease, LOCK_RUN_ANNOTATION, dict) if lease else None
        self._run_ended = None

    @property
    def expires_at(self):
        if not self.holder or self.renewed_at is None or not self.ttl:
            return None
        return self.renewed_at + datetime.timedelta(seconds=self.ttl)

    @property
    def expired(self):
        """Held, but its holder stopped renewing it in time (or never said when)."""
        if not self.holder:
            return False
        expires = self.expires_at
        return expires is None or expires <= self.now

    @property
    def free(self):
        return not self.holder or self.expired

    @property
    def run_ended(self):
        """Held by a run bound to a process of this machine that has ended (a playbook interrupted
        or killed): the lock may be taken over at once. A run of another machine never counts."""
        if self._run_ended is None:
            owner = RunOwner.recorded_here(self.run) if self.holder else None
            self._run_ended = owner is not None and owner.gone()
        return self._run_ended

    @property
    def takeable(self):
        """Nobody holds it, its holder let it expire, or the run holding it has ended."""
        return self.free or self.run_ended

    def seconds_to_expiry(self):
        expires = self.expires_at
        return None if expires is None else (expires - self.now).total_seconds()

    def describe_holder(self):
        """'alice@laptop pid 12 #00ff since 2024-05-01T10:00:00Z (14m02s ago, renewed 20s ago, expires in 59m40s)'."""
        text = "'%s'" % self.holder
        if self.acquired_at:
            text += " since %s (%s ago" % (format_seconds(self.acquired_at),
                                           _age((self.now - self.acquired_at).total_seconds()))
            if self.renewed_at and self.renewed_at != self.acquired_at:
                text += ", renewed %s ago" % _age((self.now - self.renewed_at).total_seconds())
            remaining = self.seconds_to_expiry()
            if remaining is not None:
                text += ", expires in %s" % _age(remaining) if remaining > 0 else ", expired %s ago" % _age(-remaining)
            text += ")"
        if self.purpose:
            text += " for: %s" % self.purpose
        return text

    def as_result(self, namespace, name):
        return {
            "namespace": namespace,
            "name": name,
            "holder": self.holder,
            "acquired_at": format_micro(self.acquired_at) if self.acquired_at and self.holder else None,
            "renewed_at": format_micro(self.renewed_at) if self.renewed_at and self.holder else None,
            "expires_at": format_micro(self.expires_at) if self.expires_at else None,
            "ttl": self.ttl,
            "transitions": self.transitions,
            "purpose": self.purpose if self.holder else None,
        }


class ClusterLock:
    """Acquire, renew and release one Lease with optimistic concurrency."""

    def __init__(self, client, name=DEFAULT_LOCK_NAME, namespace=DEFAULT_LOCK_NAMESPACE, clock=utc_now):
        self.client = client
        self.name = name
        self.namespace = namespace
        self.clock = clock
        self.lease = None  # the Lease as last written (or read, when nothing was written)

    @property
    def description(self):
        return "cluster lock %s/%s" % (self.namespace, self.name)

    def read(self):
        lease = self.client.get_or_none("Lease", self.name, self.namespace)
        return LeaseState(lease, self.clock())

    # -- writes ------------------------------------------------------------------------

    def _body(self, holder, ttl, purpose, previous=None, new_holder=True, run=None):
        now = format_micro(self.clock())
        if previous is not None and previous.lease is not None:
            body = dict(previous.lease)
            body["metadata"] = dict(body.get("metadata") or {})
            body["spec"] = dict(body.get("spec") or {})
        else:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": {}}
        meta, spec = body["metadata"], body["spec"]
        meta["labels"] = dict(meta.get("labels") or {}, **{MANAGED_BY_LABEL: MANAGED_BY})
        annotations = dict(meta.get("annotations") or {})
        if purpose is not None:
            annotations[LOCK_PURPOSE_ANNOTATION] = purpose
        if run is not None:
            annotations[LOCK_RUN_ANNOTATION] = json.dumps(run, sort_keys=True)
        elif new_holder:
            annotations.pop(LOCK_RUN_ANNOTATION, None)  # the previous holder's run
        meta["annotations"] = annotations
        spec["holderIdentity"] = holder
        spec["leaseDurationSeconds"] = int(ttl)
        spec["renewTime"] = now
        if new_holder:
            spec["acquireTime"] = now
            if previous is not None and previous.exists and previous.holder != holder:
                spec["leaseTransitions"] = previous.transitions + 1
        return body

    def _update(self, decide, check_mode):
        """``decide(LeaseState) -> (body or None, outcome)`` through the client's guarded update:
        the Lease is replaced with the resourceVersion read (created when absent), so of two
        runs racing exactly one write succeeds; the other reads again and decides again."""
        def compute(lease):
            return decide(LeaseState(lease, self.clock()))

        outcome, written = self.client.update_guarded("Lease", self.name, compute, namespace=self.namespace,
                                                      patch_type="replace", create_missing=True,
                                                      write=not check_mode, attempts=_MAX_CONFLICTS + 1)
        self.lease = written
        return outcome, written

    # -- operations --------------------------------------------------------------------

    def try_acquire(self, holder, ttl, purpose=None, force=False, check_mode=False, run=None):
        """One decision on the current Lease: (outcome, state before, state after or None).

        outcome is 'acquired' (it was free or absent), 'taken_over' (its holder let it
        expire, the run it was bound to has ended, or ``force``), 'renewed' (we already hold it)
        or 'held' (someone else holds it; nothing written). A lost race is decided again on the
        Lease that won it. ``run`` (RunOwner.record) binds the lock to the caller's run.
        """
        def decide(before):
            if before.exists and before.holder == holder:
                outcome = "renewed"
            elif not before.exists or not before.holder:
                outcome = "acquired"
            elif before.takeable or force:
                outcome = "taken_over"
            else:
                return None, ("held", before, None)
            body = self._body(holder, ttl, purpose, previous=before, new_holder=outcome != "renewed", run=run)
            if outcome == "renewed" and purpose is None:
                body["metadata"]["annotations"].pop(LOCK_PURPOSE_ANNOTATION, None)
                if before.purpose:
                    body["metadata"]["annotations"][LOCK_PURPOSE_ANNOTATION] = before.purpose
            return body, (outcome, before, body)

        (outcome, before, body), written = self._update(decide, check_mode)
        if outcome == "held":
            return outcome, before, None
        return outcome, before, LeaseState(body if check_mode else written, self.clock())

    def acquire(self, holder, ttl, purpose=None, wait=False, wait_timeout=300, force=False, check_mode=False,
                run=None):
        """Acquire (or renew) the lock; wait for it or fail naming who holds it."""
        if ttl <= 0:
            raise InvalidInputError("The TTL of the %s must be a positive number of seconds, not %s." % (
                self.description, ttl))
        attempt = {"result": None, "last": None}

        def attempt_once():
            outcome, before, after = self.try_acquire(holder, ttl, purpose, force, check_mode, run=run)
            attempt["last"] = before
            if outcome == "held":
                return False
            attempt["result"] = (outcome, before, after)
            return True

        # Seconds spent waiting for another holder: none when the first attempt got the lock, however long
        # that attempt took (its reads and write, a conflict retried).
        waited = 0.0
        if not attempt_once():
            held = attempt["last"]
            if not wait or check_mode:
                raise BlockedError(
                    "The %s is held by %s; another maintenance run is in progress. Wait for it to finish (or set "
                    "wait=true); %s" % (self.description, held.describe_holder(), get_past(self.namespace, self.name)),
                    lock=held.as_result(self.namespace, self.name), blockers=["lock held by %s" % held.holder])
            started = self.clock()
            self._wait_for(attempt_once, wait_timeout)
            waited = (self.clock() - started).total_seconds()
        outcome, before, after = tuple(attempt["result"])
        return {
            "action": outcome,
            "changed": outcome != "renewed",
            "acquired": True,
            "holder": holder,
            "previous_holder": before.holder if outcome == "taken_over" else None,
            "previous_expired": bool(outcome == "taken_over" and before.expired),
            "previous_run_ended": bool(outcome == "taken_over" and before.run_ended),
            "waited_seconds": round(waited, 1),
            "lock": after.as_result(self.namespace, self.name),
            "msg": self._message(outcome, before, holder),
        }

    def _wait_for(self, attempt_once, wait_timeout):
        informer = Informer(self.client, "Lease", namespace=self.namespace,
                            field_selector="metadata.name=%s" % self.name)

        def describe():
            return "it is still held by %s" % self.read().describe_holder()

        try:
            # Re-check every few seconds too: expiry happens without any change to the object.
            wait_until(attempt_once, [informer], wait_timeout, "the %s" % self.description,
                       describe_pending=describe, recheck_every=2.0)
        except WaitTimeoutError as exc:
            raise BlockedError(exc.msg, blockers=[exc.details.get("pending")]) from exc
        finally:
            informer.stop()

    def _message(self, outcome, before, holder):
        if outcome == "acquired":
            return "Acquired the %s as '%s'." % (self.description, holder)
        if outcome == "renewed":
            return "Renewed the %s held by '%s'." % (self.description, holder)
        if before.expired:
            why = "its holder stopped renewing it"
        elif before.run_ended:
            why = "the run that held it (process %s on this machine) has ended" % before.run.get("pid")
        else:
            why = "forced"
        return "Took over the %s from %s: %s." % (self.description, before.describe_holder(), why)

    def release(self, holder=None, force=False, check_mode=False):
        """Give the lock up (only when ``holder`` holds it, unless ``force``)."""
        if not holder and not force:
            raise InvalidInputError("Releasing the %s needs the holder that acquired it, or force." % self.description)
        decided = []

        def decide(before):
            result = {"holder": holder, "acquired": False, "previous_holder": before.holder, "previous_expired": False,
                      "previous_run_ended": False, "waited_seconds": 0.0}
            decided[:] = [result]
            if not before.exists or not before.holder:
                result.update(action="none", changed=False, lock=before.as_result(self.namespace, self.name),
                              msg="The %s is not held." % self.description)
                return None, (result, None)
            if before.holder != holder and not force:
                result.update(action="none", changed=False, lock=before.as_result(self.namespace, self.name),
                              msg="The %s is held by %s, not by '%s'; left as it is."
                              % (self.description, before.describe_holder(), holder))
                return None, (result, None)
            body = dict(before.lease)
            body["metadata"] = dict(body["metadata"])
            body["spec"] = dict(body.get("spec") or {})
            annotations = dict(body["metadata"].get("annotations") or {})
            annotations.pop(LOCK_PURPOSE_ANNOTATION, None)
            annotations.pop(LOCK_RUN_ANNOTATION, None)
            annotations[LOCK_LAST_HOLDER_ANNOTATION] = before.holder
            body["metadata"]["annotations"] = annotations
            for key in ("holderIdentity", "acquireTime", "renewTime"):
                body["spec"].pop(key, None)
            result.update(action="released", changed=True,
                          msg="Released the %s held by %s." % (self.description, before.describe_holder()))
            return body, (result, body)

        try:
            (result, body), written = self._update(decide, check_mode)
        except NotFoundError:
            # Deleted between our read and our write: nobody holds it any more.
            result, body, written = decided[0], None, None
        if result["action"] == "released":
            written = body if check_mode else written
            result["lock"] = LeaseState(written, self.clock()).as_result(self.namespace, self.name)
        return result


def held_by_another(client, lock):
    """The LeaseState of the lock a module's ``lock`` option names, when a holder other than
    ``lock['holder']`` holds it and has not let it expire; None when the lock is free, absent
    or the caller's own, and when the option opts out (no option, or an empty name)."""
    if not lock or not lock.get("name"):
        return None
    state = ClusterLock(client, lock["name"], lock.get("namespace") or DEFAULT_LOCK_NAMESPACE).read()
    if state.takeable or state.holder == lock.get("holder"):
        return None
    return state


def get_past(namespace, name):
    """How to get past a lock whose run is dead: the sentence every refusal over the lock ends with."""
    return ("if that run was interrupted or killed, run it again from the same machine (a run bound to the lock "
            "with owner_pid, as the roles' runs are, is taken over once its process has ended), wait for the lock to "
            "expire, or release it with kubevirt_ops.maintenance.cluster_lock name=%s namespace=%s state=absent "
            "force=true." % (name, namespace))


def held_text(lock, state):
    """'the cluster lock kube-system/kubevirt-ops-maintenance is held by 'alice@bastion ...' since ...'."""
    return "the cluster lock %s/%s is held by %s" % (
        lock.get("namespace") or DEFAULT_LOCK_NAMESPACE, lock["name"], state.describe_holder())


def refuse_while_held(client, lock, refused, **details):
    """Raise BlockedError (before anything is written) when another run holds the lock.

    ``refused`` says what is not done, for example 'Node worker-1 was not put into maintenance'.
    A task that belongs to the run holding the lock passes that run's holder in ``lock``.
    """
    try:
        state = held_by_another(client, lock)
    except ApiError as exc:
        if exc.status != 403:
            raise
        cause = str(exc).rstrip(".")
        raise ApiError(
            "%s: the cluster lock could not be checked: %s; grant get on leases in %s, or set lock.name to an "
            "empty string to act regardless of the lock." % (
                refused, cause[:1].lower() + cause[1:], lock.get("namespace") or DEFAULT_LOCK_NAMESPACE),
            status=exc.status, reason=exc.reason, **details)
    if state is None:
        return
    raise BlockedError(
        "%s: %s, so another maintenance run is in progress; wait for it to end, give its holder in lock.holder "
        "if this task belongs to that run, or set lock.name to an empty string to act regardless of the lock." % (
            refused, held_text(lock, state)),
        lock=state.as_result(lock.get("namespace") or DEFAULT_LOCK_NAMESPACE, lock["name"]),
        blockers=["lock held by %s" % state.holder], **details)
