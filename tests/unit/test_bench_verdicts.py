"""The benchmark's verdicts on the no-op module runs (bench/report.py), measured or not."""

from bench import report


def test_noop_runs_not_measured_give_no_verdict():
    """``python -m bench --noop-iterations 0`` records no samples: no verdict, rather than a crash when the results
    are written."""
    for noop in (None, {}, {"samples": {}}, {"samples": {"ping": [], "node_labeller_noop": []}, "errors": {}}):
        assert report._noop_verdicts(noop) == []


def test_noop_runs_are_judged_against_ping():
    noop = {"samples": {"ping": [1.0, 1.2, 1.1], "fast": [1.3, 1.4, 1.2], "slow": [2.0, 2.1, 2.2]}, "errors": {}}
    verdicts = dict((v["target"], v["met"]) for v in report._noop_verdicts(noop))
    assert verdicts == {"no-op fast: <= 0.3 s over ping": True, "no-op slow: <= 0.3 s over ping": False}
