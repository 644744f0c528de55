"""The live progress of a drain: the module's progress lines, as the action plugins show them."""

import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils import drain_progress


class Shown:
    def __init__(self):
        self.lines = []

    def display(self, line):
        self.lines.append(line)


def test_status_line_names_the_vms_and_the_last_error(tmp_path):
    path = str(tmp_path / "progress.log")
    progress = Progress("worker-1", path=path)
    progress.update(5, 4, 3, 2, vms=["prod/db-1", "prod/api-1", "prod/db-1"],
                    error="ns1/web-1: Cannot evict pod as it would\nviolate the pod's disruption budget.")
    progress.update(5, 4, 3, 2, vms=["prod/api-1", "prod/db-1"],
                    error="ns1/web-1: Cannot evict pod as it would violate the pod's disruption budget.")
    with open(path) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 1  # the same state twice is one line
    node, status, _text = drain_progress.parse_line(lines[0])
    assert node == "worker-1"
    assert status["pods_left"] == "3" and status["pods"] == "4" and status["vms_left"] == "2"
    assert status["vms"] == "prod/api-1,prod/db-1"
    assert status["error"] == "ns1/web-1: Cannot evict pod as it would violate the pod's disruption budget."
    shown = drain_progress.describe("node_maintenance", node, status, 31.4)
    assert shown == ("node_maintenance worker-1: running: 3/4 pods left, 2 VMs to move (migrating: prod/api-1, "
                     "prod/db-1), last error: ns1/web-1: Cannot evict pod as it would violate the pod's disruption "
                     "budget., 25% [31s]")


def test_status_line_without_vms_or_error_is_unchanged():
    lines = []
    Progress("worker-1", log=lines.append).update(12, 12, 0, 0)
    assert lines[0].endswith("node=worker-1 phase=Running pods_left=0/12 vms_left=0 progress=100%")


def test_follower_shows_new_lines_and_a_heartbeat(tmp_path):
    path = str(tmp_path / "progress.log")
    with open(path, "w") as handle:
        handle.write("2026-01-01T00:00:00Z node=worker-1 phase=Running pods_left=9/9 vms_left=1 progress=0%\n")
    progress = Progress("worker-1", path=path)
    shown = Shown()
    follower = drain_progress.Follower(path, shown, "node_maintenance", "worker-1", offset=len(open(path).read()),
                                       heartbeat=0.2, poll=0.05)
    follower.step()
    assert shown.lines == []  # what was there before the task is not this task's
    progress.update(3, 2, 2, 1, vms=["prod/db-1"])
    follower.step()
    assert len(shown.lines) == 1 and "migrating: prod/db-1" in shown.lines[0]
    time.sleep(0.25)
    follower.step()
    assert len(shown.lines) == 2 and shown.lines[1].startswith("node_maintenance worker-1: running: 2/2 pods left")
    progress.line("virt-api is not answering: evictions of virt-launcher pods are refused until it is back; waiting")
    with open(path, "a") as handle:
        handle.write("2026-01-01T00:00:09Z node=worker-1 phase=Succ")  # a line still being written
    follower.step()
    assert shown.lines[2].endswith("last error: none, 0%; virt-api is not answering: evictions of virt-launcher "
                                   "pods are refused until it is back; waiting [0s]")
    with open(path, "a") as handle:
        handle.write("eeded pods_left=0/2 vms_left=0 progress=100%\n")
    follower.finish()
    assert shown.lines[-1].startswith("node_maintenance worker-1: drained: 0/2 pods left, 0 VMs to move")


def test_follower_before_any_line_says_planning(tmp_path):
    shown = Shown()
    follower = drain_progress.Follower(str(tmp_path / "missing.log"), shown, "node_decommission", "worker-9",
                                       heartbeat=0.0, poll=0.05)
    follower.step()
    assert shown.lines == ["node_decommission worker-9: planning [0s]"]


def _drain_action(async_val, poll, transport="local"):
    from unittest import mock

    task = mock.MagicMock()
    task.args = {"name": "worker-1"}
    task.async_val = async_val
    task.poll = poll
    task.check_mode = False
    task.no_log = False
    task.action = "kubevirt_ops.maintenance.node_maintenance"
    connection = mock.MagicMock()
    connection.transport = transport
    connection.has_native_async = False
    connection._shell.tmpdir = None
    play_context = mock.MagicMock()
    play_context.become = False
    plugin = drain_progress.DrainProgressAction(task, connection, play_context, loader=None, templar=None,
                                                shared_loader_obj=None)
    plugin._remove_tmp_path = lambda path: None
    given = []

    def execute(module_args=None, task_vars=None, wrap_async=False):
        given.append(module_args)
        return {"ansible_job_id": "j1", "started": 1, "finished": 0} if async_val else {"changed": False}

    plugin._execute_module = execute
    return plugin, given


def test_an_async_drain_started_with_poll_0_names_its_progress_file_for_the_wait():
    import os

    plugin, given = _drain_action(async_val=600, poll=0)
    result = plugin.run(task_vars={})
    live = result["live_progress"]
    assert live["temporary"] is True and live["node"] == "worker-1" and live["action"] == "node_maintenance"
    assert given[0]["progress_file"] == live["file"] and os.path.exists(live["file"])
    os.unlink(live["file"])


def test_an_async_drain_that_ansible_polls_itself_gets_no_progress_file():
    import os

    plugin, given = _drain_action(async_val=600, poll=10)
    result = plugin.run(task_vars={})
    assert "live_progress" not in result and given == [{"name": "worker-1", "owner_pid": os.getppid()}]


def test_a_drain_on_the_controller_is_given_its_run_and_shows_the_arguments_of_the_task():
    import os

    plugin, given = _drain_action(async_val=0, poll=0)

    def execute(module_args=None, task_vars=None, wrap_async=False):
        given.append(module_args)
        return {"changed": False, "invocation": {"module_args": dict(module_args, wait=True)}}

    plugin._execute_module = execute
    result = plugin.run(task_vars={})
    assert given[0]["owner_pid"] == os.getppid() and given[0]["progress_file"]
    assert result["invocation"]["module_args"] == {"name": "worker-1", "owner_pid": None, "progress_file": None,
                                                   "wait": True}
    plugin, given = _drain_action(async_val=600, poll=0, transport="ssh")  # another host: its processes are not ours
    plugin.run(task_vars={})
    assert given == [None]
    plugin, given = _drain_action(async_val=600, poll=10)
    plugin._task.args = {"name": "worker-1", "owner_pid": 1}
    plugin.run(task_vars={})
    assert given == [None]  # a given owner is the task's own


def test_a_new_temporary_file_is_named_after_its_run_and_clears_those_of_killed_runs(tmp_path):
    import os
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = tmp_path / ("kubevirt-ops-progress-%d-abc.log" % gone.pid)
    running = tmp_path / ("kubevirt-ops-progress-%d-def.log" % os.getpid())
    given = tmp_path / "kubevirt-ops-progress-drain.log"  # a progress_file of the user's: not ours
    other = tmp_path / "other.log"
    for path in (killed, running, given, other):
        path.write_text("x\n")

    path = drain_progress.new_temporary_file(str(tmp_path))

    assert os.path.basename(path).startswith("kubevirt-ops-progress-%d-" % os.getppid())
    assert os.path.exists(path) and os.path.getsize(path) == 0
    assert not killed.exists()
    assert running.exists() and given.exists() and other.exists()
