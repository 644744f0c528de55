# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance report (model.py) rendered as Markdown."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import summary as machine_summary
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report.model import (
    PHASE_LABELS,
    PHASE_NAMES,
    _vm_name,
    human_duration,
    seconds_between,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import format_seconds


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
    if any(len(batch) > 1 for batch in model["batches"]):
        facts.append(("Batches (in maintenance together)", ", then ".join(" + ".join(b) for b in model["batches"])))
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
    if n["machine"]:
        details.append("- machine (%s): %s" % (n["machine"].get("road"), _md(machine_summary.text(n["machine"]))))
        for action in n["machine"].get("actions") or []:
            details.append("  - %s: %s" % (_md(action.get("action")), human_duration(action.get("seconds"))))
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
