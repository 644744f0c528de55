"""The reliability figures: faults injected / survived, bad inputs / clean errors, PDB
violations, VMs lost.

Tests record one figure per case while they run (``tests/output/reliability/*.json``):
a case is written as attempted when it starts and as passed at its end, so a test that
fails half-way still counts as injected but not survived. Running this file renders
the table from those records::

    python tests/integration/reliability.py      # or: make reliability-report

and writes ``tests/output/reliability.json`` and ``tests/output/reliability.md``.
"""

import datetime
import glob
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTPUT = os.path.join(REPO, "tests", "output")
RECORDS = os.path.join(OUTPUT, "reliability")

FAULT = "fault"
BAD_INPUT = "bad_input"

# One sentence: no line break, no Python traceback, ends like a sentence, not a wall of text
# (a sentence listing every blocker of a node can be long).
MAX_SENTENCE = 1500
# ansible-core's own argument checks answer in its words, without a full stop.
ANSIBLE_ARGUMENT_ERRORS = ("value of ", "missing required arguments", "parameters are mutually exclusive",
                           "one of the following is required", "Unsupported parameters", "Validation of arguments",
                           "argument ")


def _path(kind, name):
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150]
    return os.path.join(RECORDS, "%s--%s.json" % (kind, safe))


class Figure:
    """One case of the table. ``note()`` adds figures; ``passed()`` marks it survived / clean."""

    def __init__(self, kind, name, group=None, **figures):
        self.data = {"kind": kind, "name": name, "group": group or "", "ok": False,
                     "pdb_violations": 0, "vms_lost": 0}
        self.data.update(figures)
        self._write()

    def note(self, **figures):
        self.data.update(figures)
        self._write()
        return self

    def passed(self, **figures):
        self.data.update(figures)
        self.data["ok"] = True
        self._write()

    def failed(self, **figures):
        """Take a pass back (a later check of the same case failed)."""
        self.data.update(figures)
        self.data["ok"] = False
        self._write()

    def _write(self):
        os.makedirs(RECORDS, exist_ok=True)
        self.data["recorded_at"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = _path(self.data["kind"], self.data["name"])
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.data, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)


def fault(name, group=None):
    return Figure(FAULT, name, group)


def bad_input(name, group=None):
    return Figure(BAD_INPUT, name, group)


# -- what a clean error is -----------------------------------------------------------------

def clean_error_problems(result, names=(), rc=None):
    """Why a failed module/playbook result is not one clean sentence ([] when it is).

    ``names``: strings the sentence must mention (the object at fault).
    """
    problems = []
    if rc is not None and rc == 0:
        problems.append("exit status 0")
    if not result.get("failed"):
        problems.append("the task did not fail")
    msg = result.get("msg")
    if not isinstance(msg, str) or not msg.strip():
        return problems + ["no msg"]
    text = msg.strip()
    if text.startswith("Validation of arguments failed:"):
        text = " ".join(text.split())  # ansible-core's role argument check: its heading, then its sentence
    if "\n" in text:
        problems.append("msg spans several lines")
    exception = str(result.get("exception") or "")
    if "Traceback" in text or "File \"" in text or "Traceback" in exception or "File \"" in exception \
            or result.get("module_stderr"):
        problems.append("a Python traceback")
    if len(text) > MAX_SENTENCE:
        problems.append("msg is %d characters long" % len(text))
    if text.count(text[:40]) > 1:
        problems.append("msg repeats itself")
    if not text.rstrip(")").endswith((".", "!", "?", ".'", '."')) and not text.startswith(ANSIBLE_ARGUMENT_ERRORS) \
            and "found in " not in text:
        problems.append("msg does not end like a sentence")
    for name in names:
        if name not in text:
            problems.append("msg does not name %r" % name)
    return problems


# -- the table ------------------------------------------------------------------------------

def load_records(directory=RECORDS):
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as handle:
            try:
                records.append(json.load(handle))
            except ValueError:
                continue
    return records


def summarize(records):
    faults = [r for r in records if r.get("kind") == FAULT]
    bad = [r for r in records if r.get("kind") == BAD_INPUT]
    return {
        "faults_injected": len(faults),
        "faults_survived": sum(1 for r in faults if r.get("ok")),
        "bad_inputs": len(bad),
        "clean_errors": sum(1 for r in bad if r.get("ok")),
        "pdb_violations": sum(int(r.get("pdb_violations") or 0) for r in records),
        "vms_lost": sum(int(r.get("vms_lost") or 0) for r in records),
    }


def markdown(summary, records):
    lines = [
        "| figure | value |",
        "|---|---|",
        "| faults injected | %d |" % summary["faults_injected"],
        "| faults survived | %d |" % summary["faults_survived"],
        "| bad inputs | %d |" % summary["bad_inputs"],
        "| clean one-sentence errors, nothing changed | %d |" % summary["clean_errors"],
        "| PodDisruptionBudget violations | %d |" % summary["pdb_violations"],
        "| VMs lost | %d |" % summary["vms_lost"],
        "",
    ]
    faults = [r for r in records if r.get("kind") == FAULT]
    if faults:
        lines += ["| fault | survived | PDB violations | VMs lost |", "|---|---|---|---|"]
        for r in sorted(faults, key=lambda r: (r.get("group") or "", r["name"])):
            lines.append("| %s | %s | %d | %d |" % (
                r["name"], "yes" if r.get("ok") else "NO", int(r.get("pdb_violations") or 0),
                int(r.get("vms_lost") or 0)))
        lines.append("")
    bad = [r for r in records if r.get("kind") == BAD_INPUT]
    if bad:
        groups = {}
        for r in bad:
            group = groups.setdefault(r.get("group") or "other", [0, 0])
            group[0] += 1
            group[1] += 1 if r.get("ok") else 0
        lines += ["| bad inputs of | cases | clean errors |", "|---|---|---|"]
        for name in sorted(groups):
            lines.append("| %s | %d | %d |" % (name, groups[name][0], groups[name][1]))
        failed = sorted(r["name"] for r in bad if not r.get("ok"))
        if failed:
            lines += ["", "Not clean: " + ", ".join(failed)]
        lines.append("")
    return "\n".join(lines)


def render(directory=RECORDS, output=OUTPUT):
    records = load_records(directory)
    summary = summarize(records)
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "reliability.json"), "w") as handle:
        json.dump({"summary": summary, "cases": records}, handle, indent=1, sort_keys=True)
    text = markdown(summary, records)
    with open(os.path.join(output, "reliability.md"), "w") as handle:
        handle.write(text)
    return summary, text


def main():
    summary, text = render()
    print(text)
    if not summary["faults_injected"] and not summary["bad_inputs"]:
        print("No records in %s: run the reliability tests first (make reliability-report)." %
              os.path.relpath(RECORDS, REPO), file=sys.stderr)
        return 1
    ok = (summary["faults_injected"] == summary["faults_survived"] and summary["bad_inputs"] == summary["clean_errors"]
          and summary["pdb_violations"] == 0 and summary["vms_lost"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
