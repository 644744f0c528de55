# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node records of a rolling maintenance run, as the rolling_maintenance role keeps them.

A node in flight is described by its *current* entry (label, index, when it started, the phase
it is in and when that began, the phases behind it with their start and end, its drain result);
``advance`` moves it to the next phase, ``record`` turns it into the node's record in the run's
state, done or failed, and decides whether a failure stops the run. The report
(``report.py``) and the window prediction (``duration.py``) read these records.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The phases of a node, in order; a failure names the one it happened in.
PHASES = ("drain", "tasks", "ready", "uncordon", "verify")


def advance(current, phase, now):
    """``current`` moved on to ``phase`` at ``now``: the phase it was in ends then."""
    if phase not in PHASES:
        raise ValueError("unknown phase %r (one of %s)" % (phase, ", ".join(PHASES)))
    moved = dict(current)
    phases = dict(current.get("phases") or {})
    phases[current.get("phase") or PHASES[0]] = {"start": current.get("phase_start"), "end": now}
    moved.update({"phase": phase, "phase_start": now, "phases": phases})
    return moved


def _failure_text(failed_task, failed_result):
    name = (failed_task or {}).get("name") or "a task"
    msg = (failed_result or {}).get("msg")
    return "%s: %s" % (name, ("%s" % (msg if msg is not None else "failed")).strip())


def _lock_lost(failed_task):
    """A failure of the lock's renewal: another run may be working now, so the run always stops."""
    return "cluster_lock" in ((failed_task or {}).get("action") or "")


def record(state, node, current, now, method, verify=None, failed_task=None, failed_result=None, max_failures=0):
    """The run's state with ``node`` recorded: done when ``verify`` (the verification's result) is
    given, else failed by ``failed_task``/``failed_result`` (counted, and stopping the run beyond
    ``max_failures`` or when the lock was lost)."""
    current = current or {}
    drain = current.get("drain") or {}
    records = list(state.get("records") or [])
    failed = verify is None
    phase = current.get("phase") or PHASES[0]
    phases = dict(current.get("phases") or {})
    phases[phase] = dict({"start": current.get("phase_start") or now, "end": now}, **({"failed": True} if failed else {}))
    entry = {
        "node": node,
        "index": int(current.get("index") or len(records) + 1),
        "status": "failed" if failed else "done",
        "method": drain.get("method") or method,
        "started": current.get("started") or now,
        "finished": now,
        "predicted_seconds": current.get("predicted_seconds"),
        "phases": phases,
        "pods_evicted": drain.get("eviction_pods") or 0,
        "total_pods": drain.get("total_pods") or 0,
        "vms": drain.get("vms") or {},
    }
    updated = dict(state)
    if failed:
        failures = int(state.get("failures") or 0) + 1
        # A stop stays a stop: a later node of the same batch failing within max_failures does not undo it.
        stop = bool(state.get("stop")) or _lock_lost(failed_task) or failures > int(max_failures)
        entry.update({"failed_phase": phase, "migrations": [],
                      "not_running": (failed_result or {}).get("not_running") or [],
                      "error": _failure_text(failed_task, failed_result)})
        updated.update({"failures": failures, "stop": stop,
                        "stop_reason": state.get("stop_reason") if state.get("stop") else ("failure" if stop else None)})
    else:
        entry.update({"migrations": verify.get("migrations") or [], "not_running": [],
                      "stopped_as_expected": (verify.get("vms") or {}).get("stopped_as_expected") or [],
                      "error": None})
    updated["records"] = records + [entry]
    return updated


def record_all(state, outcomes, order, max_failures=0):
    """The run's state with the nodes of ``order`` recorded, in that order, each from its outcome:
    ``{"node", "current", "now", "method"}`` and ``verify`` (done) or ``failed_task``/``failed_result``
    (failed). A node of ``order`` without an outcome is not recorded; outcomes of other nodes are ignored."""
    by_node = dict((o.get("node"), o) for o in outcomes if isinstance(o, dict))
    for node in order:
        outcome = by_node.get(node)
        if outcome is None:
            continue
        failed = outcome.get("verify") is None
        state = record(state, node, outcome.get("current"), outcome.get("now"), outcome.get("method"),
                       verify=outcome.get("verify"),
                       failed_task=(outcome.get("failed_task") or {}) if failed else None,
                       failed_result=outcome.get("failed_result") if failed else None,
                       max_failures=max_failures)
    return state
