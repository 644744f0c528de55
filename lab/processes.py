"""Background processes of a lab: start detached, record, recognise, stop.

Each component runs in its own session (so it outlives ``lab up`` and a signal to
its process group reaches any children) with output appended to
``<state>/logs/<name>.log``. Its pid file also records the kernel start time of the
process, so a recycled pid is never mistaken for a lab component.
"""

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass

from lab.errors import LabError
from lab.wait import wait_for

# Written to the log before each start, so a failure shows only its own run.
START_MARKER = "===="

# A component that runs as a Deployment's pod in a cluster is restarted when it exits after
# it once started, as the kubelet would restart its container: virt-controller, for one, exits
# on purpose when it loses its leader lease (an API server away longer than its renew
# deadline). An exit before it first served ends the loop, so `lab up` reports the failure; a
# component started again after it served (``lab restart``, a fault test's stop and start) is
# restarted from the first exit on, as the kubelet restarts a crashed container whenever it ends:
# the node-maintenance-operator v0.17.0, for one, may crash on a reconcile that comes before its
# lease manager is set up (main.go's leaseManagerInitializer, started beside the controller).
# Stopping the component signals the loop's whole process group, the loop included.
_RESTART_LOOP = (
    'while :; do "$0" "$@"; rc=$?; [ -e "$LAB_STARTED_MARK" ] || exit $rc; '
    'echo "==== $LAB_COMPONENT exited with $rc: restarting it in 1 s"; sleep 1; done'
)


@dataclass(frozen=True)
class Tracked:
    name: str
    pid: int
    start_ticks: int
    argv: list


def start(paths, name, argv, env=None, cwd=None):
    """Start ``argv`` in the background as component ``name`` and record it."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.pids.mkdir(parents=True, exist_ok=True)
    log_path = paths.log(name)
    with open(log_path, "ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"{START_MARKER} {stamp} starting {name}: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )
    record = Tracked(name, proc.pid, _start_ticks(proc.pid) or 0, list(argv))
    # The Popen object is dropped on purpose: the component must outlive us.
    # Whoever checks on it later reaps it if it is our child (see _alive).
    proc.returncode = 0  # stops Popen.__del__ from warning about a running child
    paths.pid_file(name).write_text(json.dumps(asdict(record)))
    return record


def start_restarting(paths, name, argv, env=None, served_before=False):
    """Start ``argv`` as component ``name`` under the restart loop above; call
    :func:`mark_started` once it serves, from then on it is restarted whenever it exits.
    ``served_before``: it served in this lab before (started again): restarted from the first exit on."""
    mark = _started_mark(paths, name)
    mark.parent.mkdir(parents=True, exist_ok=True)
    if served_before:
        mark.touch()
    else:
        mark.unlink(missing_ok=True)
    env = dict(os.environ if env is None else env, LAB_STARTED_MARK=str(mark), LAB_COMPONENT=name)
    return start(paths, name, ["sh", "-c", _RESTART_LOOP, *argv], env=env)


def mark_started(paths, name):
    _started_mark(paths, name).touch()


def _started_mark(paths, name):
    return paths.state_dir / name / "started"


def tracked(paths, name):
    """The record of component ``name`` if that very process is still running."""
    pid_file = paths.pid_file(name)
    try:
        record = Tracked(**json.loads(pid_file.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    if _alive(record):
        return record
    return None


def is_running(record):
    return record is not None and _alive(record)


DEFAULT_STOP_GRACE = 10


def stop(paths, name, grace=DEFAULT_STOP_GRACE):
    """Stop component ``name`` (TERM, then KILL after ``grace`` s); True if it ran."""
    record = tracked(paths, name)
    was_running = record is not None
    if was_running:
        _signal_group(record, signal.SIGTERM)
        try:
            wait_for(lambda: not _alive(record), grace, f"{name} to exit", interval=0.2)
        except LabError:
            _signal_group(record, signal.SIGKILL)
            wait_for(lambda: not _alive(record), 30, f"{name} to exit after SIGKILL", interval=0.2)
    paths.pid_file(name).unlink(missing_ok=True)
    return was_running


def recorded_names(paths):
    """Names of all components with a pid file, running or not."""
    if not paths.pids.is_dir():
        return []
    return sorted(p.stem for p in paths.pids.glob("*.json"))


def log_tail(path, lines=25):
    """The last ``lines`` lines written by the latest start of a component."""
    return "\n".join(_latest_run(path)[-lines:]) or f"(nothing logged in {path})"


def last_error(path):
    """The line of the latest run that best says why it failed, if one stands out.

    A Python traceback ends with the exception; otherwise the last klog error or
    fatal line (``E1122 ...``, ``F1122 ...``) or zap/JSON error line counts.
    """
    run = [line.strip() for line in _latest_run(path) if line.strip()]
    if any(line.startswith("Traceback") for line in run):
        return run[-1]
    for line in reversed(run):
        klog_error = line[:1] in ("E", "F") and line[1:5].isdigit()
        json_error = any(f'"level":"{level}"' in line for level in ("error", "fatal", "panic"))
        if klog_error or json_error:
            return line
    return None


def _latest_run(path):
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    run = text.splitlines()
    for index in range(len(run) - 1, -1, -1):
        if run[index].startswith(START_MARKER):
            return run[index + 1 :]
    return run


def rss_bytes(record):
    """Resident memory of a running component and of the processes of its group (a
    restart loop's component is its child); 0 if unknown."""
    total = 0
    for pid in _group_members(record.pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _group_members(group):
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The fields after the command name: state, ppid, pgrp, ...
        if int(stat[stat.rindex(")") + 2 :].split()[2]) == group:
            members.append(int(entry))
    return members or [group]


def _signal_group(record, sig):
    try:
        # Components lead their own session, so the group id is their pid; signal
        # the group to take helper children down too.
        if os.getpgid(record.pid) == record.pid:
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)
    except ProcessLookupError:
        pass


def _alive(record):
    ticks = _start_ticks(record.pid)
    alive = ticks is not None and ticks == record.start_ticks
    if not alive:
        # If the component is our own child (lab started in-process, e.g. by the pytest plugin), reap it
        # once it exited, otherwise it lingers as a zombie. Reaped after it is seen gone, not before: a
        # child that exits between a reap and the look would be seen gone (a zombie has no start time)
        # and never reaped.
        try:
            os.waitpid(record.pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return alive


def _start_ticks(pid):
    """Kernel start time of ``pid`` (clock ticks since boot); None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces or parentheses: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start_ticks = fields[0], fields[19]
    if state in ("Z", "X"):
        return None
    return int(start_ticks)
