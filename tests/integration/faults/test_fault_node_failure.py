"""A node's machine dies (its heartbeat stops, its guests die with it) while the rolling run
maintains another node: the run notices before touching it, stops safely with one sentence
naming the node and its state, finishes nothing it cannot finish, releases the lock and says
what is left. No VM is lost but those of the dead machine, no PodDisruptionBudget is broken."""

import os
import time

import yaml
from kubernetes import client

import reliability
import runs
import safety
import workloads

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
LOCK = "kvops-fault-node"
NODE_TASK = "Wait for the go of the test"


def test_node_failure_during_the_run_stops_it_safely(k8s, lab, pair, fault_namespace, tmp_path, restore_nodes):
    a, b = pair
    figure = reliability.fault("a node fails (heartbeat stops) during the rolling run", group="nodes")
    for index in range(2):
        workloads.create_vm(k8s, fault_namespace, "nodefail-%d" % index, memory="1Gi")
    workloads.wait_vms_running(k8s, fault_namespace, ["nodefail-0", "nodefail-1"])
    go = tmp_path / "go"
    tasks = tmp_path / "node-tasks.yml"
    tasks.write_text(yaml.safe_dump([{"name": NODE_TASK,
                                      "ansible.builtin.wait_for": {"path": str(go), "timeout": 240}}]))
    extra = {
        "rolling_maintenance_nodes": [a, b],
        "rolling_maintenance_method": "drain",
        "rolling_maintenance_node_tasks": str(tasks),
        "rolling_maintenance_node_tasks_timeout": 240,
        "rolling_maintenance_lock_name": LOCK,
        "rolling_maintenance_drain_timeout": 60,
        "rolling_maintenance_ready_timeout": 30,
        "rolling_maintenance_verify_timeout": 60,
        "rolling_maintenance_lock_ttl": 300,
        "rolling_maintenance_report_dir": str(tmp_path / "reports"),
    }
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    try:
        with safety.PdbWatcher(k8s) as watcher:
            run = runs.start_playbook(lab.kubeconfig, PLAYBOOK, extra_vars=extra)
            try:
                deadline = time.monotonic() + 240
                while run.running() and NODE_TASK not in run.output() and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert run.running(), "the run ended before the node tasks of %s:\n%s" % (a, run.output()[-3000:])
                lab.node_fail(b)  # returns once B is NotReady and tainted
                go.write_text("go")
                run.wait(600)
                output = run.output()
                results = run.results()
            finally:
                run.close()
        failed_vms = [v for v in workloads.vmis(k8s, fault_namespace)
                      if (v.get("status") or {}).get("nodeName") == b]
        report = vm_check.verify(timeout=60)
        lost = [name for name in report.lost if name.split("/")[1] not in
                [v["metadata"]["name"] for v in failed_vms]]
        figure.note(pdb_violations=len(watcher.violations_excluding([b])), vms_lost=len(lost))
        assert run.proc.returncode != 0, "the run went on over a failed node:\n%s" % output[-4000:]
        assert "Traceback" not in output
        failures = [line for line in results if line["status"] == "failed" and not line.get("ignore_errors")]
        assert failures, output[-3000:]
        first = failures[0]["result"].get("msg") or ""
        assert b in first and ("NotReady" in first or "not Ready" in first or "not ready" in first.lower()), first
        assert reliability.clean_error_problems(failures[0]["result"]) == [], first
        # A was finished before B failed.
        node_a = client.CoreV1Api(k8s).read_node(a)
        assert not node_a.spec.unschedulable, "node %s was left cordoned" % a
        final = failures[-1]["result"].get("msg") or ""
        assert b in final, "the run's last word does not say what is left: %s" % final
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease(LOCK, "kube-system")
        assert not lease.spec.holder_identity, "the lock was not released"
        assert lost == [], report
        assert watcher.violations_excluding([b]) == []
        figure.passed()
    finally:
        lab.node_recover(b)  # the machine boots: its VMs start again as new VMIs (run strategy Always)
        runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
