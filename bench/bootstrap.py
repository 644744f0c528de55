"""The peers' tooling, installed on first use into a cache outside the repository.

- ``peer-venv``: a virtualenv with the ``ansible`` package (which ships
  ``kubernetes.core``) and the ``kubernetes`` library, pinned below, so
  ``kubernetes.core.k8s_drain`` runs as its users run it and apart from our own venv.
- ``nmo-<version>/node-maintenance-operator``: the medik8s node-maintenance-operator's
  controller built from its Go module (a wrapper module whose ``main.go`` is
  ``bench/nmo/main.go``), ``GOTOOLCHAIN=local CGO_ENABLED=0``.

The cache is ``$KUBEVIRT_OPS_BENCH_CACHE``, else ``$XDG_CACHE_HOME/kubevirt-ops-bench``,
else ``~/.cache/kubevirt-ops-bench``. A failed build is recorded (``build-error.txt``)
and reported, never papered over; delete the file to try again.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ANSIBLE_VERSION = "12.3.0"  # ansible-core 2.19, kubernetes.core 6.x
KUBERNETES_VERSION = "37.0.2"
NMO_MODULE = "github.com/medik8s/node-maintenance-operator"
NMO_VERSION = "v0.17.0"
NMO_BINARY = "node-maintenance-operator"
BENCH_DIR = Path(__file__).resolve().parent


class BootstrapError(Exception):
    pass


def cache_dir():
    configured = os.environ.get("KUBEVIRT_OPS_BENCH_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kubevirt-ops-bench"


def say(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


# -- kubernetes.core.k8s_drain --------------------------------------------------------

def peer_venv():
    return cache_dir() / f"peer-venv-ansible-{ANSIBLE_VERSION}"


def ensure_peer_venv():
    """The peer virtualenv's bin directory, created on first use (about a minute)."""
    venv = peer_venv()
    marker = venv / ".installed"
    if marker.exists():
        return venv / "bin"
    say(f"creating {venv} (ansible=={ANSIBLE_VERSION}, kubernetes=={KUBERNETES_VERSION})")
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    python = os.environ.get("BENCH_PEER_PYTHON") or sys.executable
    steps = [
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         f"ansible=={ANSIBLE_VERSION}", f"kubernetes=={KUBERNETES_VERSION}"],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BootstrapError(f"{' '.join(step[:3])} failed: {result.stderr.strip()[-2000:]}")
    marker.write_text(f"ansible=={ANSIBLE_VERSION}\nkubernetes=={KUBERNETES_VERSION}\n")
    return venv / "bin"


# -- node-maintenance-operator ----------------------------------------------------------

def nmo_dir():
    return cache_dir() / f"nmo-{NMO_VERSION}"


def nmo_binary():
    return nmo_dir() / NMO_BINARY


def nmo_build_error():
    path = nmo_dir() / "build-error.txt"
    return path.read_text() if path.exists() else None


def ensure_nmo(build=True):
    """The operator binary, built on first use; raises BootstrapError with the cause."""
    binary = nmo_binary()
    if binary.exists():
        return binary
    error = nmo_build_error()
    if error:
        raise BootstrapError(error)
    if not build:
        raise BootstrapError(f"{binary} is not built (run `make bench` once to build it)")
    go = shutil.which("go")
    if not go:
        raise BootstrapError("no `go` on PATH: cannot build the node-maintenance-operator")
    src = nmo_dir() / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy(BENCH_DIR / "nmo" / "main.go", src / "main.go")
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod")
    # The module's versions are served by the proxy, not always by the checksum database.
    env["GONOSUMDB"] = ",".join(filter(None, [env.get("GONOSUMDB"), "github.com/medik8s"]))
    say(f"building {NMO_MODULE}@{NMO_VERSION} (a couple of minutes, once)")
    steps = [
        [go, "mod", "init", "kubevirt-ops-bench/nmo"],
        [go, "get", f"{NMO_MODULE}@{NMO_VERSION}"],
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."],
    ]
    for step in steps:
        result = subprocess.run(step, cwd=src, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            error = f"`{' '.join(step[1:3])}` failed:\n{(result.stderr or result.stdout).strip()[-3000:]}"
            (nmo_dir() / "build-error.txt").write_text(error + "\n")
            raise BootstrapError(error)
    return binary
