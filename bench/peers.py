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
  NodeMaintenance CR and follows it; the lab's node-maintenance-operator drains).
- ``nmo``: the medik8s node-maintenance-operator the lab runs (``lab/nmo.py``: the real
  operator, built from its Go module). The run is: create a NodeMaintenance CR, wait
  until its phase is Succeeded.

Each Ansible-based peer is timed as a user sees it: ``ansible localhost -m ...`` from
process start to exit, Ansible's own start-up included.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import bootstrap, measure
from lab import nmo, processes
from lab.paths import LabPaths
from bench.kube import Kube
from bench.workloads import Timeout, wait_for

REPO = Path(__file__).resolve().parent.parent
KUBECTL = os.environ.get("BENCH_KUBECTL", "kubectl")


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
    label = f"node-maintenance-operator {nmo.VERSION}"
    clients = ("node-maintenance-operator", "nm-client")

    def __init__(self, build=True):
        self.build = build

    def prepare(self, env):
        try:
            nmo.ensure_built(build=self.build)
        except nmo.BuildError as e:
            raise Unavailable(str(e)) from e
        self.record = processes.tracked(LabPaths(Path(env.lab_dir)), nmo.NAME)
        if self.record is None:
            raise Unavailable(f"the lab in {env.lab_dir} does not run the {nmo.NAME}")
        self.client = Kube(env.kubeconfig, user_agent="nm-client/1")

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
        if not processes.is_running(self.record):
            error = (error or "") + " (the operator exited)"
        return Outcome(m, error is None, error, {"phase": phase})

    def after_run(self, env, node):
        name = f"bench-{node}"
        self.client.delete("NodeMaintenance", name)
        try:
            wait_for(lambda: self.client.get_or_none("NodeMaintenance", name) is None, 60,
                     f"NodeMaintenance {name} to be deleted by the operator")
        except Timeout:
            pass  # reset_node removes the finalizer


def all_peers(nmo_build=True):
    return [Kubectl(), K8sDrain(), Ours("drain"), Ours("cr"), NodeMaintenanceOperator(build=nmo_build)]


# -- scenario 4: rolling maintenance -------------------------------------------------------

class KubectlRolling(Kubectl):
    """``kubectl drain`` then ``kubectl uncordon``, node after node, in one shell loop."""

    key = "kubectl"
    label = "kubectl drain + uncordon loop"

    def run_rolling(self, env, nodes, link_speed=""):
        k = f"{KUBECTL} --kubeconfig={env.kubeconfig}"
        script = "set -e\nfor node in " + " ".join(nodes) + "; do\n" \
            f"  {k} drain \"$node\" --ignore-daemonsets --delete-emptydir-data --force --timeout={env.timeout}s\n" \
            f"  {k} uncordon \"$node\"\ndone\n"
        m = measure.run(["bash", "-c", script], timeout=env.timeout * len(nodes) + 60)
        error = None if m.returncode == 0 else (m.stderr.strip().splitlines() or ["exit %d" % m.returncode])[-1]
        return Outcome(m, m.returncode == 0, error)


class KubectlBmcRolling(Kubectl):
    """Scenario 7: node after node, ``kubectl drain``, a restart of its machine through its Redfish BMC with
    ``curl`` (``ComputerSystem.Reset`` ForceRestart, the credentials in a netrc file), a poll every second until
    the node is Ready with a new boot ID, ``kubectl uncordon``: what an administrator writes by hand."""

    key = "kubectl_bmc"
    label = "kubectl drain + curl Redfish restart + uncordon loop"

    def run_rolling(self, env, nodes, link_speed=""):
        import tempfile

        from lab.machines import bmc as lab_bmc

        bmcs = lab_bmc.load(LabPaths(env.lab_dir))
        k = f"{KUBECTL} --kubeconfig={env.kubeconfig}"
        boot_id = "-o jsonpath='{.status.nodeInfo.bootID}'"
        ready = "-o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}'"
        with tempfile.TemporaryDirectory(prefix="bench-bmc-loop-") as tmp:
            lines = ["set -e"]
            for node in nodes:
                entry = bmcs[node]
                netrc = Path(tmp) / f"{node}.netrc"
                host = entry["address"].split("/")[2].split(":")[0]
                fd = os.open(netrc, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(f"machine {host} login {entry['username']} password {entry['password']}\n")
                lines += [
                    f"boot=$({k} get node {node} {boot_id})",
                    f"{k} drain {node} --ignore-daemonsets --delete-emptydir-data --force --timeout={env.timeout}s",
                    f"curl -sSf --cacert {entry['ca_file']} --netrc-file {netrc} -H 'Content-Type: application/json' "
                    f"-d '{{\"ResetType\": \"ForceRestart\"}}' {entry['address']}/Actions/ComputerSystem.Reset",
                    f"until [ \"$({k} get node {node} {boot_id})\" != \"$boot\" ] && "
                    f"[ \"$({k} get node {node} {ready})\" = True ]; do sleep 1; done",
                    f"{k} uncordon {node}",
                ]
            m = measure.run(["bash", "-c", "\n".join(lines) + "\n"], timeout=env.timeout * len(nodes) + 60)
        error = None if m.returncode == 0 else (m.stderr.strip().splitlines() or ["exit %d" % m.returncode])[-1]
        return Outcome(m, m.returncode == 0, error)


class OursRole(Peer):
    """The ``rolling_maintenance`` role, through ``bench/playbooks/rolling.yml``."""

    clients = ("kubevirt_ops.maintenance",)

    def __init__(self, method="auto", max_parallel=1, failure_domain="", reboot=False, limits=None):
        self.method = method
        self.max_parallel = max_parallel
        self.failure_domain = failure_domain
        # reboot "bmc": each machine restarts through its BMC (the lab's bmc-inventory.yml), scenario 7.
        self.reboot = reboot
        self.key = "ours_role" if method == "auto" else f"ours_role_{method}"
        self.label = "rolling_maintenance role" + ("" if method == "auto" else f" (method {method})")
        if max_parallel > 1:
            self.key += "_parallel"
            self.label += f", max_parallel {max_parallel}" + (f" by {failure_domain}" if failure_domain else "")
        if reboot:
            self.key += f"_{reboot}"
            self.label += f", reboot through the {reboot.upper()}"
        # Migration limits raised for the run (rolling_maintenance_migration_limits), scenario 8.
        self.limits = dict(limits or {})
        if self.limits:
            self.key += "_limits"
            self.label += ", migration limits " + ", ".join(f"{k} {v}" for k, v in sorted(self.limits.items()))

    def prepare(self, env):
        if not (REPO / "roles" / "rolling_maintenance" / "tasks" / "main.yml").exists():
            raise Unavailable("roles/rolling_maintenance/tasks/main.yml does not exist yet")

    def run_rolling(self, env, nodes, link_speed=""):
        """``link_speed``: each node's migration link, bytes per second, for the preflight of raised limits."""
        import tempfile

        report_dir = tempfile.mkdtemp(prefix="bench-rolling-report-")
        extra = {"bench_nodes": nodes, "bench_report_dir": report_dir, "bench_drain_timeout": env.timeout,
                 "bench_method": self.method, "bench_max_parallel": self.max_parallel,
                 "bench_failure_domain": self.failure_domain, "bench_reboot": self.reboot,
                 "bench_migration_limits": self.limits,
                 "bench_migration_link_speed": link_speed if self.limits else ""}
        inventories = ["-i", "localhost,"]
        if self.reboot == "bmc":
            inventories += ["-i", str(LabPaths(env.lab_dir).bmc_inventory)]
        argv = [str(env.our_bin / "ansible-playbook"), *inventories, "-c", "local",
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
    return [OursRole(), KubectlRolling(), OursRole("drain"),
            OursRole(max_parallel=2, failure_domain="topology.kubernetes.io/zone"),
            OursRole(reboot="bmc"), KubectlBmcRolling(),
            OursRole(limits={"parallel_outbound_migrations_per_node": 4})]
