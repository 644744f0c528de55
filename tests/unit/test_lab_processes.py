"""The lab's process tracking (lab/processes.py): a component that is the caller's own child (a lab started in-process,
as the pytest plugin does) is reaped once it is seen gone, never left as a zombie."""

import os
import subprocess
import time

from lab import processes


def _state(pid):
    """The process's state letter (Z for a zombie), None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def test_a_child_that_exits_right_after_a_look_is_still_reaped(monkeypatch):
    """The child ends just after each reap attempt (the race a component's exit can win): it must not be left a
    zombie."""
    child = subprocess.Popen(["sleep", "0.5"])
    child.returncode = 0  # the lab drops its Popen objects: only the tracking may reap
    record = processes.Tracked("sleeper", child.pid, processes._start_ticks(child.pid), ["sleep", "0.5"])
    real_waitpid = os.waitpid

    def waitpid_then_the_child_ends(pid, options):
        answer = real_waitpid(pid, options)
        deadline = time.time() + 10
        while _state(pid) not in (None, "Z"):
            assert time.time() < deadline, "the child did not end"
            time.sleep(0.02)
        return answer

    monkeypatch.setattr(processes.os, "waitpid", waitpid_then_the_child_ends)
    deadline = time.time() + 10
    while processes._alive(record):
        assert time.time() < deadline, "the child did not end"
        time.sleep(0.05)
    monkeypatch.undo()
    assert _state(child.pid) is None, "the ended child was left as a zombie"


def _wait_for(predicate, what, timeout=20):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, what
        time.sleep(0.05)


def test_a_component_that_served_before_is_restarted_from_its_first_exit(tmp_path):
    """Started again after it served (``lab restart``), a component that crashes at once is started again, as the
    kubelet restarts a crashed container; on its first start, the same crash ends the loop for ``lab up`` to
    report."""
    from lab.paths import LabPaths

    paths = LabPaths(tmp_path)
    crash = ["sh", "-c", "echo run; exit 3"]
    first = processes.start_restarting(paths, "crasher", crash)
    _wait_for(lambda: not processes.is_running(first), "the first start to end with the crash")
    assert "exited with 3: restarting" not in paths.log("crasher").read_text()

    again = processes.start_restarting(paths, "crasher", crash, served_before=True)
    try:
        _wait_for(lambda: paths.log("crasher").read_text().count("exited with 3: restarting") >= 2,
                  "the restarted component to be started again after each crash")
        assert processes.is_running(again)
    finally:
        processes.stop(paths, "crasher", grace=5)
    assert not processes.is_running(again)
