"""A one-iteration smoke of the benchmark harness (bench/), so `make bench` keeps working.

One tiny scenario (4 pods under PDBs and one VM) per peer, on the session's lab. Checks
that each run is prepared, measured, accounted from the audit log, judged for
correctness and summarised; never how fast anything is.
"""

import pytest

from bench import peers, report, scenarios
from bench.context import Context

SMOKE = scenarios.SMOKE_SCENARIO


@pytest.fixture(scope="module")
def ctx(lab):
    context = Context(lab.state_dir, timeout=120)
    yield context
    scenarios.reset(context.kube, context.workers)


def _peer(key):
    # The operator is built from its Go module on first use (about a minute, then cached).
    for peer in peers.all_peers(nmo_build=True):
        if peer.key == key:
            return peer
    raise KeyError(key)


def _run(ctx, peer):
    try:
        peer.prepare(ctx.env)
    except peers.Unavailable as e:
        pytest.fail(f"{peer.label} could not be prepared: {e}")
    try:
        return scenarios.run_drain(ctx, SMOKE, peer, 0, ctx.workers[0])
    finally:
        peer.close(ctx.env)


def _check_record(record, peer):
    assert record["peer"] == peer.key
    assert record["wall_seconds"] > 0
    assert record["prepare_seconds"] >= 0
    assert isinstance(record["requests_by_client"], dict)
    assert set(record["correctness"]) >= {"all_pods_gone", "pdb_violations", "vms_running", "correct"}
    summary = report.summarize([record], {peer.key: peer.label})
    assert summary[SMOKE.key][peer.key]["iterations"] == 1
    assert "| peer |" in report.markdown({"meta": {"command": "smoke", "date": "-", "machine": "-",
                                                   "iterations": 1}, "summary": summary, "verdicts": []})


@pytest.mark.parametrize("key", ["kubectl", "ours_drain", "ours_cr"])
def test_peer_drains_the_smoke_scenario(ctx, key):
    peer = _peer(key)
    record = _run(ctx, peer)
    _check_record(record, peer)
    assert record["ok"], record["error"]
    assert record["requests"] > 0, record["requests_by_client"]
    assert record["correctness"]["correct"], record["correctness"]


def test_k8s_drain_is_recorded_with_its_error(ctx):
    """k8s_drain gives up on the first 429 of a PDB: the harness records that, it does not crash."""
    peer = _peer("k8s_drain")
    record = _run(ctx, peer)
    _check_record(record, peer)
    assert not str(record.get("error") or "").startswith("harness:"), record.get("traceback")
    if not record["ok"]:
        assert record["error"]


def test_node_maintenance_operator(ctx):
    """The medik8s operator, built once into the bench cache, drains the smoke scenario."""
    peer = _peer("nmo")
    record = _run(ctx, peer)
    _check_record(record, peer)
    assert not str(record.get("error") or "").startswith("harness:"), record.get("traceback")
    assert record["ok"], record["error"]
    assert record["correctness"]["correct"], record["correctness"]
