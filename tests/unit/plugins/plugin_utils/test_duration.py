"""Predicting a node's duration from the nodes a run has done, the window's verdict, and the start of a node."""

import datetime

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils import duration
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.node_fits_window import node_fits_window
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.run_start import run_start

GI = 2 ** 30
T0 = datetime.datetime(2026, 11, 28, 22, 0, tzinfo=datetime.timezone.utc)


def at(seconds):
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(node, start, drain, total, status="done"):
    return {"node": node, "status": status, "started": at(start), "finished": at(start + total),
            "phases": {"drain": {"start": at(start), "end": at(start + drain)}}}


def detail(name, *vms):
    return {"name": name, "plan": {"vms": [{"name": "vm-%d" % i, "outcome": outcome, "memory": memory}
                                           for i, (outcome, memory) in enumerate(vms)]}}


DETAILS = [
    detail("w1", ("migrate", 4 * GI), ("migrate", 4 * GI)),
    detail("w2", ("migrate", 16 * GI), ("restart_elsewhere", 64 * GI)),
    detail("w3"),
]


def test_nothing_to_predict_from_before_a_node_is_done():
    assert duration.predict([], DETAILS, "w1") is None
    failed = [record("w1", 0, 100, 200, status="failed")]
    assert duration.predict(failed, DETAILS, "w2") is None


def test_the_drain_scales_with_the_guest_memory_that_migrates():
    # w1 moved 8 GiB in 100 s; w2 migrates 16 GiB (its shut-down VM copies nothing): 200 s of drain.
    prediction = duration.predict([record("w1", 0, 100, 160)], DETAILS, "w2")
    assert prediction["drain_seconds"] == 200 and prediction["rest_seconds"] == 60
    assert prediction["seconds"] == 260 and prediction["memory"] == 16 * GI
    assert "16Gi of guest memory" in prediction["basis"] and "8Gi in 100 s" in prediction["basis"]


def test_the_rate_comes_only_from_drains_that_migrated_memory():
    # w3 moved no memory in its 1200 s drain (pods only): w2's 16 GiB are predicted at w1's rate, 200 s.
    records = [record("w3", 0, 1200, 1260), record("w1", 1300, 100, 160)]
    prediction = duration.predict(records, DETAILS, "w2")
    assert prediction["drain_seconds"] == 200, prediction
    assert "8Gi in 100 s" in prediction["basis"]


def test_a_node_without_migrations_takes_the_mean_drain():
    records = [record("w1", 0, 100, 160), record("w2", 200, 300, 340)]
    prediction = duration.predict(records, DETAILS, "w3")
    assert prediction["drain_seconds"] == 200 and prediction["rest_seconds"] == 50
    assert prediction["seconds"] == 250 and "mean drain" in prediction["basis"]


def test_the_window_verdict_compares_the_prediction_with_the_time_left():
    prediction = duration.predict([record("w1", 0, 100, 160)], DETAILS, "w2")  # 260 s
    window = {"open": True, "closes_at": at(600), "now": at(300)}
    assert duration.fits_window(prediction, window, "w2")["fits"]
    late = dict(window, now=at(400))  # 200 s left
    verdict = duration.fits_window(prediction, late, "w2")
    assert not verdict["fits"] and verdict["predicted_seconds"] == 260
    assert verdict["message"].startswith("Node w2 is not started: it is predicted to take 260 s (")
    assert "closes at %s, in 200 s." % at(600) in verdict["message"]


def test_no_window_or_no_prediction_always_fits():
    prediction = {"seconds": 10 ** 6, "basis": "x"}
    always_open = {"open": True, "closes_at": None, "now": at(0)}
    assert duration.fits_window(prediction, always_open, "w2")["fits"]
    assert duration.fits_window(None, {"open": True, "closes_at": at(1), "now": at(0)}, "w2")["fits"]


def test_the_filter_reads_the_run_state():
    state = {"records": [record("w1", 0, 100, 160)], "preflight": {"details": DETAILS}}
    verdict = node_fits_window(state, "w2", {"open": True, "closes_at": at(400), "now": at(200)})
    assert not verdict["fits"] and verdict["basis"].startswith("16Gi of guest memory")


def test_guest_memory_of_a_vmi():
    assert kubevirt.vmi_guest_memory({"status": {"memory": {"guestCurrent": "2Gi"}},
                                      "spec": {"domain": {"memory": {"guest": "1Gi"}}}}) == 2 * GI
    assert kubevirt.vmi_guest_memory({"spec": {"domain": {"memory": {"guest": "1Gi"},
                                                          "resources": {"requests": {"memory": "3Gi"}}}}}) == GI
    assert kubevirt.vmi_guest_memory({"spec": {"domain": {"resources": {"requests": {"memory": "512Mi"}}}}}) == GI // 2
    assert kubevirt.vmi_guest_memory({"spec": {}}) == 0


def test_the_report_shows_the_prediction_beside_the_real_duration():
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import model as report
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import markdown as report_markdown
    records = [dict(record("w1", 0, 100, 160), predicted_seconds=None),
               dict(record("w2", 200, 150, 230), predicted_seconds="260")]
    model = report.build({"nodes": ["w1", "w2"]}, records)
    data = report.to_json_data(model)
    assert [n["predicted_seconds"] for n in data["nodes"]] == [None, 260.0]
    rows = [line for line in report_markdown.to_markdown(model).splitlines() if "| w2 |" in line]
    assert rows and "3m50s (predicted 4m20s)" in rows[0], rows


def test_a_batch_drains_as_long_as_its_longest_drain_then_each_node_in_turn():
    records = [record("w1", 0, 100, 160)]  # 8 GiB in 100 s, 60 s for the rest of a node
    prediction = duration.predict_batch(records, DETAILS, ["w2", "w3"])
    # w2 drains 16 GiB (200 s), w3 nothing (the mean drain, 100 s): 200 s, then 60 s for each node.
    assert prediction["drain_seconds"] == 200 and prediction["rest_seconds"] == 120
    assert prediction["seconds"] == 320 and "longest drain of the 2 nodes" in prediction["basis"]
    assert duration.predict_batch([], DETAILS, ["w2", "w3"]) is None
    window = {"open": True, "closes_at": at(600), "now": at(400)}
    verdict = node_fits_window({"records": records, "preflight": {"details": DETAILS}}, ["w2", "w3"], window)
    assert not verdict["fits"] and verdict["predicted_seconds"] == 320
    assert verdict["message"].startswith("Nodes w2, w3 are not started: together they are predicted to take 320 s (")
    # A batch of one is a node.
    single = node_fits_window({"records": records, "preflight": {"details": DETAILS}}, ["w2"], window)
    assert single["message"].startswith("Node w2 is not started: it is predicted to take 260 s")


# run_start: whether the next node (or batch) starts, and the node's entry in flight.

RUN = {"records": [record("w1", 0, 100, 160)], "preflight": {"details": DETAILS}, "order": ["w1", "w2", "w3"],
       "stop": False}


def test_a_node_that_fits_starts_with_its_entry_in_flight():
    window = {"open": True, "closes_at": at(4000), "now": at(200)}
    current = run_start(RUN, "w2", window, at(200), host="host-2")
    assert current["go"] and current["window_stop"] is None
    assert (current["index"], current["total"], current["label"]) == (2, 3, "[2/3 w2]")
    assert (current["started"], current["phase"], current["phase_start"], current["phases"]) == (
        at(200), "drain", at(200), {})
    assert current["detail"]["name"] == "w2" and current["host"] == "host-2"
    assert current["predicted_seconds"] == node_fits_window(RUN, "w2", window)["predicted_seconds"]


def test_a_node_predicted_to_outlast_the_window_stops_the_run_with_the_reason():
    window = {"open": True, "closes_at": at(400), "now": at(200)}
    current = run_start(RUN, "w2", window, at(200))
    assert not current["go"]
    assert current["window_stop"]["message"].startswith("Node w2 is not started: it is predicted to take")
    assert current["window_stop"]["closes_at"] == at(400)


def test_a_closed_window_stops_the_run_as_it_is():
    window = {"open": False, "opens_at": at(9000), "now": at(200)}
    current = run_start(RUN, "w2", window, at(200))
    assert not current["go"] and current["window_stop"] == window


def test_after_the_run_stopped_no_node_starts_and_nothing_is_stopped_again():
    current = run_start(dict(RUN, stop=True), "w2", {"open": True}, at(200))
    assert not current["go"] and current["window_stop"] is None


def test_a_node_drained_with_its_batch_goes_on_whatever_the_window_and_keeps_the_batch_start():
    stopped = dict(RUN, stop=True)
    current = run_start(stopped, "w3", None, at(300), started=at(250), position=1)
    assert current["go"] and current["window_stop"] is None and current["predicted_seconds"] is None
    assert (current["index"], current["started"], current["phase_start"]) == (3, at(250), at(250))
    assert current["detail"] == {"name": "w3", "plan": {"vms": []}}
    unknown = run_start(RUN, "w9", None, at(300))
    assert unknown["detail"] == {"simulated": False}


def test_a_batch_gets_the_decision_only():
    window = {"open": True, "closes_at": at(400), "now": at(200)}
    batch = run_start(RUN, ["w2", "w3"], window, at(200))
    assert set(batch) == {"go", "window_stop", "predicted_seconds"}
    assert not batch["go"] and batch["window_stop"]["message"].startswith("Nodes w2, w3 are not started")
    assert run_start(RUN, ["w2", "w3"], {"open": True, "closes_at": None})["go"]


def test_run_start_refuses_what_is_not_a_state_or_a_window():
    with pytest.raises(AnsibleFilterError, match="run_start: the input must be the run's state"):
        run_start([], "w2", {"open": True})
    with pytest.raises(AnsibleFilterError, match="run_start"):
        run_start(RUN, "w2", "open")
