"""The lab's binaries: located and, when missing, built through lab/build.sh."""

import subprocess
import sys
from pathlib import Path

from lab.errors import LabError
from lab.paths import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "lab" / "build.sh"
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def bin_dir():
    """The cache directory build.sh builds into (it may not exist yet)."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LabError(f"lab/build.sh --print-bin failed: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def stages_dir(directory):
    """kwok's stage manifests, which build.sh copies next to the binaries."""
    return Path(directory).parent / "stages"


def missing(directory):
    missing_files = [b for b in REQUIRED if not (Path(directory) / b).is_file()]
    if not stages_dir(directory).is_dir():
        missing_files.append("stages/")
    return missing_files


def ensure():
    """Return the bin dir, building whatever is missing first (can take many minutes)."""
    directory = bin_dir()
    absent = missing(directory)
    if not absent:
        return directory
    print(
        f"lab: building {', '.join(absent)} with lab/build.sh (a cold build takes a while)",
        file=sys.stderr,
        flush=True,
    )
    # build.sh reports progress on stderr, which goes straight to the user.
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        raise LabError(f"lab/build.sh failed with exit code {result.returncode}")
    absent = missing(directory)
    if absent:
        raise LabError(
            f"lab/build.sh finished but {', '.join(absent)} is still missing in {directory}"
        )
    return directory


def kubernetes_version(directory):
    """The version the control plane reports, e.g. ``v1.36.3``; used as kubelet version."""
    result = subprocess.run(
        [str(Path(directory) / "kube-apiserver"), "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    # Prints "Kubernetes v1.36.3".
    words = result.stdout.split()
    return words[-1] if result.returncode == 0 and words else "v0.0.0"
