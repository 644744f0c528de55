"""Kill the rolling maintenance playbook at many points and run it again.

One chain of runs over two workers A and B: each run is killed (SIGKILL to the whole process
group: ansible-playbook, its workers and the module running) at the next point of the
list, then the next run starts, as an operator would start it again. Points are found
from the playbook's own output (a task starting) and from the cluster (a node cordoned,
an eviction done, a migration running), so each kill lands in its phase whatever the
machine's speed. After each kill: every VM still runs (or runs again) with the same VMI
(a migration keeps it), the nodes left cordoned are only the run's own, and the next run
reports them as resumed. After the last kill a run goes to the end: it converges (A and
B schedulable and out of maintenance, the lock free), and a PodDisruptionBudget watcher
that ran through the whole chain saw no violation.

The lock of a killed run stays held, bound to its ansible-playbook process: the next run,
started as is from the same machine, takes it over at once because that process has ended,
and says so; the test never breaks a lock. (Expiry of an unbound lock after its TTL is
test_fault_lock_holder_dies.py.)
"""

import glob
import json
import os
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import reliability
import runs
from lab.wait import wait_for
import safety
import workloads

REPO = runs.REPO
PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_maintenance.yml")
LOCK = "kvops-fault-chain"
ROLE = "TASK [kubevirt_ops.maintenance.rolling_maintenance : %s]"
NODE_TASK = "Simulated firmware update"
TRIGGER_TIMEOUT = 240
HOLD_MIGRATION = "kubevirt-ops.lab/hold-migration"


class Watch:
    """What a trigger may look at while a run goes on."""

    def __init__(self, k8s, run, namespace, nodes):
        self.k8s = k8s
        self.run = run
        self.namespace = namespace
        self.nodes = nodes
        self.core = client.CoreV1Api(k8s)
        self.start_pods = self._pods_by_node()
        self.first_seen = {}

    def output(self):
        return self.run.output()

    def tasks_started(self, title):
        return self.output().count(ROLE % title)

    def _pods_by_node(self):
        pods = self.core.list_namespaced_pod(self.namespace).items
        out = dict((n, set()) for n in self.nodes)
        for pod in pods:
            if pod.spec.node_name in out and not pod.metadata.deletion_timestamp:
                out[pod.spec.node_name].add(pod.metadata.name)
        return out

    def cordoned(self):
        return [n for n in self.nodes if self.core.read_node(n).spec.unschedulable]

    def migrations_running(self):
        items = client.CustomObjectsApi(self.k8s).list_namespaced_custom_object(
            "kubevirt.io", "v1", self.namespace, "virtualmachineinstancemigrations")["items"]
        return [m for m in items if (m.get("status") or {}).get("phase") == "Running"]


def task(title, nth=1, delay=0.0):
    """Fires once the nth start of a role task shows in the output (plus ``delay`` seconds)."""
    def fired(watch):
        if watch.tasks_started(title) < nth:
            return False
        seen = watch.first_seen.setdefault(title, time.monotonic())
        return time.monotonic() - seen >= delay
    return fired


def user_task(title):
    """A task of the user's node task file (shown with the role's prefix: it is included by the role)."""
    return lambda watch: (" : %s]" % title) in watch.output() or ("TASK [%s]" % title) in watch.output()


def drain_started(watch):
    return watch.tasks_started("Enter maintenance (drain)") >= 1 and bool(watch.cordoned())


def mid_eviction(watch):
    """The node being drained lost some of the pods it had when the run started, and still has pods."""
    if watch.tasks_started("Enter maintenance (drain)") < 1:
        return False
    now = watch._pods_by_node()
    for node in watch.cordoned():
        before = watch.start_pods.get(node) or set()
        if before and (before - now[node]) and now[node]:
            return True
    return False


def mid_migration(nth_node=1):
    def fired(watch):
        return watch.tasks_started("Start the node") >= nth_node and bool(watch.migrations_running())
    return fired


# (name, trigger). Order matters only in that each is reachable from the state the one before leaves.
# At the points in CTRL_C the run is interrupted as a user at its terminal does (SIGINT to its
# process group: no rescue or always block runs), everywhere else killed.
POINTS = [
    ("during the preflight", task("Preflight every node before any change", delay=0.5)),
    ("right after taking the lock", task("Remember the lock holder")),
    ("as the drain starts (node cordoned)", drain_started),
    ("mid-eviction", mid_eviction),
    ("mid-migration", mid_migration()),
    ("after the drain", task("Drained")),
    ("during the node tasks", user_task(NODE_TASK)),
    ("waiting for the node to be Ready", task("Wait until the node is Ready")),
    ("leaving maintenance", task("Leave maintenance")),
    ("during the verification", task("Verify the node is schedulable and every VM that ran still runs")),
    ("between two nodes", task("Start the node", nth=2)),
    ("while finishing (lock release, report)", task("Release the lock, write the report, say what remains")),
]


CTRL_C = ("mid-eviction",)


def lock_taken(results):
    """The result of the run's "Take the cluster lock" task, None when the run did not get there."""
    for line in results:
        if line["name"] == "Take the cluster lock" and line["status"] == "ok":
            return line["result"]
    return None


def takeover_problem(name, results, dead_holder):
    """What is wrong with how a run got the lock a killed run left held (None when it took it over
    at once, or did not get as far as the lock)."""
    taken = lock_taken(results)
    if taken is None or dead_holder is None:
        return None
    if taken.get("action") != "taken_over" or not taken.get("previous_run_ended") \
            or taken.get("previous_holder") != dead_holder:
        return "%s: the run did not take over the lock of the killed run %r at once: %s" % (
            name, dead_holder, {k: taken.get(k) for k in ("action", "previous_holder", "previous_run_ended", "msg")})
    return None


def lease_holder(k8s):
    try:
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease(LOCK, "kube-system")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return lease.spec.holder_identity


def preflight_of(results):
    for line in results:
        if line["name"] == "Preflight every node before any change" and line["status"] == "ok":
            return line["result"]
    return None


def in_maintenance(k8s, node):
    """Anything the collection leaves on a node in maintenance: cordon, its taints, a NodeMaintenance."""
    obj = client.CoreV1Api(k8s).read_node(node)
    marks = []
    if obj.spec.unschedulable:
        marks.append("cordoned")
    for taint in obj.spec.taints or []:
        if taint.key in ("medik8s.io/drain", "node.kubernetes.io/unschedulable"):
            marks.append("taint " + taint.key)
    for group in ("nodemaintenance.medik8s.io", "nodemaintenance.kubevirt.io"):
        try:
            items = client.CustomObjectsApi(k8s).list_cluster_custom_object(group, "v1beta1", "nodemaintenances")
        except ApiException:
            continue
        marks += ["NodeMaintenance %s" % i["metadata"]["name"] for i in items["items"]
                  if (i.get("spec") or {}).get("nodeName") == node]
    return marks


def release_held(k8s, namespace, names):
    """Let the migrations of these VMs end (the lab's hold annotation off), whatever is left of them."""
    for name in names:
        try:
            workloads.annotate_vm(k8s, namespace, name, {HOLD_MIGRATION: None})
        except ApiException:
            pass


def chain_extra(a, b, tmp_path):
    tasks = tmp_path / "node-tasks.yml"
    tasks.write_text(yaml.safe_dump([{"name": NODE_TASK, "ansible.builtin.wait_for": {"timeout": 2}}]))
    return runs.rolling_vars([a, b], LOCK, tmp_path, rolling_maintenance_node_tasks=str(tasks),
                             rolling_maintenance_node_tasks_timeout=60)


@pytest.fixture
def chain_world(k8s, lab, pair, fault_namespace, tmp_path):
    """VMs and a guarded Deployment on A and B; they may also go to a third worker C, never further."""
    a, b = pair
    c = [n for n in workloads.node_names(k8s) if n not in (a, b)][0]
    core = client.CoreV1Api(k8s)
    core.patch_node(c, {"spec": {"unschedulable": True}})  # so that everything starts on A and B
    try:
        for index in range(3):
            workloads.create_vm(k8s, fault_namespace, "chain-%d" % index, memory="3Gi", nodes=[a, b, c],
                                run_strategy="RerunOnFailure" if index == 2 else "Always")
        workloads.create_guarded_deployment(k8s, fault_namespace, "guarded", replicas=4, min_available=3,
                                            nodes=[a, b, c])
        workloads.wait_vms_running(k8s, fault_namespace, ["chain-%d" % i for i in range(3)])
    finally:
        core.patch_node(c, {"spec": {"unschedulable": None}})
    extra = chain_extra(a, b, tmp_path)
    yield {"a": a, "b": b, "namespace": fault_namespace, "extra": extra}
    runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})


def first_error(output):
    for line in output.splitlines():
        if line.startswith(("fatal:", "[ERROR]")):
            return line[:1500]
    return output[-1500:]


def migrations_settled(k8s, namespace):
    """What the preflight of the next run asks for: no migration in flight.

    The killed run's evictions go on without it: KubeVirt migrates every VMI it marked for
    evacuation off its node, one migration after another.
    """
    custom = client.CustomObjectsApi(k8s)
    items = custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstancemigrations")["items"]
    if not all((m.get("status") or {}).get("phase") in ("Succeeded", "Failed") for m in items):
        return False
    for vmi in custom.list_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachineinstances")["items"]:
        status = vmi.get("status") or {}
        if status.get("evacuationNodeName") and status.get("evacuationNodeName") == status.get("nodeName"):
            return False
    return True


def test_kill_at_every_point_then_converge(k8s, lab, chain_world, restore_nodes, tmp_path):
    a, b, namespace, extra = chain_world["a"], chain_world["b"], chain_world["namespace"], chain_world["extra"]
    figures = [(name, reliability.fault("kill the playbook %s" % name, group="kill")) for name, _t in POINTS]
    vm_check = safety.VmSafety(k8s, [namespace])
    problems = []
    logs = []
    left_cordoned = []
    dead_holder = None  # the holder a killed run left on the lock, until a run takes it over
    takeovers = 0
    killed = []  # process ids of the killed ansible-playbook runs
    left_progress = set()  # the temporary progress files they left, each until the next drain removed it
    with safety.PdbWatcher(k8s) as watcher:
        for (name, trigger), (_n, figure) in zip(POINTS, figures):
            run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
            killed.append(run.proc.pid)
            log = tmp_path / ("run-%02d.log" % (len(logs) + 1))
            logs.append(str(log))
            try:
                watch = Watch(k8s, run, namespace, [a, b])
                deadline = time.monotonic() + TRIGGER_TIMEOUT
                while not trigger(watch):
                    if not run.running():
                        break
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                if not run.running() or time.monotonic() > deadline:
                    problems.append("%s: the run %s before the point was reached: %s" % (
                        name, "ended (rc=%s)" % run.proc.returncode if not run.running() else "timed out",
                        first_error(run.output())))
                if name in CTRL_C:
                    status = run.interrupt()
                    if "User interrupted execution" not in run.output():
                        problems.append("%s: Ctrl-C did not interrupt the run (rc=%s)" % (name, status))
                else:
                    run.kill()
                results = run.results()
            finally:
                log.write_text(run.output())
                run.close()
            left_progress.update(progress_files_of(killed))
            problem = takeover_problem(name, results, dead_holder)
            if problem:
                problems.append(problem)
            if dead_holder is not None and lock_taken(results) is not None:
                takeovers += 1
            # The run before this one left these nodes cordoned: this run must have said it resumes them.
            preflight = preflight_of(results)
            if left_cordoned and not set(left_cordoned) <= set((preflight or {}).get("resumed") or []):
                problems.append("%s: the run did not report the nodes left in maintenance %s (resumed: %s)" % (
                    name, left_cordoned, (preflight or {}).get("resumed")))
            report = vm_check.verify(timeout=120)
            wait_for(lambda: migrations_settled(k8s, namespace), 180, "the killed run's migrations to end")
            figure.note(vms_lost=len(report.lost))
            if report.problems:
                problems.append("%s: %s" % (name, report.problems))
            others = [n for n in workloads.cordoned(k8s) if n not in (a, b)]
            if others:
                problems.append("%s: nodes outside the run are cordoned: %s" % (name, others))
            # Left held by the killed run (or by an earlier killed run this one did not get as far as).
            dead_holder = lease_holder(k8s)
            # What the next run must resume, read as late as possible before it starts: a write
            # the killed module had already sent (its uncordon, say) may land after the kill.
            left_cordoned = [n for n in (a, b) if "cordoned" in in_maintenance(k8s, n)]
            if not [p for p in problems if p.startswith(name + ":")]:
                figure.passed(vms_lost=len(report.lost))

        final = runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
    converged = final.returncode == 0
    problem = takeover_problem("the final run", final.lines, dead_holder)
    if problem:
        problems.append(problem)
    if dead_holder is not None and lock_taken(final.lines) is not None:
        takeovers += 1
    if takeovers < len(POINTS) - 2:
        problems.append("only %d runs took over a killed run's lock (the kills after the lock is taken leave it "
                        "held)" % takeovers)
    # A run killed mid-drain cannot remove the temporary file its drain's progress went through;
    # the next drain removes those of runs whose process is gone.
    if not left_progress:
        problems.append("no killed run left a temporary progress file (the kills are mid-drain)")
    if progress_files_of(killed):
        problems.append("temporary progress files of killed runs are still there after the final run: %s"
                        % progress_files_of(killed))
    if not converged:
        problems.append("the final run failed (rc=%s):\n%s" % (final.returncode, final.output[-4000:]))
    preflight = preflight_of(final.lines) or {}
    if left_cordoned and not set(left_cordoned) <= set(preflight.get("resumed") or []):
        problems.append("the final run did not report the nodes left in maintenance %s" % left_cordoned)
    for node in (a, b):
        marks = in_maintenance(k8s, node)
        if marks:
            problems.append("node %s is still in maintenance after the final run: %s" % (node, marks))
    if lease_holder(k8s):
        problems.append("the final run left the lock %s held by %s" % (LOCK, lease_holder(k8s)))
    report = vm_check.verify(timeout=120)
    if report.problems:
        problems.append("after the final run: %s" % report.problems)
    violations = watcher.violations
    figures[-1][1].note(pdb_violations=len(violations), vms_lost=len(report.lost))
    if violations:
        problems.append("PodDisruptionBudget violations: %s" % violations)
    if not converged or violations or report.problems:
        for _name, figure in figures:
            figure.failed()
    assert problems == [], "\n\n".join(problems + ["outputs of the killed runs: %s" % ", ".join(logs)])


def progress_files_of(pids):
    """The temporary progress files (plugin_utils/drain_progress.py) of these ansible-playbook
    processes, for those that are gone (a process id taken again by a live process keeps its files)."""
    files = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        files += glob.glob(os.path.join(runs.ANSIBLE_TMPDIR, "kubevirt-ops-progress-%d-*.log" % pid))
    return sorted(files)


def collection_watches(audit_log, offset, resource):
    """Whether the collection opened a watch on ``resource`` since ``offset`` of the lab's audit log
    (the API server logs a watch as it starts, at stage ResponseStarted)."""
    with open(audit_log, errors="replace") as handle:
        handle.seek(offset)
        for line in handle:
            if resource not in line or '"watch"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if (event.get("verb") == "watch" and event.get("stage") == "ResponseStarted"
                    and (event.get("userAgent") or "").startswith("kubevirt_ops.maintenance/")
                    and (event.get("objectRef") or {}).get("resource") == resource):
                return True
    return False


def test_kill_then_resume_when_only_the_resumed_node_has_room(k8s, lab, pair, fault_namespace, tmp_path,
                                                              restore_nodes):
    """VMs that may run on A and B only; the run is killed while A's evacuation migrates them, and
    the next run starts while that migration is provably still in flight: the lab holds every
    migration of these VMs (``kubevirt-ops.lab/hold-migration``) until the next run's preflight
    watches the migrations, that is, waits for them. That preflight must wait for the migration
    to end and then plan, not refuse; and the run must finish A first (uncordoning it), so it has
    room for B's VMs: its preflight must not refuse B because A, which it is about to resume, is
    cordoned right now."""
    a, b = pair
    figure = reliability.fault("kill the playbook as the drain starts, VMs bound to the two nodes", group="kill")
    core = client.CoreV1Api(k8s)
    core.patch_node(b, {"spec": {"unschedulable": True}})  # so that both start on A, which is drained first
    try:
        for index in range(2):
            workloads.create_vm(k8s, fault_namespace, "pair-%d" % index, memory="2Gi", nodes=[a, b],
                                annotations={HOLD_MIGRATION: "true"})
        workloads.wait_vms_running(k8s, fault_namespace, ["pair-0", "pair-1"])
    finally:
        core.patch_node(b, {"spec": {"unschedulable": None}})
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    extra = chain_extra(a, b, tmp_path)
    audit_log = str(lab.paths.audit_log)
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
            try:
                watch = Watch(k8s, run, fault_namespace, [a, b])
                deadline = time.monotonic() + TRIGGER_TIMEOUT
                while run.running() and time.monotonic() < deadline and not (
                        drain_started(watch) and watch.migrations_running()):
                    time.sleep(0.1)
                assert run.running(), "the run ended before A's evacuation started:\n%s" % run.output()[-3000:]
                run.kill()
            finally:
                run.close()
            held = [m["metadata"]["name"] for m in watch.migrations_running()]
            assert held, "no migration of A's evacuation is in flight after the kill"
            runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
            offset = os.path.getsize(audit_log)
            again = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
            try:
                # The migrations stay held until the preflight waits for them (or the run ended without).
                wait_for(lambda: not again.running() or collection_watches(
                    audit_log, offset, "virtualmachineinstancemigrations"), 300,
                    "the resumed run's preflight to watch the migrations in flight")
                release_held(k8s, fault_namespace, ["pair-0", "pair-1"])
                again.wait(1800)
                output, results = again.output(), again.results()
            finally:
                again.close()
        report = vm_check.verify(timeout=120)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        failures = [r for r in results if r["status"] == "failed"]
        assert again.proc.returncode == 0, "the run after the kill failed: %s" % (
            failures[0]["result"].get("msg") if failures else output[-3000:])
        preflight = preflight_of(results) or {}
        settled = [m["name"] for m in preflight.get("migrations_settled") or []]
        assert set(held) <= set(settled), "the resumed preflight did not wait for %s (settled: %s)" % (held, settled)
        assert a in (preflight.get("resumed") or [])
        assert in_maintenance(k8s, a) == [] and in_maintenance(k8s, b) == []
        assert report.problems == [] and watcher.violations == []
        figure.passed()
    finally:
        release_held(k8s, fault_namespace, ["pair-0", "pair-1"])
        runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})


def async_jobs(directory):
    """{job id: its status file's content (None while it cannot be read as JSON)} of an async directory."""
    jobs = {}
    for path in glob.glob(os.path.join(str(directory), "j*")):
        try:
            with open(path) as handle:
                jobs[os.path.basename(path)] = json.load(handle)
        except (OSError, ValueError):
            jobs[os.path.basename(path)] = None
    return jobs


def test_kill_mid_batch_drain_stops_the_drain_jobs(k8s, lab, pair, fault_namespace, tmp_path, restore_nodes):
    """A batch of two nodes (max_parallel 2) drains as async jobs, which Ansible daemonizes: they
    outlive a killed ansible-playbook (or a cancelled AWX job). Killed while both drains wait on held
    migrations, the jobs must see their run gone and stop (module_utils/coordination/run_owner.py), well before
    their drain timeout, leaving both nodes cordoned; the next run resumes them."""
    a, b = pair
    others = [n for n in workloads.node_names(k8s) if n not in pair]
    figure = reliability.fault("kill the playbook while a batch of two nodes drains (async jobs)", group="kill")
    core = client.CoreV1Api(k8s)
    for node in others:  # so that each VM starts on its node of the pair
        core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        for index, node in enumerate(pair):
            workloads.create_vm(k8s, fault_namespace, "held-%d" % index, memory="1Gi", nodes=[node] + others,
                                annotations={HOLD_MIGRATION: "true"})
        workloads.wait_vms_running(k8s, fault_namespace, ["held-0", "held-1"])
    finally:
        for node in others:
            core.patch_node(node, {"spec": {"unschedulable": None}})
    async_dir = tmp_path / "async"
    extra = runs.rolling_vars([a, b], LOCK, tmp_path, rolling_maintenance_max_parallel=2)
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra,
                                      env={"ANSIBLE_ASYNC_DIR": str(async_dir)})
            try:
                watch = Watch(k8s, run, fault_namespace, [a, b])
                wait_for(lambda: not run.running() or (
                    len(async_jobs(async_dir)) == 2 and len(watch.cordoned()) == 2
                    and len(watch.migrations_running()) == 2), TRIGGER_TIMEOUT,
                    "both drains of the batch to wait on their held migrations")
                assert run.running(), "the run ended before its batch drained:\n%s" % run.output()[-3000:]
                run.kill()
            finally:
                run.close()
            killed = time.monotonic()
            # Without the run's process the jobs would wait for their drain timeout (300 s).
            wait_for(lambda: all(job and job.get("failed") for job in async_jobs(async_dir).values()), 120,
                     "the drain jobs to stop after the run was killed")
            stopped_after = time.monotonic() - killed
            for job in async_jobs(async_dir).values():
                assert "has ended, so the drain stopped" in job["msg"], job
                assert job["node"] in (a, b) and job["phase"] == "Failed", job
            assert sorted(watch.cordoned()) == sorted([a, b]), "the stopped drains left the nodes cordoned"
            release_held(k8s, fault_namespace, ["held-0", "held-1"])
            runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
            again = runs.playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
        assert again.returncode == 0, again.output[-3000:]
        assert in_maintenance(k8s, a) == [] and in_maintenance(k8s, b) == []
        assert watcher.violations == []
        figure.passed(stopped_after_seconds=round(stopped_after, 1))
    finally:
        release_held(k8s, fault_namespace, ["held-0", "held-1"])
        runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
