# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance report: one normalised model rendered as JSON, Markdown and an SVG timeline.

Input is what the rolling_maintenance role records: a ``run`` (start, end, status, message,
the planned node order, what remains) and one record per node that was started, holding
the start and end of each phase, the pods evicted and the VMs migrated or shut down. All
durations, totals and the pictures are computed here, in one place, so the three outputs
always agree.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.timeutil import format_seconds, parse_time_utc, utc_now

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
    avoidable. Nodes outside the run count as done.
    """
    planned = set(planned or [])
    per_vm = {}
    landed = {}  # VM -> (node still to do it landed on, forced, nodes done then)
    avoidable = []
    done = []
    for n in nodes:
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
            done.append(n["node"])
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
    }


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
        "untouched": model["untouched"],
        "remaining": model["remaining"],
        "resume": model["resume"],
        "totals": model["totals"],
        "moves": model["moves"],
        "nodes": [node(n) for n in model["nodes"]],
    }


# -- Markdown ------------------------------------------------------------------------------


def _md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_facts(model):
    t = model["totals"]
    facts = [
        ("Started", format_seconds(model["started"]) or "-"),
        ("Finished", format_seconds(model["finished"]) or "-"),
        ("Duration", human_duration(model["seconds"])),
        ("Nodes", "%d planned, %d done, %d failed, %d untouched" % (
            t["nodes_planned"], t["nodes_done"], t["nodes_failed"], t["nodes_untouched"])),
        ("Pods evicted", t["pods_evicted"]),
        ("VMs", "%d migrated, %d shut down, %d not running after" % (
            t["vms_migrated"], t["vms_shut_down"], t["vms_not_running"])),
    ]
    moves = model["moves"]
    if moves["total"]:
        facts.append(("VM moves", "%d (minimum for this run %d, avoidable %d)" % (
            moves["total"], moves["minimum"], moves["avoidable"])))
    if model["cluster"]:
        facts.insert(0, ("Cluster", model["cluster"]))
    if model["selection"]:
        facts.append(("Selection", model["selection"]))
    for key, value in sorted((model["policy"] or {}).items()):
        facts.append(("Policy: %s" % key, value))
    if model["lock"]:
        facts.append(("Lock", model["lock"]))
    return ["| | |", "|---|---|"] + ["| %s | %s |" % (_md(k), _md(v)) for k, v in facts] + [""]


def _md_node_row(n):
    by_name = dict((p["name"], p) for p in n["phases"])
    cells = [human_duration(seconds_between(by_name[p]["start"], by_name[p]["end"])) if p in by_name else "-"
             for p in PHASE_NAMES]
    return "| %s | %s | %s | %s | %s | %s | %d | %d | %d |" % (
        n["index"] or "", _md(n["node"]), n["status"].upper() if n["status"] == "failed" else n["status"],
        n["started"].strftime("%H:%M:%S") if n["started"] else "-", human_duration(n["seconds"]) + (
            " (predicted %s)" % human_duration(n["predicted_seconds"]) if n["predicted_seconds"] is not None else ""),
        " | ".join(cells), n["pods_evicted"], len(n["migrations"]), len(n["shut_down"]))


def _md_node_table(model):
    lines = ["## Nodes", "",
             "| # | Node | Status | Start | Total | " + " | ".join(PHASE_LABELS[p].split(" (")[0] for p in PHASE_NAMES)
             + " | Pods evicted | VMs migrated | VMs shut down |",
             "|---" * (8 + len(PHASE_NAMES)) + "|"]
    lines += [_md_node_row(n) for n in model["nodes"]]
    for name in model["untouched"]:
        lines.append("| | %s | not started | - | - | %s | 0 | 0 | 0 |" % (_md(name), " | ".join("-" for _phase in PHASE_NAMES)))
    lines.append("")
    return lines


def _md_node_details(n):
    details = []
    if n["error"]:
        details.append("- **Failed:** %s" % _md(n["error"]))
    for m in n["migrations"]:
        details.append("- migrated %s: %s -> %s%s" % (
            _vm_name(m), m["source"] or n["node"], m["target"] or "?",
            " in %s" % human_duration(m["seconds"]) if m["seconds"] is not None else ""))
    for vm in n["shut_down"]:
        details.append("- shut down %s%s" % (_vm_name(vm), (" (%s)" % vm["reason"]) if vm.get("reason") else ""))
    for vm in n["blocked"]:
        details.append("- blocked by %s: %s" % (_vm_name(vm), vm.get("reason") or "not migratable"))
    for vm in n["not_running"]:
        details.append("- **not running after maintenance:** %s" % _md(_vm_name(vm) if isinstance(vm, dict) else vm))
    if not details:
        return []
    return ["### %s" % n["node"], ""] + details + [""]


def _md_moves(moves):
    if not moves["total"]:
        return []
    lines = ["## VM moves", "", "| VM | Moves |", "|---|---|"]
    lines += ["| %s | %d |" % (_md(vm), count) for vm, count in moves["per_vm"].items()] + [""]
    lines += ["- avoidable: %s moved again because %s" % (_md(a["vm"]), _md(a["reason"]))
              for a in moves["avoidable_moves"]]
    lines += ["%d moves, the minimum for this run is %d: %s." % (
        moves["total"], moves["minimum"],
        "no avoidable move" if not moves["avoidable"] else "%d avoidable" % moves["avoidable"]), ""]
    return lines


def _md_remains(model):
    if not (model["remaining"] or model["resume"]):
        return []
    lines = ["## What remains", ""]
    if model["remaining"]:
        lines += [model["remaining"], ""]
    if model["resume"]:
        lines += ["Resume with:", "", "```", model["resume"], "```", ""]
    return lines


def to_markdown(model, timeline_file=None):
    lines = ["# %s: %s" % (model["title"], model["status"]), ""]
    if model["message"]:
        lines += [model["message"], ""]
    lines += _md_facts(model)
    if timeline_file:
        lines += ["![Timeline](%s)" % timeline_file, ""]
    lines += _md_node_table(model)
    for n in model["nodes"]:
        lines += _md_node_details(n)
    lines += _md_moves(model["moves"])
    lines += _md_remains(model)
    return "\n".join(lines)


# -- SVG timeline --------------------------------------------------------------------------


def _esc(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))


def _tick_step(span):
    for step in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600):
        if span / step <= 10:
            return step
    return 43200


def _count(number, noun):
    return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def _clock_label(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return "%d:%02d:%02d" % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)
    return "%d:%02d" % (seconds // 60, seconds % 60)


class _Timeline(object):
    """The geometry of the timeline: where the plot is and where a moment falls on it."""

    width, left, right, top, row_h, bar_h = 1160, 150, 280, 86, 60, 24

    def __init__(self, model, rows):
        nodes = model["nodes"]
        preflight = model["preflight"]
        starts = [p["start"] for n in nodes for p in n["phases"]] + [n["started"] for n in nodes if n["started"]]
        starts += [preflight["start"]] if preflight["start"] else []
        ends = [p["end"] or p["start"] for n in nodes for p in n["phases"]] + [n["finished"] for n in nodes if n["finished"]]
        ends += [m["end"] for n in nodes for m in n["migrations"] if m["end"]]
        self.origin = min(starts) if starts else (model["started"] or utc_now())
        self.last = max(ends) if ends else self.origin
        self.span = max(10.0, (self.last - self.origin).total_seconds())
        self.rows = len(rows)
        self.plot_w = self.width - self.left - self.right
        self.legend_top = self.top + max(1, len(rows)) * self.row_h + 34
        self.height = self.legend_top + 104
        self.scale = self.plot_w / self.span

    def x(self, moment):
        return self.left + max(0.0, min(self.span, (moment - self.origin).total_seconds())) * self.scale


def _svg_rows(model):
    rows = [("node", n) for n in model["nodes"]] + [("untouched", name) for name in model["untouched"]]
    preflight = model["preflight"]
    if preflight["start"] and preflight["end"]:
        rows.insert(0, ("preflight", preflight))
    return rows


def _svg_heading(model, g):
    width, height = g.width, g.height
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
        'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">' % (width, height, width, height),
        '<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (width, height),
    ]
    t = model["totals"]
    status = model["status"]
    title_colour = FAILED_COLOUR if status == "failed" else "#222222"
    out.append('<text x="20" y="30" font-size="19" font-weight="bold" fill="%s">%s - %s</text>' % (
        title_colour, _esc(model["title"]), _esc(status)))
    subtitle = "started %s  |  %s total  |  %d/%d nodes done  |  %d pods evicted  |  %d VMs migrated, %d shut down" % (
        format_seconds(model["started"]) or "-", human_duration(model["seconds"]), t["nodes_done"], t["nodes_planned"],
        t["pods_evicted"], t["vms_migrated"], t["vms_shut_down"])
    out.append('<text x="20" y="52" fill="#555555">%s</text>' % _esc(subtitle))
    return out


def _svg_axis(g):
    """Time axis with a grid."""
    left, top = g.left, g.top
    step = _tick_step(g.span)
    axis_y = top - 10
    out = ['<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999999"/>' % (left, axis_y, left + g.plot_w, axis_y)]
    tick = 0
    while tick <= g.span + 0.001:
        tx = left + tick * g.scale
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e8e8e8"/>' % (
            tx, axis_y, tx, top + g.rows * g.row_h))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="#666666">%s</text>' % (
            tx, axis_y - 6, _clock_label(tick)))
        tick += step
    out.append('<text x="%d" y="%d" font-size="11" fill="#666666" text-anchor="end">elapsed</text>' % (
        left - 22, axis_y - 6))
    return out


def _svg_preflight_row(item, g, bar_y):
    x1, x2 = g.x(item["start"]), g.x(item["end"])
    return [
        '<text x="%d" y="%.1f" text-anchor="end" fill="#555555">preflight + lock</text>' % (g.left - 10, bar_y + 17),
        '<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>' % (
            x1, bar_y, max(2.0, x2 - x1), g.bar_h, PREFLIGHT_COLOUR),
        '<text x="%d" y="%.1f" fill="#444444" font-size="12">%s</text>' % (
            g.left + g.plot_w + 14, bar_y + 16, human_duration(seconds_between(item["start"], item["end"]))),
    ]


def _svg_untouched_row(name, g, bar_y):
    return [
        '<text x="%d" y="%.1f" text-anchor="end" fill="#999999">%s</text>' % (g.left - 10, bar_y + 17, _esc(name)),
        '<rect x="%d" y="%.1f" width="%d" height="%d" fill="%s" rx="3"/>' % (
            g.left, bar_y, g.plot_w, g.bar_h, UNTOUCHED_COLOUR),
        '<text x="%d" y="%.1f" fill="#888888" font-size="12">not started</text>' % (g.left + 8, bar_y + 16),
    ]


def _svg_phases(n, g, bar_y):
    out = []
    for p in n["phases"]:
        x1 = g.x(p["start"])
        x2 = g.x(p["end"] or g.last)
        w = max(2.0, x2 - x1)
        stroke = ' stroke="%s" stroke-width="3"' % FAILED_COLOUR if p["failed"] else ""
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"%s><title>%s: %s</title></rect>' % (
            x1, bar_y, w, g.bar_h, PHASE_COLOURS[p["name"]], stroke, _esc(PHASE_LABELS[p["name"]]),
            human_duration(seconds_between(p["start"], p["end"]))))
        if w > 36:
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#ffffff">%s</text>' % (
                x1 + w / 2.0, bar_y + 16, human_duration(seconds_between(p["start"], p["end"]))))
    return out


def _svg_migrations(n, g, strip_y):
    # Under the bar, one thin lane per migration: a line while it ran, a dot when it completed.
    out = []
    lanes = 5
    timed = [m for m in n["migrations"] if m["end"]]
    for k, m in enumerate(timed):
        ly = strip_y + (k % lanes) * 4
        mx = g.x(m["end"])
        if m["start"]:
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" opacity="0.6"/>'
                       % (g.x(m["start"]), ly, mx, ly, MIGRATION_COLOUR))
        out.append('<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s"><title>migrated %s to %s</title></circle>' % (
            mx, ly, MIGRATION_COLOUR, _esc(_vm_name(m)), _esc(m["target"] or "?")))
    return out


def _svg_shutdowns(n, g, strip_y):
    drain = [p for p in n["phases"] if p["name"] == "drain"]
    if not (n["shut_down"] and drain):
        return []
    out = []
    sx = g.x(drain[0]["end"] or g.last)
    for k, vm in enumerate(n["shut_down"]):
        cx, cy = sx - 5 - 11 * k, strip_y + 8
        out.append('<path d="M %.1f %.1f l 7 7 m 0 -7 l -7 7" stroke="%s" stroke-width="2">'
                   '<title>shut down %s</title></path>' % (cx - 3.5, cy - 3.5, SHUTDOWN_COLOUR, _esc(_vm_name(vm))))
    return out


def _svg_node_summary(n, g, bar_y, label_colour):
    first = human_duration(n["seconds"])
    if n["status"] == "failed":
        first = "FAILED after %s" % first
    second = "%s, %s migrated" % (_count(n["pods_evicted"], "pod"), _count(len(n["migrations"]), "VM"))
    if n["shut_down"]:
        second += ", %d shut down" % len(n["shut_down"])
    tx = g.left + g.plot_w + 14
    return [
        '<text x="%d" y="%.1f" fill="%s" font-size="13" font-weight="bold">%s</text>' % (
            tx, bar_y + 12, label_colour, _esc(first)),
        '<text x="%d" y="%.1f" fill="#444444" font-size="12">%s</text>' % (tx, bar_y + 29, _esc(second)),
    ]


def _svg_node_row(n, g, bar_y):
    label_colour = FAILED_COLOUR if n["status"] == "failed" else "#222222"
    out = ['<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-weight="bold">%s</text>' % (
        g.left - 10, bar_y + 17, label_colour, _esc(n["node"]))]
    out += _svg_phases(n, g, bar_y)
    strip_y = bar_y + g.bar_h + 5
    out += _svg_migrations(n, g, strip_y)
    out += _svg_shutdowns(n, g, strip_y)
    out += _svg_node_summary(n, g, bar_y, label_colour)
    return out


_SVG_ROWS = {"preflight": _svg_preflight_row, "untouched": _svg_untouched_row, "node": _svg_node_row}


def _svg_legend_mark(shape, colour, ix, iy):
    if shape == "box":
        return ['<rect x="%d" y="%d" width="16" height="12" fill="%s" rx="2"/>' % (ix, iy, colour)]
    if shape == "failed":
        return ['<rect x="%d" y="%d" width="16" height="12" fill="#ffffff" stroke="%s" stroke-width="3"/>'
                % (ix, iy, colour)]
    if shape == "migration":
        return ['<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" opacity="0.6"/>'
                % (ix, iy + 6, ix + 14, iy + 6, colour),
                '<circle cx="%d" cy="%d" r="2.6" fill="%s"/>' % (ix + 14, iy + 6, colour)]
    return ['<path d="M %d %d l 8 8 m 0 -8 l -8 8" stroke="%s" stroke-width="2"/>' % (ix + 4, iy + 2, colour)]


def _svg_legend(g):
    lx = 20
    ly = g.legend_top
    out = ['<text x="%d" y="%d" font-weight="bold" fill="#333333">Legend</text>' % (lx, ly)]
    items = [(PHASE_COLOURS[name], PHASE_LABELS[name], "box") for name in PHASE_NAMES]
    items += [(MIGRATION_COLOUR, "VM live migration (line: running, dot: done)", "migration"),
              (SHUTDOWN_COLOUR, "VM shut down by the drain", "cross"),
              (FAILED_COLOUR, "phase that failed", "failed"),
              (UNTOUCHED_COLOUR, "node not started", "box"),
              (PREFLIGHT_COLOUR, "preflight of all nodes and cluster lock", "box")]
    col_w, per_row = 355, 3
    for k, (colour, label, shape) in enumerate(items):
        ix = lx + (k % per_row) * col_w
        iy = ly + 14 + (k // per_row) * 20
        out += _svg_legend_mark(shape, colour, ix, iy)
        out.append('<text x="%d" y="%d" font-size="12" fill="#333333">%s</text>' % (ix + 22, iy + 11, _esc(label)))
    return out


def to_svg(model):
    """One row per node: coloured phases, migrations as ticks, shut-downs as crosses, a legend."""
    rows = _svg_rows(model)
    g = _Timeline(model, rows)
    out = _svg_heading(model, g)
    out += _svg_axis(g)
    for i, (kind, item) in enumerate(rows):
        y = g.top + i * g.row_h
        if i % 2:
            out.append('<rect x="0" y="%d" width="%d" height="%d" fill="#f7f7f7"/>' % (y, g.width, g.row_h))
        out += _SVG_ROWS[kind](item, g, y + 8)
    out += _svg_legend(g)
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- summary and files ---------------------------------------------------------------------


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
        if n["error"]:
            line += "; error: %s" % n["error"]
        lines.append(line)
    for name in model["untouched"]:
        lines.append("%s not started" % name)
    if model["message"]:
        lines.append(model["message"])
    return lines


def _write(path, text):
    """Write atomically, so a reader never sees half a report."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".report-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write(run, records, directory, formats=("json", "markdown", "svg"), basename="report"):
    """Render and write the report files; returns (files, model, json data)."""
    model = build(run, records)
    data = to_json_data(model)
    directory = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(directory, exist_ok=True)
    files = {}
    if "svg" in formats:
        files["svg"] = os.path.join(directory, "%s-timeline.svg" % basename)
        _write(files["svg"], to_svg(model))
    if "json" in formats:
        files["json"] = os.path.join(directory, "%s.json" % basename)
        _write(files["json"], json.dumps(data, indent=2, sort_keys=False) + "\n")
    if "markdown" in formats:
        files["markdown"] = os.path.join(directory, "%s.md" % basename)
        timeline = os.path.basename(files["svg"]) if "svg" in files else None
        _write(files["markdown"], to_markdown(model, timeline))
    return files, model, data
