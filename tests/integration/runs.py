"""Running the collection as a user does, for the reliability and security tests.

``module(...)`` runs one module through ``ansible`` (with any kubeconfig, verbosity and
extra options); ``playbook(...)`` runs a playbook to the end, ``start_playbook(...)``
starts one to be killed. The terminal output is ansible's default, exactly what a user
sees (tests grep it); task results come as JSON lines from the test-only callback
``callback_plugins/result_log.py``.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile

from kubernetes import client

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.node_marks import (
    EXCLUDE_LABEL,
    MAINTENANCE_TAINTS,
    PENDING_TAINT,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import NODE_STATE_ANNOTATION

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _integration_conftest():
    """tests/integration/conftest.py, loaded under its own name (every conftest is 'conftest')."""
    name = "kubevirt_ops_integration_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "conftest.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


BIN = _integration_conftest().BIN
# The temporary directory of the ansible processes the tests start (AnsiballZ payloads, drain progress files).
ANSIBLE_TMPDIR = _integration_conftest().ANSIBLE_TMPDIR
# The marks of maintenance on a node, as the collection sets them; a NodeMaintenance of either API group.
MAINTENANCE_TAINT_KEYS = tuple(t["key"] for t in MAINTENANCE_TAINTS + (PENDING_TAINT,))
NODE_MAINTENANCE_GROUPS = ("nodemaintenance.medik8s.io", "nodemaintenance.kubevirt.io")
CALLBACKS = os.path.join(HERE, "callback_plugins")


def ansible_env(kubeconfig, result_log, extra=None):
    env = _integration_conftest().ansible_env(kubeconfig)
    env.update({
        "ANSIBLE_STDOUT_CALLBACK": "default",
        "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS,
        "ANSIBLE_CALLBACKS_ENABLED": "result_log",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "KVOPS_RESULT_LOG": result_log,
    })
    if kubeconfig is None:
        env.pop("K8S_AUTH_KUBECONFIG", None)
    env.update(extra or {})
    return env


def _result_log():
    handle = tempfile.NamedTemporaryFile(prefix="kvops-results-", suffix=".jsonl", delete=False)
    handle.close()
    return handle.name


def _read_results(path):
    results = []
    try:
        with open(path) as handle:
            for line in handle:
                if line.strip():
                    results.append(json.loads(line))
    except OSError:
        pass
    return results


class Run:
    """The outcome of one ansible / ansible-playbook process."""

    def __init__(self, argv, returncode, stdout, stderr, results):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.lines = results

    @property
    def output(self):
        return self.stdout + "\n" + self.stderr

    def results(self):
        """Every task result of the run: [(task name without its role prefix, host result dict)]."""
        return [(line["name"], line["result"]) for line in self.lines]

    def statuses(self, name):
        """The statuses of the results of the task ``name`` (without its role prefix), in order: ok, changed (an ok
        result that changed), skipped, failed or unreachable."""
        return ["changed" if line["status"] == "ok" and line["result"].get("changed") else line["status"]
                for line in self.lines if line["name"] == name]

    def failures(self):
        return [(line["name"], line["result"]) for line in self.lines
                if line["status"] in ("failed", "unreachable") and not line.get("ignore_errors")]

    def result(self):
        """The result of the single task of an ad-hoc run."""
        results = self.results()
        if not results:
            raise AssertionError("ansible produced no task result (rc=%s)\nstdout:\n%s\nstderr:\n%s" % (
                self.returncode, self.stdout[-3000:], self.stderr[-3000:]))
        return results[0][1]


def module(kubeconfig, name, args, check=False, diff=False, verbosity=0, env=None, timeout=1800):
    """Run ``kubevirt_ops.maintenance.<name>`` on localhost; returns a Run."""
    argv = [os.path.join(BIN, "ansible"), "localhost", "-c", "local", "-m", "kubevirt_ops.maintenance." + name,
            "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    if verbosity:
        argv.append("-" + "v" * verbosity)
    return _run(argv, kubeconfig, env, timeout)


def _in_maintenance(node, maintained):
    """Whether ``node`` (a kubernetes.client V1Node) carries a mark of maintenance, as the collection
    defines them (module_utils/cluster/node_marks.py), or is named by a NodeMaintenance (``maintained``)."""
    meta, spec = node.metadata, node.spec
    return bool(spec.unschedulable or NODE_STATE_ANNOTATION in (meta.annotations or {})
                or EXCLUDE_LABEL in (meta.labels or {}) or meta.name in maintained
                or any(t.key in MAINTENANCE_TAINT_KEYS for t in spec.taints or []))


def end_maintenance_left(kubeconfig, api, names):
    """``node_maintenance state=absent`` on each of ``names`` that carries a mark of maintenance (cordon,
    a maintenance or pending taint, the collection's record, the remediation exclusion label, a
    NodeMaintenance resource): what a test left, even when it failed. A node without one is left alone
    (the module would change nothing there), so a test that ended its maintenance costs no ansible run."""
    maintained = set()
    for group in NODE_MAINTENANCE_GROUPS:
        try:
            crs = client.CustomObjectsApi(api).list_cluster_custom_object(group, "v1beta1", "nodemaintenances")
        except client.exceptions.ApiException as exc:
            if exc.status != 404:  # 404: that NodeMaintenance API is not in this lab
                raise
            continue
        maintained.update((cr.get("spec") or {}).get("nodeName") for cr in crs["items"])
    core = client.CoreV1Api(api)
    for name in names:
        if _in_maintenance(core.read_node(name), maintained):
            module(kubeconfig, "node_maintenance", {"name": name, "state": "absent"})


def _run(argv, kubeconfig, env, timeout):
    log = _result_log()
    try:
        proc = subprocess.run(argv, env=ansible_env(kubeconfig, log, env), capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
        return Run(argv, proc.returncode, proc.stdout, proc.stderr, _read_results(log))
    finally:
        os.unlink(log)


def playbook_argv(playbook, extra_vars=None, verbosity=0, inventory="localhost,"):
    """``inventory``: one source, or a list of them (each its own -i)."""
    argv = [os.path.join(BIN, "ansible-playbook")]
    for source in [inventory] if isinstance(inventory, str) else inventory:
        argv += ["-i", str(source)]
    argv += ["-c", "local", playbook]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    if verbosity:
        argv.append("-" + "v" * verbosity)
    return argv


def playbook(kubeconfig, playbook_path, extra_vars=None, verbosity=0, env=None, timeout=1800, inventory="localhost,"):
    """Run a playbook to its end; returns a Run."""
    return _run(playbook_argv(playbook_path, extra_vars, verbosity, inventory), kubeconfig, env, timeout)


def _stat(pid):
    """The fields of /proc/<pid>/stat from the third on (state, parent, ...), None when the process is gone.
    The second field, the command, is in parentheses and may hold spaces."""
    try:
        with open("/proc/%s/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 19 else None


def _descendants(root):
    """Every process under ``root`` (from /proc), children before grandchildren."""
    children = {}
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _start_time(pid):
    """The start time of process ``pid`` (clock ticks since boot), None when it is gone or a zombie."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else fields[19]


def still_running(processes):
    """The pids of ``processes`` ([(pid, start time)], from Started.tree) that still run."""
    return [pid for pid, started in processes if started is not None and _start_time(pid) == started]


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Started:
    """A playbook running in the background, in its own process group, with its output in a file."""

    def __init__(self, argv, kubeconfig, env):
        self.argv = argv
        self.results_path = _result_log()
        self.log = tempfile.NamedTemporaryFile(prefix="kvops-run-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, env=ansible_env(kubeconfig, self.results_path, env), stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)

    def output(self):
        with open(self.log.name, errors="replace") as handle:
            return handle.read()

    def results(self):
        """Task results so far: [{status, task, action, host, result}]."""
        return _read_results(self.results_path)

    def running(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGKILL ansible-playbook and every process under it, as a crash of the machine would.

        Ansible's worker processes start their own sessions, so the module a task runs is in
        another process group: the whole tree is frozen first (no new process escapes), then
        killed.
        """
        tree = [self.proc.pid]
        for _round in range(3):
            for pid in tree:
                _signal(pid, signal.SIGSTOP)
            grown = [self.proc.pid] + _descendants(self.proc.pid)
            if set(grown) == set(tree):
                break
            tree = grown
        for pid in reversed(tree):
            _signal(pid, signal.SIGKILL)
        return self.proc.wait(60)

    def tree(self):
        """ansible-playbook and every process under it now, as [(pid, start time)]."""
        return [(pid, _start_time(pid)) for pid in [self.proc.pid] + _descendants(self.proc.pid)]

    def cancel(self, timeout=60):
        """An AWX job cancelled through ansible-runner: SIGKILL to ansible-playbook's process group.
        Ansible's workers (sessions of their own) and what they started are left to end by themselves."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout)

    def interrupt(self, timeout=120):
        """Ctrl-C in the terminal that runs the playbook: SIGINT to its foreground process group
        (ansible-playbook; the workers live in sessions of their own). ansible-playbook ends
        without its rescue and always blocks; returns its exit status."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout)

    def wait(self, timeout=None):
        return self.proc.wait(timeout)

    def close(self):
        if self.running():
            self.kill()
        self.log.close()
        for path in (self.log.name, self.results_path):
            try:
                os.unlink(path)
            except OSError:
                pass


def rolling_vars(nodes, lock, tmp_path, **extra):
    """Extra vars of a rolling run over ``nodes`` by drain, for the fault tests: its own lock, generous
    timeouts, the report under ``tmp_path``; ``extra`` adds or overrides."""
    values = {
        "rolling_maintenance_nodes": list(nodes),
        "rolling_maintenance_method": "drain",
        "rolling_maintenance_lock_name": lock,
        "rolling_maintenance_lock_ttl": 600,
        "rolling_maintenance_drain_timeout": 300,
        "rolling_maintenance_ready_timeout": 120,
        "rolling_maintenance_verify_timeout": 180,
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
    }
    values.update(extra)
    return values


def start_playbook(kubeconfig, playbook_path, extra_vars=None, env=None, verbosity=0):
    """Start a playbook in the background; returns a Started."""
    extra = dict(env or {})
    extra["PYTHONUNBUFFERED"] = "1"
    return Started(playbook_argv(playbook_path, extra_vars, verbosity), kubeconfig, extra)
