"""The peers' tooling, installed on first use into a cache outside the repository.

- ``peer-venv``: a virtualenv with the ``ansible`` package (which ships
  ``kubernetes.core``) and the ``kubernetes`` library, pinned below, so
  ``kubernetes.core.k8s_drain`` runs as its users run it and apart from our own venv.

The cache is ``$KUBEVIRT_OPS_BENCH_CACHE``, else ``$XDG_CACHE_HOME/kubevirt-ops-bench``,
else ``~/.cache/kubevirt-ops-bench``. The medik8s node-maintenance-operator is the lab's
(``lab/nmo.py`` builds it into the lab's cache; the lab runs it).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from lab import nmo

ANSIBLE_VERSION = "12.3.0"  # ansible-core 2.19, kubernetes.core 6.x
KUBERNETES_VERSION = "37.0.2"
NMO_VERSION = nmo.VERSION


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
