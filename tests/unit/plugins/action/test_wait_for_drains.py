"""wait_for_drains: the async drains' results in the order given, their live progress while they
run, the temporary progress files removed, a timeout and a drain that failed."""

from unittest import mock

from ansible_collections.kubevirt_ops.maintenance.plugins.action.wait_for_drains import ActionModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress


class Shown:
    def __init__(self):
        self.lines = []

    def display(self, line, *args, **kwargs):
        self.lines.append(line)


def action(args, transport="local"):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection.transport = transport
    connection._shell.tmpdir = None
    plugin = ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    plugin._display = Shown()
    plugin._remove_tmp_path = lambda path: None
    plugin._async_dir = lambda: "/nowhere"
    return plugin


def started(node, jid, path=None, temporary=True):
    job = {"item": node, "ansible_job_id": jid, "started": 1, "finished": 0, "changed": True}
    if path:
        job["live_progress"] = {"file": str(path), "offset": 0, "temporary": temporary,
                                "action": "node_maintenance", "node": node}
    return job


def test_results_in_order_with_live_progress_and_the_files_removed(tmp_path):
    files = {n: tmp_path / ("%s.log" % n) for n in ("worker-1", "worker-2")}
    for path in files.values():
        path.write_text("")
    jobs = [started("worker-1", "j1", files["worker-1"]), started("worker-2", "j2", files["worker-2"]),
            {"item": "worker-3", "skipped": True, "changed": False}]
    polls = {"j1": 0, "j2": 0}

    def status(jid, task_vars):
        polls[jid] += 1
        if jid == "j1" and polls[jid] == 1:
            Progress("worker-1", path=str(files["worker-1"])).update(10, 4, 2, 1, vms=["prod/db-1"])
        if polls[jid] < 3:
            return {"ansible_job_id": jid, "started": 1, "finished": 0}
        if jid == "j2":
            return {"ansible_job_id": jid, "started": 1, "finished": 1, "failed": True,
                    "msg": "Timed out after 60s draining node worker-2: 1 pod left."}
        return {"ansible_job_id": jid, "started": 1, "finished": 1, "changed": True, "phase": "Succeeded"}

    plugin = action({"jobs": jobs, "poll": 0.05})
    plugin._status = status
    result = plugin.run(task_vars={})
    assert [e["node"] for e in result["results"]] == ["worker-1", "worker-2", "worker-3"]
    assert result["results"][0]["phase"] == "Succeeded" and result["results"][0]["failed"] is False
    assert result["results"][1]["failed"] and result["results"][1]["msg"].startswith("Timed out after 60s")
    assert result["results"][2]["skipped"] and result["results"][2]["finished"]
    assert [e["changed"] for e in result["results"]] == [True, False, False]
    assert result["failed"] and result["msg"] == "The drain of 1 of 3 nodes failed: worker-2."
    assert result["changed"] is True
    assert any(line.startswith("node_maintenance worker-1: running: 2/4 pods left, 1 VM to move (migrating: "
                               "prod/db-1)") for line in plugin._display.lines), plugin._display.lines
    assert not any(path.exists() for path in files.values())  # temporary: the wait removes them


def test_a_given_progress_file_is_kept_and_a_job_still_running_times_out(tmp_path):
    given = tmp_path / "mine.log"
    given.write_text("")
    plugin = action({"jobs": [started("worker-1", "j1", given, temporary=False)], "poll": 0.05, "timeout": 0})
    plugin._status = lambda jid, task_vars: {"ansible_job_id": jid, "started": 1, "finished": 0}
    result = plugin.run(task_vars={})
    entry = result["results"][0]
    assert entry["failed"] and entry["finished"] is False
    assert entry["msg"] == ("Timed out after 0s waiting for the drain of node worker-1 (async job j1); it may still "
                            "be running.")
    assert given.exists()


def test_without_a_local_connection_a_line_names_the_drains_still_running(monkeypatch, tmp_path):
    from ansible_collections.kubevirt_ops.maintenance.plugins.action import wait_for_drains

    monkeypatch.setattr(wait_for_drains, "HEARTBEAT", 0.0)
    polls = []

    def status(jid, task_vars):
        polls.append(jid)
        return {"ansible_job_id": jid, "started": 1, "finished": int(len(polls) > 2)}

    plugin = action({"jobs": [started("worker-1", "j1", tmp_path / "x.log")], "poll": 0.01}, transport="ssh")
    plugin._status = status
    result = plugin.run(task_vars={})
    assert not result.get("failed") and result["results"][0]["finished"]
    assert plugin._display.lines and plugin._display.lines[0].startswith("waiting for the drain of worker-1 [")


def test_the_async_directory_is_worked_out_once_for_all_polls():
    task = mock.MagicMock()
    connection = mock.MagicMock()
    plugin = ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    expanded = []
    plugin.get_shell_option = lambda option, default=None: default
    plugin._remote_expand_user = lambda path: expanded.append(path) or "/home/ops/.ansible_async"
    executed = []
    plugin._execute_module = lambda module_name, module_args, task_vars: executed.append(module_args) or {}
    for _poll in range(3):
        plugin._status("j1", {})
    assert expanded == ["~/.ansible_async"]
    assert [a["_async_dir"] for a in executed] == ["/home/ops/.ansible_async"] * 3


class Sleeps:
    """time.sleep of the action plugin, recording how long the wait would have slept."""

    def __init__(self):
        self.seconds = []

    def __call__(self, seconds):
        self.seconds.append(seconds)


def test_a_local_job_is_read_as_soon_as_its_results_file_says_it_ended(monkeypatch, tmp_path):
    """The first read finds the job running; it ends then (async_wrapper writes its result over the start
    record). The wait reads the state again at its next look at the file, long before ``poll``."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.action import wait_for_drains

    sleeps = Sleeps()
    monkeypatch.setattr(wait_for_drains.time, "sleep", sleeps)
    results_file = tmp_path / "j1"
    results_file.write_text('{"started": true, "finished": false, "ansible_job_id": "j1"}')
    reads = []

    def status(jid, task_vars):
        reads.append(jid)
        if len(reads) == 1:
            results_file.write_text('{"changed": true, "phase": "Succeeded"}')
            return {"ansible_job_id": jid, "started": 1, "finished": 0}
        return {"ansible_job_id": jid, "changed": True, "phase": "Succeeded", "finished": 1}

    job = dict(started("worker-1", "j1"), results_file=str(results_file))
    plugin = action({"jobs": [job], "poll": 600})
    plugin._status = status
    result = plugin.run(task_vars={})
    assert reads == ["j1", "j1"]
    assert result["results"][0]["phase"] == "Succeeded" and not result.get("failed")
    assert sum(sleeps.seconds) < 600  # it did not wait out the poll period


def test_a_results_file_that_says_ended_while_the_state_does_not_is_not_trusted(monkeypatch, tmp_path):
    """A results file async_status does not agree with (another async directory, for example) is not looked at
    again: the wait falls back to one read per ``poll``, and never spins."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.action import wait_for_drains

    sleeps = Sleeps()
    monkeypatch.setattr(wait_for_drains.time, "sleep", sleeps)
    monkeypatch.setattr(wait_for_drains.time, "monotonic", iter(range(0, 100000, 1)).__next__)
    results_file = tmp_path / "j1"
    results_file.write_text('{"changed": true}')
    reads = []

    def status(jid, task_vars):
        reads.append(jid)
        return {"ansible_job_id": jid, "started": 1, "finished": int(len(reads) == 3)}

    job = dict(started("worker-1", "j1"), results_file=str(results_file))
    plugin = action({"jobs": [job], "poll": 5})
    plugin._status = status
    plugin.run(task_vars={})
    assert reads == ["j1", "j1", "j1"]
    assert sleeps.seconds and all(s > wait_for_drains.LOCAL_LOOK for s in sleeps.seconds), sleeps.seconds


def test_the_results_file_of_a_remote_job_is_not_looked_at(monkeypatch, tmp_path):
    """Over another connection the results file is on the managed node: only async_status reads it."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.action import wait_for_drains

    looked = []
    monkeypatch.setattr(wait_for_drains, "ended_locally", lambda path: looked.append(path) or True)
    reads = []

    def status(jid, task_vars):
        reads.append(jid)
        return {"ansible_job_id": jid, "started": 1, "finished": int(len(reads) == 2)}

    job = dict(started("worker-1", "j1"), results_file=str(tmp_path / "j1"))
    plugin = action({"jobs": [job], "poll": 0.01}, transport="ssh")
    plugin._status = status
    plugin.run(task_vars={})
    assert looked == [] and reads == ["j1", "j1"]


def test_ended_locally_reads_a_results_file_as_async_status_does(tmp_path):
    from ansible_collections.kubevirt_ops.maintenance.plugins.action.wait_for_drains import ended_locally

    path = tmp_path / "j1"
    assert not ended_locally(str(path))  # not there (yet)
    path.write_text("")
    assert not ended_locally(str(path))  # being written
    path.write_text('{"started": 1, "finished": 0, "ansible_job_id": "j1"}')
    assert not ended_locally(str(path))
    path.write_text('{"failed": true, "msg": "boom"}')
    assert ended_locally(str(path))
