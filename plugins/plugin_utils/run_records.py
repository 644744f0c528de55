# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node records of a rolling maintenance run, as the rolling_maintenance role keeps them.

``start`` decides whether a node (or a batch of nodes) starts: not after the run stopped, not
outside the maintenance window, not when it is predicted to outlast the window. A node in flight
is described by its *current* entry (label, index, when it started, the phase it is in and when
that began, the phases behind it with their start and end, its drain result), which ``start``
also makes; ``advance`` moves it to the next phase, ``record`` turns it into the node's record in the run's
state, done or failed, and decides whether a failure stops the run; ``record_outcomes`` records the
outcomes a node or a batch's nodes kept (their entry in flight and how they ended). The report
(``module_utils/report/model.py``) and the window prediction (``duration.py``) read these records.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.duration import fits_window, predict_batch

# The phases of a node, in order; a failure names the one it happened in.
PHASES = ("drain", "tasks", "ready", "uncordon", "verify")


def fit(state, nodes, window):
    """Whether ``nodes`` (one node's name or a batch's names) are predicted to finish before ``window``
    (a status of the maintenance window) closes, from the nodes the run has done: duration.fits_window's
    verdict with the prediction's ``basis``."""
    names = [str(n) for n in nodes] if isinstance(nodes, (list, tuple)) else [str(nodes)]
    prediction = predict_batch(state.get("records"), (state.get("preflight") or {}).get("details"), names)
    result = fits_window(prediction, window, names[0] if len(names) == 1 else names)
    result["basis"] = prediction["basis"] if prediction else None
    return result


def start(state, nodes, window, now=None, started=None, position=0, host=""):
    """Whether ``nodes`` start now, and for one node its entry in flight.

    ``window``: the status of the maintenance window now, or None for a node whose drain already ran
    with its batch (the batch was started, so the node goes on). Returns ``go``; ``window_stop``,
    the window as the run's state records a stop before these nodes (the status, with the prediction's
    message when the window is open but closes too early), or None when they go or the run had already
    stopped; ``predicted_seconds``; and, given ``now`` and one node, the entry of the node in flight:
    ``index`` (``position`` places a node among a batch's nodes recorded together), ``total``,
    ``label``, ``started`` (``started``, the batch's drain start, else ``now``), the first phase,
    the node's preflight ``detail`` and its inventory ``host``.
    """
    state = state or {}
    if window is None:
        go, verdict = True, None
    elif state.get("stop") or not window.get("open"):
        go, verdict = False, None
    else:
        verdict = fit(state, nodes, window)
        go = verdict["fits"]
    result = {"go": go, "predicted_seconds": verdict["predicted_seconds"] if verdict else None, "window_stop": None}
    if not go and not state.get("stop"):
        result["window_stop"] = dict(window, message=verdict["message"]) if verdict else dict(window)
    if now is None or isinstance(nodes, (list, tuple)):
        return result
    order = state.get("order") or []
    index = len(state.get("records") or []) + 1 + int(position or 0)
    details = (state.get("preflight") or {}).get("details") or []
    result.update({
        "index": index,
        "total": len(order),
        "label": "[%d/%d %s]" % (index, len(order), nodes),
        "started": started or now,
        "phase": PHASES[0],
        "phase_start": started or now,
        "phases": {},
        "detail": next((d for d in details if d.get("name") == nodes), {"simulated": False}),
        "host": host or "",
    })
    return result


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
        # What node_machine did to the machine: its own result, or what its failure said of it.
        "machine": current.get("machine") or ((failed_result or {}).get("machine") if failed else None),
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


def record_outcomes(state, outcomes, order=None, max_failures=0):
    """The run's state with nodes recorded from their outcomes, one node's or a batch's.

    ``outcomes``: one outcome or a list of them, each ``{"node", "current", "now", "method"}`` and
    ``verify`` (done) or ``failed_task``/``failed_result`` (failed). ``order``: the nodes to record, in
    that order (a node without an outcome is not recorded; outcomes of other nodes are ignored);
    without it, the nodes of the outcomes as they come. Each node is recorded as ``record`` records it.
    """
    if isinstance(outcomes, dict):
        outcomes = [outcomes]
    outcomes = [o for o in outcomes if isinstance(o, dict)]
    if order is None:
        order = []
        for outcome in outcomes:
            if outcome.get("node") not in order:
                order.append(outcome.get("node"))
    by_node = dict((o.get("node"), o) for o in outcomes)
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


# What a failed phase was doing, as the run's messages say it.
PHASE_WORDS = {
    "drain": "entering maintenance (drain)",
    "tasks": "running the node tasks",
    "ready": "waiting for the node to be Ready",
    "uncordon": "leaving maintenance",
    "verify": "verifying the node and its VMs",
}


def _count(value):
    return len(value or [])


def progress(current, step, state=None, verify=None, with_batch=False, node_tasks=False, reboot=False,
             recorded_later=0, machine=False):
    """The progress line of the node in flight (``current``) after ``step``:

    - ``enter``: it enters maintenance (pods and VMs on it at preflight);
    - ``drained``: its drain's figures (``with_batch``: the drain ran with its batch), then what comes
      next (``node_tasks``, ``machine``: the machine serviced through its BMC, ``reboot``);
    - ``done``: Ready and schedulable, the VMs of the verification (``verify``), and the nodes of the
      run (``state``) left, less ``recorded_later`` nodes of the batch recorded after it.
    """
    label = current.get("label") or ""
    detail = current.get("detail") or {}
    if step == "enter":
        return "%s entering maintenance (%s pods and %s VMs on it at preflight)" % (
            label, detail.get("pods", "?"), detail.get("vms", "?"))
    if step == "drained":
        drain = current.get("drain") or {}
        vms = drain.get("vms") or {}
        words = ["%s drained in %ds (%s%s): %d pods evicted, %d VMs migrated, %d shut down; left on the node: "
                 "%d pods, %d VMs." % (label, int(round(drain.get("duration_seconds") or 0)), drain.get("method") or "",
                                       ", with its batch" if with_batch else "", drain.get("eviction_pods") or 0,
                                       _count(vms.get("migrated")), _count(vms.get("shut_down")),
                                       _count(drain.get("pending_pods")), _count(vms.get("blocked")))]
        if node_tasks:
            words.append("Running the node tasks.")
        if machine:
            words.append("Servicing its machine.")
        if reboot:
            words.append("Reboot simulated (a KWOK node has no machine): waiting for Ready." if detail.get("simulated")
                         else "Rebooting %s." % current.get("host"))
        return " ".join(words)
    if step == "done":
        vms = (verify or {}).get("vms") or {}
        stopped = vms.get("stopped_as_expected") or []
        left = _count((state or {}).get("order")) - _count((state or {}).get("records")) - int(recorded_later or 0)
        return "%s done: Ready and schedulable, %s of %s VMs that ran before run%s; %d node(s) left%s." % (
            label, vms.get("running"), vms.get("expected"),
            (", %d left stopped by their run strategy" % len(stopped)) if stopped else "", left,
            " after this batch" if recorded_later else "")
    raise ValueError("unknown step %r (one of enter, drained, done)" % step)


def failure(state, outcome, max_failures=0, with_batch=False, recorded_later=False):
    """What the run says of a node that failed (``outcome``: its node, failed task and result), with the
    run's state after its record: the run stops here (the error and the phase it failed in); the node is
    one of a batch whose other nodes finish first (``with_batch``: drained with its batch;
    ``recorded_later``: finished on its host beside them, not recorded yet); or the run goes on."""
    node = outcome.get("node")
    if recorded_later:
        error = _failure_text(outcome.get("failed_task"), outcome.get("failed_result"))
        return ("Node %s failed and is left cordoned: %s. The other nodes of its batch finish on their hosts; then "
                "the failures are counted (at most %s go on)." % (node, error, max_failures))
    last = (state.get("records") or [{}])[-1]
    if state.get("stop") and not with_batch:
        return "Node %s failed while %s and is left cordoned (in maintenance): %s" % (
            node, PHASE_WORDS.get(last.get("failed_phase"), "in maintenance"), last.get("error"))
    if state.get("stop"):
        return ("Node %s failed and is left cordoned: %s. The run stops once the other nodes of its batch, already "
                "drained, are finished." % (node, last.get("error")))
    return "Node %s failed and is left cordoned: %s. %s of at most %s failure(s); going on with the next node." % (
        node, last.get("error"), state.get("failures"), max_failures)
