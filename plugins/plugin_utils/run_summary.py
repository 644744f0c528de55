# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The end of a rolling maintenance run, as the rolling_maintenance role says it.

``summary`` reads the run's state (its ``order``, the ``records`` of the nodes it did, why it
stopped) and returns the run's ``status``, the nodes that ``remain`` (failed, then not started),
the command that finishes the job (``resume``) and the closing ``message``, which the play prints
last, the report shows and the job's artifacts carry.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# The status of a run, from its records and the reason it stopped.
SUCCEEDED = "succeeded"
FAILED = "failed"
WINDOW_CLOSED = "window_closed"
HEALTH_GATE_FAILED = "health_gate_failed"
NOT_STARTED = "not_started"

# How the message of a run that stopped before its end begins, by status.
_STOPPED = {
    WINDOW_CLOSED: "stopped by the maintenance window",
    HEALTH_GATE_FAILED: "stopped: the health gate failed",
}


def _text(value):
    """A value as the message shows it; nothing for a missing one."""
    return "" if value is None else "%s" % (value,)


def _join(nodes):
    return ", ".join("%s" % (node,) for node in nodes)


def status(order, failed, untouched, stop_reason):
    """The run's status: ``failed`` when a node failed, else why it stopped (the maintenance window,
    the health gate), else ``succeeded`` when every node of a non-empty run is recorded, else
    ``not_started``."""
    if failed:
        return FAILED
    if stop_reason == "window":
        return WINDOW_CLOSED
    if stop_reason == "health_gate":
        return HEALTH_GATE_FAILED
    return SUCCEEDED if order and not untouched else NOT_STARTED


def lock_sentence(holder, release, lock_ttl):
    """What the message says of the cluster lock: nothing when the run held none, else whether the
    release (the result of ``cluster_lock`` with ``state: absent``) gave it back."""
    if not holder:
        return ""
    release = release or {}
    if release.get("changed"):
        return "The cluster lock was released."
    return "The cluster lock could not be released (%s); it expires %ss after its last renewal." % (
        _text(release.get("msg", "")), lock_ttl)


def resume_command(command, remaining):
    """The command that finishes the job: ``command`` with the nodes that remain, and no selector."""
    nodes = {"rolling_maintenance_nodes": list(remaining), "rolling_maintenance_node_selector": ""}
    return "%s -e '%s'" % (command, json.dumps(nodes))


def summary(state, command, lock_ttl, release=None):
    """The end of the run whose state is ``state``: ``status``, ``message``, ``remaining`` and ``resume``.

    ``command``: what users run to finish the job (the resume command is it with the nodes that
    remain); ``release``: the result of the lock's release; ``lock_ttl``: the lock's TTL in seconds,
    which the message names when the lock could not be released.
    """
    state = state or {}
    records = list(state.get("records") or [])
    order = list(state.get("order") or [])
    done = [r.get("node") for r in records if r.get("status") == "done"]
    failed = [r.get("node") for r in records if r.get("status") == "failed"]
    recorded = [r.get("node") for r in records]
    untouched = [node for node in order if node not in recorded]
    remaining = failed + untouched
    run_status = status(order, failed, untouched, state.get("stop_reason"))
    resume = resume_command(command, remaining)
    lock = lock_sentence(state.get("holder"), release, lock_ttl)
    window_message = _text((state.get("window") or {}).get("message"))

    if run_status == SUCCEEDED:
        words = ["Rolling maintenance %s succeeded: %d node(s) done (%s)." % (
            _text(state.get("id")), len(done), _join(done)), lock]
    elif run_status == WINDOW_CLOSED and not records:
        words = [window_message, "Nothing was changed."]
    elif run_status == NOT_STARTED:
        words = ["Nothing was changed: the run stopped before its first node (see the error above).", lock]
    else:
        words = ["Rolling maintenance %s %s." % (_text(state.get("id")), _STOPPED.get(run_status, "stopped")),
                 "Done: %s." % (_join(done) if done else "none")]
        if failed:
            words.append("Failed and left cordoned (in maintenance): %s." % _join(failed))
        words += ["Not started: %s." % (_join(untouched) if untouched else "none"), lock]
        if state.get("stop_reason") == "window":
            words.append(window_message)
        if state.get("stop_reason") == "health_gate":
            words.append(_text((state.get("health_gate") or {}).get("message")))
        if remaining:
            words.append("%s the job with: %s" % (
                ("After fixing %s, finish" % _join(failed)) if failed else "Finish", resume))
    return {
        "status": run_status,
        "message": re.sub(r"\s+", " ", " ".join(words)).strip(),
        "remaining": remaining,
        "resume": resume if remaining else "",
    }
