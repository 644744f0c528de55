"""node_maintenance: which method auto picks, and method=cr refusing the drain options the
node-maintenance operator ignores, against the in-memory API server."""


import pytest

from drain_cluster import module_cluster, pod
from module_runner import assert_documented, record_warnings, run_module

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import runner as nm
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import node_maintenance

CR = "kubevirt-ops-worker-1"

# Each option set to a value the operator's drain does not use, and how the sentence names it.
IGNORED = [
    ({"pod_selector": "app=web"}, "pod_selector='app=web'", "evicts every pod"),
    ({"grace_period": 5}, "grace_period=5", "gives each pod its own terminationGracePeriodSeconds"),
    ({"grace_period": 0}, "grace_period=0", "gives each pod its own terminationGracePeriodSeconds"),
    ({"disable_eviction": True}, "disable_eviction=true", "always uses the Eviction API"),
    ({"force": False}, "force=false", "deletes pods no controller manages"),
    ({"ignore_daemonsets": False}, "ignore_daemonsets=false", "leaves DaemonSet pods on the node"),
    ({"delete_emptydir_data": False}, "delete_emptydir_data=false", "evicts pods with emptyDir data"),
    ({"non_migratable": "shutdown"}, "non_migratable=shutdown",
     "retries a VM whose live migrations keep failing instead of shutting it down"),
    ({"drain": False}, "drain=false", "always drains the node"),
]
IDS = [text.split("=", maxsplit=1)[0] + ("-" + text.split("=")[1] if "grace" in text else "") for _a, text, _i in IGNORED]


WARNED = []


def run(module, args, capsys, check=False):
    """module_runner.run, recording the warnings the module gives (how ansible-core passes them on
    depends on its version and on what else the test session imported)."""
    del WARNED[:]
    return run_module(module, args, capsys, check=check)[1]


@pytest.fixture
def api(monkeypatch):
    """Three workers, KubeVirt, and the node-maintenance operator's API served."""
    server = module_cluster(monkeypatch, operator=True)
    server.add("Pod", pod("web-a"))
    record_warnings(monkeypatch, WARNED)
    return server


def versions(server):
    return dict((key, obj["metadata"]["resourceVersion"]) for key, obj in server.objects.items())


def node_maintenances(server):
    return [key for key in server.objects if key[0] in ("NodeMaintenance", "LegacyNodeMaintenance")]


@pytest.mark.parametrize("args,text,instead", IGNORED, ids=IDS)
def test_auto_drains_when_an_ignored_option_is_set(api, capsys, args, text, instead):
    task = dict({"name": "worker-1", "wait_timeout": 30}, **args)
    before = versions(api)
    checked = run(node_maintenance, task, capsys, check=True)
    reason = "method auto chose drain: the NodeMaintenance operator ignores %s (it %s)." % (text, instead)
    assert checked["method"] == "drain" and checked["method_reason"] == reason, checked
    assert reason in WARNED
    assert versions(api) == before
    assert_documented(checked, node_maintenance)

    result = run(node_maintenance, task, capsys)
    assert result["method"] == "drain" and result["method_reason"] == reason, result
    assert reason in WARNED
    assert node_maintenances(api) == []
    assert api.get("Node", "worker-1")["spec"]["unschedulable"] is True
    assert_documented(result, node_maintenance)
    left = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys)
    assert left["changed"] is True and left["method"] == "drain"
    assert left["method_reason"].startswith("state=absent removes what a drain by this collection added")


@pytest.mark.parametrize("args,text,instead", IGNORED, ids=IDS)
def test_method_cr_refuses_an_ignored_option_and_changes_nothing(api, capsys, args, text, instead):
    task = dict({"name": "worker-1", "method": "cr"}, **args)
    before = versions(api)
    message = ("Node worker-1 cannot enter maintenance with method=cr and %s: the NodeMaintenance operator ignores "
               "that option (it %s); use method=drain or auto, or leave it at its default." % (text, instead))
    for check in (True, False):
        failed = run(node_maintenance, task, capsys, check=check)
        assert failed["failed"] is True and failed["msg"] == message, failed
        assert "\n" not in failed["msg"]
    assert versions(api) == before
    assert node_maintenances(api) == []


def test_method_cr_names_every_ignored_option(api, capsys):
    before = versions(api)
    failed = run(node_maintenance, {"name": "worker-1", "method": "cr", "pod_selector": "app=web",
                                    "grace_period": 5}, capsys)
    assert failed["msg"] == (
        "Node worker-1 cannot enter maintenance with method=cr and pod_selector='app=web' and grace_period=5: the "
        "NodeMaintenance operator ignores these options (it evicts every pod; it gives each pod its own "
        "terminationGracePeriodSeconds); use method=drain or auto, or leave them at their defaults.")
    assert versions(api) == before


def test_defaults_given_explicitly_do_not_count(api, capsys):
    """What the role passes (its defaults, or the operator's own values) keeps the operator."""
    task = {"name": "worker-1", "wait": False, "force": True, "grace_period": -1, "disable_eviction": False,
            "ignore_daemonsets": True, "delete_emptydir_data": True, "pod_selector": "", "non_migratable": "fail"}
    checked = run(node_maintenance, task, capsys, check=True)
    reason = ("method auto chose cr: the NodeMaintenance operator is installed (nodemaintenance.medik8s.io is "
              "served) and no option it ignores is set.")
    assert checked["method"] == "cr" and checked["method_reason"] == reason
    assert not WARNED
    result = run(node_maintenance, task, capsys)
    assert result["method"] == "cr" and result["method_reason"] == reason and result["changed"] is True
    assert node_maintenances(api) == [("NodeMaintenance", "", CR)]
    explicit = run(node_maintenance, dict(task, method="cr"), capsys)
    assert explicit["method"] == "cr" and explicit["method_reason"] == "method cr as requested."
    assert run(node_maintenance, dict(task, non_migratable="wait", method="cr"), capsys)["method"] == "cr"


def test_a_node_in_maintenance_through_our_cr_keeps_it_with_a_warning(api, capsys):
    assert run(node_maintenance, {"name": "worker-1", "wait": False}, capsys)["method"] == "cr"
    api.get("NodeMaintenance", CR)["status"] = {"phase": "Succeeded", "drainProgress": 100, "totalpods": 1,
                                                "evictionPods": 1, "pendingPods": []}
    before = versions(api)
    again = run(node_maintenance, {"name": "worker-1", "pod_selector": "app=web"}, capsys)
    reason = ("method auto kept cr: node worker-1 is already in maintenance through NodeMaintenance %s, and the "
              "NodeMaintenance operator ignores pod_selector='app=web' (it evicts every pod); end the maintenance "
              "with state=absent to drain with these options." % CR)
    assert again["changed"] is False and again["method"] == "cr" and again["method_reason"] == reason, again
    assert WARNED == [reason]
    assert versions(api) == before
    plain = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert plain["method_reason"] == "method auto kept cr: node worker-1 is already in maintenance through " \
        "NodeMaintenance %s." % CR and not WARNED
    left = run(node_maintenance, {"name": "worker-1", "state": "absent", "wait": False}, capsys)
    assert left["method"] == "cr" and left["method_reason"] == (
        "state=absent deletes NodeMaintenance %s, through which node worker-1 is in maintenance." % CR)


def test_without_the_operator_auto_says_so(api, capsys):
    api.served.discard("NodeMaintenance")
    checked = run(node_maintenance, {"name": "worker-1", "pod_selector": "app=web"}, capsys, check=True)
    assert checked["method"] == "drain" and not WARNED
    assert checked["method_reason"] == ("method auto chose drain: the cluster does not serve the NodeMaintenance "
                                        "API (no node-maintenance operator).")


def test_operator_ignored_only_counts_values_the_operator_does_not_use():
    defaults = {"ignore_daemonsets": True, "delete_emptydir_data": True, "force": True, "pod_selector": None,
                "grace_period": -1, "disable_eviction": False, "non_migratable": "fail"}
    assert nm.operator_ignored(defaults) == []
    assert nm.operator_ignored(dict(defaults, pod_selector="", grace_period=None, non_migratable="wait")) == []
    assert [o for o, _i in nm.operator_ignored(dict(defaults, force=False, disable_eviction=True))] == [
        "force=false", "disable_eviction=true"]


def test_method_cr_stops_waiting_once_its_run_has_ended(api, capsys):
    """The operator never finishes here; the run's process ends after a second, and the module stops
    waiting (the NodeMaintenance stays: the operator goes on with it)."""
    import subprocess
    import sys
    import threading
    import time

    run_process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    threading.Thread(target=run_process.wait).start()  # reaped as it ends, so its process id is gone
    started = time.monotonic()
    result = run(node_maintenance, {"name": "worker-1", "method": "cr", "owner_pid": run_process.pid,
                                    "wait_timeout": 120}, capsys)
    assert time.monotonic() - started < 60
    assert result.get("failed") and result["phase"] == "Failed" and result["node"] == "worker-1", result
    assert result["msg"] == (
        "The run that started the maintenance of node worker-1 (process %d) has ended, so the module stopped waiting "
        "for NodeMaintenance %s; the node-maintenance operator goes on with it, and the node stays in maintenance. "
        "Run again to go on, or leave maintenance with state=absent." % (run_process.pid, CR))
    assert node_maintenances(api) == [("NodeMaintenance", "", CR)]
