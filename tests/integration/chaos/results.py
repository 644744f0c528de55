"""The seeds of a chaos session and its results file (JSON and Markdown), one writer for a session on one lab and
for the lanes of one spread over several (lanes.py)."""

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import runs  # noqa: E402  (tests/integration helpers)

OUTPUT = os.path.join(runs.REPO, os.environ.get("CHAOS_OUTPUT") or os.path.join("tests", "output", "chaos"))


def seeds():
    """The session's seeds: ``CHAOS_SEED`` (``<n>`` or ``<n>,<m>,...``), else ``CHAOS_RUNS`` (default 5) from
    ``CHAOS_FIRST_SEED`` (default 1)."""
    if os.environ.get("CHAOS_SEED"):
        return [int(seed) for seed in os.environ["CHAOS_SEED"].split(",")]
    first = int(os.environ.get("CHAOS_FIRST_SEED") or 1)
    return list(range(first, first + int(os.environ.get("CHAOS_RUNS") or 5)))


def write(records, output, lanes=1):
    """chaos.json and chaos.md of ``records`` (the runs' records, in seed order) under ``output``."""
    records = sorted(records, key=lambda record: record["seed"])
    os.makedirs(output, exist_ok=True)
    summary = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs": len(records),
        "lanes": lanes,
        "violations": sum(len(r["violations"]) for r in records),
        "faults": sum(len(r["faults"]) for r in records),
        "records": records,
    }
    with open(os.path.join(output, "chaos.json"), "w") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
    lines = ["# Chaos session %s" % summary["when"], "",
             "%d runs, %d faults injected, %d invariant violations%s." % (
                 summary["runs"], summary["faults"], summary["violations"],
                 " (%d labs side by side)" % lanes if lanes > 1 else ""), "",
             "| seed | nodes | non_migratable | faults (trigger -> fault) | runs to finish | violations |",
             "|---|---|---|---|---|---|"]
    for record in records:
        nodes = len(record.get("nodes") or ()) or 2
        shape = "%d, %d at a time, by zone" % (nodes, record["max_parallel"]) if record.get("failure_domains") else "%d" % nodes
        lines.append("| %d | %s | %s | %s | %d | %s |" % (
            record["seed"], shape, "shutdown" if record.get("non_migratable_shut_down") else "fail",
            "; ".join("%s -> %s" % (f["trigger"], f["fault"]) for f in record["faults"]) or "none",
            record["attempts"], "; ".join(record["violations"]) or "0"))
    with open(os.path.join(output, "chaos.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return summary


def read(output):
    """The records of the session written under ``output`` (none if it wrote nothing)."""
    path = os.path.join(output, "chaos.json")
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return json.load(handle)["records"]
