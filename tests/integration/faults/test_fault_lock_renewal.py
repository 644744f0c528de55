"""The API server goes away while the cluster lock is renewed (between two nodes of a rolling run):
the renewal waits it out (the client's retry budget) and the lock stays with its holder; never
a traceback, never a lock lost or taken by nobody."""

import os
import threading

from kubernetes import client

import reliability
import runs
import safety
import workloads
from lab.wait import wait_for

LOCK = "kvops-fault-renewal"
ROLLING_LOCK = "kvops-fault-renewal-rolling"
PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
# Node tasks that say they have started, then wait for the test's word: the run's next call to
# the API server is the renewal of the lock after the node tasks.
NODE_TASKS = """---
- name: Say the node tasks run
  ansible.builtin.copy:
    content: "{{ rolling_maintenance_node }}"
    dest: "%(started)s"
    mode: "0600"
- name: Wait for the test's word
  ansible.builtin.wait_for:
    path: "%(go)s"
    timeout: 300
"""
HOLDER = "rolling_maintenance@fault-renewal"
DOWN_FOR = 8  # seconds without an API server, well inside the client's 30 s retry budget


def lease(k8s, name=LOCK):
    return client.CoordinationV1Api(k8s).read_namespaced_lease(name, "kube-system")


def test_apiserver_restart_during_the_lock_renewal(k8s, lab):
    figure = reliability.fault("API server restarted during the lock renewal", group="control plane")
    args = {"name": LOCK, "holder": HOLDER, "ttl": 300, "purpose": "fault test"}
    taken = runs.module(lab.kubeconfig, "cluster_lock", args).result()
    assert taken.get("acquired"), taken
    before = lease(k8s).spec.renew_time
    restart = threading.Thread(target=lab.restart_apiserver, kwargs={"down_for": DOWN_FOR})
    try:
        restart.start()
        wait_for(lambda: not lab.apiserver_up(), 60, "the API server to stop")
        # The renewal starts while no API server listens.
        run = runs.module(lab.kubeconfig, "cluster_lock", args)
        restart.join(180)
        assert not restart.is_alive(), "the API server did not come back"
        renewed = run.result()
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not renewed.get("failed"), renewed.get("msg")
        assert renewed.get("acquired") and renewed.get("holder") == HOLDER, renewed
        after = lease(k8s)
        assert after.spec.holder_identity == HOLDER and after.spec.renew_time > before
        figure.note(pdb_violations=0, vms_lost=0)
    finally:
        restart.join(180)
        runs.module(lab.kubeconfig, "cluster_lock", dict(args, state="absent")).result()
    assert not lease(k8s).spec.holder_identity, "the lock was not released"
    figure.passed()


def test_apiserver_restart_during_the_lock_renewal_of_a_rolling_run(
        k8s, lab, pair, fault_namespace, tmp_path, restore_nodes):
    """The same fault inside a rolling run: the API server stops as the node tasks end, so the
    role's renewal of the lock after them meets no API server. The run waits it out and finishes
    the node; the lock is held throughout and released at the end."""
    a, b = pair
    figure = reliability.fault("API server restarted during the lock renewal of a rolling run", group="control plane")
    workloads.vms_start_on(k8s, fault_namespace, (a, b), ["renewed"], "1Gi")
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    started, go = tmp_path / "started", tmp_path / "go"
    tasks = tmp_path / "node-tasks.yml"
    tasks.write_text(NODE_TASKS % {"started": started, "go": go})
    extra = runs.rolling_vars([a], ROLLING_LOCK, tmp_path, rolling_maintenance_node_tasks=str(tasks),
                              rolling_maintenance_node_tasks_timeout=300)
    restart = threading.Thread(target=lab.restart_apiserver, kwargs={"down_for": DOWN_FOR})
    run = None
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
            wait_for(lambda: started.exists() or not run.running(), 600, "the node tasks to start")
            assert run.running(), run.output()[-3000:]
            holder = lease(k8s, ROLLING_LOCK).spec.holder_identity
            assert holder, "the run holds no lock during its node tasks"
            restart.start()
            wait_for(lambda: not lab.apiserver_up(), 60, "the API server to stop")
            go.write_text("go")  # the renewal starts while no API server listens
            restart.join(180)
            assert not restart.is_alive(), "the API server did not come back"
            assert run.wait(900) == 0, run.output()[-4000:]
        report = vm_check.verify(timeout=120)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        assert "Traceback" not in run.output(), run.output()[-3000:]
        renewals = [r for r in run.results() if r["name"] == "Renew the cluster lock after the node tasks"]
        assert renewals and renewals[0]["status"] == "ok", renewals
        assert renewals[0]["result"].get("holder") == holder, renewals[0]["result"]
        assert not client.CoreV1Api(k8s).read_node(a).spec.unschedulable, "the node was left cordoned"
        assert report.problems == [] and report.lost == [], report
        assert watcher.violations == []
        assert not lease(k8s, ROLLING_LOCK).spec.holder_identity, "the lock was not released"
        figure.passed()
    finally:
        go.write_text("go")
        if restart.is_alive():
            restart.join(180)
        if run is not None:
            run.close()
