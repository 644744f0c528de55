"""The scenarios, and one measured run of a peer on one of them.

1. plain drain: 100 ReplicaSet pods (10 ReplicaSets of 10) on one node;
2. PDB-gated drain: the same pods, a PDB with ``maxUnavailable: 1`` per ReplicaSet;
3. VM drain: 20 VMs (LiveMigrate, ReadWriteMany PVC, 2Gi guest memory) plus 40 pods,
   the lab's migration limits (5 per cluster, 2 outbound per node) on;
4. rolling maintenance of 4 workers running 40 VMs (10 each, 4Gi guest memory),
   compared with the lower bound the migration limits and migration time imply;
5. scale (see scale.py);
6. several nodes at once (8 workers in 2 zones);
7. rolling maintenance of 4 workers running 12 VMs with a restart of each machine through its
   Redfish BMC while its node is drained, against a hand-written loop doing the same;
8. one node with 20 VMs of 8Gi whose migrations share the node's link (4x a migration's bandwidth; the
   cluster's ``bandwidthPerMigration`` 256Mi for it: 32 s of copy each, a link of 1 GiB/s, a 10 GbE
   migration network, where the copy outweighs KubeVirt's own cost of a migration as on real machines): the role
   with KubeVirt's default limits against the role raising them for the run (4 outbound per node).
"""

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field

from bench import measure, peers as peers_mod, workloads as w
from bench.audit import requests_of
from bench.watcher import Budget, Watcher
from lab.standins.links import LINK_ANNOTATION, link_bytes_per_second


@dataclass
class DrainScenario:
    key: str
    title: str
    replica_sets: int = 10
    per_set: int = 10
    with_pdbs: bool = False
    vms: int = 0
    vm_memory: str = "2Gi"
    peers: tuple = ("kubectl", "k8s_drain", "ours_drain", "ours_cr", "nmo")

    @property
    def pods(self):
        return self.replica_sets * self.per_set


@dataclass
class RollingScenario:
    key: str
    title: str
    nodes: int = 4
    vms_per_node: int = 10
    vm_memory: str = "4Gi"
    # ours_role_drain (the role with method drain) runs when named in --peers.
    peers: tuple = ("ours_role", "kubectl", "ours_role_drain")
    # Failure domains: a value of ZONE_LABEL per node (scenario 6), none by default.
    zones: tuple = ()
    # "bmc": each node's machine restarts through its BMC while the node is drained (scenario 7).
    reboot: str = ""
    # Each node's migration link, as a multiple of a migration's bandwidth (scenario 8; 0: no link limit).
    link_multiple: int = 0
    # The cluster's own bandwidthPerMigration for the scenario's runs (scenario 8; empty: the lab's default).
    migration_bandwidth: str = ""


ZONE_LABEL = "topology.kubernetes.io/zone"


SCENARIOS = {
    "1": DrainScenario("1", "plain drain: 100 ReplicaSet pods"),
    "2": DrainScenario("2", "PDB-gated drain: 100 pods, PDB maxUnavailable 1 per 10 pods", with_pdbs=True),
    "3": DrainScenario("3", "VM drain: 20 VMs (LiveMigrate, RWX) + 40 pods", replica_sets=4, per_set=10, vms=20),
    "4": RollingScenario("4", "rolling maintenance: 4 workers, 40 VMs"),
    "6": RollingScenario("6", "several nodes at once: 8 workers in 2 zones, 80 VMs, max_parallel 2 by zone vs 1",
                         nodes=8, peers=("ours_role", "ours_role_parallel"), zones=("zone-a", "zone-b") * 4),
    "7": RollingScenario("7", "rolling maintenance with a restart through each machine's BMC: 4 workers, 12 VMs",
                         vms_per_node=3, vm_memory="1Gi", peers=("ours_role_bmc", "kubectl_bmc"), reboot="bmc"),
    "8": RollingScenario("8", "one node, 20 VMs of 8Gi, a link of 4x a migration's bandwidth (256Mi): KubeVirt's "
                              "default migration limits vs 4 outbound per node for the run",
                         nodes=1, vms_per_node=20, vm_memory="8Gi", peers=("ours_role", "ours_role_limits"),
                         link_multiple=4, migration_bandwidth="256Mi"),
}

SMOKE_SCENARIO = DrainScenario("smoke", "smoke: 4 pods under a PDB, 1 VM", replica_sets=2, per_set=2,
                               with_pdbs=True, vms=1, vm_memory="256Mi")


# -- preparation ---------------------------------------------------------------------------

@dataclass
class Prepared:
    namespace: str
    budgets: list = field(default_factory=list)
    vms: list = field(default_factory=list)
    vmi_uids: dict = field(default_factory=dict)
    seconds: float = 0.0


def reset(kube, lab_nodes):
    """The previous run's namespaces gone, every worker out of maintenance, nothing pending."""
    w.delete_namespaces(kube)
    for node in lab_nodes:
        w.reset_node(kube, node)
    w.settle(kube)


def prepare_drain(kube, scenario, node):
    started = time.monotonic()
    namespace = w.new_namespace(kube, f"bench-s{scenario.key}")
    with w.Placement(kube, [node]):
        expected = w.create_pods(kube, namespace, scenario.replica_sets, scenario.per_set, scenario.with_pdbs)
        names = w.create_vms(kube, namespace, scenario.vms, scenario.vm_memory) if scenario.vms else []
        total = scenario.pods + len(names)
        w.wait_for(lambda: w.pods_ready_on(kube, namespace, {node}, total), w.PREPARE_TIMEOUT,
                   f"{total} pods Ready on {node}", interval=0.5)
        if names:
            w.wait_for(lambda: w.vms_running_on(kube, namespace, names, {node}), w.PREPARE_TIMEOUT,
                       f"{len(names)} VMs running on {node}", interval=0.5)
    budgets = []
    if scenario.with_pdbs:
        healthy = {f"{rs}-pdb": n for rs, n in expected.items()}
        w.wait_for(lambda: w.pdbs_settled(kube, namespace, healthy), w.PREPARE_TIMEOUT,
                   "PDBs observed by the disruption controller", interval=0.5)
        budgets = [Budget(f"{rs}-pdb", {"app": rs}, n, 1) for rs, n in expected.items()]
    return Prepared(namespace, budgets, names, w.vmi_uids(kube, namespace) if names else {},
                    round(time.monotonic() - started, 1))


def check_drain(kube, prepared, watcher, node):
    """Correctness after the run: pods gone, budgets kept, VMs running elsewhere as before."""
    remaining = w.remaining_pods(kube, node)
    violated = watcher.violated_budgets()
    vm_problems = dict(watcher.vm_disruptions)
    if prepared.vms:
        vmis = {v["metadata"]["name"]: v for v in kube.list("VirtualMachineInstance", prepared.namespace)[0]}
        for name in prepared.vms:
            vmi = vmis.get(name)
            status = (vmi or {}).get("status") or {}
            if vmi is None:
                vm_problems.setdefault(name, "no VMI at the end")
            elif vmi["metadata"]["uid"] != prepared.vmi_uids.get(name):
                vm_problems.setdefault(name, "VMI re-created (restarted, not migrated)")
            elif status.get("phase") != "Running":
                vm_problems.setdefault(name, f"VMI phase {status.get('phase')} at the end")
            elif status.get("nodeName") == node:
                vm_problems.setdefault(name, "VMI still on the drained node")
    return {
        "all_pods_gone": not remaining,
        "remaining_pods": remaining[:20],
        "remaining_count": len(remaining),
        "pdb_violations": violated,
        "vms_running": not vm_problems if prepared.vms else None,
        "vm_problems": vm_problems,
        "watch_errors": watcher.errors,
        "correct": not remaining and not violated and not vm_problems,
    }


def run_drain(ctx, scenario, peer, iteration, node):
    """One measured run of ``peer`` on ``scenario``; returns the record."""
    kube = ctx.kube
    record = {"scenario": scenario.key, "peer": peer.key, "iteration": iteration, "node": node}
    reset(kube, ctx.workers)
    peer.before_run(ctx.env, node)
    prepared = prepare_drain(kube, scenario, node)
    record["prepare_seconds"] = prepared.seconds
    watcher = Watcher(kube, prepared.namespace, prepared.budgets, watch_vmis=bool(prepared.vms)).start()
    offset = ctx.audit.mark()
    outcome = peer.run(ctx.env, node)
    watcher.stop()
    m = outcome.measured
    counts = ctx.audit.count(offset, m.started, m.ended)
    record.update({
        "ok": outcome.ok,
        "error": outcome.error,
        "wall_seconds": m.wall_seconds,
        "max_rss_mib": m.max_rss_mib,
        "peak_tree_rss_mib": m.peak_tree_rss_mib,
        "cpu_seconds": round(m.user_seconds + m.system_seconds, 3),
        "requests": requests_of(counts, peer.clients),
        "requests_by_client": counts["by_client"],
        "requests_detail": {c: counts["verbs"].get(c) for c in counts["verbs"] if any(c.startswith(p) for p in peer.clients)},
        "response_codes": {c: counts["codes"].get(c) for c in counts["codes"] if any(c.startswith(p) for p in peer.clients)},
        "details": outcome.details,
    })
    record["correctness"] = check_drain(kube, prepared, watcher, node)
    if prepared.vms:
        settings = migration_settings(kubevirt_cr(kube), ctx.lab_dir)
        record["migration_settings"] = settings
        record["vm_lower_bound_seconds"] = drain_lower_bound(settings, len(prepared.vms), scenario.vm_memory)
    try:
        peer.after_run(ctx.env, node)
    except Exception as e:  # noqa: BLE001 - the next run resets the node anyway
        record["after_run_error"] = str(e)
    return record


# -- scenario 4 ------------------------------------------------------------------------------

class RollingWatcher:
    """Watches nodes, VMIs and migrations during a rolling run.

    Records, for each node, when it was cordoned and how many VMIs it had then (what
    its drain had to move), and the phase timestamps of every migration.
    """

    def __init__(self, kube, namespace, nodes):
        self.kube = kube
        self.namespace = namespace
        self.nodes = set(nodes)
        self.vmis = {}
        self.cordoned = {}  # node -> {"at": t, "vms": n}
        self.uncordoned = {}
        self.migrations = {}
        self.unschedulable = {}
        self._watches = []
        self._threads = []
        self._lock = threading.Lock()
        self.errors = []
        self.vm_disruptions = {}
        self.initial_vmis = {}

    def start(self):
        vmis, vrv = self.kube.list("VirtualMachineInstance", self.namespace)
        self.vmis = {v["metadata"]["name"]: v for v in vmis}
        self.initial_vmis = {n: v["metadata"]["uid"] for n, v in self.vmis.items()}
        nodes, nrv = self.kube.list("Node")
        self.unschedulable = {n["metadata"]["name"]: bool(n["spec"].get("unschedulable")) for n in nodes}
        _, mrv = self.kube.list("VirtualMachineInstanceMigration", self.namespace)
        self._watch("VirtualMachineInstance", self.namespace, vrv, self._on_vmi)
        self._watch("Node", None, nrv, self._on_node)
        self._watch("VirtualMachineInstanceMigration", self.namespace, mrv, self._on_migration)
        return self

    def stop(self):
        time.sleep(0.3)
        for watch in self._watches:
            watch.close()
        for thread in self._threads:
            thread.join(5)

    def _watch(self, kind, namespace, rv, handler):
        watch = self.kube.watch(kind, namespace, resource_version=rv)
        self._watches.append(watch)

        def loop():
            try:
                for event_type, obj in watch.events():
                    if event_type == "BOOKMARK":
                        continue
                    with self._lock:
                        handler(event_type, obj)
            except Exception as e:  # noqa: BLE001
                if not watch.closed:
                    self.errors.append(f"{kind} watch failed: {e}")

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _on_vmi(self, event_type, vmi):
        name = vmi["metadata"]["name"]
        if event_type == "DELETED":
            self.vmis.pop(name, None)
            self.vm_disruptions.setdefault(name, "VMI deleted")
            return
        self.vmis[name] = vmi
        if name in self.initial_vmis and vmi["metadata"]["uid"] != self.initial_vmis[name]:
            self.vm_disruptions.setdefault(name, "VMI re-created")

    def _on_node(self, event_type, node):
        name = node["metadata"]["name"]
        now = bool(node["spec"].get("unschedulable"))
        before = self.unschedulable.get(name, False)
        self.unschedulable[name] = now
        if name not in self.nodes:
            return
        if now and not before and name not in self.cordoned:
            on_node = sum(1 for v in self.vmis.values() if (v.get("status") or {}).get("nodeName") == name)
            self.cordoned[name] = {"at": time.time(), "vms": on_node}
        elif before and not now and name in self.cordoned:
            self.uncordoned[name] = time.time()

    def _on_migration(self, event_type, migration):
        if event_type != "DELETED":
            self.migrations[migration["metadata"]["uid"]] = migration


def migration_settings(cr, lab_dir):
    """Migration limits and bandwidth as KubeVirt CR ``cr`` sets them and the lab applies them."""
    import json
    from pathlib import Path

    config = migration_configuration(cr)
    bandwidth = config.get("bandwidthPerMigration")
    if not bandwidth:
        try:
            bandwidth = json.loads((Path(lab_dir) / "sim" / "ready").read_text()).get("migration_bandwidth")
        except (OSError, ValueError):
            bandwidth = None
    from kubernetes.utils import parse_quantity

    return {
        "parallel_migrations_per_cluster": int(config.get("parallelMigrationsPerCluster") or 5),
        "parallel_outbound_migrations_per_node": int(config.get("parallelOutboundMigrationsPerNode") or 2),
        "bandwidth": str(bandwidth or "1Gi"),
        "bandwidth_bytes_per_second": float(parse_quantity(str(bandwidth or "1Gi"))),
    }


def lower_bounds(settings, vm_memory, counts, nodes, vms_per_node, groups=None):
    """Seconds: the bound for the VM counts each drain met, and the placement-free ideal.

    ``groups``: the VM counts of the nodes that were out at the same time, group by group (None:
    one node at a time). The nodes of a group drain together, each with its share of the
    cluster's migrations, so a group lasts as long as its slowest node."""
    from kubernetes.utils import parse_quantity

    per_vm = float(parse_quantity(vm_memory)) / settings["bandwidth_bytes_per_second"]
    lanes = min(settings["parallel_outbound_migrations_per_node"], settings["parallel_migrations_per_cluster"])
    if groups:
        observed = sum(max(math.ceil(n / max(1, min(lanes, settings["parallel_migrations_per_cluster"] // len(g))))
                           for n in g) for g in groups) * per_vm
    else:
        observed = sum(math.ceil(n / lanes) for n in counts) * per_vm if counts else None
    # Every VM leaves its node once; the first node's VMs can only go to nodes still to be
    # maintained, so they leave a second time: at least nodes*v + v migrations, one node at a time.
    ideal = math.ceil((nodes * vms_per_node + vms_per_node) / lanes) * per_vm
    return {"migration_seconds_per_vm": per_vm, "lanes": lanes,
            "observed_placement_seconds": observed, "ideal_seconds": ideal}


def drain_lower_bound(settings, vms, vm_memory):
    """Seconds the migrations of ``vms`` VMs off one node take at least: waves of ``lanes`` migrations."""
    from kubernetes.utils import parse_quantity

    per_vm = float(parse_quantity(vm_memory)) / settings["bandwidth_bytes_per_second"]
    lanes = min(settings["parallel_outbound_migrations_per_node"], settings["parallel_migrations_per_cluster"])
    return math.ceil(vms / lanes) * per_vm


def migration_phase_stats(migrations):
    """Mean seconds per migration phase (from phaseTransitionTimestamps) and overall."""
    from bench.audit import _timestamp

    phases = {}
    totals = []
    for m in migrations:
        status = m.get("status") or {}
        stamps = [(t.get("phase"), _timestamp(t.get("phaseTransitionTimestamp")))
                  for t in status.get("phaseTransitionTimestamps") or [] if t.get("phaseTransitionTimestamp")]
        if not stamps or status.get("phase") != "Succeeded":
            continue
        created = _timestamp(m["metadata"]["creationTimestamp"])
        previous = ("created", created)
        for phase, at in stamps:
            phases.setdefault(f"{previous[0]}->{phase}", []).append(at - previous[1])
            previous = (phase, at)
        totals.append(stamps[-1][1] - created)
    mean = {k: round(sum(v) / len(v), 2) for k, v in phases.items()}
    return {"succeeded": len(totals), "mean_total_seconds": round(sum(totals) / len(totals), 2) if totals else None,
            "mean_phase_seconds": mean, "mean_active_seconds": active_seconds(mean, totals)}


def active_seconds(mean_phases, totals):
    """The mean time of a migration once KubeVirt let it out of Pending (its lane free) to Succeeded: what one
    migration takes whoever asked for it; the time in Pending is queueing for a lane, the driver's pace."""
    if not totals:
        return None
    queued = mean_phases.get("created->Pending", 0.0) + mean_phases.get("Pending->Scheduling", 0.0)
    return round(sum(totals) / len(totals) - queued, 2)


def prepare_rolling(kube, scenario, nodes):
    started = time.monotonic()
    namespace = w.new_namespace(kube, f"bench-s{scenario.key}")
    names = []
    for index, node in enumerate(nodes):
        with w.Placement(kube, [node]):
            batch = w.create_vms(kube, namespace, scenario.vms_per_node, scenario.vm_memory, prefix=f"vm-n{index}")
            w.wait_for(lambda b=batch, n=node: w.vms_running_on(kube, namespace, names + b, set(nodes[:index + 1]))
                       and sum(1 for v in kube.list("VirtualMachineInstance", namespace)[0]
                               if v["status"].get("nodeName") == n) == len(b),
                       w.PREPARE_TIMEOUT, f"{len(batch)} VMs running on {node}", interval=0.5)
        names += batch
    return Prepared(namespace, [], names, w.vmi_uids(kube, namespace), round(time.monotonic() - started, 1))


def label_zones(kube, nodes, zones):
    """Put the scenario's failure domains on the nodes (None: take the label off)."""
    for node, zone in zip(nodes, zones):
        kube.patch("Node", node, {"metadata": {"labels": {ZONE_LABEL: zone}}})


def parallel_stats(node_windows, zones_by_node, migrations):
    """Several nodes at once: the most nodes cordoned together, moments with two zones cordoned,
    and the most live migrations in flight together (from their phase timestamps)."""
    from bench.audit import _timestamp

    events = []
    for node, window in node_windows.items():
        events.append((window["cordoned_at"], 1, node))
        events.append((window["uncordoned_at"] if window["uncordoned_at"] is not None else float("inf"), -1, node))
    cordoned, most, mixed = set(), 0, 0
    for _at, delta, node in sorted(events, key=lambda e: (e[0], e[1])):
        if delta > 0:
            cordoned.add(node)
        else:
            cordoned.discard(node)
        most = max(most, len(cordoned))
        if len(set(zones_by_node.get(n) for n in cordoned)) > 1:
            mixed += 1
    spans = []
    for m in migrations:
        stamps = dict((t.get("phase"), _timestamp(t.get("phaseTransitionTimestamp")))
                      for t in (m.get("status") or {}).get("phaseTransitionTimestamps") or []
                      if t.get("phaseTransitionTimestamp"))
        start = stamps.get("Scheduling") or stamps.get("Scheduled")
        end = stamps.get("Succeeded") or stamps.get("Failed")
        if start is not None and end is not None:
            spans += [(start, 1), (end, -1)]
    in_flight, most_migrations = 0, 0
    for _at, delta in sorted(spans):
        in_flight += delta
        most_migrations = max(most_migrations, in_flight)
    return {"most_nodes_cordoned": most, "moments_with_two_zones": mixed, "most_migrations_in_flight": most_migrations}


def out_together(watcher, nodes):
    """The VM counts at cordon of the nodes that were cordoned at the same time, group by group:
    a node joins the group of the nodes still cordoned when it was cordoned."""
    seen = sorted((watcher.cordoned[n]["at"], watcher.uncordoned.get(n, float("inf")), watcher.cordoned[n]["vms"])
                  for n in nodes if n in watcher.cordoned)
    groups, group_end = [], None
    for cordoned_at, uncordoned_at, vms in seen:
        if groups and cordoned_at < group_end:
            groups[-1].append(vms)
            group_end = max(group_end, uncordoned_at)
        else:
            groups.append([vms])
            group_end = uncordoned_at
    return groups


@contextlib.contextmanager
def machines_through_their_bmcs(ctx, scenario):
    """For a scenario that restarts machines through their BMCs: their BareMetalHosts out of the operator's hands
    for its runs (lab/metal3.py ``hosts_released``; else the operator powers a machine it reads Off back on, as
    baremetal-operator's ``manageHostPower`` does), made again afterwards. Nothing for the other scenarios."""
    if scenario.reboot != "bmc":
        yield
        return
    from kubernetes import config

    from lab import metal3
    from lab.machines import bmc as lab_bmc
    from lab.paths import LabPaths

    api = config.new_client_from_config(config_file=str(ctx.kubeconfig))
    with metal3.hosts_released(api, lab_bmc.load(LabPaths(ctx.lab_dir)), ctx.workers[:scenario.nodes]):
        yield


KUBEVIRT = ("kubevirt", "kubevirt")


@contextlib.contextmanager
def migration_link(ctx, scenario):
    """Scenario 8: the cluster's ``bandwidthPerMigration`` at the scenario's (``migration_bandwidth``) and the
    nodes' migration link (lab/standins/links.py) at ``link_multiple`` times it for the scenario's runs, both as
    before afterwards. Nothing for the other scenarios."""
    if not scenario.link_multiple:
        yield
        return
    set_bandwidth = _bandwidth_setter(ctx.kube) if scenario.migration_bandwidth else None
    if set_bandwidth:
        before = migration_configuration(kubevirt_cr(ctx.kube)).get("bandwidthPerMigration")
        set_bandwidth(scenario.migration_bandwidth)
    try:
        settings = migration_settings(kubevirt_cr(ctx.kube), ctx.lab_dir)
        link = int(settings["bandwidth_bytes_per_second"] * scenario.link_multiple)
        ctx.kube.patch("KubeVirt", KUBEVIRT[1], {"metadata": {"annotations": {LINK_ANNOTATION: str(link)}}},
                       namespace=KUBEVIRT[0])
        yield
    finally:
        ctx.kube.patch("KubeVirt", KUBEVIRT[1], {"metadata": {"annotations": {LINK_ANNOTATION: None}}},
                       namespace=KUBEVIRT[0])
        if set_bandwidth:
            set_bandwidth(before)


def _bandwidth_setter(kube):
    """A function setting the cluster's ``bandwidthPerMigration`` (None: unset) where its owner keeps it, found
    once: the HyperConverged CR when there is one (HCO builds the KubeVirt CR's migration settings from it and
    puts back any edit of them), else the KubeVirt CR. It waits until the KubeVirt CR says the value, so the
    scenario's figures are what they say."""
    hcos = kube.list("HyperConverged")[0] if kube.served("HyperConverged") else []
    if hcos:
        kind, meta = "HyperConverged", hcos[0]["metadata"]
        name, namespace = meta["name"], meta["namespace"]

        def body(value):
            return {"spec": {"liveMigrationConfig": {"bandwidthPerMigration": value}}}
    else:
        kind, (namespace, name) = "KubeVirt", KUBEVIRT

        def body(value):
            return {"spec": {"configuration": {"migrations": {"bandwidthPerMigration": value}}}}

    def set_bandwidth(value):
        kube.patch(kind, name, body(value), namespace=namespace)
        w.wait_for(lambda: migration_configuration(kubevirt_cr(kube)).get("bandwidthPerMigration") == value, 60,
                   f"the KubeVirt CR's bandwidthPerMigration to be {value!r}")

    return set_bandwidth


def kubevirt_cr(kube):
    """The lab's KubeVirt CR, {} when there is none."""
    crs, _ = kube.list("KubeVirt")
    return crs[0] if crs else {}


def migration_configuration(cr):
    """``spec.configuration.migrations`` of a KubeVirt CR."""
    return ((cr.get("spec") or {}).get("configuration") or {}).get("migrations") or {}


def boot_ids(kube, nodes):
    return {n: ((kube.get("Node", n).get("status") or {}).get("nodeInfo") or {}).get("bootID") for n in nodes}


def run_rolling(ctx, scenario, peer, iteration):
    kube = ctx.kube
    nodes = ctx.workers[:scenario.nodes]
    record = {"scenario": scenario.key, "peer": peer.key, "iteration": iteration, "nodes": nodes}
    reset(kube, ctx.workers)
    if scenario.zones:
        label_zones(kube, nodes, scenario.zones)
        try:
            return _run_rolling(ctx, scenario, peer, nodes, record)
        finally:
            label_zones(kube, nodes, [None] * len(nodes))
    return _run_rolling(ctx, scenario, peer, nodes, record)


def _run_rolling(ctx, scenario, peer, nodes, record):
    kube = ctx.kube
    prepared = prepare_rolling(kube, scenario, nodes)
    record["prepare_seconds"] = prepared.seconds
    watcher = RollingWatcher(kube, prepared.namespace, nodes).start()
    booted = boot_ids(kube, nodes)
    cr = kubevirt_cr(kube)
    limits_before, link = migration_configuration(cr), link_bytes_per_second(cr)
    offset = ctx.audit.mark()
    # The link speed a user states for the role's preflight (scenario 8), none without a link.
    outcome = peer.run_rolling(ctx.env, nodes, link_speed=str(int(link)) if link else "")
    watcher.stop()
    # Scenario 7: every machine restarted (a new boot ID), none that should not have been.
    now_booted = boot_ids(kube, nodes)
    not_restarted = [n for n in nodes if now_booted[n] == booted[n]] if scenario.reboot else []
    restarted = [n for n in nodes if now_booted[n] != booted[n]] if not scenario.reboot else []
    m = outcome.measured
    counts = ctx.audit.count(offset, m.started, m.ended)
    cr_after = kubevirt_cr(kube)
    settings = migration_settings(cr_after, ctx.lab_dir)
    vm_counts = [watcher.cordoned[n]["vms"] for n in nodes if n in watcher.cordoned]
    groups = out_together(watcher, nodes) if scenario.zones else None
    bounds = lower_bounds(settings, scenario.vm_memory, vm_counts, len(nodes), scenario.vms_per_node, groups)
    node_windows = {
        n: {"vms_at_cordon": watcher.cordoned[n]["vms"],
            "cordoned_at": round(watcher.cordoned[n]["at"] - m.started, 2),
            "uncordoned_at": round(watcher.uncordoned[n] - m.started, 2) if n in watcher.uncordoned else None}
        for n in nodes if n in watcher.cordoned
    }
    # Correctness: every VM running, never restarted, no node left cordoned.
    vmis = {v["metadata"]["name"]: v for v in kube.list("VirtualMachineInstance", prepared.namespace)[0]}
    problems = dict(watcher.vm_disruptions)
    for name in prepared.vms:
        vmi = vmis.get(name)
        if vmi is None or (vmi.get("status") or {}).get("phase") != "Running":
            problems.setdefault(name, "not Running at the end")
    still_cordoned = [n for n in nodes if kube.get("Node", n)["spec"].get("unschedulable")]
    record.update({
        "ok": outcome.ok,
        "error": outcome.error,
        "wall_seconds": m.wall_seconds,
        "max_rss_mib": m.max_rss_mib,
        "peak_tree_rss_mib": m.peak_tree_rss_mib,
        "cpu_seconds": round(m.user_seconds + m.system_seconds, 3),
        "requests": requests_of(counts, peer.clients),
        "requests_by_client": counts["by_client"],
        "details": outcome.details,
        "migration_settings": settings,
        "lower_bound": bounds,
        "nodes_timeline": node_windows,
        "migrations": migration_phase_stats(watcher.migrations.values()),
        "correctness": {
            "vms_running": not problems,
            "vm_problems": problems,
            "nodes_left_cordoned": still_cordoned,
            "all_nodes_visited": len(watcher.cordoned) == len(nodes),
            "machines_not_restarted": not_restarted,
            "machines_restarted_unasked": restarted,
            "watch_errors": watcher.errors,
            "correct": not problems and not still_cordoned and len(watcher.cordoned) == len(nodes)
            and not not_restarted and not restarted,
        },
    })
    if bounds["observed_placement_seconds"]:
        overhead = m.wall_seconds - bounds["observed_placement_seconds"]
        record["overhead_seconds"] = round(overhead, 2)
        record["overhead_per_node_seconds"] = round(overhead / len(nodes), 2)
        record["ratio_to_lower_bound"] = round(m.wall_seconds / bounds["observed_placement_seconds"], 3)
    record["ratio_to_ideal_bound"] = round(m.wall_seconds / bounds["ideal_seconds"], 3)
    floor = kubevirt_floor(settings, peer, vm_counts, groups, record["migrations"].get("mean_active_seconds"))
    if floor:
        record["kubevirt_floor_seconds"] = floor
        record["ratio_to_kubevirt_floor"] = round(m.wall_seconds / floor, 3)
    if scenario.zones:
        record["parallel"] = parallel_stats(node_windows, dict(zip(nodes, scenario.zones)),
                                            watcher.migrations.values())
    if scenario.link_multiple:
        record["link"] = link_stats(settings, scenario, peer, vm_counts, link, record["migrations"])
        # The floors are the migrations': measured against the drains the role's report times (its preflight,
        # lock and report are the same with any limits).
        nodes_timed = ((outcome.details or {}).get("timeline") or {}).get("nodes") or {}
        drains = [(n.get("phases") or {}).get("drain") for n in nodes_timed.values()]
        record["link"]["drain_seconds"] = round(sum(drains), 2) if drains and None not in drains else None
        limits_restored = migration_configuration(cr_after) == limits_before
        record["link"]["limits_restored"] = limits_restored
        record["correctness"]["limits_restored"] = limits_restored
        record["correctness"]["correct"] = record["correctness"]["correct"] and limits_restored
    return record


def peer_lanes(settings, peer):
    """Migrations at once off one node during the peer's run: its own limits for the run, else the cluster's."""
    limits = getattr(peer, "limits", None) or {}
    return min(limits.get("parallel_outbound_migrations_per_node") or settings["parallel_outbound_migrations_per_node"],
               limits.get("parallel_migrations_per_cluster") or settings["parallel_migrations_per_cluster"])


def kubevirt_floor(settings, peer, vm_counts, groups, mean_migration_seconds):
    """Seconds KubeVirt itself needs for the run's drains: each node's VMs (at cordon) in waves of the lanes it
    allows, each wave the run's measured mean migration time (out of Pending to Succeeded); nodes out together
    (``groups``) share the cluster's migrations and last as long as their slowest."""
    if not mean_migration_seconds or not vm_counts:
        return None
    lanes = peer_lanes(settings, peer)
    if groups:
        cluster = settings["parallel_migrations_per_cluster"]
        waves = sum(max(math.ceil(n / max(1, min(lanes, cluster // len(g)))) for n in g) for g in groups)
    else:
        waves = sum(math.ceil(n / lanes) for n in vm_counts)
    return round(waves * mean_migration_seconds, 2)


def link_stats(settings, scenario, peer, vm_counts, link, migrations):
    """Scenario 8: the floors of the run. The link floor: the guests' memory over the node's link, what no setting
    of KubeVirt can beat; the lanes floor: waves of the lanes the run had (its own limits, else the cluster's), each
    a migration's memory at its bandwidth or its share of the link; KubeVirt's floor: the same waves at the run's
    measured mean migration time (out of Pending to Succeeded: the target pod's start-up included)."""
    from kubernetes.utils import parse_quantity

    memory = float(parse_quantity(scenario.vm_memory))
    vms = sum(vm_counts) or scenario.vms_per_node * scenario.nodes
    lanes = peer_lanes(settings, peer)
    rate = min(settings["bandwidth_bytes_per_second"], link / lanes) if link else settings["bandwidth_bytes_per_second"]
    waves = math.ceil(vms / lanes)
    mean = (migrations or {}).get("mean_active_seconds")
    return {"link_bytes_per_second": link, "lanes": lanes,
            "link_floor_seconds": round(vms * memory / link, 2) if link else None,
            "lanes_floor_seconds": round(waves * memory / rate, 2),
            "kubevirt_floor_seconds": round(waves * mean, 2) if mean else None}


def measure_noop(ctx, iterations):
    """A module run that changes nothing vs ``ansible localhost -m ansible.builtin.ping``, interleaved."""
    env = ctx.env
    node = ctx.workers[-1]
    w.reset_node(ctx.kube, node)
    commands = {
        "ping": ["ansible.builtin.ping", {}],
        "node_labeller_noop": ["kubevirt_ops.maintenance.node_labeller", {"name": node, "skip": False}],
        "node_maintenance_absent_noop": ["kubevirt_ops.maintenance.node_maintenance",
                                         {"name": node, "state": "absent"}],
    }
    samples = {k: [] for k in commands}
    errors = {}
    for _ in range(iterations):
        for key, (module, args) in commands.items():
            argv = [str(env.our_bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", module]
            if args:
                import json
                argv += ["-a", json.dumps(args)]
            m = measure.run(argv, env=env.our_ansible_env(), timeout=300, sample_memory=False)
            result = peers_mod.ansible_result(m.stdout)
            error = peers_mod.ansible_error(m, result)
            if error is None and result and result.get("changed"):
                error = "reported changed: true (not a no-op)"
            if error:
                errors[key] = error
            samples[key].append(m.wall_seconds)
    return {"node": node, "samples": samples, "errors": errors}
