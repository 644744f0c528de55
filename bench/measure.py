"""Run one command and measure it: wall time, exit code, output, peak memory.

Peak memory is taken two ways. ``max_rss_mib`` is the kernel's own figure from
``wait4`` (the largest resident set of any single process in the command's tree:
what ``/usr/bin/time -v`` reports). ``peak_tree_rss_mib`` is the largest sum of the
resident sets of all processes of the tree at once, sampled from /proc every 50 ms
(an Ansible run is a controller process plus a module process, alive together).
"""

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_SECONDS = 0.05


@dataclass
class Measured:
    argv: list
    wall_seconds: float
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    max_rss_mib: float = 0.0
    peak_tree_rss_mib: float = 0.0
    user_seconds: float = 0.0
    system_seconds: float = 0.0
    started: float = 0.0  # time.time() at start, for the audit-log window
    ended: float = 0.0
    extra: dict = field(default_factory=dict)

    def summary(self):
        data = asdict(self)
        data.pop("stdout")
        data.pop("stderr")
        return data


def _children_map():
    """ppid -> [pid] for every process visible in /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_bytes(root):
    """Sum of the resident sets of ``root`` and all its descendants right now."""
    children = _children_map()
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss_bytes(pid)
        stack.extend(children.get(pid, ()))
    return total


def run(argv, env=None, timeout=1800, cwd=None, sample_memory=True):
    """Run ``argv`` to completion (its whole process group is killed on timeout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started_wall = time.time()
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.wait(SAMPLE_SECONDS):
                peak[0] = max(peak[0], tree_rss_bytes(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True) if sample_memory else None
        if sampler:
            sampler.start()
        timed_out = [False]

        def kill():
            timed_out[0] = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            done.set()
        wall = time.monotonic() - started
        ended_wall = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if sampler:
            sampler.join()
        # Anything the command left behind in its session goes too.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out.seek(0)
        err.seek(0)
        return Measured(
            argv=[str(a) for a in argv],
            wall_seconds=round(wall, 3),
            returncode=proc.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
            timed_out=timed_out[0],
            max_rss_mib=round(usage.ru_maxrss / 1024.0, 1),
            peak_tree_rss_mib=round(peak[0] / 2**20, 1),
            user_seconds=round(usage.ru_utime, 3),
            system_seconds=round(usage.ru_stime, 3),
            started=started_wall,
            ended=ended_wall,
        )
