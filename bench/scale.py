"""Scenario 5: node_maintenance_info and the role's preflight on a large lab.

A lab of its own with N workers (default 1,000) and P pods per node in total
(default 30: 29 ReplicaSet pods plus the simulator's virt-handler DaemonSet pod), so
30,000 pods at the default size. The ReplicaSets' pod templates name their node, so
the pods bypass the scheduler (which would take longer than anything measured here)
but are otherwise ordinary ReplicaSet pods that KWOK marks Running.

Measured, each as a user runs it (``ansible localhost -m ...``, start-up included):
``node_maintenance_info`` for every node, the preflight of the ``rolling_maintenance``
role over every worker (its ``maintenance_preflight`` module, which is what the role's
preflight step runs), and, for reference, ``kubectl get nodes,pods -A -o json``.
Wall time and peak memory (the sum over the process tree, sampled, and the largest
single process from wait4).
"""

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from bench import labs, measure, peers as peers_mod, workloads as w
from bench.bootstrap import say
from bench.kube import Kube

NAMESPACE = "bench-scale"
# ReplicaSets are created from this many threads (the pods by the lab's controller-manager).
CREATE_WORKERS = 4


def populate(kube, workers, pods_per_node, timeout):
    """ReplicaSets pinned to each node until the lab holds ``pods_per_node`` pods per worker."""
    if kube.get_or_none("Namespace", NAMESPACE) is None:
        kube.create("Namespace", {"metadata": {"name": NAMESPACE}})
        w.wait_for(lambda: kube.get_or_none("ServiceAccount", "default", NAMESPACE), 300,
                   "the default ServiceAccount of the scale namespace")
    existing = {rs["metadata"]["name"] for rs in kube.list("ReplicaSet", NAMESPACE)[0]}
    daemon_pods = 1 if kube.list("Pod", "kubevirt", limit=1)[0] else 0
    replicas = max(0, pods_per_node - daemon_pods)

    def create(node):
        rs = w.replica_set(f"rs-{node}", replicas)
        rs["spec"]["template"]["spec"]["nodeName"] = node
        kube.create("ReplicaSet", rs, NAMESPACE)

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(create, [n for n in workers if f"rs-{n}" not in existing]))
    want = replicas * len(workers)
    started = time.monotonic()
    last = -1
    running_deadline = None
    while True:
        created = _count(kube, NAMESPACE)
        not_running = len(kube.list("Pod", NAMESPACE, field_selector="status.phase!=Running")[0])
        running = created - not_running
        if created >= want:
            # KWOK marks pods Running at its own pace; Pending pods count for the plan as well.
            running_deadline = running_deadline or time.monotonic() + 300
            if not_running == 0 or time.monotonic() > running_deadline:
                break
        if running != last:
            say(f"scale: {created}/{want} pods created, {running} Running "
                f"({time.monotonic() - started:.0f}s)")
            last = running
        if time.monotonic() - started > timeout:
            raise w.Timeout(f"only {created} of {want} pods created after {timeout}s")
        time.sleep(10)
    populate.running = running
    return want + daemon_pods * len(workers)


def _ready_workers(kube):
    nodes, _ = kube.list("Node")
    return sum(1 for n in nodes if n["metadata"]["name"].startswith("lab-worker-") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (n.get("status") or {}).get("conditions") or []))


def _count(kube, namespace=None):
    """Objects in a list, from one page of one (remainingItemCount), without fetching them."""
    from bench.kube import path_of

    page = kube.request("GET", path_of("Pod", namespace), {"limit": 1})
    return len(page.get("items") or []) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


def _median_run(runs):
    """The run with the median wall time (every run's wall time and peak memory listed with it)."""
    ok = sorted((r for r in runs if r["ok"]), key=lambda r: r["wall_seconds"]) or runs
    chosen = dict(ok[(len(ok) - 1) // 2])
    chosen["all_wall_seconds"] = [r["wall_seconds"] for r in runs]
    chosen["all_peak_tree_rss_mib"] = [r["peak_tree_rss_mib"] for r in runs]
    return chosen


def run(ctx_env_factory, nodes, pods_per_node, state_dir, keep_lab, populate_timeout=3600, iterations=1):
    """Bring the scale lab up, fill it, measure (``iterations`` runs each, the median reported)."""
    record = {"nodes": nodes, "pods_per_node": pods_per_node, "iterations": iterations,
              "lab": f"python -m lab up --scale --nodes {nodes}"}
    started = time.monotonic()
    # The lab's scale profile: a pod CIDR with a /24 for every node and Lease heartbeats
    # every 30 s (see lab/README.md). Re-running `up` on a lab already up adds missing nodes.
    labs.up(state_dir, nodes, extra=("--scale",))
    kubeconfig = state_dir / "kubeconfig"
    kube = Kube(kubeconfig)
    record["workers_ready_before"] = _ready_workers(kube)
    workers = w.workers(kube)
    record["lab_up_seconds"] = round(time.monotonic() - started, 1)
    say(f"scale: lab with {len(workers)} workers up in {record['lab_up_seconds']}s; creating pods")
    started = time.monotonic()
    record["pods"] = populate(kube, workers, pods_per_node, populate_timeout)
    record["nodes"] = len(workers)
    record["populate_seconds"] = round(time.monotonic() - started, 1)
    record["pods_running"] = getattr(populate, "running", None)
    record["workers_ready"] = _ready_workers(kube)
    all_pods = _count(kube)
    record["pods_total_in_cluster"] = all_pods
    say(f"scale: {all_pods} pods in the cluster after {record['populate_seconds']}s; measuring")
    env = ctx_env_factory(state_dir, kubeconfig, kube)
    results = {}
    commands = {
        "node_maintenance_info (all nodes)": ["kubevirt_ops.maintenance.node_maintenance_info", {}],
        "preflight (maintenance_preflight, all workers)": [
            "kubevirt_ops.maintenance.maintenance_preflight",
            {"label_selector": w.WORKER_ROLE, "fail_on_problems": False}],
    }
    # The machine is shared: the load while measuring says how much of a figure is queueing.
    record["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    for key, (module, args) in commands.items():
        argv = [str(env.our_bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", module]
        if args:
            argv += ["-a", json.dumps(args)]
        runs = []
        for _ in range(max(1, iterations)):
            m = measure.run(argv, env=env.our_ansible_env(), timeout=1800)
            result = peers_mod.ansible_result(m.stdout)
            error = peers_mod.ansible_error(m, result)
            summary = m.summary()
            summary.update({"ok": error is None, "error": error})
            if result and key.startswith("node_maintenance_info"):
                summary["nodes_returned"] = len(result.get("nodes") or [])
            if result and key.startswith("preflight"):
                summary["problems"] = len(result.get("problems") or [])
            runs.append(summary)
            result = None
        results[key] = _median_run(runs)
    m = measure.run(["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes,pods", "-A", "-o", "json"],
                    timeout=600)
    summary = m.summary()
    summary.update({"ok": m.returncode == 0, "error": None if m.returncode == 0 else m.stderr[-300:],
                    "output_mib": round(len(m.stdout) / 2**20, 1)})
    results["kubectl get nodes,pods -A -o json (reference)"] = summary
    record["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    record["results"] = results
    if not keep_lab:
        labs.down(state_dir)
    return record
