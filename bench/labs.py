"""The benchmark's own labs, in state directories of their own (never the developer's .lab)."""

import os
import subprocess
import sys
from pathlib import Path

from bench.bootstrap import say

REPO = Path(__file__).resolve().parent.parent
LAB_DIR_ENV = "KUBEVIRT_OPS_LAB_DIR"


def default_dir(name):
    return REPO / ".build" / name


def lab_cli(state_dir, *args, timeout=3600):
    env = dict(os.environ, **{LAB_DIR_ENV: str(state_dir)})
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def is_up(state_dir):
    return lab_cli(state_dir, "status", timeout=120).returncode == 0


def up(state_dir, nodes, extra=()):
    say(f"lab up --nodes {nodes} in {state_dir}")
    result = lab_cli(state_dir, "up", "--nodes", str(nodes), *extra)
    if result.returncode != 0:
        raise RuntimeError(f"python -m lab up failed ({result.returncode}): {result.stderr.strip()[-3000:]}")
    return Path(state_dir) / "kubeconfig"


def down(state_dir):
    say(f"lab down in {state_dir}")
    lab_cli(state_dir, "down", timeout=600)
