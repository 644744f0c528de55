"""The tools compared, each run the way its users run it.

Every peer drains one node and returns when that tool considers the node drained:

- ``kubectl``: ``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --force``
  (retries a refused eviction every 5 s, polls each pod every second).
- ``k8s_drain``: ``kubernetes.core.k8s_drain`` from the ``ansible`` package, in its own
  virtualenv, with the same three options and ``wait_timeout`` (so it waits for the pods
  to be gone, as kubectl does) and ``wait_sleep: 1`` (kubectl's poll interval; the
  module's default is 5 s).
- ``ours (drain)`` / ``ours (cr)``: ``kubevirt_ops.maintenance.node_maintenance`` with
  ``method: drain`` (the module evicts) and ``method: cr`` (the module creates a
  NodeMaintenance CR and follows it; the lab's NodeMaintenance controller drains).
- ``nmo``: the medik8s node-maintenance-operator, built from its Go module and run out
  of cluster (the lab simulator's own NodeMaintenance controller is switched off for
  it). The run is: create a NodeMaintenance CR, wait until its phase is Succeeded.

Each Ansible-based peer is timed as a user sees it: ``ansible localhost -m ...`` from
process start to exit, Ansible's own start-up included.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import bootstrap, measure
from bench.kube import Kube
from bench.workloads import Timeout, wait_for

REPO = Path(__file__).resolve().parent.parent
KUBECTL = os.environ.get("BENCH_KUBECTL", "kubectl")
SIM = "kubevirt-sim"
NO_NM_FLAG = "--no-node-maintenance"


class Unavailable(Exception):
    """The peer cannot be run on this machine (with the reason)."""


def ansible_result(stdout):
    """The result of ``ansible localhost -m ...`` (ad-hoc ``minimal`` output: ``host | STATUS => {json}``)."""
    marker = stdout.find(" => {")
    if marker < 0:
        return None
    try:
        result, _ = json.JSONDecoder().raw_decode(stdout[marker + 4:])
    except ValueError:
        return None
    status = stdout[:marker].rsplit("|", 1)[-1].strip()
    if status.startswith("FAILED") and "failed" not in result:
        result["failed"] = True
    if status.startswith("UNREACHABLE"):
        result["unreachable"] = True
    return result


def ansible_error(measured, result):
    if result is None:
        tail = (measured.stderr or measured.stdout or "").strip().splitlines()[-5:]
        return f"ansible exited {measured.returncode} with no result: {' | '.join(tail)}"
    if result.get("failed") or result.get("unreachable"):
        return str(result.get("msg") or result)[:2000]
    return None


class Env:
    """What peers need: the lab, our virtualenv and collection path, the peers' tooling."""

    def __init__(self, lab_dir, kubeconfig, kube, collections, timeout=900):
        self.lab_dir = Path(lab_dir)
        self.kubeconfig = str(kubeconfig)
        self.kube = kube
        self.collections = str(collections)
        self.timeout = timeout
        self.our_bin = Path(sys.executable).parent

    def ansible_env(self, python, extra=None):
        env = dict(os.environ)
        env.update({
            "ANSIBLE_STDOUT_CALLBACK": "minimal",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_HOST_KEY_CHECKING": "0",
            "ANSIBLE_PYTHON_INTERPRETER": str(python),
            "ANSIBLE_NOCOLOR": "1",
            "K8S_AUTH_KUBECONFIG": self.kubeconfig,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        })
        env.update(extra or {})
        return env

    def our_ansible_env(self):
        env = self.ansible_env(self.our_bin / "python", {"ANSIBLE_COLLECTIONS_PATH": self.collections})
        env["PATH"] = str(self.our_bin) + os.pathsep + env.get("PATH", "")
        return env


class Outcome:
    """What one peer run produced."""

    def __init__(self, measured, ok, error=None, details=None):
        self.measured = measured
        self.ok = ok
        self.error = error
        self.details = details or {}


class Peer:
    key = ""
    label = ""
    clients = ()  # user-agent product tokens of this peer's API requests
    needs_nm_controller = None  # True: the lab's NodeMaintenance controller on; False: off

    def prepare(self, env):
        """Once per benchmark: install or check the tooling; raise Unavailable."""

    def before_run(self, env, node):
        """Before each run, untimed."""

    def run(self, env, node):
        raise NotImplementedError

    def after_run(self, env, node):
        """After each run, untimed: leave maintenance the peer's own way."""

    def close(self, env):
        """At the end of the benchmark."""


class Kubectl(Peer):
    key = "kubectl"
    label = "kubectl drain"
    clients = ("kubectl",)

    def prepare(self, env):
        result = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise Unavailable(f"kubectl is not usable: {result.stderr.strip()}")

    def run(self, env, node):
        argv = [KUBECTL, f"--kubeconfig={env.kubeconfig}", "drain", node, "--ignore-daemonsets",
                "--delete-emptydir-data", "--force", f"--timeout={env.timeout}s"]
        m = measure.run(argv, timeout=env.timeout + 60)
        error = None if m.returncode == 0 else (m.stderr.strip().splitlines() or ["exit %d" % m.returncode])[-1]
        return Outcome(m, m.returncode == 0, error)

    def after_run(self, env, node):
        subprocess.run([KUBECTL, f"--kubeconfig={env.kubeconfig}", "uncordon", node],
                       capture_output=True, check=False)


class K8sDrain(Peer):
    key = "k8s_drain"
    label = "kubernetes.core.k8s_drain"
    clients = ("OpenAPI-Generator",)

    def prepare(self, env):
        try:
            self.bin = bootstrap.ensure_peer_venv()
        except bootstrap.BootstrapError as e:
            raise Unavailable(str(e)) from e

    def run(self, env, node):
        args = {
            "name": node,
            "state": "drain",
            "kubeconfig": env.kubeconfig,
            "delete_options": {
                "ignore_daemonsets": True,
                "delete_emptydir_data": True,
                "force": True,
                "wait_timeout": env.timeout,
                "wait_sleep": 1,
            },
        }
        argv = [str(self.bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                "-m", "kubernetes.core.k8s_drain", "-a", json.dumps(args)]
        m = measure.run(argv, env=env.ansible_env(self.bin / "python"), timeout=env.timeout + 60)
        result = ansible_result(m.stdout)
        error = ansible_error(m, result)
        if error is None and result and result.get("warnings"):
            # e.g. "timeout reached while pods were still running."
            warnings = [w for w in result["warnings"] if "timeout" in str(w).lower()]
            if warnings:
                error = "; ".join(map(str, warnings))
        return Outcome(m, error is None, error, {"result": (result or {}).get("result")})

    def after_run(self, env, node):
        args = {"name": node, "state": "uncordon", "kubeconfig": env.kubeconfig}
        subprocess.run([str(self.bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                        "-m", "kubernetes.core.k8s_drain", "-a", json.dumps(args)],
                       env=env.ansible_env(self.bin / "python"), capture_output=True, check=False)


class Ours(Peer):
    clients = ("kubevirt_ops.maintenance",)

    def __init__(self, method):
        self.method = method
        self.key = f"ours_{method}"
        self.label = f"node_maintenance (method {method})"
        self.needs_nm_controller = True if method == "cr" else None

    def prepare(self, env):
        module = REPO / "plugins" / "modules" / "node_maintenance.py"
        if not module.exists():
            raise Unavailable("plugins/modules/node_maintenance.py does not exist yet")

    def module(self, env, args, check=False):
        argv = [str(env.our_bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                "-m", "kubevirt_ops.maintenance.node_maintenance", "-a", json.dumps(args)]
        if check:
            argv.append("--check")
        return measure.run(argv, env=env.our_ansible_env(), timeout=env.timeout + 60)

    def run(self, env, node):
        args = {"name": node, "method": self.method, "reason": "benchmark", "wait_timeout": env.timeout}
        m = self.module(env, args)
        result = ansible_result(m.stdout)
        error = ansible_error(m, result)
        details = {}
        if result:
            details = {k: result.get(k) for k in ("phase", "method", "total_pods", "eviction_pods",
                                                   "duration_seconds", "last_error")}
            vms = result.get("vms") or {}
            details["vms"] = {k: len(v or []) for k, v in vms.items()}
            if error is None and result.get("phase") not in (None, "Succeeded"):
                error = f"phase {result.get('phase')}: {result.get('last_error')}"
        return Outcome(m, error is None, error, details)

    def after_run(self, env, node):
        self.module(env, {"name": node, "state": "absent", "method": self.method})


class NodeMaintenanceOperator(Peer):
    key = "nmo"
    label = f"node-maintenance-operator {bootstrap.NMO_VERSION}"
    clients = ("node-maintenance-operator", "nm-client")
    needs_nm_controller = False

    def __init__(self, build=True):
        self.build = build
        self.proc = None
        self.log = None

    def prepare(self, env):
        try:
            self.binary = bootstrap.ensure_nmo(build=self.build)
        except bootstrap.BootstrapError as e:
            raise Unavailable(str(e)) from e
        if not simulator_supports_nm_off():
            raise Unavailable(
                "the lab simulator has no --no-node-maintenance flag: its own NodeMaintenance "
                "controller would act on the same CRs")
        self.client = Kube(env.kubeconfig, user_agent="nm-client/1")

    def _start(self, env):
        if self.proc and self.proc.poll() is None:
            return
        log_path = env.lab_dir / "logs" / "node-maintenance-operator.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "ab")
        self.log_path = log_path
        start = log_path.stat().st_size
        proc_env = dict(os.environ, KUBECONFIG=env.kubeconfig, NO_PROXY="127.0.0.1,localhost")
        self.proc = subprocess.Popen([str(self.binary)], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=proc_env, start_new_session=True)

        def started():
            if self.proc.poll() is not None:
                raise Unavailable(f"node-maintenance-operator exited {self.proc.returncode}: "
                                  f"{_tail(log_path, start)}")
            with open(log_path, "rb") as handle:
                handle.seek(start)
                return b"Starting workers" in handle.read()
        try:
            wait_for(started, 120, "the node-maintenance-operator to start its workers", interval=0.2)
        except Timeout as e:
            raise Unavailable(f"{e}: {_tail(log_path, start)}") from e

    def before_run(self, env, node):
        self._start(env)

    def run(self, env, node):
        name = f"bench-{node}"
        body = {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
                "metadata": {"name": name}, "spec": {"nodeName": node, "reason": "benchmark"}}
        started_wall, started = time.time(), time.monotonic()
        error = None
        phase = None
        try:
            created = self.client.create("NodeMaintenance", body)
            watch = self.client.watch("NodeMaintenance", field_selector=f"metadata.name={name}",
                                      resource_version=created["metadata"]["resourceVersion"],
                                      timeout_seconds=env.timeout)
            deadline = time.monotonic() + env.timeout
            last = created
            for _, obj in watch.events():
                last = obj
                phase = (obj.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
                    break
            watch.close()
            if phase != "Succeeded":
                status = last.get("status") or {}
                error = f"phase {phase}: {status.get('lastError') or 'no result before the timeout'}"
        except Exception as e:  # noqa: BLE001 - recorded as the peer's error
            error = str(e)
        wall = time.monotonic() - started
        m = measure.Measured(argv=["create NodeMaintenance", name], wall_seconds=round(wall, 3),
                             returncode=0 if error is None else 1, stdout="", stderr=error or "",
                             started=started_wall, ended=time.time())
        if self.proc.poll() is not None:
            error = (error or "") + f" (the operator exited {self.proc.returncode})"
        return Outcome(m, error is None, error, {"phase": phase})

    def after_run(self, env, node):
        name = f"bench-{node}"
        self.client.delete("NodeMaintenance", name)
        try:
            wait_for(lambda: self.client.get_or_none("NodeMaintenance", name) is None, 60,
                     f"NodeMaintenance {name} to be deleted by the operator")
        except Timeout:
            pass  # reset_node removes the finalizer

    def close(self, env):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log:
            self.log.close()


def _tail(path, start, lines=8):
    with open(path, "rb") as handle:
        handle.seek(start)
        text = handle.read().decode("utf-8", "replace")
    return " | ".join(text.strip().splitlines()[-lines:])


def all_peers(nmo_build=True):
    return [Kubectl(), K8sDrain(), Ours("drain"), Ours("cr"), NodeMaintenanceOperator(build=nmo_build)]


# -- the lab simulator's NodeMaintenance controller ---------------------------------------

def simulator_supports_nm_off():
    source = REPO / "lab" / "kubevirt_sim" / "main.py"
    return source.exists() and NO_NM_FLAG in source.read_text()


def nm_controller_on(lab_dir):
    """Whether the simulator runs with its NodeMaintenance controller (None: no simulator)."""
    from lab import processes
    from lab.paths import LabPaths

    record = processes.tracked(LabPaths(Path(lab_dir)), SIM)
    if record is None:
        return None
    return NO_NM_FLAG not in record.argv


def set_nm_controller(lab_dir, on):
    """Restart the simulator with or without its NodeMaintenance controller (untimed)."""
    from lab import components, processes
    from lab import settings as lab_settings
    from lab.paths import LabPaths

    current = nm_controller_on(lab_dir)
    if current is None or current == on:
        return
    paths = LabPaths(Path(lab_dir))
    record = processes.tracked(paths, SIM)
    argv = [a for a in record.argv if a != NO_NM_FLAG]
    if not on:
        argv.append(NO_NM_FLAG)
    processes.stop(paths, SIM)
    paths.sim_ready.unlink(missing_ok=True)
    env = components.environment()
    env["PYTHONUNBUFFERED"] = "1"
    processes.start(paths, SIM, argv, env=env, cwd=str(REPO))
    wait_for(lambda: paths.sim_ready.exists(), 120, "the KubeVirt simulator to be ready again", interval=0.2)
    assert lab_settings.load(paths) is not None


# -- scenario 4: rolling maintenance -------------------------------------------------------

class KubectlRolling(Kubectl):
    """``kubectl drain`` then ``kubectl uncordon``, node after node, in one shell loop."""

    key = "kubectl"
    label = "kubectl drain + uncordon loop"

    def run_rolling(self, env, nodes):
        k = f"{KUBECTL} --kubeconfig={env.kubeconfig}"
        script = "set -e\nfor node in " + " ".join(nodes) + "; do\n" \
            f"  {k} drain \"$node\" --ignore-daemonsets --delete-emptydir-data --force --timeout={env.timeout}s\n" \
            f"  {k} uncordon \"$node\"\ndone\n"
        m = measure.run(["bash", "-c", script], timeout=env.timeout * len(nodes) + 60)
        error = None if m.returncode == 0 else (m.stderr.strip().splitlines() or ["exit %d" % m.returncode])[-1]
        return Outcome(m, m.returncode == 0, error)


class OursRole(Peer):
    """The ``rolling_maintenance`` role, through ``bench/playbooks/rolling.yml``."""

    clients = ("kubevirt_ops.maintenance",)

    def __init__(self, method="auto"):
        self.method = method
        self.key = "ours_role" if method == "auto" else f"ours_role_{method}"
        self.label = "rolling_maintenance role" + ("" if method == "auto" else f" (method {method})")
        # auto picks the NodeMaintenance CR when its CRD exists (the lab has it).
        self.needs_nm_controller = True if method in ("auto", "cr") else None

    def prepare(self, env):
        if not (REPO / "roles" / "rolling_maintenance" / "tasks" / "main.yml").exists():
            raise Unavailable("roles/rolling_maintenance/tasks/main.yml does not exist yet")

    def run_rolling(self, env, nodes):
        import tempfile

        report_dir = tempfile.mkdtemp(prefix="bench-rolling-report-")
        extra = {"bench_nodes": nodes, "bench_report_dir": report_dir, "bench_drain_timeout": env.timeout,
                 "bench_method": self.method}
        argv = [str(env.our_bin / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                str(REPO / "bench" / "playbooks" / "rolling.yml"), "-e", json.dumps(extra)]
        penv = env.our_ansible_env()
        penv["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
        m = measure.run(argv, env=penv, timeout=env.timeout * len(nodes) + 120)
        error = None
        if m.returncode != 0:
            lines = [line for line in m.stdout.splitlines() if "fatal:" in line or "FAILED" in line or "msg" in line]
            error = (" | ".join(lines[-3:]) or m.stderr.strip()[-1000:] or f"exit {m.returncode}")[:2000]
        timeline = _timeline(report_dir)
        shutil.rmtree(report_dir, ignore_errors=True)
        return Outcome(m, m.returncode == 0, error, {"timeline": timeline})


def _timeline(report_dir):
    """Where the role's time went, from its JSON report: totals and per-node phase seconds."""
    for path in sorted(Path(report_dir).glob("**/*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "totals" not in data:
            continue
        return {
            "duration_seconds": data.get("duration_seconds"),
            "preflight_seconds": data.get("preflight_seconds"),
            "totals": data.get("totals"),
            "nodes": {n.get("node"): {"method": n.get("method"), "duration_seconds": n.get("duration_seconds"),
                                      "phases": {k: (v or {}).get("seconds") for k, v in (n.get("phases") or {}).items()}}
                      for n in data.get("nodes") or []},
        }
    return None


def rolling_peers():
    return [OursRole(), KubectlRolling(), OursRole("drain")]
