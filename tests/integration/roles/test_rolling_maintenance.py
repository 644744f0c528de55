"""The rolling_maintenance role on the lab, run as an operator runs it (ansible-playbook).

Each test names its own cluster lock, so a lock left by one test never blocks another, and
puts every worker back in service afterwards. The lab needs at least 4 workers.
"""

import datetime
import json
import os
import re
import threading
import uuid

import pytest
from kubernetes import client, watch

import recorded_events
import runs
import safety
import workloads
from lab.wait import wait_for
from lab.webhooks import DownEndpoint, WebhookReceiver

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_maintenance.yml")
HOSTS_PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_maintenance_hosts.yml")
WORKERS = ["lab-worker-1", "lab-worker-2", "lab-worker-3", "lab-worker-4"]
LOCK_NAMESPACE = "kube-system"
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


@pytest.fixture
def lock_name(k8s):
    name = "test-rolling-%s" % uuid.uuid4().hex[:8]
    yield name
    try:
        client.CoordinationV1Api(k8s).delete_namespaced_lease(name, LOCK_NAMESPACE)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def workers_back(lab, k8s):
    """Ends any maintenance a test left on the workers, even when the test failed."""
    yield
    runs.end_maintenance_left(lab.kubeconfig, k8s, WORKERS)
    lab.restore_nodes()


@pytest.fixture
def task_files(tmp_path):
    """Node task files: one that works (and takes a moment), one that fails on a chosen node."""
    ok = tmp_path / "ok.yml"
    # The lab's nodes have no machine behind them: the work runs on the controller.
    ok.write_text(
        "- name: Pretend to work on the node\n"
        "  ansible.builtin.wait_for:\n"
        "    timeout: \"{{ node_task_seconds | default(1) | int }}\"\n"
        "  delegate_to: localhost\n")
    failing = tmp_path / "failing.yml"
    failing.write_text(
        "- name: Update the firmware\n"
        "  ansible.builtin.fail:\n"
        "    msg: firmware update of {{ rolling_maintenance_node }} exited 1\n"
        "  when: rolling_maintenance_node == (fail_on_node | default(''))\n")
    gated = tmp_path / "gated.yml"
    gated.write_text(
        "- name: Work until the test opens the gate\n"
        "  ansible.builtin.wait_for:\n"
        "    path: \"{{ node_task_gate }}\"\n"
        "    state: absent\n"
        "    timeout: 600\n"
        "  delegate_to: localhost\n")
    return {"ok": str(ok), "failing": str(failing), "gated": str(gated)}


def base_vars(tmp_path, lock, **extra):
    values = {
        "rolling_maintenance_lock_name": lock,
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
        "rolling_maintenance_drain_timeout": 300,
        "rolling_maintenance_ready_timeout": 120,
        "rolling_maintenance_verify_timeout": 180,
        "rolling_maintenance_lock_ttl": 900,
    }
    values.update(extra)
    return values


def _ours_to_judge(key, system_keys, prefixes=()):
    """Not a field the cluster's own controllers change on their own schedule (safety.SYSTEM_NODE_*)."""
    domain = key.split("/", 1)[0] if "/" in key else ""
    return key not in system_keys and not key.startswith(tuple(prefixes)) and not (
        domain == safety.SYSTEM_NODE_LABEL_DOMAIN or domain.endswith("." + safety.SYSTEM_NODE_LABEL_DOMAIN))


def node_marks(k8s):
    """What maintenance changes on a node, per worker, without what changes by itself (resourceVersions
    move with heartbeats; virt-handler renews its heartbeat annotation every minute, the node-labeller
    its labels, the node-lifecycle controller its node.kubernetes.io/* taints)."""
    marks = {}
    for node in client.CoreV1Api(k8s).list_node().items:
        if node.metadata.name not in WORKERS:
            continue
        marks[node.metadata.name] = (
            bool(node.spec.unschedulable),
            sorted((t.key, t.effect) for t in node.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")),
            sorted((k, v) for k, v in (node.metadata.annotations or {}).items()
                   if _ours_to_judge(k, safety.SYSTEM_NODE_ANNOTATIONS)),
            sorted((k, v) for k, v in (node.metadata.labels or {}).items()
                   if _ours_to_judge(k, safety.SYSTEM_NODE_LABELS, safety.SYSTEM_NODE_LABEL_PREFIXES)),
        )
    return marks


def maintenances(k8s):
    data = client.CustomObjectsApi(k8s).list_cluster_custom_object("nodemaintenance.medik8s.io", "v1beta1",
                                                                    "nodemaintenances")
    return sorted(item["metadata"]["name"] for item in data.get("items") or [])


def lease(k8s, name):
    try:
        return client.CoordinationV1Api(k8s).read_namespaced_lease(name, LOCK_NAMESPACE)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def in_service(k8s, name):
    node = client.CoreV1Api(k8s).read_node(name)
    taints = [t.key for t in node.spec.taints or []]
    return not node.spec.unschedulable and "medik8s.io/drain" not in taints


TAINTS_OFF_TASK = "Take the preference taints off the nodes still to do"


def failure_messages(run):
    return [result.get("msg", "") for _task, result in run.failures()]


def report_of(tmp_path):
    reports = sorted((tmp_path / "reports").glob("rolling-maintenance-*/report.json"))
    assert reports, "no report was written"
    with open(str(reports[-1])) as handle:
        return json.load(handle)


def unpinned_vms(k8s, namespace, count):
    """``count`` migratable VMs pinned nowhere, running."""
    names = ["vm-%d" % i for i in range(1, count + 1)]
    for name in names:
        workloads.create_vm(k8s, namespace, name, memory="512Mi")
    workloads.wait_vms_running(k8s, namespace, names)
    return names


@pytest.fixture
def four_vms(k8s, namespace):
    """One migratable VM pinned nowhere, per worker on average."""
    return unpinned_vms(k8s, namespace, 4)


def test_bad_input_is_refused_with_a_clear_message(lab, k8s, tmp_path, lock_name):
    before = node_marks(k8s)
    bad_order = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"], rolling_maintenance_order="sideways"))
    assert bad_order.returncode != 0
    text = " ".join(failure_messages(bad_order))
    assert "rolling_maintenance_order" in text and "given, fewest_vms_first" in text, text

    both = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
        rolling_maintenance_node_selector="node-role.kubernetes.io/worker"))
    assert both.returncode != 0
    assert any("either as rolling_maintenance_nodes" in m and "not both" in m for m in failure_messages(both))

    bad_window = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
        rolling_maintenance_window={"days": ["someday"], "start": "01:00", "end": "02:00"}))
    assert bad_window.returncode != 0
    assert any("someday" in m and "rolling_maintenance_window" in m for m in failure_messages(bad_window)), \
        failure_messages(bad_window)

    bad_webhook = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
        rolling_maintenance_notify_webhooks=[{"url": "hooks.example.com/services/T0/s3cret"}]))
    assert bad_webhook.returncode != 0
    assert failure_messages(bad_webhook) == [
        "rolling_maintenance_notify_webhooks is refused: Option webhooks[1].url must be an http:// or https:// URL, "
        "not a value without http:// or https://."]
    assert "s3cret" not in bad_webhook.output

    # Every problem of the inputs at once, each naming its variable and value, in one failure.
    several = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1", " "], rolling_maintenance_max_parallel=0,
        rolling_maintenance_reboot="maybe", rolling_maintenance_lock_ttl=60))
    assert several.returncode != 0
    messages = failure_messages(several)
    assert len(messages) == 1, messages
    for part in ('rolling_maintenance_nodes (["lab-worker-1", " "]) has an empty node name',
                 "rolling_maintenance_max_parallel (0) is not a number of nodes",
                 "rolling_maintenance_reboot (maybe) must be false, true",
                 "rolling_maintenance_lock_ttl (60s) must be longer than the drain timeout"):
        assert part in messages[0], messages[0]
    assert node_marks(k8s) == before
    assert lease(k8s, lock_name) is None


def test_closed_window_changes_nothing(lab, k8s, tmp_path, lock_name, workers_back):
    today = DAYS[datetime.datetime.now(datetime.timezone.utc).weekday()]
    # Open only on a day that is neither today nor tomorrow (a window opening late today could be open now).
    other_days = [d for d in DAYS if d != today][2:4]
    before = node_marks(k8s), maintenances(k8s)
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_node_selector="node-role.kubernetes.io/worker",
        rolling_maintenance_window={"days": other_days, "start": "01:00", "end": "02:00", "timezone": "UTC"}))
    assert run.returncode == 0, run.output[-3000:]
    assert "Outside the maintenance window" in run.output and "Nothing was changed." in run.output
    assert (node_marks(k8s), maintenances(k8s)) == before
    assert lease(k8s, lock_name) is None
    assert not (tmp_path / "reports").exists()

    strict = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_node_selector="node-role.kubernetes.io/worker",
        rolling_maintenance_window_closed="fail",
        rolling_maintenance_window={"days": other_days, "start": "01:00", "end": "02:00"}))
    assert strict.returncode != 0
    assert any("Outside the maintenance window" in m for m in failure_messages(strict))
    assert (node_marks(k8s), maintenances(k8s)) == before


def test_a_node_that_would_outlast_the_window_is_not_started(lab, k8s, tmp_path, lock_name, workers_back):
    """The first node's time predicts the second's; inside the window, the second node is not started
    because the window closes before it could finish, and the run ends with the resume command.

    Nothing here hangs on how fast the machine is. The first node's tasks take at least 60 s (from
    the moment the test sees them start until it lets them end), and a prediction is never shorter
    than the rest of a node (plugin_utils/duration.py), so the second node is predicted to take over
    60 s. Its health gate holds it until the test lets it go: when less than 40 s of the window are
    left. The product says how long the window had left when it judged; above 0 proves it judged
    inside the window."""
    now = datetime.datetime.now(datetime.timezone.utc)
    # Five to six minutes from now: the first node's drain, its 60 s of tasks and the rest of it fit
    # with minutes to spare even on a loaded machine; the test then waits for the window's last 40 s.
    closes = (now + datetime.timedelta(minutes=6)).replace(second=0, microsecond=0)
    opens = now - datetime.timedelta(hours=1)
    window = {"start": opens.strftime("%H:%M"), "end": closes.strftime("%H:%M"), "timezone": "UTC"}
    first, second = WORKERS[:2]
    working, gate, hold, tries = (tmp_path / name for name in ("working", "gate", "hold", "gate-tries"))
    gate.write_text("hold")
    tasks = tmp_path / "work.yml"
    tasks.write_text(
        "- name: Say the work started\n"
        "  ansible.builtin.copy:\n"
        "    dest: \"%s\"\n"
        "    content: started\n"
        "  delegate_to: localhost\n"
        "- name: Work until the test opens the gate\n"
        "  ansible.builtin.wait_for:\n"
        "    path: \"%s\"\n"
        "    state: absent\n"
        "    timeout: 600\n"
        "  delegate_to: localhost\n" % (working, gate))
    health_gate = {"command": ["sh", "-c", "echo try >> %s; test ! -e %s" % (tries, hold)],
                   "timeout": 600, "delay": 1}
    core = client.CoreV1Api(k8s)

    def now_utc():
        return datetime.datetime.now(datetime.timezone.utc)

    run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=[first, second], rolling_maintenance_window=window,
        rolling_maintenance_node_tasks=str(tasks), rolling_maintenance_health_gate=health_gate))
    try:
        wait_for(lambda: working.exists() or not run.running(), 300, "the first node's tasks to start")
        assert run.running(), run.output()[-3000:]
        began = now_utc()
        hold.write_text("hold")
        wait_for(lambda: (now_utc() - began).total_seconds() >= 60, 120, "the first node's tasks to take 60 s")
        gate.unlink()
        wait_for(lambda: len(tries.read_text().split()) >= 2 or not run.running(), 400,
                 "the second node's health gate")
        assert run.running(), run.output()[-3000:]
        assert not core.read_node(second).spec.unschedulable
        wait_for(lambda: (closes - now_utc()).total_seconds() < 40, 400, "the window's last 40 s")
        hold.unlink()
        assert run.wait(600) == 0, run.output()[-3000:]
        output, results = run.output(), run.results()
    finally:
        for name in (gate, hold):
            if name.exists():
                name.unlink()
        run.close()
    judged = re.search(r"Node %s is not started: it is predicted to take (\d+) s .* and the maintenance window "
                       r"closes at \S+, in (\d+) s\." % second, output)
    assert judged, output[-3000:]
    predicted, left = int(judged.group(1)), int(judged.group(2))
    assert predicted >= 60 and 0 < left < predicted, judged.group(0)
    assert "Outside the maintenance window" not in output
    report = report_of(tmp_path)
    assert report["status"] == "window_closed" and report["untouched"] == [second], report["message"]
    assert '"rolling_maintenance_nodes": ["%s"]' % second in report["resume"], report["resume"]
    assert [(n["node"], n["status"], n["predicted_seconds"]) for n in report["nodes"]] == [(first, "done", None)]
    assert not core.read_node(second).spec.unschedulable
    entered = [r for r in results if "Enter maintenance" in r["task"] and r["status"] != "skipped"]
    assert len(entered) == 1, "%d nodes entered maintenance" % len(entered)


def test_blocker_on_node_3_fails_preflight_before_node_1_is_touched(lab, k8s, namespace, tmp_path, lock_name,
                                                                   workers_back):
    workloads.create_vm(k8s, namespace, "stuck", migratable=False, eviction="LiveMigrate", memory="512Mi",
                        node_selector={"kubernetes.io/hostname": "lab-worker-3"})
    workloads.wait_vms_running(k8s, namespace, ["stuck"])
    before = node_marks(k8s), maintenances(k8s)
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(tmp_path, lock_name, rolling_maintenance_nodes=WORKERS))
    assert run.returncode != 0
    messages = failure_messages(run)
    assert any("Preflight found" in m and "VM %s/stuck cannot leave node lab-worker-3" % namespace in m
               for m in messages), messages
    assert "Nothing was changed" in run.output
    assert (node_marks(k8s), maintenances(k8s)) == before
    assert not any(task.startswith("Enter maintenance") for task, _result in run.results())
    # The lock was never taken, so nothing is left behind.
    held = lease(k8s, lock_name)
    assert held is None or not held.spec.holder_identity


def test_drain_options_reach_the_preflight_and_refuse_an_emptydir_pod(lab, k8s, namespace, tmp_path, lock_name,
                                                                      workers_back):
    """rolling_maintenance_drain_options goes to the modules as one dict: with delete_emptydir_data false, a pod
    with an emptyDir volume on the third node stops the run before the first node is touched."""
    client.CoreV1Api(k8s).create_namespaced_pod(namespace, {
        "metadata": {"name": "scratch"},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                 "volumes": [{"name": "tmp", "emptyDir": {}}], "nodeName": "lab-worker-3"}})
    before = node_marks(k8s), maintenances(k8s)
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=WORKERS,
        rolling_maintenance_drain_options={"delete_emptydir_data": False}))
    assert run.returncode != 0
    messages = failure_messages(run)
    assert any("Preflight found" in m and "%s/scratch" % namespace in m and "delete_emptydir_data" in m
               for m in messages), messages
    assert (node_marks(k8s), maintenances(k8s)) == before
    assert not any(task.startswith("Enter maintenance") for task, _result in run.results())


def test_two_concurrent_runs_exactly_one_proceeds(lab, k8s, tmp_path, lock_name, task_files, workers_back):
    # The winner's node task waits for this file to go, so the winner holds the lock for as long as the
    # loser needs to give up, however slow the machine is.
    gate = tmp_path / "gate"
    gate.write_text("hold")
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
                      rolling_maintenance_node_tasks=task_files["gated"], node_task_gate=str(gate))
    both = [runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra), runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra)]
    try:
        wait_for(lambda: any(not run.running() for run in both), 600, "one of the two runs to give up")
        loser = [run for run in both if not run.running()][0]
        winner = [run for run in both if run is not loser][0]
        assert loser.wait(10) != 0, loser.output()[-3000:]
        gate.unlink()
        assert winner.wait(600) == 0, winner.output()[-4000:]
        loser_output, winner_output = loser.output(), winner.output()
    finally:
        for run in both:
            run.close()
    assert "kube-system/%s is held by" % lock_name in loser_output, loser_output[-3000:]
    assert "Nothing was changed" in loser_output
    assert "[1/1 lab-worker-1] done" in winner_output
    assert in_service(k8s, "lab-worker-1")
    assert not lease(k8s, lock_name).spec.holder_identity


def test_failure_on_node_2_stops_the_run_and_a_rerun_finishes_it(lab, k8s, tmp_path, lock_name, task_files,
                                                                 four_vms, namespace, workers_back):
    running_before = sorted(workloads.vm_nodes(k8s, namespace))
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=WORKERS,
                      rolling_maintenance_node_tasks=task_files["failing"], fail_on_node="lab-worker-2")
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra)
    assert run.returncode != 0
    final = failure_messages(run)[-1]
    assert "Done: lab-worker-1." in final, final
    assert "Failed and left cordoned (in maintenance): lab-worker-2." in final
    assert "Not started: lab-worker-3, lab-worker-4." in final
    assert "The cluster lock was released." in final
    assert '"rolling_maintenance_nodes": ["lab-worker-2", "lab-worker-3", "lab-worker-4"]' in final
    assert any("firmware update of lab-worker-2 exited 1" in m for m in failure_messages(run))
    assert in_service(k8s, "lab-worker-1")
    assert not in_service(k8s, "lab-worker-2")
    assert in_service(k8s, "lab-worker-3") and in_service(k8s, "lab-worker-4")
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "failed" and report["untouched"] == ["lab-worker-3", "lab-worker-4"]
    assert [n["status"] for n in report["nodes"]] == ["done", "failed"]
    assert report["nodes"][1]["phases"]["tasks"]["failed"]

    # What the message says to run: the remaining nodes; the node left in maintenance is finished first.
    rerun = runs.playbook(lab.kubeconfig, PLAYBOOK, dict(extra, fail_on_node="", rolling_maintenance_nodes=[
        "lab-worker-2", "lab-worker-3", "lab-worker-4"]))
    assert rerun.returncode == 0, rerun.output[-4000:]
    assert "Node lab-worker-2 was left in maintenance by an earlier run" in rerun.output
    assert all(in_service(k8s, name) for name in WORKERS)
    assert sorted(workloads.vm_nodes(k8s, namespace)) == running_before
    report = report_of(tmp_path)
    assert report["status"] == "succeeded"
    assert [n["node"] for n in report["nodes"]] == ["lab-worker-2", "lab-worker-3", "lab-worker-4"]


def test_a_failure_within_max_failures_goes_on_with_the_next_node(lab, k8s, tmp_path, lock_name, task_files,
                                                                 workers_back):
    """rolling_maintenance_max_failures 1: the failed node is left cordoned and the run goes on; it still
    ends failed, naming the node to fix, and a second failure would have stopped it."""
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=WORKERS, rolling_maintenance_max_failures=1,
                      rolling_maintenance_node_tasks=task_files["failing"], fail_on_node="lab-worker-2")
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra)
    assert run.returncode != 0
    assert ("Node lab-worker-2 failed and is left cordoned: Update the firmware: firmware update of lab-worker-2 "
            "exited 1.") in run.output, run.output[-4000:]
    assert "1 of at most 1 failure(s); going on with the next node." in run.output
    final = failure_messages(run)[-1]
    assert "Done: lab-worker-1, lab-worker-3, lab-worker-4." in final, final
    assert "Failed and left cordoned (in maintenance): lab-worker-2." in final
    assert '"rolling_maintenance_nodes": ["lab-worker-2"]' in final
    assert not in_service(k8s, "lab-worker-2")
    assert all(in_service(k8s, name) for name in ("lab-worker-1", "lab-worker-3", "lab-worker-4"))
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "failed" and report["untouched"] == []
    assert [(n["node"], n["status"]) for n in report["nodes"]] == [
        ("lab-worker-1", "done"), ("lab-worker-2", "failed"), ("lab-worker-3", "done"), ("lab-worker-4", "done")]
    assert "firmware update of lab-worker-2 exited 1" in report["nodes"][1]["error"]


def test_host_based_play_with_the_inventory_plugin(lab, k8s, tmp_path, lock_name, task_files, workers_back):
    inventory = tmp_path / "lab.nodes.yml"
    inventory.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    listed = runs._run([os.path.join(runs.BIN, "ansible-inventory"), "-i", str(inventory), "--list"],
                       lab.kubeconfig, None, 300)
    assert listed.returncode == 0, listed.output[-3000:]
    hosts = json.loads(listed.stdout)
    assert sorted(hosts["workers"]["hosts"]) == sorted(WORKERS)
    assert hosts["control_plane"]["hosts"] == ["lab-cp-1"]
    assert hosts["_meta"]["hostvars"]["lab-worker-1"]["node_simulated"] is True

    argv = [os.path.join(runs.BIN, "ansible-playbook"), "-i", str(inventory), HOSTS_PLAYBOOK, "-e", json.dumps(
        base_vars(tmp_path, lock_name, rolling_maintenance_target="lab-worker-3:lab-worker-4",
                  rolling_maintenance_node_tasks=task_files["ok"], rolling_maintenance_reboot=True))]
    run = runs._run(argv, lab.kubeconfig, None, 900)
    assert run.returncode == 0, run.output[-4000:]
    assert "lab-worker-3] done" in run.output and "lab-worker-4] done" in run.output
    assert "Reboot simulated" in run.output
    report = report_of(tmp_path)
    assert report["status"] == "succeeded" and [n["node"] for n in report["nodes"]] == ["lab-worker-3", "lab-worker-4"]
    assert all(in_service(k8s, name) for name in WORKERS)
    assert not lease(k8s, lock_name).spec.holder_identity


# -- where VMs go: nodes already done ----------------------------------------------------------

FAVOURITE = "kubevirt-ops.test/favourite"
PENDING_TAINT = "kubevirt-ops.io/maintenance-pending"


class VmiMoves:
    """Watches the VMIs of a namespace and counts, per VM, how often its status.nodeName changed."""

    def __init__(self, k8s, namespace):
        self.k8s, self.namespace = k8s, namespace
        self.nodes, self.moves, self.hops = {}, {}, []
        self._stop = threading.Event()
        data = client.CustomObjectsApi(k8s).list_namespaced_custom_object(
            workloads.GROUP, workloads.VERSION, namespace, "virtualmachineinstances")
        for vmi in data.get("items") or []:
            self.nodes[vmi["metadata"]["name"]] = (vmi.get("status") or {}).get("nodeName")
        self._rv = data["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(client.CustomObjectsApi(self.k8s).list_namespaced_custom_object,
                                           workloads.GROUP, workloads.VERSION, self.namespace,
                                           "virtualmachineinstances", resource_version=self._rv,
                                           timeout_seconds=5):
                    vmi = event["object"]
                    self._rv = vmi["metadata"]["resourceVersion"]
                    name, node = vmi["metadata"]["name"], (vmi.get("status") or {}).get("nodeName")
                    if node and self.nodes.get(name) and node != self.nodes[name]:
                        self.moves[name] = self.moves.get(name, 0) + 1
                        self.hops.append((name, self.nodes[name], node))
                    if node:
                        self.nodes[name] = node
                    if self._stop.is_set():
                        break
            finally:
                stream.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(30)


def set_favourite(k8s, node):
    """Move the label the test VMs prefer onto ``node`` alone."""
    core = client.CoreV1Api(k8s)
    for name in WORKERS:
        core.patch_node(name, {"metadata": {"labels": {FAVOURITE: "yes" if name == node else None}}})


@pytest.fixture
def favourite_back(k8s):
    yield
    set_favourite(k8s, None)


@pytest.fixture
def scheduler_profile(lab):
    """Switch the lab's kube-scheduler profile for one test; the one it had comes back after."""
    previous = []

    def switch(name):
        previous.append(lab.scheduler_profile(name))

    yield switch
    if previous:
        lab.scheduler_profile(previous[0])


def preferring_vms(k8s, namespace, names, node):
    """VMs with a preferred node affinity (weight 100) for the favourite label, started while only
    ``node`` carries it, so they run there."""
    set_favourite(k8s, node)
    for name in names:
        body = workloads.vm_body(namespace, name, memory="512Mi")
        body["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": FAVOURITE, "operator": "In", "values": ["yes"]}]}}]}}
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            workloads.GROUP, workloads.VERSION, namespace, "virtualmachines", body)
    workloads.wait_vms_running(k8s, namespace, names)
    placed = workloads.vm_nodes(k8s, namespace)
    assert all(placed[name] == node for name in names), placed


def rolling_with_a_favourite_still_to_do(lab, k8s, namespace, tmp_path, lock_name, switch, profile, **extra):
    """Two VMs on lab-worker-1, two on lab-worker-2, all preferring lab-worker-3; the run takes
    lab-worker-1, -2 and -3 in that order (lab-worker-4 is not part of it). Without the
    preference for done nodes the scheduler sends the VMs of lab-worker-2 to lab-worker-3,
    still to do, and they move again when its turn comes. The VMs are placed under the default
    scheduler profile; the run goes under ``profile``. Returns (watched moves, report)."""
    switch("default")
    preferring_vms(k8s, namespace, ["first-1", "first-2"], "lab-worker-1")
    preferring_vms(k8s, namespace, ["second-1", "second-2"], "lab-worker-2")
    set_favourite(k8s, "lab-worker-3")
    switch(profile)
    moves = VmiMoves(k8s, namespace)
    try:
        run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
            tmp_path, lock_name, rolling_maintenance_nodes=WORKERS[:3], **extra))
    finally:
        moves.stop()
    assert run.returncode == 0, run.output[-4000:]
    assert all(in_service(k8s, name) for name in WORKERS)
    for node in client.CoreV1Api(k8s).list_node().items:
        assert PENDING_TAINT not in [t.key for t in node.spec.taints or []], node.metadata.name
    # Each node's drain took its taint off: the end of the run has none left to take off.
    assert run.statuses(TAINTS_OFF_TASK) == ["skipped"]
    return moves, report_of(tmp_path)


@pytest.mark.parametrize("profile", ["default", "LowNodeUtilization", "HighNodeUtilization"])
def test_vms_leaving_a_node_go_to_nodes_already_done(lab, k8s, namespace, tmp_path, lock_name, workers_back,
                                                      favourite_back, scheduler_profile, profile):
    moves, report = rolling_with_a_favourite_still_to_do(lab, k8s, namespace, tmp_path, lock_name,
                                                         scheduler_profile, profile)
    # Every VM left its node once; none landed on a node still to do, so none moved twice.
    assert moves.moves == {"first-1": 1, "first-2": 1, "second-1": 1, "second-2": 1}, moves.hops
    assert all(target in ("lab-worker-1", "lab-worker-4") for _vm, _source, target in moves.hops), moves.hops
    assert report["moves"]["per_vm"] == dict(("%s/%s" % (namespace, name), 1) for name in moves.moves)
    assert (report["totals"]["vm_moves"], report["totals"]["vm_moves_minimum"],
            report["totals"]["vm_moves_avoidable"]) == (4, 4, 0)


def test_without_the_preference_vms_land_on_a_node_still_to_do(lab, k8s, namespace, tmp_path, lock_name,
                                                               workers_back, favourite_back, scheduler_profile):
    """The placement above is one where the scheduler alone makes avoidable moves: the report counts them."""
    moves, report = rolling_with_a_favourite_still_to_do(lab, k8s, namespace, tmp_path, lock_name,
                                                         scheduler_profile, "default",
                                                         rolling_maintenance_prefer_done_nodes=False)
    assert moves.moves.get("second-1") == 2 and moves.moves.get("second-2") == 2, moves.hops
    assert report["totals"]["vm_moves"] == sum(moves.moves.values())
    assert report["totals"]["vm_moves_avoidable"] == 2
    assert sorted(a["vm"] for a in report["moves"]["avoidable_moves"]) == [
        "%s/second-1" % namespace, "%s/second-2" % namespace]


def test_without_scoring_the_report_counts_what_the_scheduler_did(lab, k8s, namespace, tmp_path, lock_name,
                                                                  workers_back, favourite_back, scheduler_profile):
    """NoScoring turns every score plugin off: the preference (like the VMs' own preferred affinity) is not
    looked at and any feasible node may win. The run still succeeds, takes its taints off, and its report
    counts exactly the moves that happened."""
    moves, report = rolling_with_a_favourite_still_to_do(lab, k8s, namespace, tmp_path, lock_name,
                                                         scheduler_profile, "NoScoring")
    assert report["totals"]["vm_moves"] == sum(moves.moves.values()) >= 4
    assert report["moves"]["per_vm"] == dict(("%s/%s" % (namespace, name), count) for name, count in moves.moves.items())
    assert report["totals"]["vm_moves_minimum"] + report["totals"]["vm_moves_avoidable"] == report["totals"]["vm_moves"]


def test_lock_ttl_shorter_than_the_node_tasks_is_refused(lab, k8s, tmp_path, lock_name, task_files):
    """The lock is not renewed while the node tasks run: a TTL they could outlast is refused up front."""
    before = node_marks(k8s)
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
        rolling_maintenance_node_tasks=task_files["ok"], rolling_maintenance_node_tasks_timeout=1200))
    assert run.returncode != 0
    text = " ".join(failure_messages(run))
    assert "rolling_maintenance_lock_ttl (900s) must be longer than rolling_maintenance_node_tasks_timeout (1200s)" \
        in text, text
    assert node_marks(k8s) == before
    assert lease(k8s, lock_name) is None


def test_the_lock_is_renewed_before_a_node_only_when_its_ttl_would_not_outlast_the_node(lab, k8s, tmp_path,
                                                                                         lock_name, workers_back):
    """Drain 300 + Ready 120 + verify 180 + 120 s to spare = 720 s: a TTL of 720 s needs renewing before every
    node, one of 3600 s taken a moment ago does not (and outlasts both nodes)."""
    with WebhookReceiver() as receiver:
        hooks = [{"url": receiver.base + "/slack/T0/s3cret", "format": "slack"}, {"url": receiver.base + "/json"}]
        tight = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
            tmp_path / "tight", lock_name, rolling_maintenance_nodes=["lab-worker-1", "lab-worker-2"],
            rolling_maintenance_lock_ttl=720, rolling_maintenance_notify_webhooks=hooks))
    assert tight.returncode == 0, failure_messages(tight)
    assert tight.statuses("Renew the cluster lock before the node") == ["ok", "ok"]
    # The webhooks were told, in order, with the right nodes; the Slack one got its text only.
    told = receiver.bodies("/json")
    assert [(m["event"], m["node"]) for m in told] == [
        ("run_started", None), ("node_done", "lab-worker-1"), ("node_done", "lab-worker-2"), ("run_finished", None)]
    assert len({m["run"] for m in told}) == 1 and told[0]["details"]["nodes"] == ["lab-worker-1", "lab-worker-2"]
    assert told[-1]["details"]["done"] == ["lab-worker-1", "lab-worker-2"] and told[-1]["details"]["remaining"] == []
    assert [sorted(m) for m in receiver.bodies("/slack/T0/s3cret")] == [["text"]] * 4
    assert "lab-worker-2" in receiver.bodies("/slack/T0/s3cret")[2]["text"]
    assert "s3cret" not in tight.output
    # The run's story on the lock's Lease: its renewals are one Event, counted in its series.
    told = recorded_events.of(k8s, lock_name, "Lease", LOCK_NAMESPACE)
    assert [(e["reason"], e["count"]) for e in told] == [("LockAcquired", 1), ("LockRenewed", 2),
                                                         ("LockReleased", 1)], told
    holder = told[0]["run"]
    assert holder and all(e["run"] == holder for e in told)
    # And on each node, in order, by the same run.
    for node in ("lab-worker-1", "lab-worker-2"):
        story = [e for e in recorded_events.of(k8s, node, "Node") if e["run"] == holder]
        assert [e["reason"] for e in story] == ["MaintenancePending", "BeginMaintenance", "SucceedMaintenance",
                                                "RemovedMaintenance", "BackInService"], story
    # A webhook that is down: the run succeeds and says the notifications failed.
    with DownEndpoint() as down:
        roomy = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
            tmp_path / "roomy", lock_name, rolling_maintenance_nodes=["lab-worker-1", "lab-worker-2"],
            rolling_maintenance_lock_ttl=3600, rolling_maintenance_notify_webhooks=[{"url": down.base + "/json"}]))
    assert roomy.returncode == 0, failure_messages(roomy)
    assert roomy.statuses("Renew the cluster lock before the node") == ["skipped", "skipped"]
    told = [(name, result) for name, result in roomy.results() if name.startswith("Tell the webhooks")]
    assert [name for name, _r in told] == ["Tell the webhooks the run starts"] + [
        "Tell the webhooks how the node ended"] * 2 + ["Tell the webhooks how the run ended"], told
    for _name, result in told:
        assert not result.get("failed") and result["delivered"] == [], result
        assert [(f["target"], f["attempts"]) for f in result["failures"]] == [(down.base, 3)], result
    assert "notification to webhook 1" in roomy.output  # the warning
    assert [r["status"] for r in report_of(tmp_path / "roomy")["nodes"]] == ["done", "done"]


def test_lock_of_a_run_stops_node_maintenance_by_hand_but_not_the_run(lab, k8s, tmp_path, lock_name, task_files,
                                                                      workers_back):
    """While a run works on lab-worker-1 (its node task waits for a gate), node_maintenance by hand with
    the run's lock is refused, on another node and for ending lab-worker-1's maintenance; the run's own
    node_maintenance calls pass its holder, so the run, once the gate opens, finishes."""
    gate = tmp_path / "gate"
    gate.write_text("hold")
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"],
                      rolling_maintenance_node_tasks=task_files["gated"], node_task_gate=str(gate))
    run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra)
    try:
        wait_for(lambda: not run.running() or "Work until the test opens the gate" in run.output(), 600,
                 "the run to reach its node task")
        assert run.running(), run.output()[-3000:]
        holder = lease(k8s, lock_name).spec.holder_identity
        assert holder
        versions = safety.ResourceVersions(k8s)
        by_hand = {"name": lock_name, "namespace": LOCK_NAMESPACE}
        for args, refused in (({"name": "lab-worker-2"}, "Node lab-worker-2 was not put into maintenance"),
                              ({"name": "lab-worker-1", "state": "absent"}, "Node lab-worker-1 was left in maintenance")):
            result = runs.module(lab.kubeconfig, "node_maintenance", dict(args, lock=by_hand)).result()
            assert result.get("failed") and result["msg"].startswith(
                "%s: the cluster lock %s/%s is held by '%s'" % (refused, LOCK_NAMESPACE, lock_name, holder)), result
        # Nodes compared by spec, labels and annotations, less what the cluster itself keeps changing.
        assert [c for c in versions.changes() if c.startswith(("Node lab-worker-1 ", "Node lab-worker-2 "))] == []
        gate.unlink()
        assert run.wait(600) == 0, run.output()[-4000:]
        output = run.output()
    finally:
        run.close()
    assert "[1/1 lab-worker-1] done" in output
    assert in_service(k8s, "lab-worker-1") and in_service(k8s, "lab-worker-2")
    assert not lease(k8s, lock_name).spec.holder_identity


# -- health gate -------------------------------------------------------------------------------

def drained_nodes(run):
    """The nodes the run put into maintenance, from its 'Enter maintenance' results."""
    return [line["result"].get("invocation", {}).get("module_args", {}).get("name") for line in run.lines
            if line["name"].startswith("Enter maintenance") and line["status"] != "skipped"]


def test_health_gate_bad_input_is_refused(lab, k8s, tmp_path, lock_name):
    before = node_marks(k8s)
    for gate, expected in (
            ({"comand": "true"}, "rolling_maintenance_health_gate.comand. Supported parameters include"),
            ({"command": "true", "url": "http://prometheus:9090/"}, "must name exactly one check"),
            ({"timeout": 30}, "it names none"),
            ({"command": "true", "timeout": -5}, "needs a timeout of 0 seconds or more")):
        run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
            tmp_path, lock_name, rolling_maintenance_nodes=["lab-worker-1"], rolling_maintenance_health_gate=gate))
        assert run.returncode != 0
        text = " ".join(failure_messages(run))
        assert expected in text, (gate, text)
        assert not any(task.startswith("Preflight every node") for task, _result in run.results()), gate
    assert node_marks(k8s) == before
    assert lease(k8s, lock_name) is None


def test_health_gate_passes_after_tries_then_stops_the_run_before_the_next_node(lab, k8s, tmp_path, lock_name,
                                                                                workers_back):
    """The gate's third try passes (lab-worker-1 goes ahead); from its fourth try on it fails, so the run
    stops before lab-worker-2 and says how to finish the job."""
    counter = tmp_path / "tries"
    script = ('n=$(( $(cat %s 2>/dev/null || echo 0) + 1 )); echo $n > %s; [ $n -eq 3 ] && exit 0; '
              'echo "$n critical alerts firing" >&2; exit 1' % (counter, counter))
    run = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=WORKERS[:3],
        rolling_maintenance_health_gate={"command": ["sh", "-c", script], "timeout": 30, "delay": 1}))
    assert run.returncode != 0, run.output[-4000:]
    out = run.output
    assert "[1/3 lab-worker-1] health gate: try 1, failing: exited 1: 1 critical alerts firing, retrying for" in out
    assert "[1/3 lab-worker-1] health gate: try 3, passed after" in out
    assert "[1/3 lab-worker-1] done" in out
    assert "[2/3 lab-worker-2] health gate: try 1, failing: exited 1: 4 critical alerts firing, retrying for" in out
    assert "giving up after" in out
    assert drained_nodes(run) == ["lab-worker-1"]
    final = failure_messages(run)[-1]
    assert "stopped: the health gate failed." in final, final
    assert "Done: lab-worker-1." in final and "Not started: lab-worker-2, lab-worker-3." in final
    assert "so node lab-worker-2 was not started: exited 1:" in final and "critical alerts firing" in final
    assert "Failed and left cordoned" not in final
    assert "The cluster lock was released." in final
    assert ("Finish the job with: ansible-playbook kubevirt_ops.maintenance.rolling_maintenance -e "
            "'{\"rolling_maintenance_nodes\": [\"lab-worker-2\", \"lab-worker-3\"], "
            "\"rolling_maintenance_node_selector\": \"\"}'") in final, final
    assert all(in_service(k8s, name) for name in WORKERS)
    # The nodes not started kept their taints until the end of the run took them off.
    assert run.statuses(TAINTS_OFF_TASK) == ["changed"]
    for node in client.CoreV1Api(k8s).list_node().items:
        assert PENDING_TAINT not in [t.key for t in node.spec.taints or []], node.metadata.name
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "health_gate_failed"
    assert "the health gate failed" in report["message"]
    assert [(n["node"], n["status"]) for n in report["nodes"]] == [("lab-worker-1", "done")]
    assert report["untouched"] == ["lab-worker-2", "lab-worker-3"]
    assert report["remaining"] == "Not finished: lab-worker-2, lab-worker-3."
    assert '"rolling_maintenance_nodes": ["lab-worker-2", "lab-worker-3"]' in report["resume"]


def test_health_gate_url_in_the_host_based_play_stops_before_the_first_node(lab, k8s, tmp_path, lock_name,
                                                                            workers_back):
    """A URL gate failing its only try (timeout 0) stops the host-based play before its first node; the
    URL's user, password and query string and the request's headers appear nowhere."""
    inventory = tmp_path / "lab.nodes.yml"
    inventory.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    server = k8s.configuration.host.split("://", 1)[1]
    gate = {"url": "https://gate-user:gate-password@%s/readyz?token=gate-query-token" % server,
            "headers": {"Authorization": "Bearer gate-header-token"}, "validate_certs": False,
            "expect": "no alert firing", "timeout": 0}
    before = node_marks(k8s), maintenances(k8s)
    argv = [os.path.join(runs.BIN, "ansible-playbook"), "-i", str(inventory), HOSTS_PLAYBOOK, "-v", "-e", json.dumps(
        base_vars(tmp_path, lock_name, rolling_maintenance_target="lab-worker-3:lab-worker-4",
                  rolling_maintenance_health_gate=gate))]
    run = runs._run(argv, lab.kubeconfig, None, 900)
    assert run.returncode != 0, run.output[-4000:]
    out = run.output
    shown = "https://%s/readyz" % server
    assert "[1/2 lab-worker-3] health gate: try 1, failing:" in out and "giving up after" in out, out[-4000:]
    assert drained_nodes(run) == []
    final = failure_messages(run)[-1]
    assert "stopped: the health gate failed." in final, final
    assert "The health gate (GET %s) still failed after 1 try" % shown in final
    assert "Done: none." in final and "Not started: lab-worker-3, lab-worker-4." in final
    assert ("Finish the job with: ansible-playbook <your playbook> -e '{\"rolling_maintenance_nodes\": "
            "[\"lab-worker-3\", \"lab-worker-4\"], \"rolling_maintenance_node_selector\": \"\"}'") in final, final
    for secret in ("gate-user", "gate-password", "gate-query-token", "gate-header-token"):
        assert secret not in out, secret
        assert secret not in json.dumps(run.lines), secret
    assert (node_marks(k8s), maintenances(k8s)) == before
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "health_gate_failed" and report["nodes"] == []
    assert report["untouched"] == ["lab-worker-3", "lab-worker-4"]


# -- several nodes at once -------------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"
ZONES = {"lab-worker-1": "zone-a", "lab-worker-2": "zone-b", "lab-worker-3": "zone-a", "lab-worker-4": "zone-b"}


@pytest.fixture
def zones(k8s):
    """Two failure domains: workers 1 and 3 in zone-a, 2 and 4 in zone-b."""
    core = client.CoreV1Api(k8s)
    for name, zone in ZONES.items():
        core.patch_node(name, {"metadata": {"labels": {ZONE: zone}}})
    yield ZONES
    for name in ZONES:
        core.patch_node(name, {"metadata": {"labels": {ZONE: None}}})


@pytest.fixture
def eight_vms(k8s, namespace):
    return unpinned_vms(k8s, namespace, 8)


HOLD = "kubevirt-ops.test/hold"


@pytest.fixture
def held_pod(k8s, namespace):
    """A ReplicaSet's pod on lab-worker-1 only that, once evicted, stays (terminating, by a finalizer) until
    the test releases it: the drain of lab-worker-1 cannot end before that."""
    labels = {"app": "held"}
    template = {"metadata": {"labels": labels, "finalizers": [HOLD]},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                         "terminationGracePeriodSeconds": 0, "affinity": workloads.only_on(["lab-worker-1"])}}
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_replica_set(namespace, {"metadata": {"name": "held", "labels": labels}, "spec": {
        "replicas": 1, "selector": {"matchLabels": labels}, "template": template}})

    def held_pods():
        return core.list_namespaced_pod(namespace, label_selector="app=held").items

    wait_for(lambda: any(p.status.phase == "Running" for p in held_pods()), 120, "the held pod to run")

    def release():
        for pod in held_pods():
            if HOLD in (pod.metadata.finalizers or []):
                core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})

    yield held_pods, release
    apps.patch_namespaced_replica_set("held", namespace, {"spec": {"replicas": 0}})

    def gone():
        release()
        return not held_pods()

    wait_for(gone, 120, "the held pods to go")


def assert_no_move_within_a_batch(moves):
    """Every node of a batch (here: a zone) was out of scheduling before any of them drained, so no VM
    left one node of a batch for another node of the same batch."""
    assert moves.hops, "no VM moved"
    within = [hop for hop in moves.hops if ZONES[hop[1]] == ZONES[hop[2]]]
    assert within == [], moves.hops


def test_two_nodes_of_one_zone_at_a_time(lab, k8s, namespace, tmp_path, lock_name, zones, eight_vms, held_pod,
                                         workers_back):
    """max_parallel 2 by zone: both nodes of a zone are drained together, never nodes of two zones, never
    more than two; KubeVirt's migration limits hold and every VM runs afterwards."""
    held_pods, release = held_pod
    vm_safety = safety.VmSafety(k8s, [namespace])
    # A TTL the batches' drain, Ready and verify timeouts cannot outlast with two minutes to spare (300 + 120 + 180
    # + 120 s): renewed before each batch.
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=WORKERS, rolling_maintenance_max_parallel=2,
                      rolling_maintenance_failure_domain=ZONE, rolling_maintenance_lock_ttl=720)
    outcome = {}
    moves = VmiMoves(k8s, namespace)
    with safety.PdbWatcher(k8s) as budgets, safety.ParallelWatcher(k8s, WORKERS, ZONE) as parallel:
        thread = threading.Thread(target=lambda: outcome.update(run=runs.playbook(lab.kubeconfig, PLAYBOOK, extra)))
        thread.start()
        try:
            # lab-worker-3 enters maintenance while the drain of lab-worker-1 cannot have ended: together.
            wait_for(lambda: client.CoreV1Api(k8s).read_node("lab-worker-3").spec.unschedulable, 300,
                     "lab-worker-3 to be cordoned while lab-worker-1 still drains")
            # (the held pod is still on lab-worker-1, evicted or about to be: its drain has not ended)
            assert any(p.spec.node_name == "lab-worker-1" for p in held_pods())
        finally:
            release()
            thread.join(1200)
            moves.stop()
    run = outcome["run"]
    assert run.returncode == 0, run.output[-4000:]
    assert run.statuses("Renew the cluster lock before the batch") == ["ok", "ok"]
    assert_no_move_within_a_batch(moves)
    assert "lab-worker-1 + lab-worker-3, then lab-worker-2 + lab-worker-4 (up to 2 at once" in run.output
    assert "entering maintenance together: lab-worker-1, lab-worker-3" in run.output
    # The drains of a batch show their progress while they run, each node its own lines.
    for name in WORKERS:
        assert "node_maintenance %s: drained: 0/" % name in run.output, run.output[-4000:]
    assert "RETRYING" not in run.output
    # Both nodes of a zone were out at the same time, and only ever those.
    assert parallel.most_cordoned == 2, parallel.cordoned_sets
    assert ["lab-worker-1", "lab-worker-3"] in parallel.cordoned_sets
    assert ["lab-worker-2", "lab-worker-4"] in parallel.cordoned_sets
    assert parallel.mixed_domains == []
    assert 0 < parallel.most_migrations <= 5  # parallelMigrationsPerCluster, KubeVirt's default
    assert budgets.violations == []
    vms = vm_safety.verify()
    assert vms.problems == [] and vms.migrated, vms
    assert all(in_service(k8s, name) for name in WORKERS)
    report = report_of(tmp_path)
    assert report["status"] == "succeeded"
    assert [n["node"] for n in report["nodes"]] == ["lab-worker-1", "lab-worker-3", "lab-worker-2", "lab-worker-4"]
    assert all(n["status"] == "done" for n in report["nodes"])
    # method auto drains a batch itself: the node-maintenance operator would drain its nodes in turns.
    assert all(n["method"] == "drain" for n in report["nodes"]), [n["method"] for n in report["nodes"]]
    assert report["batches"] == [["lab-worker-1", "lab-worker-3"], ["lab-worker-2", "lab-worker-4"]]
    assert report["policy"]["max_parallel"] in (2, "2") and report["policy"]["failure_domain"] == ZONE


def test_a_failure_in_a_batch_finishes_the_batch_and_starts_no_other(lab, k8s, namespace, tmp_path, lock_name,
                                                                   zones, task_files, four_vms, workers_back):
    # A TTL that outlasts the first batch, taken a moment ago: not renewed before it (the run stops after it).
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_nodes=WORKERS, rolling_maintenance_max_parallel=2,
                      rolling_maintenance_failure_domain=ZONE, rolling_maintenance_node_tasks=task_files["failing"],
                      fail_on_node="lab-worker-1", rolling_maintenance_lock_ttl=3600)
    with safety.ParallelWatcher(k8s, WORKERS, ZONE) as parallel:
        run = runs.playbook(lab.kubeconfig, PLAYBOOK, extra)
    assert run.returncode != 0
    assert run.statuses("Renew the cluster lock before the batch") == ["skipped"]
    final = failure_messages(run)[-1]
    assert "Done: lab-worker-3." in final, final
    assert "Failed and left cordoned (in maintenance): lab-worker-1." in final
    assert "Not started: lab-worker-2, lab-worker-4." in final
    assert '"rolling_maintenance_nodes": ["lab-worker-1", "lab-worker-2", "lab-worker-4"]' in final
    assert not in_service(k8s, "lab-worker-1")
    assert all(in_service(k8s, name) for name in ("lab-worker-2", "lab-worker-3", "lab-worker-4"))
    assert parallel.most_cordoned == 2 and parallel.mixed_domains == []
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert [(n["node"], n["status"]) for n in report["nodes"]] == [("lab-worker-1", "failed"), ("lab-worker-3", "done")]


def test_max_parallel_bad_input_changes_nothing(lab, k8s, tmp_path, lock_name):
    before = node_marks(k8s)
    zero = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=WORKERS, rolling_maintenance_max_parallel=0))
    assert zero.returncode != 0
    assert any("rolling_maintenance_max_parallel (0) is not a number of nodes" in m for m in failure_messages(zero))
    unlabelled = runs.playbook(lab.kubeconfig, PLAYBOOK, base_vars(
        tmp_path, lock_name, rolling_maintenance_nodes=WORKERS, rolling_maintenance_max_parallel=2,
        rolling_maintenance_failure_domain="example.com/rack"))
    assert unlabelled.returncode != 0
    assert any("Node lab-worker-1 has no label example.com/rack, so its failure domain is unknown" in m
               for m in failure_messages(unlabelled)), failure_messages(unlabelled)
    hosts = host_based_run(lab, tmp_path, base_vars(tmp_path, lock_name, rolling_maintenance_max_parallel=0))
    assert hosts.returncode != 0
    assert any("rolling_maintenance_max_parallel (0) is not a number of nodes" in m
               for m in failure_messages(hosts)), failure_messages(hosts)
    # The host-based playbook plans only nodes with a host: lab-worker-2 has none in this inventory.
    static = tmp_path / "one-host.ini"
    static.write_text("[workers]\nlab-worker-1 ansible_connection=local\n")
    hostless = runs._run([os.path.join(runs.BIN, "ansible-playbook"), "-i", str(static), HOSTS_PLAYBOOK, "-e",
                          json.dumps(base_vars(tmp_path, lock_name, rolling_maintenance_max_parallel=2,
                                               rolling_maintenance_nodes=["lab-worker-1", "lab-worker-2"]))],
                         lab.kubeconfig, None, 900)
    assert hostless.returncode != 0
    assert any(m.startswith("Node lab-worker-2 has no inventory host, and the host-based playbook maintains each node")
               for m in failure_messages(hostless)), failure_messages(hostless)
    assert node_marks(k8s) == before
    assert lease(k8s, lock_name) is None


def host_based_run(lab, tmp_path, extra, *options):
    """The host-based playbook over the nodes of the inventory plugin."""
    inventory = tmp_path / "lab.nodes.yml"
    inventory.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    return runs._run([os.path.join(runs.BIN, "ansible-playbook"), "-i", str(inventory), HOSTS_PLAYBOOK, "-e",
                      json.dumps(extra)] + list(options), lab.kubeconfig, None, 1200)


def overlap(first, second):
    """Whether two phases of the report ran at the same time for a while."""
    return first["start"] < second["end"] and second["start"] < first["end"]


def test_host_based_play_runs_a_batch_on_its_hosts_at_the_same_time(lab, k8s, namespace, tmp_path, lock_name, zones,
                                                                   four_vms, task_files, workers_back):
    """The host-based playbook with max_parallel 2 by zone: the play's serial batches are the preflight's
    (hosts in the run's order, not the inventory's), both nodes of a zone are out together and never
    nodes of two zones, and the node tasks of a batch's hosts run at the same time."""
    vm_safety = safety.VmSafety(k8s, [namespace])
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_target="workers", rolling_maintenance_max_parallel=2,
                      rolling_maintenance_failure_domain=ZONE, rolling_maintenance_node_tasks=task_files["ok"],
                      node_task_seconds=6)
    moves = VmiMoves(k8s, namespace)
    try:
        with safety.PdbWatcher(k8s) as budgets, safety.ParallelWatcher(k8s, WORKERS, ZONE) as parallel:
            run = host_based_run(lab, tmp_path, extra)
    finally:
        moves.stop()
    assert run.returncode == 0, run.output[-4000:]
    assert_no_move_within_a_batch(moves)
    assert "lab-worker-1 + lab-worker-3, then lab-worker-2 + lab-worker-4 (up to 2 at once" in run.output
    assert "entering maintenance together: lab-worker-1, lab-worker-3" in run.output
    # The drains of a batch show their progress while they run, each node its own lines.
    for name in WORKERS:
        assert "node_maintenance %s: drained: 0/" % name in run.output, run.output[-4000:]
    assert "RETRYING" not in run.output
    assert "[2/4 lab-worker-3] done" in run.output and "[4/4 lab-worker-4] done" in run.output
    assert parallel.most_cordoned == 2, parallel.cordoned_sets
    assert ["lab-worker-1", "lab-worker-3"] in parallel.cordoned_sets
    assert ["lab-worker-2", "lab-worker-4"] in parallel.cordoned_sets
    assert parallel.mixed_domains == []
    assert budgets.violations == []
    vms = vm_safety.verify()
    assert vms.problems == [] and vms.migrated, vms
    assert all(in_service(k8s, name) for name in WORKERS)
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "succeeded"
    nodes = report["nodes"]
    assert [(n["node"], n["index"], n["status"]) for n in nodes] == [
        ("lab-worker-1", 1, "done"), ("lab-worker-3", 2, "done"), ("lab-worker-2", 3, "done"),
        ("lab-worker-4", 4, "done")]
    assert report["batches"] == [["lab-worker-1", "lab-worker-3"], ["lab-worker-2", "lab-worker-4"]]
    # The node tasks (6 s each) of a batch's two hosts ran at the same time; the batches one after the other.
    tasks = dict((n["node"], n["phases"]["tasks"]) for n in nodes)
    assert overlap(tasks["lab-worker-1"], tasks["lab-worker-3"]), tasks
    assert overlap(tasks["lab-worker-2"], tasks["lab-worker-4"]), tasks
    assert max(tasks["lab-worker-1"]["end"], tasks["lab-worker-3"]["end"]) < min(
        tasks["lab-worker-2"]["start"], tasks["lab-worker-4"]["start"]), tasks


def test_a_failure_in_a_host_based_batch_finishes_the_batch_and_starts_no_other(lab, k8s, namespace, tmp_path,
                                                                               lock_name, zones, task_files,
                                                                               four_vms, workers_back):
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_target="workers", rolling_maintenance_max_parallel=2,
                      rolling_maintenance_failure_domain=ZONE, rolling_maintenance_node_tasks=task_files["failing"],
                      fail_on_node="lab-worker-1")
    # One fork: the hosts of a batch take turns through the node tasks, and the plan says so.
    with safety.ParallelWatcher(k8s, WORKERS, ZONE) as parallel:
        run = host_based_run(lab, tmp_path, extra, "--forks", "1")
    assert run.returncode != 0
    assert "Ansible's forks (1) are fewer than rolling_maintenance_max_parallel (2)" in run.output, [l for l in run.output.splitlines() if "in this order" in l]
    final = failure_messages(run)[-1]
    assert "Done: lab-worker-3." in final, final
    assert "Failed and left cordoned (in maintenance): lab-worker-1." in final
    assert "Not started: lab-worker-2, lab-worker-4." in final
    assert any(m.startswith("1 node(s) of the batch failed and are left cordoned (in maintenance): lab-worker-1.")
               and "firmware update of lab-worker-1 exited 1" in m for m in failure_messages(run)), failure_messages(run)
    assert not in_service(k8s, "lab-worker-1")
    assert all(in_service(k8s, name) for name in ("lab-worker-2", "lab-worker-3", "lab-worker-4"))
    assert parallel.most_cordoned == 2 and parallel.mixed_domains == []
    assert not lease(k8s, lock_name).spec.holder_identity
    report = report_of(tmp_path)
    assert report["status"] == "failed"
    assert [(n["node"], n["index"], n["status"]) for n in report["nodes"]] == [
        ("lab-worker-1", 1, "failed"), ("lab-worker-3", 2, "done")]
    assert report["nodes"][0]["phases"]["tasks"]["failed"]
    assert report["nodes"][0]["error"] == "Update the firmware: firmware update of lab-worker-1 exited 1"
    # Both hosts of the batch failed the play at once (the run stops); the run was finished once for them.
    assert run.output.count("Release the cluster lock]") == 1, run.output[-4000:]


@pytest.mark.parametrize("style", ["single-play", "host-based"])
def test_a_failed_drain_in_a_batch_fails_its_node_before_its_node_tasks(lab, k8s, namespace, tmp_path, lock_name,
                                                                       zones, four_vms, held_pod, task_files,
                                                                       workers_back, style):
    """lab-worker-1 cannot finish its drain (a pod of it stays terminating until the test releases it):
    its drain fails with the batch's, the node is recorded as failed in its drain, before any node task,
    and left cordoned; lab-worker-3, drained with it, is finished; no other batch starts."""
    _held_pods, release = held_pod
    extra = base_vars(tmp_path, lock_name, rolling_maintenance_max_parallel=2, rolling_maintenance_failure_domain=ZONE,
                      rolling_maintenance_drain_timeout=45, rolling_maintenance_node_tasks=task_files["ok"])
    try:
        if style == "host-based":
            run = host_based_run(lab, tmp_path, dict(extra, rolling_maintenance_target="workers"))
        else:
            run = runs.playbook(lab.kubeconfig, PLAYBOOK, dict(extra, rolling_maintenance_nodes=WORKERS))
    finally:
        release()
    assert run.returncode != 0
    final = failure_messages(run)[-1]
    assert "Done: lab-worker-3." in final, final
    assert "Failed and left cordoned (in maintenance): lab-worker-1." in final
    assert "Not started: lab-worker-2, lab-worker-4." in final
    report = report_of(tmp_path)
    assert [(n["node"], n["status"]) for n in report["nodes"]] == [("lab-worker-1", "failed"), ("lab-worker-3", "done")]
    failed = report["nodes"][0]
    assert list(failed["phases"]) == ["drain"] and failed["phases"]["drain"]["failed"], failed["phases"]
    assert failed["error"].startswith("Enter maintenance (drain) with the batch: "), failed["error"]
    assert not in_service(k8s, "lab-worker-1")
    assert all(in_service(k8s, name) for name in ("lab-worker-2", "lab-worker-3", "lab-worker-4"))
    assert not lease(k8s, lock_name).spec.holder_identity


def test_a_host_based_play_of_ones_own_must_take_its_batches_from_the_plan(lab, k8s, tmp_path, lock_name):
    """A copy of the host-based playbook with hosts: workers and serial: 1 and max_parallel 2: refused
    before the batch is drained (lab-worker-2 would be drained without its host); nothing left changed."""
    before = node_marks(k8s)
    with open(HOSTS_PLAYBOOK) as handle:
        own = handle.read()
    own = re.sub(r'(?m)^  hosts: "\{\{ hostvars.*$', "  hosts: workers", own)
    own = re.sub(r'(?m)^  serial: "\{\{ hostvars.*$', "  serial: 1", own)
    assert own.count("  serial: 1\n") == 1 and own.count("  hosts: workers\n") == 1
    (tmp_path / "own.yml").write_text(own)
    inventory = tmp_path / "lab.nodes.yml"
    inventory.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    run = runs._run([os.path.join(runs.BIN, "ansible-playbook"), "-i", str(inventory), str(tmp_path / "own.yml"),
                     "-e", json.dumps(base_vars(tmp_path, lock_name, rolling_maintenance_max_parallel=2))],
                    lab.kubeconfig, None, 900)
    assert run.returncode != 0
    assert any(m.startswith("The play's serial batch (lab-worker-1) is not the run's batch of node lab-worker-1 "
                            "(lab-worker-1, lab-worker-2)") for m in failure_messages(run)), failure_messages(run)
    assert node_marks(k8s) == before
    assert not lease(k8s, lock_name).spec.holder_identity
    assert report_of(tmp_path)["status"] == "not_started"
