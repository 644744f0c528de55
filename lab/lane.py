"""One lab for several test tiers run one after another (a lane of ``make test``).

``python -m lab.lane DIR COMMAND [ARG...]`` brings a lab up in the state directory DIR (after
taking down whatever an earlier, interrupted lane left running there), runs COMMAND with
``$KUBEVIRT_OPS_LAB_DIR`` naming it, and takes the lab down whatever COMMAND's outcome, also
when the lane is interrupted (SIGINT, SIGTERM: passed on to COMMAND and every process it started, which
are killed once COMMAND ends). It exits with
COMMAND's exit code, or 1 when the lab did not come up.

The tests' ``lab`` fixture reuses a running lab named by ``$KUBEVIRT_OPS_LAB_DIR`` when it runs
the KubeVirt release they ask for (lab/pytest_plugin.py ``session_lab``), so the tiers of a lane
share one control plane instead of starting one each; a tier that asks for another release (or
brings up a lab of its own, as the bench smoke does) still does.
"""

import os
import signal
import time
import subprocess
import sys
from pathlib import Path

from lab import cluster
from lab.errors import LabError
from lab.paths import STATE_DIR_ENV, LabPaths


def run(state_dir, command):
    paths = LabPaths(Path(state_dir).resolve())
    cluster.down(paths)
    started = time.monotonic()
    try:
        cluster.up(paths)
    except LabError as e:
        print(f"lab lane: the lab did not come up in {paths.state_dir}: {e}", file=sys.stderr)
        cluster.down(paths)
        return 1
    print(f"lab lane: the lab in {paths.state_dir} is up ({time.monotonic() - started:.0f} s); "
          f"running {' '.join(command)}", flush=True)
    # COMMAND and everything it starts form a process group of their own, so a signal reaches all of them
    # (make passes SIGTERM to no child of its own), and nothing of the lane outlives its lab.
    child = subprocess.Popen(command, env=dict(os.environ, **{STATE_DIR_ENV: str(paths.state_dir)}),
                             start_new_session=True)

    def pass_on(signum, _frame):
        _signal_group(child, signum)

    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _signal_group(child, signal.SIGKILL)
        child.wait()
        cluster.down(paths)


def _signal_group(child, signum):
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:
        pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m lab.lane DIR COMMAND [ARG...]", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
