"""The report: one model, three renderings that agree."""

import json
import os
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import model as report
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import files as report_files
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import markdown as report_markdown
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import svg as report_svg
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import timeutil


def phases(base_minute, drain, tasks, ready=3, uncordon=1, verify=2, failed=None):
    """Phase times for a node starting at 22:<base_minute>:00, lengths in seconds."""
    seconds = base_minute * 60
    result = {}
    for name, length in (("drain", drain), ("tasks", tasks), ("ready", ready), ("uncordon", uncordon),
                         ("verify", verify)):
        if length is None:
            break
        result[name] = {"start": stamp(seconds), "end": stamp(seconds + length)}
        if failed == name:
            result[name]["failed"] = True
        seconds += length
    return result


def stamp(seconds):
    return "2024-05-04T22:%02d:%02d.250000Z" % (seconds // 60, seconds % 60)


def vm(name, source, target=None, ns="prod"):
    item = {"namespace": ns, "name": name, "source": source}
    if target:
        item["target"] = target
    return item


RUN = {
    "title": "Rolling maintenance",
    "started": stamp(0),
    "finished": stamp(440),
    "nodes": ["worker-1", "worker-2", "worker-3", "worker-4"],
    "status": "failed",
    "message": "worker-3 failed in its node tasks: the firmware update exited 1.",
    "remaining": "Done: worker-1, worker-2. Failed and left cordoned: worker-3. Not started: worker-4.",
    "resume": "ansible-playbook site.yml -e rolling_maintenance_resume=true",
    "policy": {"non_migratable": "shutdown", "method": "auto"},
    "preflight": {"start": "2024-05-04T21:59:52Z", "end": "2024-05-04T22:00:00Z"},
}

RECORDS = [
    {"node": "worker-1", "index": 1, "status": "done", "phases": phases(0, 95, 60), "pods_evicted": 14,
     "total_pods": 16,
     "vms": {"migrated": [vm("db-1", "worker-1", "worker-3"), vm("web-1", "worker-1", "worker-2")],
             "shut_down": [vm("scratch", "worker-1")], "blocked": []},
     "migrations": [dict(vm("db-1", "worker-1", "worker-3"), start=stamp(10), end=stamp(48)),
                    dict(vm("web-1", "worker-1", "worker-2"), start=stamp(12), end=stamp(70))]},
    {"node": "worker-2", "index": 2, "status": "done", "phases": phases(3, 40, 55), "pods_evicted": 6,
     "vms": {"migrated": [vm("web-2", "worker-2", "worker-4")]},
     "migrations": [dict(vm("web-2", "worker-2", "worker-4"), start=stamp(185), end=stamp(215))]},
    {"node": "worker-3", "index": 3, "status": "failed", "phases": phases(5, 70, 30, ready=None, failed="tasks"),
     "pods_evicted": 9, "vms": {"migrated": [vm("db-1", "worker-3", "worker-2")]},
     "error": "the firmware update exited 1"},
]


@pytest.fixture(scope="module")
def model():
    return report.build(RUN, RECORDS)


def test_totals_and_untouched(model):
    totals = model["totals"]
    assert totals["nodes_done"] == 2 and totals["nodes_failed"] == 1 and totals["nodes_untouched"] == 1
    assert totals["pods_evicted"] == 29 and totals["vms_migrated"] == 4 and totals["vms_shut_down"] == 1
    assert model["untouched"] == ["worker-4"]
    assert totals["drain_seconds"] == 205.0


def test_json_has_phase_durations_and_migration_endpoints(model):
    data = report.to_json_data(model)
    json.dumps(data)  # serialisable
    first = data["nodes"][0]
    assert first["phases"]["drain"]["seconds"] == 95.0
    assert first["duration_seconds"] == 161.0
    migrated = first["vms"]["migrated"][0]
    assert migrated["source"] == "worker-1" and migrated["target"] == "worker-3" and migrated["seconds"] == 38.0
    assert data["nodes"][2]["phases"]["tasks"]["failed"]


def test_batches_one_node_each_unless_the_run_had_batches(model):
    assert report.to_json_data(model)["batches"] == [["worker-1"], ["worker-2"], ["worker-3"], ["worker-4"]]
    assert "Batches" not in report_markdown.to_markdown(model)
    together = report.build(dict(RUN, batches=[["worker-1", "worker-3"], ["worker-2", "worker-4"]]), RECORDS)
    assert report.to_json_data(together)["batches"] == [["worker-1", "worker-3"], ["worker-2", "worker-4"]]
    assert "| Batches (in maintenance together) | worker-1 + worker-3, then worker-2 + worker-4 |" in \
        report_markdown.to_markdown(together)


def test_failed_phase_defaults_to_the_last_one_started():
    model = report.build({}, [{"node": "n1", "status": "failed", "phases": phases(0, 10, None)}])
    assert model["nodes"][0]["phases"][-1]["failed"]


def test_markdown_lists_nodes_migrations_and_what_remains(model):
    text = report_markdown.to_markdown(model, "report-timeline.svg")
    assert "# Rolling maintenance: failed" in text
    assert "| 3 | worker-3 | FAILED |" in text
    assert "| | worker-4 | not started |" in text
    assert "migrated prod/db-1: worker-1 -> worker-3 in 38s" in text
    assert "shut down prod/scratch" in text
    assert "## What remains" in text and "rolling_maintenance_resume=true" in text
    assert "![Timeline](report-timeline.svg)" in text


def test_svg_is_valid_xml_with_one_row_per_node_and_a_legend(model):
    svg = report_svg.to_svg(model)
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for name in ("worker-1", "worker-2", "worker-3", "worker-4", "Legend", "not started", "preflight + lock"):
        assert name in texts
    assert any(t and t.startswith("FAILED after") for t in texts)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "migrated prod/web-1 to worker-2" in titles


def test_svg_escapes_names():
    svg = report_svg.to_svg(report.build({"title": "a<b & \"c\""}, [{"node": "n<1>", "phases": phases(0, 5, 5)}]))
    ET.fromstring(svg)


def test_empty_run_still_renders():
    model = report.build({"status": "window_closed", "message": "Outside the window.", "nodes": ["a", "b"]}, [])
    ET.fromstring(report_svg.to_svg(model))
    assert report.summary_lines(model)[-1] == "Outside the window."


def test_write_creates_the_three_files(tmp_path, model):
    files, _model, data = report_files.write(RUN, RECORDS, str(tmp_path / "out"))
    assert sorted(files) == ["json", "markdown", "svg"]
    for path in files.values():
        assert os.path.getsize(path) > 100
    with open(files["json"]) as handle:
        assert json.load(handle) == json.loads(json.dumps(data))
    if os.environ.get("REPORT_SAMPLE_DIR"):  # to look at the picture while changing the renderer
        report_files.write(RUN, RECORDS, os.environ["REPORT_SAMPLE_DIR"])


def test_summary_lines(model):
    lines = report.summary_lines(model)
    assert lines[0].startswith("Rolling maintenance failed in 7m20s: 2/4 nodes done, 1 failed, 1 untouched")
    assert lines[1].startswith("worker-1 done: 2m41s (drain 1m35s, tasks 1m00s, ready 3s, uncordon 1s, verify 2s)")
    assert "worker-4 not started" in lines


@pytest.mark.parametrize("value, expected", [
    ("2024-05-04T22:00:00Z", "2024-05-04T22:00:00Z"),
    ("2024-05-04T22:00:00.123456789+02:00", "2024-05-04T20:00:00Z"),
    ("2024-05-04 22:00:00", "2024-05-04T22:00:00Z"),
    (None, None),
    ("garbage", None),
])
def test_parse_time(value, expected):
    assert timeutil.format_seconds(timeutil.parse_time_utc(value)) == expected


def test_moves_of_the_first_node_may_be_two_and_are_not_avoidable(model):
    moves = model["moves"]
    # db-1 had to land on worker-3 (nothing was done yet), then moved to worker-2, done by then.
    assert moves["per_vm"] == {"prod/db-1": 2, "prod/web-1": 1, "prod/web-2": 1}
    assert (moves["total"], moves["minimum"], moves["avoidable"]) == (4, 4, 0)
    assert (model["totals"]["vm_moves"], model["totals"]["vm_moves_avoidable"]) == (4, 0)


def rolling(*drains):
    """Records of a run over worker-1..n; drains[i] lists (vm, target) moved off worker-i+1."""
    return [{"node": "worker-%d" % (i + 1), "index": i + 1, "status": "done", "phases": phases(i * 3, 30, 0),
             "vms": {"migrated": [vm(name, "worker-%d" % (i + 1), target) for name, target in moved]}}
            for i, moved in enumerate(drains)]


def test_a_landing_on_a_node_still_to_do_while_one_was_done_is_an_avoidable_move():
    records = rolling([("a", "worker-2")],           # forced: nothing done yet
                      [("a", "worker-1"), ("b", "worker-3")],  # b could have gone to worker-1
                      [("b", "worker-1")])
    model = report.build({"nodes": ["worker-1", "worker-2", "worker-3"]}, records)
    moves = model["moves"]
    assert moves["per_vm"] == {"prod/a": 2, "prod/b": 2}
    assert (moves["total"], moves["minimum"], moves["avoidable"]) == (4, 3, 1)
    assert moves["avoidable_moves"] == [{"vm": "prod/b", "node": "worker-3", "done": ["worker-1"], "reason":
                                         "it had landed on worker-3, still to do, while worker-1 was done"}]
    text = report_markdown.to_markdown(model)
    assert "| VM moves | 4 (minimum for this run 3, avoidable 1) |" in text
    assert "- avoidable: prod/b moved again because it had landed on worker-3" in text
    assert report.summary_lines(model)[0].endswith("; 4 VM moves (minimum 3, 1 avoidable).")
    assert report.to_json_data(model)["moves"]["avoidable"] == 1


def test_the_nodes_of_a_batch_do_not_count_as_done_for_one_another():
    """worker-1 and worker-2 out together (max_parallel 2): what leaves worker-2 can only land on nodes
    still to do, although worker-1's record comes first; worker-3 and worker-4 follow, after both."""
    records = rolling([("a", "worker-3")], [("b", "worker-4")], [("a", "worker-1")], [("b", "worker-2")])
    records[1]["phases"] = phases(0, 40, 0)  # started with worker-1, finished after it
    model = report.build({"nodes": ["worker-1", "worker-2", "worker-3", "worker-4"]}, records)
    moves = model["moves"]
    assert (moves["total"], moves["minimum"], moves["avoidable"]) == (4, 4, 0), moves["avoidable_moves"]


def test_nodes_outside_the_run_count_as_done():
    records = rolling([("a", "infra-1")], [("b", "worker-1")])
    moves = report.build({"nodes": ["worker-1", "worker-2"]}, records)["moves"]
    assert (moves["total"], moves["minimum"], moves["avoidable"]) == (2, 2, 0)


MACHINE = {"road": "redfish", "address": "https://bmc-1/redfish/v1/Systems/1", "boot_id_before": "a",
           "boot_id_after": "b", "firmware_before": {"bios": "1.0.0"}, "firmware_after": {"bios": "1.1.0"},
           "bios_changed": {"SriovGlobalEnable": {"before": "Disabled", "after": "Enabled"}},
           "actions": [{"action": "firmware bios 1.1.0", "started": "2024-05-04T22:00:12Z", "seconds": 0.4},
                       {"action": "restart (GracefulRestart)", "started": "2024-05-04T22:00:13Z", "seconds": 14.2}],
           "power_state": "On"}


def test_what_was_done_to_a_machine_is_in_every_rendering():
    model = report.build({}, [{"node": "n1", "phases": phases(0, 10, 20), "machine": MACHINE}])
    (node,) = report.to_json_data(model)["nodes"]
    assert node["machine"] == dict((k, v) for k, v in MACHINE.items() if k != "power_state")
    assert report.summary_lines(model)[1].endswith(
        "; machine: bios 1.0.0 -> 1.1.0, BIOS SriovGlobalEnable=Enabled, restarted (new boot)")
    text = report_markdown.to_markdown(model)
    assert "- machine (redfish): bios 1.0.0 -> 1.1.0, BIOS SriovGlobalEnable=Enabled, restarted (new boot)" in text
    assert "  - restart (GracefulRestart): 14s" in text
    root = ET.fromstring(report_svg.to_svg(model))
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "machine: restart (GracefulRestart), 14s" in titles
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "machine: bios 1.0.0 -> 1.1.0, BIOS SriovGlobalEnable=Enabled, restarted (new boot)" in texts
    # A node nothing was asked of its machine: no machine in any rendering.
    plain = report.build({}, [{"node": "n1", "phases": phases(0, 10, 20)}])
    assert report.to_json_data(plain)["nodes"][0]["machine"] is None
    assert "machine" not in report.summary_lines(plain)[1]
