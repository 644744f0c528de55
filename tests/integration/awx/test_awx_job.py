"""The rolling maintenance playbook run as an AWX / AAP job template runs it.

Through ansible-runner, the library AWX runs jobs with: the playbook of the project, the
inventory ``localhost``, the job template's extra variables (``extravars``), and the
credentials only as the environment variables AWX's "OpenShift or Kubernetes API Bearer
Token" credential injects (K8S_AUTH_HOST, K8S_AUTH_API_KEY, K8S_AUTH_VERIFY_SSL,
K8S_AUTH_SSL_CA_CERT): no kubeconfig anywhere (KUBECONFIG unset, HOME an empty directory).
The token is a ServiceAccount's bound only to the shipped ClusterRoles (docs/rbac).

Asserted on the job events ansible-runner records, as AWX shows them:

* during each node's drain a progress event at least every 15 s (the gaps measured with the
  events' timestamps, from the drain task's start to its end), naming the migrating VMs;
* the playbook_on_stats summary, and the role's report in its artifact_data (set_stats);
* no event holds the token.

Figures (the job's duration, the largest gap between two progress events of a drain) go to
tests/output/awx/figures.json.

A second job is cancelled mid-drain, as AWX cancels it through ansible-runner: its drain must stop.
"""

import base64
import datetime
import json
import os
import re
import signal
import sys
import time

import pytest
from kubernetes import client

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import identities  # noqa: E402  (tests/integration helpers)
import runs  # noqa: E402
import workloads  # noqa: E402

import ansible_runner  # noqa: E402  (requirements-dev.txt: the tier never skips)

REPO = identities.REPO
BIN = os.path.dirname(sys.executable)
OPERATOR_ROLE = "kubevirt-ops-maintenance-operator"
LOCK_NAMESPACE = "kube-system"
LOCK_ROLE = "kubevirt-ops-maintenance-lock"
MAX_GAP = 15.0  # seconds between two progress events of a drain, at most
# The drained nodes, and the node each one's VMs may move to (kept cordoned while the VMs
# are created, so that they start on the drained node).
LONG, LONG_SPARE = "lab-worker-3", "lab-worker-1"
SHORT, SHORT_SPARE = "lab-worker-4", "lab-worker-2"
# Live migration in the lab lasts guest memory / 1 GiB/s, two at a time per node: on LONG the
# VM of 4 GiB has left after about 5 s, the one of 20 GiB after about 20 s, with no change in
# between (the progress repeats itself, the heartbeat); on SHORT one of 1 GiB, a drain of a few s.
LONG_VMS = [("awx-db-1", "20Gi"), ("awx-web-2", "4Gi")]
SHORT_VMS = [("awx-web-1", "1Gi")]
FIGURES = os.path.join(REPO, "tests", "output", "awx", "figures.json")


def _set_unschedulable(k8s, node, value):
    client.CoreV1Api(k8s).patch_node(node, {"spec": {"unschedulable": value}})


@pytest.fixture
def awx_vms(k8s, namespace, restore_nodes):
    """VMs that run on LONG and SHORT, each free to move to its spare node only."""
    for spare in (LONG_SPARE, SHORT_SPARE):
        _set_unschedulable(k8s, spare, True)
    try:
        for names, nodes in ((LONG_VMS, [LONG, LONG_SPARE]), (SHORT_VMS, [SHORT, SHORT_SPARE])):
            for name, memory in names:
                workloads.create_vm(k8s, namespace, name, memory=memory, nodes=nodes)
        workloads.wait_vms_running(k8s, namespace, [n for n, _m in LONG_VMS + SHORT_VMS])
    finally:
        for spare in (LONG_SPARE, SHORT_SPARE):
            _set_unschedulable(k8s, spare, False)
    placed = workloads.vm_nodes(k8s, namespace)
    assert all(placed[n] == LONG for n, _m in LONG_VMS) and all(placed[n] == SHORT for n, _m in SHORT_VMS), placed
    return namespace


@pytest.fixture
def bearer_token_credential(k8s, lab, tmp_path):
    """What AWX's "OpenShift or Kubernetes API Bearer Token" credential injects, for a
    ServiceAccount bound only to the shipped operator ClusterRole and lock Role."""
    identities.apply_rbac(k8s, identities.OPERATOR_FILE)
    identity = identities.create_identity(k8s, lab.kubeconfig, tmp_path, prefix="kvops-awx",
                                          cluster_roles=[OPERATOR_ROLE], roles=[(LOCK_NAMESPACE, LOCK_ROLE)])
    os.unlink(identity.kubeconfig)  # AWX has none: the token and the CA file are all it gives
    server, ca_data = identities.lab_cluster(lab.kubeconfig)
    ca_file = tmp_path / "awx-ca.crt"
    ca_file.write_bytes(base64.b64decode(ca_data))
    env = {
        "K8S_AUTH_HOST": server,
        "K8S_AUTH_API_KEY": identity.token,
        "K8S_AUTH_VERIFY_SSL": "True",
        "K8S_AUTH_SSL_CA_CERT": str(ca_file),
    }
    yield identity, env
    identities.delete_identity(k8s, identity)


def _when(event):
    stamp = datetime.datetime.fromisoformat(event["created"])
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()


def _drains(events):
    """[(node, start event, end event)] of the role's drain tasks (node_maintenance, present)."""
    starts = {}
    found = []
    for event in events:
        data = event.get("event_data") or {}
        if not str(data.get("task_action", "")).endswith("node_maintenance"):
            continue
        if event["event"] == "runner_on_start":
            starts[data.get("task_uuid")] = event
        elif event["event"] in ("runner_on_ok", "runner_on_failed") and data.get("task_uuid") in starts \
                and "Enter maintenance (drain)" in data.get("task", ""):
            found.append(((data.get("res") or {}).get("node"), starts[data["task_uuid"]], event))
    return found


def _progress(events, node, start, end):
    """The progress events of the drain of ``node`` between two events, in order."""
    low, high = start["counter"], end["counter"]
    return [e for e in events
            if low < e["counter"] < high and e["event"] == "verbose"
            and (e.get("stdout") or "").startswith("node_maintenance %s:" % node)]


def job_setup(credential_env, tmp_path, monkeypatch):
    """(private data dir, environment) of a job as AWX runs it: the credential's variables only, no
    kubeconfig anywhere (not in the environment, not in an empty HOME), and the job's modules run
    from a directory of its own (ANSIBLE_REMOTE_TMP, tmp_path / "job-modules")."""
    for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    private_data_dir = tmp_path / "job"
    private_data_dir.mkdir()
    envvars = dict(credential_env)
    envvars.update({
        "HOME": str(home),
        "ANSIBLE_REMOTE_TMP": str(tmp_path / "job-modules"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".build", "collections"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
    })
    return private_data_dir, envvars


def test_rolling_maintenance_as_an_awx_job(k8s, awx_vms, bearer_token_credential, tmp_path, monkeypatch):
    identity, credential_env = bearer_token_credential
    private_data_dir, envvars = job_setup(credential_env, tmp_path, monkeypatch)
    # The job template's extra variables (a survey's answers arrive the same way).
    extravars = {
        "rolling_maintenance_nodes": [LONG, SHORT],
        "rolling_maintenance_method": "drain",
        "rolling_maintenance_non_migratable": "fail",
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
    }
    started = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        project_dir=REPO,
        playbook="playbooks/rolling_maintenance.yml",
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}},
        extravars=extravars,
        envvars=envvars,
        quiet=True,
        timeout=900,
    )
    duration = time.monotonic() - started
    events = list(runner.events)
    stdout = "".join(e.get("stdout") or "" for e in events)
    assert runner.status == "successful" and runner.rc == 0, stdout[-4000:]

    # -- progress during each drain --------------------------------------------------------
    drains = _drains(events)
    assert sorted(node for node, _s, _e in drains) == sorted([LONG, SHORT]), [d[0] for d in drains]
    figures = {"job_seconds": round(duration, 1), "drains": {}}
    for node, start, end in drains:
        progress = _progress(events, node, start, end)
        assert progress, "no progress event during the drain of %s:\n%s" % (node, stdout[-3000:])
        times = [_when(start)] + [_when(e) for e in progress] + [_when(end)]
        gaps = [b - a for a, b in zip(times, times[1:])]
        between = gaps[1:-1]  # between two progress events
        figures["drains"][node] = {
            "seconds": round(times[-1] - times[0], 1),
            "progress_events": len(progress),
            "max_gap_between_progress_events": round(max(between), 1) if between else None,
            "max_gap_including_task_start_and_end": round(max(gaps), 1),
        }
        assert max(gaps) <= MAX_GAP, "a gap of %.1f s without progress in the drain of %s: %s" % (
            max(gaps), node, [e["stdout"] for e in progress])
        expected = [n for n, _m in (LONG_VMS if node == LONG else SHORT_VMS)]
        text = "\n".join(e["stdout"] for e in progress)
        for vm in expected:
            assert "%s/%s" % (awx_vms, vm) in text, "VM %s is not named in the progress of %s:\n%s" % (
                vm, node, text)
    long_progress = _progress(events, LONG, *[(s, e) for n, s, e in drains if n == LONG][0])
    said = [re.sub(r" \[\d+s\]$", "", e["stdout"]) for e in long_progress]
    assert any(a == b for a, b in zip(said, said[1:])), "no heartbeat in the drain of %s: %s" % (LONG, said)
    assert figures["drains"][LONG]["seconds"] > MAX_GAP, (
        "the long drain took %s s: too short to show the heartbeat" % figures["drains"][LONG]["seconds"])

    # -- the summary and the report as job artifacts --------------------------------------
    stats = [e for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1
    data = stats[0]["event_data"]
    assert not data.get("failures") and not data.get("dark"), data
    assert data.get("changed", {}).get("localhost"), data
    published = (data.get("artifact_data") or {}).get("rolling_maintenance")
    assert published, "the role published no artifact_data: %s" % sorted(data)
    assert published["status"] == "succeeded", published["message"]
    # What a workflow's next node reads: the nodes done, none failed or left.
    assert (published["done"], published["failed"], published["remaining"], published["resume"]) == (
        [LONG, SHORT], [], [], "")
    assert [n["node"] for n in published["report"]["nodes"]] == [LONG, SHORT]
    assert published["totals"]["nodes_done"] == 2
    assert published["totals"]["vms_migrated"] == len(LONG_VMS + SHORT_VMS)
    assert published["summary"] and os.path.exists(published["files"]["json"])
    assert runner.stats["failures"] == {} and runner.stats["changed"].get("localhost")

    # -- no secret in any event ------------------------------------------------------------
    leaks = [e["event"] for e in events if identity.token in json.dumps(e)]
    assert leaks == [], "the token appears in the events %s" % leaks
    with open(os.path.join(runner.config.artifact_dir, "stdout")) as handle:
        assert identity.token not in handle.read()

    # -- the VMs moved where they could go ------------------------------------------------
    placed = workloads.vm_nodes(k8s, awx_vms)
    assert all(placed[n] == LONG_SPARE for n, _m in LONG_VMS), placed
    assert all(placed[n] == SHORT_SPARE for n, _m in SHORT_VMS), placed

    figures["max_gap_between_progress_events"] = max(
        (d["max_gap_between_progress_events"] or 0) for d in figures["drains"].values())
    os.makedirs(os.path.dirname(FIGURES), exist_ok=True)
    with open(FIGURES, "w") as handle:
        json.dump(figures, handle, indent=2, sort_keys=True)
    print("AWX job figures: %s" % json.dumps(figures, sort_keys=True))


HOLD_MIGRATION = "kubevirt-ops.lab/hold-migration"


def module_processes(marker):
    """Process ids of node_maintenance modules whose command line holds ``marker`` (the job's own
    ANSIBLE_REMOTE_TMP, where Ansible puts the module it runs)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                command = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        if "AnsiballZ_node_maintenance" in command and marker in command:
            found.append(int(entry))
    return found


def test_a_cancelled_awx_job_stops_its_drain(k8s, lab, awx_vms, bearer_token_credential, tmp_path, monkeypatch):
    """AWX cancels a job the way ansible-runner does: SIGKILL to ansible-playbook's process group.
    Ansible's workers run in sessions of their own (ansible-core executor/process/worker.py
    ``_detach``), so the worker running the drain, and the module under it, outlive the cancel.
    The module must see its run gone (owner_pid, module_utils/coordination/run_owner.py) and stop, instead of
    draining unattended until its timeout (1800 s by default)."""
    _identity, credential_env = bearer_token_credential
    private_data_dir, envvars = job_setup(credential_env, tmp_path, monkeypatch)
    remote_tmp = envvars["ANSIBLE_REMOTE_TMP"]  # the job's modules, and only they, run from here
    for name, _memory in LONG_VMS:  # their migrations off LONG stay Running until released
        workloads.annotate_vm(k8s, awx_vms, name, {HOLD_MIGRATION: "true"})
    core = client.CoreV1Api(k8s)
    custom = client.CustomObjectsApi(k8s)
    seen = {}

    def cancel():
        """True (cancel the job) once LONG is drained into a held migration with the module running."""
        if not core.read_node(LONG).spec.unschedulable:
            return False
        migrations = custom.list_namespaced_custom_object("kubevirt.io", "v1", awx_vms,
                                                          "virtualmachineinstancemigrations")["items"]
        if not any((m.get("status") or {}).get("phase") == "Running" for m in migrations):
            return False
        seen["modules"] = module_processes(remote_tmp)
        return bool(seen["modules"])

    try:
        runner = ansible_runner.run(
            private_data_dir=str(private_data_dir),
            project_dir=REPO,
            playbook="playbooks/rolling_maintenance.yml",
            inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}},
            extravars={"rolling_maintenance_nodes": [LONG, SHORT], "rolling_maintenance_method": "drain",
                       "rolling_maintenance_report_dir": str(tmp_path / "reports")},
            envvars=envvars,
            quiet=True,
            timeout=900,
            cancel_callback=cancel,
        )
        stdout = "".join(e.get("stdout") or "" for e in runner.events)
        assert runner.status == "canceled", "the job was not cancelled mid-drain (%s):\n%s" % (
            runner.status, stdout[-3000:])
        assert seen["modules"], "no drain module ran when the job was cancelled"
        cancelled = time.monotonic()
        deadline = cancelled + 120
        while module_processes(remote_tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = module_processes(remote_tmp)
        assert left == [], "the drain module (process %s) still runs 120 s after the job was cancelled" % left
        print("AWX cancel: the drain stopped %.1f s after the cancel" % (time.monotonic() - cancelled))
        assert core.read_node(LONG).spec.unschedulable, "the stopped drain left %s in maintenance" % LONG
    finally:
        for pid in module_processes(remote_tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for name, _memory in LONG_VMS:
            workloads.annotate_vm(k8s, awx_vms, name, {HOLD_MIGRATION: None})
        for node in (LONG, SHORT):
            runs.module(lab.kubeconfig, "node_maintenance", {"name": node, "state": "absent"})
        runs.module(lab.kubeconfig, "cluster_lock", {"state": "absent", "force": True})
