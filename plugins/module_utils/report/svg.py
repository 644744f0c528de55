# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance report (model.py) rendered as an SVG timeline: one row per node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import summary as machine_summary
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report.model import (
    FAILED_COLOUR,
    MIGRATION_COLOUR,
    PHASE_COLOURS,
    PHASE_LABELS,
    PHASE_NAMES,
    PREFLIGHT_COLOUR,
    SHUTDOWN_COLOUR,
    UNTOUCHED_COLOUR,
    _vm_name,
    human_duration,
    seconds_between,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import (
    format_seconds,
    parse_time_utc,
    utc_now,
)

MACHINE_COLOUR = "#222222"


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


def _svg_machine_actions(n, g, bar_y):
    # Over the top of the bar, a dark stripe while something was done to the machine (firmware, BIOS, restart).
    out = []
    for action in (n["machine"] or {}).get("actions") or []:
        start = parse_time_utc(action.get("started"))
        if start is None:
            continue
        x1 = g.x(start)
        w = max(2.0, g.scale * float(action.get("seconds") or 0))
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="5" fill="%s"><title>machine: %s, %s</title></rect>' % (
            x1, bar_y - 6, w, MACHINE_COLOUR, _esc(action.get("action")), human_duration(action.get("seconds"))))
    return out


def _svg_node_summary(n, g, bar_y, label_colour):
    first = human_duration(n["seconds"])
    if n["status"] == "failed":
        first = "FAILED after %s" % first
    second = "%s, %s migrated" % (_count(n["pods_evicted"], "pod"), _count(len(n["migrations"]), "VM"))
    if n["shut_down"]:
        second += ", %d shut down" % len(n["shut_down"])
    tx = g.left + g.plot_w + 14
    lines = [
        '<text x="%d" y="%.1f" fill="%s" font-size="13" font-weight="bold">%s</text>' % (
            tx, bar_y + 12, label_colour, _esc(first)),
        '<text x="%d" y="%.1f" fill="#444444" font-size="12">%s</text>' % (tx, bar_y + 29, _esc(second)),
    ]
    if n["machine"]:
        lines.append('<text x="%d" y="%.1f" fill="#444444" font-size="11">%s</text>' % (
            tx, bar_y + 45, _esc("machine: " + machine_summary.text(n["machine"]))))
    return lines


def _svg_node_row(n, g, bar_y):
    label_colour = FAILED_COLOUR if n["status"] == "failed" else "#222222"
    out = ['<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-weight="bold">%s</text>' % (
        g.left - 10, bar_y + 17, label_colour, _esc(n["node"]))]
    out += _svg_phases(n, g, bar_y)
    strip_y = bar_y + g.bar_h + 5
    out += _svg_migrations(n, g, strip_y)
    out += _svg_shutdowns(n, g, strip_y)
    out += _svg_machine_actions(n, g, bar_y)
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
