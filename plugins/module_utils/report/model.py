# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance report: one normalised model rendered as JSON, Markdown and an SVG timeline.

Input is what the rolling_maintenance role records: a ``run`` (start, end, status, message,
the planned node order, what remains) and one record per node that was started, holding
the start and end of each phase, the pods evicted and the VMs migrated or shut down. All
durations, totals and the pictures are computed here, in one place, so the three outputs
always agree: markdown.py and svg.py render the model, files.py writes
the files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import summary as machine_summary
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import format_seconds, parse_time_utc

# Phases of one node, in order, with their label and colour in the timeline.
PHASES = (
    ("drain", "Drain (enter maintenance)", "#4c78a8"),
    ("tasks", "Node tasks (reboot, firmware...)", "#f58518"),
    ("ready", "Wait for Ready", "#b279a2"),
    ("uncordon", "Leave maintenance", "#54a24b"),
    ("verify", "Verify VMs and node", "#72b7b2"),
)
PHASE_NAMES = tuple(p[0] for p in PHASES)
PHASE_LABELS = dict((p[0], p[1]) for p in PHASES)
PHASE_COLOURS = dict((p[0], p[2]) for p in PHASES)
FAILED_COLOUR = "#d62728"
MIGRATION_COLOUR = "#1b1b1b"
SHUTDOWN_COLOUR = "#d62728"
UNTOUCHED_COLOUR = "#e6e6e6"
PREFLIGHT_COLOUR = "#9e9e9e"


def seconds_between(start, end):
    if not start or not end:
        return None
    return round(max(0.0, (end - start).total_seconds()), 1)


def human_duration(seconds):
    """'45s', '3m05s', '1h02m'."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


def _vm_name(vm):
    return "%s/%s" % (vm.get("namespace"), vm.get("name")) if vm.get("namespace") else str(vm.get("name"))


def _phases(record):
    raw = record.get("phases") or {}
    if isinstance(raw, list):
        raw = dict((p.get("name"), p) for p in raw if isinstance(p, dict))
    phases = []
    for name in PHASE_NAMES:
        item = raw.get(name) or {}
        start, end = parse_time_utc(item.get("start")), parse_time_utc(item.get("end"))
        if start is None:
            continue
        phases.append({"name": name, "start": start, "end": end, "failed": bool(item.get("failed"))})
    return phases


def _migrations(record):
    vms = record.get("vms") or {}
    timed = {}
    for item in record.get("migrations") or []:
        timed[_vm_name(item)] = item
    result = []
    for vm in vms.get("migrated") or []:
        timing = timed.pop(_vm_name(vm), {})
        result.append(_migration(vm, timing))
    for leftover in timed.values():  # a migration seen on the cluster that the drain did not list
        result.append(_migration(leftover, leftover))
    return result


def _migration(vm, timing):
    start, end = parse_time_utc(timing.get("start")), parse_time_utc(timing.get("end"))
    return {
        "namespace": vm.get("namespace"),
        "name": vm.get("name"),
        "source": vm.get("source") or timing.get("source"),
        "target": vm.get("target") or timing.get("target") or vm.get("node"),
        "start": start,
        "end": end,
        "seconds": seconds_between(start, end),
    }


def vm_moves(nodes, planned):
    """How often each VM moved, the fewest moves the run could have made, and the avoidable ones.

    ``nodes``: the node entries of the model in the order the run took them; ``planned``: the
    nodes of the run. A VM leaving a node needs one move. It needs a second one only when it
    had to land on a node of the run still to do, because no node of the run was done yet
    (the first node's VMs): such a landing is forced. A landing on a node still to do while
    some were done is not forced, and the move that takes the VM off that node again is
    avoidable. Nodes outside the run count as done. Done means finished before the node that
    sends the VM away started: the nodes of one batch (several at once) drain together, so none
    of them counts as done for another.
    """
    planned = set(planned or [])
    per_vm = {}
    landed = {}  # VM -> (node still to do it landed on, forced, nodes done then)
    avoidable = []
    finished = []  # the nodes done so far, in the run's order
    for n in nodes:
        done = [x["node"] for x in finished
                if n["started"] is None or x["finished"] is None or x["finished"] <= n["started"]]
        for m in n["migrations"]:
            vm, source, target = _vm_name(m), m["source"] or n["node"], m["target"]
            per_vm[vm] = per_vm.get(vm, 0) + 1
            earlier = landed.pop(vm, None)
            if earlier and earlier[0] == source and not earlier[1]:
                avoidable.append({"vm": vm, "node": source, "done": earlier[2], "reason": (
                    "it had landed on %s, still to do, while %s %s done" % (
                        source, ", ".join(earlier[2]), "was" if len(earlier[2]) == 1 else "were"))})
            if target and target in planned and target not in done and target != n["node"]:
                landed[vm] = (target, not done, list(done))
        if n["status"] == "done":
            finished.append(n)
    total = sum(per_vm.values())
    return {"total": total, "minimum": total - len(avoidable), "avoidable": len(avoidable),
            "per_vm": dict(sorted(per_vm.items())), "avoidable_moves": avoidable}


def _number(value):
    """A number from a record (a string from a template, or null) -> float or None."""
    try:
        return None if value in (None, "", "None") else float(value)
    except (TypeError, ValueError):
        return None


def _node(record):
    """One node record -> the node entry of the model."""
    phases = _phases(record)
    start = parse_time_utc(record.get("started")) or (phases[0]["start"] if phases else None)
    ends = [p["end"] for p in phases if p["end"]]
    end = parse_time_utc(record.get("finished")) or (max(ends) if ends else None)
    vms = record.get("vms") or {}
    status = record.get("status") or "done"
    if status == "failed" and phases and not any(p["failed"] for p in phases):
        phases[-1]["failed"] = True  # the phase that was running when it failed
    return {
        "node": record.get("node"),
        "index": record.get("index"),
        "status": status,
        "started": start,
        "finished": end,
        "seconds": seconds_between(start, end),
        "predicted_seconds": _number(record.get("predicted_seconds")),
        "phases": phases,
        "pods_evicted": int(record.get("pods_evicted") or 0),
        "total_pods": int(record.get("total_pods") or 0),
        "migrations": _migrations(record),
        "shut_down": list(vms.get("shut_down") or []),
        "blocked": list(vms.get("blocked") or []),
        "not_running": list(record.get("not_running") or []),
        "method": record.get("method"),
        "error": record.get("error"),
        "machine": _machine(record.get("machine")),
    }


MACHINE_KEYS = ("road", "address", "bmh", "boot_id_before", "boot_id_after", "firmware_before", "firmware_after",
                "bios_changed", "actions")


def _machine(summary):
    """What node_machine did to a node's machine (its result's ``machine``), or None when nothing was asked of it."""
    if not isinstance(summary, dict):
        return None
    return dict((key, summary.get(key)) for key in MACHINE_KEYS if key in summary)


def _run_bound(recorded, moments, pick):
    """The run's start or end: as recorded, else the earliest (``min``) or latest (``max``) of the nodes'."""
    moments = [m for m in moments if m]
    return parse_time_utc(recorded) or (pick(moments) if moments else None)


def _totals(nodes, planned, untouched, moves):
    totals = {
        "nodes_planned": len(planned),
        "nodes_done": sum(1 for n in nodes if n["status"] == "done"),
        "nodes_failed": sum(1 for n in nodes if n["status"] == "failed"),
        "nodes_untouched": len(untouched),
        "pods_evicted": sum(n["pods_evicted"] for n in nodes),
        "vms_migrated": sum(len(n["migrations"]) for n in nodes),
        "vms_shut_down": sum(len(n["shut_down"]) for n in nodes),
        "vms_not_running": sum(len(n["not_running"]) for n in nodes),
    }
    totals.update(vm_moves=moves["total"], vm_moves_minimum=moves["minimum"], vm_moves_avoidable=moves["avoidable"])
    durations = [n["seconds"] for n in nodes if n["status"] == "done" and n["seconds"] is not None]
    totals["average_node_seconds"] = round(sum(durations) / len(durations), 1) if durations else None
    for name in PHASE_NAMES:
        totals["%s_seconds" % name] = round(sum(
            seconds_between(p["start"], p["end"]) or 0 for n in nodes for p in n["phases"] if p["name"] == name), 1)
    return totals


def build(run, records):
    """Normalise the run and node records into the report model (datetimes, durations, totals)."""
    run = dict(run or {})
    nodes = [_node(record) for record in records or []]
    seen = set(n["node"] for n in nodes)
    planned = list(run.get("nodes") or [n["node"] for n in nodes])
    untouched = [name for name in planned if name not in seen]
    started = _run_bound(run.get("started"), [n["started"] for n in nodes], min)
    finished = _run_bound(run.get("finished"), [n["finished"] for n in nodes], max)
    moves = vm_moves(nodes, planned)
    totals = _totals(nodes, planned, untouched, moves)
    preflight = run.get("preflight") or {}
    return {
        "title": run.get("title") or "Rolling maintenance",
        "status": run.get("status") or ("failed" if totals["nodes_failed"] else "succeeded"),
        "message": run.get("message"),
        "cluster": run.get("cluster"),
        "selection": run.get("selection"),
        "lock": run.get("lock"),
        "policy": run.get("policy") or {},
        "started": started,
        "finished": finished,
        "seconds": seconds_between(started, finished),
        "preflight": {"start": parse_time_utc(preflight.get("start")),
                      "end": parse_time_utc(preflight.get("end"))},
        "planned": planned,
        "batches": [list(b) for b in run.get("batches") or []] or [[name] for name in planned],
        "untouched": untouched,
        "remaining": run.get("remaining"),
        "resume": run.get("resume"),
        "nodes": nodes,
        "moves": moves,
        "totals": totals,
    }


# -- JSON ----------------------------------------------------------------------------------


def to_json_data(model):
    def node(n):
        return {
            "node": n["node"],
            "index": n["index"],
            "status": n["status"],
            "method": n["method"],
            "started": format_seconds(n["started"]),
            "finished": format_seconds(n["finished"]),
            "duration_seconds": n["seconds"],
            "predicted_seconds": n["predicted_seconds"],
            "phases": dict((p["name"], {"start": format_seconds(p["start"]), "end": format_seconds(p["end"]),
                                        "seconds": seconds_between(p["start"], p["end"]),
                                        "failed": p["failed"]}) for p in n["phases"]),
            "pods_evicted": n["pods_evicted"],
            "total_pods": n["total_pods"],
            "vms": {
                "migrated": [dict(m, start=format_seconds(m["start"]), end=format_seconds(m["end"])) for m in n["migrations"]],
                "shut_down": n["shut_down"],
                "blocked": n["blocked"],
                "not_running": n["not_running"],
            },
            "error": n["error"],
            "machine": n["machine"],
        }

    return {
        "title": model["title"],
        "status": model["status"],
        "message": model["message"],
        "cluster": model["cluster"],
        "selection": model["selection"],
        "policy": model["policy"],
        "lock": model["lock"],
        "started": format_seconds(model["started"]),
        "finished": format_seconds(model["finished"]),
        "duration_seconds": model["seconds"],
        "preflight_seconds": seconds_between(model["preflight"]["start"], model["preflight"]["end"]),
        "planned": model["planned"],
        "batches": model["batches"],
        "untouched": model["untouched"],
        "remaining": model["remaining"],
        "resume": model["resume"],
        "totals": model["totals"],
        "moves": model["moves"],
        "nodes": [node(n) for n in model["nodes"]],
    }


# -- summary -------------------------------------------------------------------------------


def summary_lines(model):
    t = model["totals"]
    lines = ["%s %s in %s: %d/%d nodes done, %d failed, %d untouched; %d pods evicted, %d VMs migrated, %d shut down." % (
        model["title"], model["status"], human_duration(model["seconds"]), t["nodes_done"], t["nodes_planned"],
        t["nodes_failed"], t["nodes_untouched"], t["pods_evicted"], t["vms_migrated"], t["vms_shut_down"])]
    if t["vm_moves"]:
        lines[0] = lines[0][:-1] + "; %d VM moves (minimum %d, %d avoidable)." % (
            t["vm_moves"], t["vm_moves_minimum"], t["vm_moves_avoidable"])
    for n in model["nodes"]:
        by_name = dict((p["name"], p) for p in n["phases"])
        phases = ", ".join("%s %s" % (name, human_duration(seconds_between(by_name[name]["start"], by_name[name]["end"])))
                           for name in PHASE_NAMES if name in by_name)
        line = "%s %s: %s (%s); %d pods evicted, %d VMs migrated, %d shut down" % (
            n["node"], n["status"], human_duration(n["seconds"]), phases, n["pods_evicted"], len(n["migrations"]),
            len(n["shut_down"]))
        if n["machine"]:
            line += "; machine: %s" % machine_summary.text(n["machine"])
        if n["error"]:
            line += "; error: %s" % n["error"]
        lines.append(line)
    for name in model["untouched"]:
        lines.append("%s not started" % name)
    if model["message"]:
        lines.append(model["message"])
    return lines
