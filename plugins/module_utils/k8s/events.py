# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes Events (``events.k8s.io/v1``) of the collection's own work.

What a controller built on client-go's ``tools/events`` writes, for processes that live as long
as one module call:

* reporting controller ``kubevirt-ops.io/maintenance``, action and reason in the style of the
  node-maintenance-operator (``BeginMaintenance``, ``SucceedMaintenance``...);
* series: client-go (``tools/events/event_broadcaster.go``, ``getKey`` and ``recordToSink``)
  keeps a repeated Event in one object and counts it in ``series`` (``count`` from 2, and
  ``lastObservedTime``). Its cache lives in the controller's memory; a module lives for one call,
  so the key is the Event's name instead: a digest of type, action, reason, regarding, related,
  run and note. The same happening again (the lock renewed by every node of a run) finds its
  Event and counts it; anything else is an Event of its own. The API keeps ``note``, ``reason``,
  ``type`` and ``eventTime`` immutable (``ValidateEventUpdate`` in kubernetes
  ``pkg/apis/core/validation/events.go``), which is why the note is part of the key;
* the run: the annotation ``maintenance.kubevirt-ops.io/run`` and, in the note, ``(run ...)``;
* never fatal: an Event that cannot be written is a warning, and once the API refuses Events
  (no right to create them, events.k8s.io not served) the recorder stops trying;
* never a secret: every note passes the module's redaction first;
* check mode records nothing (``enabled=False``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import socket

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import format_micro, utc_now
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import api_version_of

KIND = "Event.events.k8s.io"
REPORTING_CONTROLLER = "kubevirt-ops.io/maintenance"
RUN_ANNOTATION = "maintenance.kubevirt-ops.io/run"
NORMAL = "Normal"
WARNING = "Warning"
# kubernetes pkg/apis/core/validation/events.go: ReportingInstanceLengthLimit, NoteLengthLimit.
INSTANCE_LIMIT = 128
NOTE_LIMIT = 1024
# Cluster-scoped objects' Events live here (as the kubelet's Node Events do).
CLUSTER_EVENTS_NAMESPACE = "default"
# An Event's name: the regarding object's name, a dot, the digest (a DNS subdomain, <= 253).
NAME_PREFIX_LIMIT = 200


def reference(obj, kind=None):
    """The ObjectReference of an object as read from the API (``kind`` when the object has none)."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion") or (api_version_of(kind)[1] if kind else None),
        "kind": obj.get("kind") or kind,
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return dict((k, v) for k, v in ref.items() if v)


def event_name(ref, digest):
    return "%s.%s" % (ref["name"][:NAME_PREFIX_LIMIT].rstrip(".-"), digest)


def event_key(event_type, action, reason, regarding, related, run, note):
    """The digest that names an Event: what client-go's getKey compares, the run and the note."""
    parts = [event_type, action, reason, REPORTING_CONTROLLER]
    for ref in (regarding, related or {}):
        parts += [ref.get("kind", ""), ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", "")]
    parts += [run or "", note]
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


def clip(note):
    """A note the API accepts (at most 1 KiB of characters)."""
    return note if len(note) <= NOTE_LIMIT else note[:NOTE_LIMIT - 3] + "..."


class EventRecorder:
    """Records Events for one module call; see the module docstring."""

    def __init__(self, client, run=None, warn=None, scrub=None, enabled=True, instance=None, now=utc_now):
        self.client = client
        self.run = run
        self.warn = warn or (lambda text: None)
        self.scrub = scrub or (lambda text: text)
        self.enabled = enabled
        self.instance = (instance or "%s-%s" % ("kubevirt-ops-maintenance", socket.gethostname()))[:INSTANCE_LIMIT]
        self.now = now
        self.recorded = []

    def normal(self, regarding, reason, action, note, related=None):
        return self.record(regarding, reason, action, note, NORMAL, related)

    def warning(self, regarding, reason, action, note, related=None):
        return self.record(regarding, reason, action, note, WARNING, related)

    def record(self, regarding, reason, action, note, event_type=NORMAL, related=None):
        """Write the Event (or count it again); returns its name, or None when nothing was written."""
        if not self.enabled or not regarding or not regarding.get("name"):
            return None
        note = clip(self.scrub(note + (" (run %s)" % self.run if self.run else "")))
        digest = event_key(event_type, action, reason, regarding, related, self.run, note)
        name = event_name(regarding, digest)
        namespace = regarding.get("namespace") or CLUSTER_EVENTS_NAMESPACE
        moment = format_micro(self.now())

        def compute(existing):
            if existing is None:
                body = {
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": namespace},
                    "eventTime": moment,
                    "reportingController": REPORTING_CONTROLLER,
                    "reportingInstance": self.instance,
                    "action": action,
                    "reason": reason,
                    "regarding": regarding,
                    "note": note,
                    "type": event_type,
                }
                if related:
                    body["related"] = related
                if self.run:
                    body["metadata"]["annotations"] = {RUN_ANNOTATION: self.scrub(self.run)}
                return body, "created"
            count = ((existing.get("series") or {}).get("count") or 1) + 1
            return {"series": {"count": count, "lastObservedTime": moment}}, "counted"

        try:
            self.client.update_guarded(KIND, name, compute, namespace=namespace, create_missing=True)
        except MaintenanceError as exc:
            self._refused(reason, regarding, exc)
            return None
        self.recorded.append({"reason": reason, "regarding": "%s %s" % (regarding.get("kind"), regarding["name"])})
        return name

    def _refused(self, reason, regarding, exc):
        status = getattr(exc, "status", None)
        what = "%s on %s %s" % (reason, regarding.get("kind"), regarding.get("name"))
        if status in (401, 403, 404):
            # Not allowed or not served: it will not change during this call.
            self.enabled = False
            self.warn("Events are not recorded (the Event %s was refused: %s)" % (what, exc.msg))
            return
        self.warn("The Event %s was not recorded: %s" % (what, exc.msg))
