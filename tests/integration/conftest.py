"""Integration tests run against the lab cluster (see lab/README.md).

Fixtures from lab.pytest_plugin: ``lab`` (one lab per session), ``k8s`` (a kubernetes
ApiClient), ``namespace`` (a fresh namespace per test). ``run_module`` runs one module of
this collection through ``ansible`` exactly as a user would, and returns its result.
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytest_plugins = ["lab.pytest_plugin"]


def pytest_addoption(parser):
    parser.addoption(
        "--kubevirt-version",
        default=None,
        help="KubeVirt release the real-KubeVirt suites (kubevirt_contract) run against, e.g. 1.9.0;"
        " default: the lab's (1.7.0)",
    )


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The ansible the tests run: this virtualenv's, or the one whose bin directory
# KUBEVIRT_OPS_ANSIBLE_BIN names (make integration-core-<X.Y>: the oldest and newest ansible-core).
BIN = os.environ.get("KUBEVIRT_OPS_ANSIBLE_BIN") or os.path.dirname(sys.executable)
PYTHON = os.path.join(BIN, "python")
# The temporary directory of the ansible processes the tests start: a module process killed with its playbook
# (the kill tests) leaves its AnsiballZ payload behind, here rather than in the machine's /tmp. Gone at exit.
# One per test process, whichever copy of this file makes it (tests/integration/runs.py loads it too).
ANSIBLE_TMPDIR = os.environ.get("KVOPS_TEST_ANSIBLE_TMPDIR") or ""
if not ANSIBLE_TMPDIR:
    ANSIBLE_TMPDIR = os.environ["KVOPS_TEST_ANSIBLE_TMPDIR"] = tempfile.mkdtemp(prefix="kvops-ansible-tmp-")
    atexit.register(shutil.rmtree, ANSIBLE_TMPDIR, True)


def ansible_env(kubeconfig, extra=None):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".build", "collections"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_PYTHON_INTERPRETER": PYTHON,
        "K8S_AUTH_KUBECONFIG": kubeconfig,
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
        "TMPDIR": ANSIBLE_TMPDIR,
    })
    env.update(extra or {})
    return env


def run_ansible_module(kubeconfig, module, args, check=False, diff=False, env=None, verbosity=0):
    """Run ``kubevirt_ops.maintenance.<module>`` on localhost; return (result dict, completed process)."""
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-c", "local", "-m", "kubevirt_ops.maintenance." + module,
           "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    if verbosity:
        cmd.append("-" + "v" * verbosity)
    proc = subprocess.run(cmd, env=ansible_env(kubeconfig, env), capture_output=True, text=True, timeout=3600)
    try:
        # The JSON document starts at the first line that is "{" (lines before it: the
        # progress the drain modules display while they run).
        data = json.loads(proc.stdout[proc.stdout.index("{") if proc.stdout.startswith("{")
                                      else proc.stdout.index("\n{") + 1:])
        result = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("ansible produced no JSON result (rc=%s)\nstdout:\n%s\nstderr:\n%s"
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    return result, proc


@pytest.fixture
def run_module(lab):
    """run_module('node_labeller', {'name': 'lab-worker-1', 'skip': True}, check=False, diff=False).

    The result comes from the test-only ``result_log`` callback (runs.py), which needs no
    collection besides ansible-core (the ``json`` stdout callback lives in ansible.posix).
    """
    import runs

    def _run(module, args, check=False, diff=False, env=None):
        return runs.module(lab.kubeconfig, module, args, check=check, diff=diff, env=env).result()
    return _run
