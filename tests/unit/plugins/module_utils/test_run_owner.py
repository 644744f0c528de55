"""The run a drain belongs to (owner_pid): its process, known by id and start time."""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import run_owner
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError


def ended_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_running_process_is_there_and_an_ended_one_is_gone():
    assert run_owner.RunOwner(os.getpid()).gone() is False
    owner = run_owner.RunOwner(os.getpid())
    owner.pid = ended_pid()
    assert owner.gone() is True


def test_a_process_id_taken_again_by_another_process_is_gone(monkeypatch):
    owner = run_owner.RunOwner(os.getpid())
    assert owner.start_time is not None  # /proc is there on the machines the tests run on
    monkeypatch.setattr(run_owner, "_stat", lambda pid: ("S", "1"))  # another process with the same id
    assert owner.gone() is True
    monkeypatch.setattr(run_owner, "_stat", lambda pid: None)  # no /proc: the process id alone decides
    assert owner.gone() is False


def test_a_process_that_exited_and_is_not_reaped_yet_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    owner = run_owner.RunOwner(child.pid)
    assert owner.gone() is False
    deadline = time.monotonic() + 30
    while run_owner._stat(child.pid)[0] != "Z" and time.monotonic() < deadline:  # pylint: disable=protected-access
        time.sleep(0.05)
    assert run_owner.process_exists(child.pid)  # a zombie: its id is still taken
    assert owner.gone() is True
    child.wait()
    assert owner.gone() is True


def test_the_start_time_reads_past_a_command_with_spaces_and_parentheses(tmp_path, monkeypatch):
    stat = "77 (a (b) c) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10"
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/77/stat":
            target = tmp_path / "stat"
            target.write_text(stat)
            return real_open(str(target), *args, **kwargs)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert run_owner._stat(77) == ("S", "123456")  # pylint: disable=protected-access


def test_the_option_left_out_watches_nothing_and_a_process_not_running_is_refused():
    assert run_owner.run_owner({"owner_pid": None}, "worker-1") is None
    assert run_owner.run_owner({"owner_pid": os.getpid()}, "worker-1").pid == os.getpid()
    pid = ended_pid()
    for bad in (pid, -5):
        with pytest.raises(MaintenanceError) as caught:
            run_owner.run_owner({"owner_pid": bad}, "worker-1")
        assert caught.value.msg == (
            "owner_pid %d is not a running process on the host that runs the module, so the maintenance of node "
            "worker-1 would stop as soon as it started; leave owner_pid out (the module's action plugin sets it "
            "when the module runs on the controller)." % bad)
