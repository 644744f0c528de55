"""KubeVirt's binaries for one release: located and, when missing, built by build.sh."""

import os
import subprocess
import sys
from pathlib import Path

from lab.errors import LabError
from lab.kubevirt import normalize_version
from lab.paths import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "lab" / "kubevirt" / "build.sh"
PROGRAMS = ("virt-controller", "virt-api", "kubevirt-manifests")


def _env(version):
    return dict(os.environ, KUBEVIRT_VERSION=f"v{normalize_version(version)}")


def bin_dir(version):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(version),
    )
    if result.returncode != 0:
        raise LabError(f"lab/kubevirt/build.sh --print-bin failed: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def missing(directory):
    return [p for p in PROGRAMS if not (Path(directory) / p).is_file()]


def ensure(version, log_file):
    """The bin dir of KubeVirt ``version``, built first when incomplete (minutes, once)."""
    directory = bin_dir(version)
    if missing(directory):
        print(
            f"lab: building KubeVirt v{normalize_version(version)} (virt-controller, virt-api) from"
            f" its Go module; a cold build takes several minutes; log: {log_file}",
            file=sys.stderr,
            flush=True,
        )
    # build.sh returns at once when everything is there; it also rebuilds our manifest
    # generator (seconds) when its sources changed.
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.DEVNULL,
            stderr=log,
            check=False,
            env=_env(version),
        )
    absent = missing(directory)
    if result.returncode != 0 or absent:
        reason = _last_line(log_file)
        raise LabError(
            f"building KubeVirt v{normalize_version(version)} failed"
            f"{': ' + reason if reason else ''} [log: {log_file}]"
        )
    return directory


def _last_line(path):
    try:
        lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def module_version(binary):
    """The kubevirt.io/kubevirt version `go version -m` names in ``binary`` (or None)."""
    result = subprocess.run(["go", "version", "-m", str(binary)], capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] in ("mod", "dep") and words[1] == "kubevirt.io/kubevirt":
            return words[2]
    return None
