"""Chaos runs: one rolling maintenance run per seed, with the faults its seed draws, resumed until it
completes, checked by an observer of its own (its own watches, none of the product's code):

- no VM lost, and none restarted unless a fault killed the machine it ran on or its own spec says its drain shuts
  it down (eviction strategy None, LiveMigrateIfPossible with a ReadWriteOnce disk, and on runs that shut the VMs
  that cannot leave by eviction down, those and the VMs whose migrations a fault made fail): every other VM must
  migrate; a Manual VM shut down stays stopped and the run's report says so (unless an attempt was cut short);
  the anti-affinity pair never ends on one node;
- no PodDisruptionBudget below its minimum, at any moment, but on a machine a fault killed, or by pods
  that only lost their readiness while an API server restart's missed heartbeats made their node
  NotReady (listed in the record as excused);
- never more than ``max_parallel`` of the nodes out at once (1; in a run in batches 2 of the lab's workers, and
  never two failure domains);
- at the end: both nodes schedulable and free of our marks, the lock released, node remediation no longer paused
  for them (a NodeHealthCheck over the workers, paused by another tool too, keeps only that pause), no process of
  the run left running (after an AWX-style cancel, the workers and drains it left must end by themselves);
- no token of the run in its output (a run whose schedule lets its token expire authenticates through an exec
  credential plugin);
- every pod of the workload back at the end;
- the run completes within the attempts its schedule allows (one per fault, plus two); an attempt
  after a run that stopped uses the resume command that run printed (the nodes that remain), an
  attempt after a kill or an interrupt the same command again.

About a third of the seeds (catalogue.shuts_down) run with ``rolling_maintenance_non_migratable: shutdown`` and two
more VMs that need it (LiveMigrate with a ReadWriteOnce disk, External). About a third (catalogue.batched) run in
failure-domain batches: three nodes, the pair and a third
worker of the first one's zone (the lab's first four workers labelled with two zones), at most two out at once.
On even seeds, and when a fault waits for that step, each node's machine is restarted through its
BMC while the node is drained (``rolling_maintenance_reboot: bmc``). On every third seed the run raises
KubeVirt's live-migration limits for itself; at the end they must be the cluster's own again, with no record
of a run left in the HyperConverged resource.

The seed and the schedule are printed and written to tests/output/chaos/; ``make chaos SEED=<n>``
replays a run.
"""

import glob
import json
import os
import re
import subprocess
import time
import uuid

import pytest
from kubernetes import client

import runs
import safety
import workloads
from lab.wait import wait_for

from catalogue import (ENDS_ATTEMPT, MAX_PARALLEL, RAISED_LIMITS, SABOTAGE, TOKEN_FAULT, ZONE, Credentials, Injector,
                       Moment, batched, draw, raises_limits, restarts_machines, shuts_down, zones)
import results
from results import OUTPUT

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
OUR_TAINTS = ("medik8s.io/drain", "kubevirt-ops.io/maintenance-pending")
# Node remediation the run pauses while a node is out: a NodeHealthCheck over the workers that another tool has
# paused too (its request must stay; ours must go), and the record the run keeps on a node it paused it for.
NHC = ("remediation.medik8s.io", "v1alpha1", "nodehealthchecks")
OTHER_PAUSE = "upgrade-manager"
REMEDIATION_RECORD = "maintenance.kubevirt-ops.io/remediation-paused"
ATTEMPT_TIMEOUT = 900
TRIGGER_TIMEOUT = 300
# How long the processes an AWX-style cancel left behind (Ansible's workers, an async drain) may take
# to notice that their run is gone: the drain checks its run's process between its polls.
ORPHAN_TIMEOUT = 120
VM_NAMES = ["always-1", "always-2", "rerun-1"]
# What the observer expects of a VM when its node is drained, from the VM's own spec (not from the product's plan).
MIGRATES, RESTARTS, STAYS_STOPPED = "migrates", "restarts", "stays stopped"
# The rest of the workload, one VM of each kind a drain treats differently: (name, eviction strategy, run strategy,
# the access mode of its disk or None, what becomes of it).
WIDE = (
    ("shared-1", "LiveMigrateIfPossible", "Always", "ReadWriteMany", MIGRATES),
    ("local-1", "LiveMigrateIfPossible", "Always", "ReadWriteOnce", RESTARTS),
    ("batch-1", "None", "RerunOnFailure", None, RESTARTS),
    ("dev-1", "None", "Manual", None, STAYS_STOPPED),
)
# The VMs that cannot leave by eviction, in the world of a run that shuts them down (catalogue.shuts_down).
BLOCKERS = (
    ("legacy-1", "LiveMigrate", "Always", "ReadWriteOnce", RESTARTS),
    ("external-1", "External", "RerunOnFailure", None, RESTARTS),
)
# Two VMs that must never run on one node (required pod anti-affinity), allowed on every worker, one started on
# each node of the pair: each must live-migrate to a node where the other is not.
APART = ("apart-1", "apart-2")
APART_LABEL = "kubevirt-ops.test/apart"


def create_vms(k8s, namespace, pair, kinds):
    """VMs of ``kinds`` (WIDE, BLOCKERS) on the pair, running; a Manual one is started as Always and switched to
    Manual once it runs (Manual starts a VM only when asked to)."""
    for name, eviction, run_strategy, disk, _ in kinds:
        workloads.create_vm(k8s, namespace, name, eviction=eviction, memory="256Mi", nodes=list(pair), disk=disk,
                            run_strategy="Always" if run_strategy == "Manual" else run_strategy)
    workloads.wait_vms_running(k8s, namespace, [kind[0] for kind in kinds], timeout=300)
    for name, _, run_strategy, _, _ in kinds:
        if run_strategy == "Manual":
            client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
                "kubevirt.io", "v1", namespace, "virtualmachines", name, {"spec": {"runStrategy": "Manual"}})


def create_apart(k8s, namespace, pair):
    """The anti-affinity pair, each preferring one node of ``pair`` (where it starts)."""
    for name, node in zip(APART, pair):
        prefer = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}
        apart = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": APART_LABEL, "operator": "Exists"}]},
            "topologyKey": "kubernetes.io/hostname"}]}
        workloads.create_vm(k8s, namespace, name, memory="256Mi", labels={APART_LABEL: "yes"},
                            affinity={"nodeAffinity": prefer, "podAntiAffinity": apart})
    workloads.wait_vms_running(k8s, namespace, list(APART), timeout=300)


def apart_together(k8s, namespace):
    """The node where both VMs of the anti-affinity pair run, or None."""
    placed = workloads.vm_nodes(k8s, namespace)
    nodes = [placed.get(name) for name in APART]
    return nodes[0] if nodes[0] and nodes[0] == nodes[1] else None


@pytest.fixture
def world(k8s, lab):
    """Two workers and a workload on them: VMs of every run strategy and eviction strategy a drain can get past
    (WIDE; BLOCKERS join on runs that shut those down), disks shared and not, an anti-affinity pair, a Deployment
    guarded by a PodDisruptionBudget, a Deployment whose pod keeps scratch data in an emptyDir, a DaemonSet on every
    worker; the other workers are where things go."""
    workers = workloads.node_names(k8s)
    assert len(workers) >= 3, "chaos runs need at least 3 workers"
    pair = tuple(workers[:2])
    namespace = "kvops-chaos-%s" % uuid.uuid4().hex[:6]
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": namespace}})
    workloads.wait_for_default_service_account(k8s, namespace)
    workloads.vms_start_on(k8s, namespace, pair, VM_NAMES[:2], "256Mi", guarded=True)
    workloads.create_vm(k8s, namespace, VM_NAMES[2], run_strategy="RerunOnFailure", memory="256Mi",
                        nodes=list(pair))
    create_vms(k8s, namespace, pair, WIDE)
    create_apart(k8s, namespace, pair)
    workloads.wait_vms_running(k8s, namespace, VM_NAMES)
    workloads.create_scratch_deployment(k8s, namespace, "scratch", pair)
    workloads.create_node_agent(k8s, namespace, "node-agent")
    custom = client.CustomObjectsApi(k8s)
    custom.create_cluster_custom_object(*NHC, {
        "apiVersion": "%s/%s" % NHC[:2], "kind": "NodeHealthCheck", "metadata": {"name": namespace},
        "spec": {"selector": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                    "values": list(workers)}]},
                 "unhealthyConditions": [{"type": "Ready", "status": "False", "duration": "300s"}],
                 "pauseRequests": [OTHER_PAUSE]}})
    wait_for(lambda: not workloads.not_whole(k8s, namespace, workers), 120, "the workload to be whole")
    yield {"pair": pair, "workers": workers, "namespace": namespace, "health_check": namespace}
    for node in pair:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": node, "state": "absent"})
    custom.delete_cluster_custom_object(*NHC, namespace)
    workloads.delete_namespace(k8s, namespace)


def expected(kinds, namespace):
    """{"namespace/name": what becomes of it} for VMs of ``kinds``."""
    return {"%s/%s" % (namespace, kind[0]): kind[4] for kind in kinds}


def reported_stopped(tmp_path, keys):
    """Those of ``keys`` ("namespace/name") some report of the run lists as shut down to stay stopped."""
    found = set()
    for path in glob.glob(str(tmp_path / "reports" / "rolling-maintenance-*" / "report.json")):
        with open(path) as handle:
            for node in json.load(handle).get("nodes") or []:
                for vm in (node.get("vms") or {}).get("shut_down") or []:
                    key = "%s/%s" % (vm.get("namespace"), vm.get("name"))
                    if key in keys and vm.get("outcome") == "stay_stopped":
                        found.add(key)
    return found


def resumed(extra, tmp_path, since):
    """The extra vars of the next attempt: the resume command the last run printed (its report's
    ``resume``: the nodes that remain) when it wrote one after ``since``, else the same command (a run
    killed or interrupted wrote none)."""
    reports = [p for p in glob.glob(str(tmp_path / "reports" / "rolling-maintenance-*" / "report.json"))
               if os.path.getmtime(p) >= since]
    if not reports:
        return extra
    with open(max(reports, key=os.path.getmtime)) as handle:
        resume = json.load(handle).get("resume") or ""
    found = re.search(r"-e '(\{.*\})'$", resume)
    return dict(extra, **json.loads(found.group(1))) if found else extra


LIMITS_RECORD = "kubevirt-ops.io/migration-limits"
# The mark on a RerunOnFailure VM a drain shut down, until the collection started it again.
START_AGAIN = "maintenance.kubevirt-ops.io/start-again"


def migration_limits(k8s):
    """(the HyperConverged resource's live-migration config, the record a run left or None)."""
    obj = workloads.hyperconverged(k8s)
    return obj["spec"].get("liveMigrationConfig"), (obj["metadata"].get("annotations") or {}).get(LIMITS_RECORD)


def end_state(k8s, nodes, lock, limits_before, health_check):
    """What is left of the run at the end that should not be."""
    problems = []
    pauses = client.CustomObjectsApi(k8s).get_cluster_custom_object(*NHC, health_check)["spec"].get("pauseRequests")
    if pauses != [OTHER_PAUSE]:
        problems.append("NodeHealthCheck %s pauses remediation for %s, not %s only" % (health_check, pauses, [OTHER_PAUSE]))
    config, record = migration_limits(k8s)
    if record:
        problems.append("a record of raised migration limits is left: %s" % record)
    if config != limits_before:
        problems.append("the migration limits are %s, not the cluster's own %s" % (config, limits_before))
    core = client.CoreV1Api(k8s)
    for name in nodes:
        node = core.read_node(name)
        if node.spec.unschedulable:
            problems.append("node %s is still cordoned" % name)
        ours = [t.key for t in node.spec.taints or [] if t.key in OUR_TAINTS]
        if ours:
            problems.append("node %s still has %s" % (name, ", ".join(ours)))
        if REMEDIATION_RECORD in (node.metadata.annotations or {}):
            problems.append("node %s still records remediation paused for it" % name)
    marked = client.CustomObjectsApi(k8s).list_cluster_custom_object(
        "kubevirt.io", "v1", "virtualmachines", label_selector=START_AGAIN)["items"]
    if marked:
        problems.append("VMs still marked to be started again: %s" % ", ".join(
            "%s/%s" % (vm["metadata"]["namespace"], vm["metadata"]["name"]) for vm in marked))
    try:
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease(lock, "kube-system")
        if lease.spec.holder_identity:
            problems.append("the lock is still held by %s" % lease.spec.holder_identity)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
    return problems


def test_chaos_run(lab, k8s, world, seed, chaos_results, tmp_path):
    schedule = draw(seed)
    print("chaos seed %d: %s" % (seed, schedule))
    record = session(lab, k8s, world, seed, schedule, tmp_path)
    chaos_results.append(record)
    results.write(chaos_results, OUTPUT)  # as the session goes: a session stopped part-way keeps what it ran
    assert record["violations"] == [], "seed %d (replay: make chaos SEED=%d): %s" % (seed, seed, record)


def test_the_observer_reports_violations_made_on_purpose(lab, k8s, world, tmp_path):
    """The observer is not blind: violations made behind the run's back during the drain of a run in batches
    are reported, each by the invariant it breaks (a third node out of a second failure domain, a VM restarted
    that could have migrated, a budget below its minimum)."""
    schedule = [{"trigger": "cluster:a migration in flight", "fault": sabotage} for sabotage in SABOTAGE]
    record = session(lab, k8s, world, 0, schedule, tmp_path, batches=True, shutdown=False)
    assert [f["hit"] for f in record["faults"]][0].startswith("node "), record
    assert [v for v in record["violations"] if v.startswith("Nodes: 3 nodes out at once (max_parallel 2)")], record
    assert [v for v in record["violations"] if v.startswith("Nodes: two failure domains out at once")], record
    assert [v for v in record["violations"] if v.startswith("VM: ")], record
    assert [v for v in record["violations"] if v.startswith("PDB: ")], record


def session(lab, k8s, world, seed, schedule, tmp_path, batches=None, shutdown=None):
    """One chaos run: attempts until the run completes, the faults of ``schedule``, the observer's verdict.
    ``batches``: whether the run goes in failure-domain batches, ``shutdown``: whether it shuts the VMs that cannot
    leave by eviction down (by default both as its seed draws)."""
    pair, namespace = world["pair"], world["namespace"]
    batches = batched(seed) if batches is None else batches
    shutdown = shuts_down(seed) if shutdown is None else shutdown
    fates = expected(WIDE + (BLOCKERS if shutdown else ()), namespace)
    if shutdown:
        create_vms(k8s, namespace, pair, BLOCKERS)
    lock = "kvops-chaos-%d-%s" % (seed, uuid.uuid4().hex[:6])
    nodes, watched, domains, most, in_batches = pair, pair, {}, 1, {}
    if batches:
        # The pair's first node and a third worker in one zone, the pair's second in the other: the batches
        # are the first two, then the second; every worker of the lab watched.
        domains = zones(world["workers"])
        assert len(domains) == 4 and domains[pair[0]] != domains[pair[1]], domains
        third = next(n for n in sorted(domains) if n not in pair and domains[n] == domains[pair[0]])
        nodes, watched, most = (pair[0], third, pair[1]), tuple(sorted(domains)), MAX_PARALLEL
        in_batches = {"rolling_maintenance_max_parallel": MAX_PARALLEL, "rolling_maintenance_failure_domain": ZONE}
    extra = runs.rolling_vars(nodes, lock, tmp_path, rolling_maintenance_non_migratable="shutdown" if shutdown else "fail",
                              **in_batches)
    inventory = ["localhost,"]
    if raises_limits(seed):
        extra.update(rolling_maintenance_migration_limits=RAISED_LIMITS)
    limits_before = migration_limits(k8s)[0]
    if restarts_machines(seed, schedule):
        # Each machine restarted through its BMC while its node is drained (the lab's bmc-inventory.yml).
        extra.update(rolling_maintenance_reboot="bmc", rolling_maintenance_machine_timeout=300)
        inventory.append(str(lab.paths.bmc_inventory))
    attempt_vars = extra
    # A run whose token is to expire authenticates through an exec credential plugin.
    credentials = Credentials(k8s, lab, tmp_path / "credentials") if any(
        step["fault"] == TOKEN_FAULT for step in schedule) else None
    kubeconfig = credentials.kubeconfig if credentials else lab.kubeconfig
    injector = Injector(lab, k8s, namespace, VM_NAMES, nodes,
                        bystanders={n: zone for n, zone in domains.items() if n not in nodes}, credentials=credentials)
    vm_check = safety.VmSafety(k8s, [namespace])
    record = {"seed": seed, "schedule": schedule, "faults": [], "attempts": 0, "violations": [],
              "machines_restarted": len(inventory) > 1, "limits_raised": raises_limits(seed), "non_migratable_shut_down": shutdown,
              "nodes": list(nodes), "max_parallel": most, "failure_domains": domains or None}
    started_all = []
    core = client.CoreV1Api(k8s)
    for node, zone in domains.items():
        core.patch_node(node, {"metadata": {"labels": {ZONE: zone}}})
    try:
        with safety.PdbWatcher(k8s) as pdbs, safety.ParallelWatcher(k8s, watched, domain_label=ZONE if domains else None) as parallel:
            finished = False
            pending = list(schedule)
            for attempt in range(len(schedule) + 2):
                record["attempts"] = attempt + 1
                began = time.time()
                started = runs.Started(runs.playbook_argv(PLAYBOOK, attempt_vars, inventory=inventory),
                                       kubeconfig, None)
                started_all.append(started)
                # The schedule's faults in order, each at its moment, until one ends the attempt (the
                # next attempt goes on with the rest) or the attempt ends by itself.
                moment = Moment(k8s, started, nodes, namespace, batches=batches)
                ended = False
                while pending and not ended:
                    planned = pending[0]
                    wait_for(lambda: not started.running() or moment.reached(planned["trigger"]), TRIGGER_TIMEOUT,
                             "%s (seed %d)" % (planned["trigger"], seed), interval=0.2)
                    if not started.running():
                        break
                    pending.pop(0)
                    at = round(time.time(), 1)
                    hit = injector.inject(planned["fault"], started)
                    if hit is not None:
                        record["faults"].append(dict(planned, at=at, attempt=attempt + 1, hit=hit))
                    ended = planned["fault"] in ENDS_ATTEMPT
                    moment.passed()
                if not ended:
                    try:
                        started.wait(ATTEMPT_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        record["violations"].append("attempt %d did not end within %d s" % (
                            attempt + 1, ATTEMPT_TIMEOUT))
                        started.kill()
                injector.undo()
                if started.proc.returncode not in (0, None) and not ended:
                    # How an attempt the schedule did not end failed (its first failed task), for the replay.
                    fatal = [line for line in started.output().splitlines() if line.startswith("fatal: [")]
                    record.setdefault("failed_attempts", {})[attempt + 1] = (fatal or ["no failed task"])[0][:2000]
                if started.proc.returncode == 0:
                    finished = True
                    break
                attempt_vars = resumed(extra, tmp_path, began)
            if not finished:
                record["violations"].append("the run did not complete within %d attempts" % record["attempts"])
        # A VM whose machine a fault killed may have restarted, and so may one its eviction strategy or disk shuts
        # down (or whose migrations a fault made fail, when the run shuts such VMs down); what a fault did to
        # budgets is excused.
        down = set(injector.killed_vms) | set(key for key, fate in fates.items() if fate != MIGRATES)
        report = vm_check.verify(shut_down=down | (injector.made_to_fail if shutdown else set()), timeout=300)
        record["violations"] += ["VM: %s" % p for p in report.problems]
        record["restarted"] = sorted(report.restarted)
        # A Manual VM shut down stays stopped (a new VMI of it is a start nobody asked for), and a run that completed
        # without being cut short reports it (one cut short may have stopped it before it could write its report).
        stopped = [key for key, fate in fates.items() if fate == STAYS_STOPPED]
        for key in stopped:
            before = (vm_check.before.get(tuple(key.split("/"))) or {}).get("vmi") or {}
            vmi = workloads.get_vmi(k8s, *key.split("/"))
            if vmi and workloads.vmi_running(vmi) and vmi["metadata"]["uid"] != before.get("uid"):
                record["violations"].append("VM: %s (Manual) was started again, on %s" % (
                    key, vmi["status"].get("nodeName")))
        # (A Manual VM a fault killed with its machine was stopped by the fault, not by the run.)
        if finished and not any(f["fault"] in ENDS_ATTEMPT for f in record["faults"]):
            unreported = set(stopped) - reported_stopped(tmp_path, stopped) - set(injector.killed_vms)
            record["violations"] += ["VM: %s stays stopped, and no report of the run says so" % key
                                     for key in sorted(unreported)]
        together = apart_together(k8s, namespace)
        if together:
            record["violations"].append("VM: %s run together on %s despite their anti-affinity" % (
                " and ".join(APART), together))
        for violation in pdbs.violations:
            why = injector.excused(violation)
            if why:
                record.setdefault("excused", []).append("%r: %s" % (violation, why))
            else:
                record["violations"].append("PDB: %r" % violation)
        if parallel.most_cordoned > most:
            record["violations"].append("Nodes: %d nodes out at once (max_parallel %d): %s" % (
                parallel.most_cordoned, most, parallel.cordoned_sets))
        if parallel.mixed_domains:
            record["violations"].append("Nodes: two failure domains out at once: %s" % parallel.mixed_domains)
        record["violations"] += end_state(k8s, nodes, lock, limits_before, world["health_check"])
        # Every pod of the workload back (the DaemonSet's where they were, the evicted ones elsewhere).
        try:
            wait_for(lambda: not workloads.not_whole(k8s, namespace, world["workers"]), 120, "the workload to be whole")
        except Exception:  # reported below
            pass
        record["violations"] += ["Workload: %s" % p for p in workloads.not_whole(k8s, namespace, world["workers"])]
        if credentials:
            shown = [n + 1 for n, s in enumerate(started_all) if credentials.shown_in(s.output())]
            if shown:
                record["violations"].append("Secrets: a token of the run is in the output of attempt(s) %s" % shown)
        left = [s.proc.pid for s in started_all if s.running()]
        try:
            wait_for(lambda: not runs.still_running(injector.orphans), ORPHAN_TIMEOUT,
                     "the processes a cancelled run left to end", interval=1)
        except Exception:  # reported below
            pass
        left += runs.still_running(injector.orphans)
        if left:
            record["violations"].append("processes of the run still running: %s" % left)
    finally:
        injector.undo()
        for started in started_all:
            started.close()
        for node in domains:
            core.patch_node(node, {"metadata": {"labels": {ZONE: None}}})
        if credentials:
            credentials.delete()
    return record
