"""pytest fixtures for tests that run against the lab.

Enable with ``pytest_plugins = ["lab.pytest_plugin"]`` (run pytest from the
repository root, e.g. ``.venv/bin/python -m pytest``, so ``lab`` is importable).

* ``lab`` (session): the lab under test. If ``$KUBEVIRT_OPS_LAB_DIR`` names a lab
  that is up, it is reused and left running; otherwise a lab with the default shape
  (1 control-plane node, 4 workers) is brought up in a fresh temporary state
  directory for the session and taken down at its end. A suite that needs a given
  KubeVirt (real or simulated, a version) overrides it with ``session_lab``.
* ``k8s`` (session): a ``kubernetes.client.ApiClient`` for the lab.
* ``namespace``: a fresh namespace per test, with its ``default`` ServiceAccount
  in place; always deleted afterwards.
* ``restore_nodes``: after the test, uncordons, heals and boots the nodes that were
  schedulable and healthy before it (a dead machine is powered on and its node waited
  for until Ready), so a test that cordons, drains, partitions or fails nodes leaves
  them as it found them even when it fails.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lab import cluster, network, nodes
from lab import settings as lab_settings
from lab.errors import LabError
from lab.paths import REPO_ROOT, STATE_DIR_ENV, LabPaths
from lab.wait import wait_for

KUBECTL_TIMEOUT = 600
SERVICE_ACCOUNT_TIMEOUT = 120


class Lab:
    """Handle on a running lab, for tests."""

    def __init__(self, state_dir):
        self.paths = LabPaths(Path(state_dir))

    @property
    def state_dir(self):
        return self.paths.state_dir

    @property
    def kubeconfig(self):
        """Path (str) of the admin kubeconfig."""
        return str(self.paths.kubeconfig)

    @property
    def settings(self):
        """Ports and node counts the lab was brought up with."""
        return lab_settings.load(self.paths)

    def kubectl(self, *args, check=True, input=None, timeout=KUBECTL_TIMEOUT):
        """Run ``kubectl --kubeconfig <lab> ARGS``; returns the CompletedProcess (text).

        With ``check`` (the default) a non-zero exit raises AssertionError carrying
        kubectl's stderr, so a failing command explains itself in the test report.
        """
        argv = ["kubectl", f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr}{result.stdout}"
            )
        return result

    def cli(self, *args, check=True, state_dir=None, timeout=KUBECTL_TIMEOUT):
        """Run ``python -m lab ARGS`` for this lab (or ``state_dir``), as a user would."""
        env = dict(os.environ, **{STATE_DIR_ENV: str(state_dir or self.state_dir)})
        result = subprocess.run(
            [sys.executable, "-m", "lab", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"python -m lab {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr}{result.stdout}"
            )
        return result

    def api_client(self):
        return config.new_client_from_config(config_file=self.kubeconfig)

    def node_fail(self, name, wait=True):
        """The node's machine crashes (``python -m lab node-fail``: its BMC's ForceOff, or the same death for a
        machine without one); returns once it is dead, with ``wait`` once the node is NotReady and tainted.
        Its guests are dead; their VMIs stay Running in the API."""
        cluster.node_fail(self.paths, name, wait=wait)

    def node_recover(self, name, wait=True):
        """The node's machine is powered on and boots (a new boot ID, its virt-launcher pods Failed, a node
        deleted meanwhile registered again); returns once it booted, with ``wait`` once it is Ready."""
        cluster.node_recover(self.paths, name, wait=wait)

    def node_partition(self, name, wait=True):
        """Cut the node off the network: its heartbeat stops, its processes and guests go on; with ``wait``,
        until it is NotReady and tainted."""
        cluster.node_partition(self.paths, name, wait=wait)

    def node_heal(self, name, wait=True):
        """End the node's partition: the same boot, its guests still running; with ``wait``, until Ready."""
        cluster.node_heal(self.paths, name, wait=wait)

    def restart_apiserver(self, down_for=0):
        """Stop kube-apiserver and start it again on the same port (after ``down_for`` seconds);
        waits for /readyz."""
        cluster.restart(self.paths, "kube-apiserver", down_for=down_for)

    def apiserver_up(self):
        """Whether something listens on the API server's port."""
        return network.port_in_use(self.settings.ports["kube-apiserver"])

    def scheduler_profile(self, name):
        """Restart the kube-scheduler with a profile of lab/scheduler.py; returns the one it had."""
        before = self.settings.scheduler_profile
        cluster.set_scheduler_profile(self.paths, name)
        return before

    def node_states(self):
        """Which nodes are cordoned, which dead and which partitioned, for ``restore_nodes`` later."""
        api = self._api()
        cordoned = {n.metadata.name for n in nodes.list_nodes(api) if n.spec.unschedulable}
        return {"cordoned": cordoned, "failed": set(nodes.failed_names(api)),
                "partitioned": set(nodes.partitioned_names(api))}

    def restore_nodes(self, states=None):
        """Heal partitioned nodes, power dead machines on (until their nodes are Ready again) and uncordon;
        with ``states`` only the nodes that were fine then."""
        states = states or {}
        api = self._api()
        for name in nodes.partitioned_names(api):
            if name not in states.get("partitioned", ()):
                cluster.node_heal(self.paths, name)
        for name in nodes.failed_names(api):
            if name not in states.get("failed", ()):
                cluster.node_recover(self.paths, name)
        core = client.CoreV1Api(api)
        for node in nodes.list_nodes(api):
            name = node.metadata.name
            if node.spec.unschedulable and name not in states.get("cordoned", ()):
                core.patch_node(name, {"spec": {"unschedulable": None}})

    def _api(self):
        return nodes.api_client(self.paths.kubeconfig)


def session_lab(tmp_path_factory, kubevirt_mode=None, kubevirt_version=None):
    """Generator behind the ``lab`` fixture, for suites that need a particular KubeVirt.

    Reuses the lab named by ``$KUBEVIRT_OPS_LAB_DIR`` when it is up and (if asked) runs
    that KubeVirt mode and version; otherwise brings one up in a fresh temporary
    directory (``kubevirt_mode`` "real" or "simulated", ``kubevirt_version`` e.g. "1.9.0")
    and takes it down at the end.
    """
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        paths = LabPaths(Path(configured).resolve())
        if cluster.is_running(paths) and _runs(paths, kubevirt_mode, kubevirt_version):
            yield Lab(paths.state_dir)
            return
    paths = LabPaths(tmp_path_factory.mktemp("lab"))
    try:
        try:
            cluster.up(paths, kubevirt_mode=kubevirt_mode, kubevirt_version=kubevirt_version)
        except LabError as e:
            pytest.fail(f"the lab did not come up: {e}\n{e.detail or ''}", pytrace=False)
        yield Lab(paths.state_dir)
    finally:
        cluster.down(paths)


def _runs(paths, kubevirt_mode, kubevirt_version):
    settings = lab_settings.load(paths)
    if settings is None:
        return kubevirt_mode is None and kubevirt_version is None
    if kubevirt_version is not None:
        kubevirt_mode = kubevirt_mode or "real"
        if settings.kubevirt_version.lstrip("v") != str(kubevirt_version).lstrip("v"):
            return False
    return kubevirt_mode is None or (settings.kubevirt and settings.kubevirt_mode == kubevirt_mode)


@pytest.fixture(scope="session")
def lab(tmp_path_factory, pytestconfig):
    """The session's lab: real KubeVirt of ``--kubevirt-version`` (a pytest option of the
    integration tests) or ``$KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION``, else the default release."""
    version = pytestconfig.getoption("--kubevirt-version", default=None) or os.environ.get(
        cluster.KUBEVIRT_VERSION_ENV
    )
    yield from session_lab(tmp_path_factory, kubevirt_version=version)


@pytest.fixture(scope="session")
def k8s(lab):
    api = lab.api_client()
    yield api
    api.close()


@pytest.fixture
def namespace(k8s):
    core = client.CoreV1Api(k8s)
    name = f"test-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        # Pods are refused until the controller-manager created this account.
        wait_for(
            lambda: _service_account_exists(core, name),
            SERVICE_ACCOUNT_TIMEOUT,
            f"the default ServiceAccount in {name}",
        )
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def restore_nodes(lab):
    states = lab.node_states()
    yield
    lab.restore_nodes(states)


def _service_account_exists(core, namespace):
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise
