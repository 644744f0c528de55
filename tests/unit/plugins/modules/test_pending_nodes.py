"""pending_nodes: the PreferNoSchedule taint on the nodes a rolling run still has to do,
end to end against the in-memory API server."""

import pytest

from kubevirt_objects import cluster
from module_runner import assert_documented, run, run_module

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import pending_nodes

KEY = "kubevirt-ops.io/maintenance-pending"
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.fixture
def api(monkeypatch):
    client, server = cluster()
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    for name in ("w1", "w2", "w3"):
        server.add("Node", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                            "spec": {"taints": [OTHER]} if name == "w3" else {}})
    return server


def taints(api, name):
    return (api.get("Node", name).get("spec") or {}).get("taints") or []


def ours(api, name):
    return [t for t in taints(api, name) if t["key"] == KEY]


def test_present_taints_exactly_the_nodes_to_do_and_keeps_other_taints(api, capsys):
    args = {"nodes": ["w2", "w3"], "mark": "run-1"}
    checked = run(pending_nodes, args, capsys, check=True, diff=True)
    assert checked["changed"] is True and checked["added"] == ["w2", "w3"] and api.writes() == []
    assert checked["diff"]["after"]["pending"] == {"w2": "run-1", "w3": "run-1"}
    assert_documented(checked, pending_nodes)
    result = run(pending_nodes, args, capsys)
    assert result["changed"] is True and result["pending"] == ["w2", "w3"] and result["added"] == ["w2", "w3"]
    assert ours(api, "w1") == []
    assert ours(api, "w2") == [{"key": KEY, "value": "run-1", "effect": "PreferNoSchedule"}]
    assert OTHER in taints(api, "w3") and len(ours(api, "w3")) == 1
    writes = len(api.writes())
    again = run(pending_nodes, args, capsys)
    assert again["changed"] is False and len(api.writes()) == writes


def test_next_node_done_moves_the_taint_off_it(api, capsys):
    run(pending_nodes, {"nodes": ["w1", "w2", "w3"], "mark": "run-1"}, capsys)
    result = run(pending_nodes, {"nodes": ["w3"], "mark": "run-1"}, capsys)
    assert result["removed"] == ["w1", "w2"] and result["added"] == [] and result["pending"] == ["w3"]
    assert ours(api, "w1") == ours(api, "w2") == [] and len(ours(api, "w3")) == 1


def test_a_resumed_run_replaces_the_marks_of_one_that_died(api, capsys):
    run(pending_nodes, {"nodes": ["w1", "w2", "w3"], "mark": "run-1"}, capsys)
    result = run(pending_nodes, {"nodes": ["w3"], "mark": "run-2"}, capsys)
    assert result["stale"] == ["w1", "w2", "w3"] and result["removed"] == ["w1", "w2"]
    assert [t["value"] for t in ours(api, "w3")] == ["run-2"]


def test_absent_takes_every_mark_off_and_keeps_other_taints(api, capsys):
    run(pending_nodes, {"nodes": ["w1", "w3"], "mark": "run-1"}, capsys)
    checked = run(pending_nodes, {"state": "absent"}, capsys, check=True)
    assert checked["removed"] == ["w1", "w3"] and len(ours(api, "w1")) == 1
    result = run(pending_nodes, {"state": "absent"}, capsys, diff=True)
    assert result["changed"] is True and result["pending"] == [] and result["stale"] == []
    assert_documented(result, pending_nodes)
    assert all(ours(api, n) == [] for n in ("w1", "w2", "w3")) and taints(api, "w3") == [OTHER]
    assert "taints" not in (api.get("Node", "w1").get("spec") or {})
    assert run(pending_nodes, {"state": "absent"}, capsys)["changed"] is False


@pytest.mark.parametrize("args, words", [
    ({"nodes": ["w1"]}, ["mark", "state=present"]),
    ({"nodes": ["w1", "nope"], "mark": "run-1"}, ["nope", "does not exist"]),
    ({"nodes": ["w1"], "mark": "run 1"}, ["mark", "label value"]),
    ({"nodes": ["w1"], "state": "absent"}, ["nodes", "state=absent"]),
    ({"nodes": ["W1"], "mark": "run-1"}, ["nodes", "W1"]),
])
def test_bad_input_changes_nothing(api, capsys, args, words):
    code, result = run_module(pending_nodes, args, capsys)
    assert code != 0 and result["failed"] is True
    assert all(w in result["msg"] for w in words), result["msg"]
    assert api.writes() == []
