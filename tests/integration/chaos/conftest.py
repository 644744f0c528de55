"""Randomized chaos runs (``make chaos``): seeded rolling-maintenance runs with faults drawn at random,
checked by an observer of its own (tests/integration/safety.py). ``make test`` runs a short session of
fixed seeds (``make test-chaos``); the long one is ``make chaos CHAOS_RUNS=50``.

``CHAOS_SEED=<n>`` replays one run (``<n>,<m>,...`` several); otherwise ``CHAOS_RUNS`` runs (default 5) from ``CHAOS_FIRST_SEED``
(default 1). Results: tests/output/chaos/chaos.{json,md}.
"""

import datetime
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import runs  # noqa: E402  (tests/integration helpers)

OUTPUT = os.path.join(runs.REPO, os.environ.get("CHAOS_OUTPUT") or os.path.join("tests", "output", "chaos"))


def seeds():
    if os.environ.get("CHAOS_SEED"):
        return [int(seed) for seed in os.environ["CHAOS_SEED"].split(",")]
    first = int(os.environ.get("CHAOS_FIRST_SEED") or 1)
    return list(range(first, first + int(os.environ.get("CHAOS_RUNS") or 5)))


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds(), ids=lambda s: "seed-%d" % s)


@pytest.fixture(scope="session", autouse=True)
def machines_through_their_bmcs(lab, k8s):
    """The runs restart machines through their BMCs (the lab's bmc-inventory.yml) and cut their power there: the
    BareMetalHosts ``lab up`` makes are detached and deleted first, as an administrator does before driving a
    Metal3 host's BMC (else the operator would power a machine back as ``spec.online`` says), and made again at
    the end."""
    from lab import metal3
    from lab.machines import bmc as lab_bmc

    bmcs = lab_bmc.load(lab.paths)
    for node in sorted(bmcs):
        metal3.release_host(k8s, node)
    yield
    for node in sorted(bmcs):
        metal3.restore_host(k8s, bmcs, node)


@pytest.fixture(scope="session")
def chaos_results():
    """Every run's record; written to tests/output/chaos/ when the session ends."""
    records = []
    yield records
    os.makedirs(OUTPUT, exist_ok=True)
    summary = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs": len(records),
        "violations": sum(len(r["violations"]) for r in records),
        "faults": sum(len(r["faults"]) for r in records),
        "records": records,
    }
    with open(os.path.join(OUTPUT, "chaos.json"), "w") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
    lines = ["# Chaos session %s" % summary["when"], "",
             "%d runs, %d faults injected, %d invariant violations." % (
                 summary["runs"], summary["faults"], summary["violations"]), "",
             "| seed | nodes | faults (trigger -> fault) | runs to finish | violations |", "|---|---|---|---|---|"]
    for record in records:
        nodes = len(record.get("nodes") or ()) or 2
        shape = "%d, %d at a time, by zone" % (nodes, record["max_parallel"]) if record.get("failure_domains") else "%d" % nodes
        lines.append("| %d | %s | %s | %d | %s |" % (
            record["seed"], shape,
            "; ".join("%s -> %s" % (f["trigger"], f["fault"]) for f in record["faults"]) or "none",
            record["attempts"], "; ".join(record["violations"]) or "0"))
    with open(os.path.join(OUTPUT, "chaos.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
