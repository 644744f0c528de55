"""What a chaos run may do to a rolling run, and when: the faults and the moments, drawn from a seed.

A schedule is a list of (trigger, fault) pairs, carried out in order: each fault at its moment, until one
ends the attempt (a kill, an interrupt, a cancel); the resumed attempt goes on with the rest, and an
attempt past the schedule runs undisturbed to its end.
Triggers are read from the run's own output (a task of the role starting) and from the cluster (a node
cordoned, a live migration in flight), so a fault lands in its phase whatever the machine's speed.
"""

import random
import time

from kubernetes import client

import identities
import safety
from credentials import credential_plugin, lab_context, rotate, write
from lab.machines import bmc as lab_bmc
from lab.wait import wait_for

ROLE = "TASK [kubevirt_ops.maintenance.rolling_maintenance : %s]"
FAIL_MIGRATION = "kubevirt-ops.lab/fail-migration"

# Moments: a role task starting (its title), or a state of the cluster.
TRIGGERS = (
    "task:Take the cluster lock",
    "task:Enter maintenance (drain)",
    "task:Leave maintenance",
    "task:Verify the node is schedulable and every VM that ran still runs",
    "task:Renew the cluster lock before the node",
    "task:Service the node's machine",
    "cluster:a node cordoned",
    "cluster:a migration in flight",
)

# Faults: what ends the attempt (kill, interrupt), and what it survives (restarts, a failing migration
# that stops it at that node: the next attempt resumes once the migration may succeed again).
FAULTS = (
    "sigkill",
    "sigint",
    "awx_cancel",
    "apiserver_restart",
    "virt_controller_restart",
    "virt_api_outage",
    "node_maintenance_operator_restart",
    "migration_fails",
    "machine_power_off",
    "bmc_unreachable",
)
# Drawn from the stream of later faults (see LATER_FAULTS).
TOKEN_FAULT = "token_expires"
ENDS_ATTEMPT = ("sigkill", "sigint", "awx_cancel")
# Faults that mean something only at one moment: a migration's target machine, or the machine of the node
# being drained (its source), loses power while the migration runs; a BMC stops answering while the run
# restarts its machine.
FAULT_TRIGGERS = {
    "machine_power_off": "cluster:a migration in flight",
    "drained_machine_power_off": "cluster:a migration in flight",
    "bmc_unreachable": "task:Service the node's machine",
}
MACHINE_OFF_SECONDS = 20
# After the API server is back, the nodes' heartbeats of the outage are missing: kube-controller-manager
# may find a node's Lease older than its grace period (the lab's 20 s: lab/settings.py) and mark the node
# NotReady and its pods not Ready until the next heartbeat. That is the fault's doing, not the run's: a pod
# that only lost its readiness this long after the restart is not counted against its budget.
HEARTBEAT_GAP_SECONDS = 45
# Violations made on purpose, never drawn: the observer must report them (test_chaos.py). The first one
# needs a run in batches: a node of another failure domain cordoned behind the run's back while a batch is
# out (more nodes out than max_parallel, two failure domains at once).
SABOTAGE = ("sabotage_node_of_another_domain_cordoned", "sabotage_vmi_deleted",
            "sabotage_pod_deleted_against_its_budget")
VIRT_API_OUTAGE_SECONDS = 20


# Faults added to the catalogue later are drawn from streams of their own, after the first draw, so the
# schedules of earlier seeds (the replays of what they found) keep their faults, in their order.
# token_expires: the run authenticates through an exec credential plugin whose tokens last TOKEN_TTL seconds; the
# plugin starts handing out another identity's token and the first identity is deleted (its token refused from
# then on), as a rotation or a short-lived cloud token does.
LATER_FAULTS = (TOKEN_FAULT,)
LATER_FAULT_SHARE = 0.3
TOKEN_TTL = 5
# drained_machine_power_off: the machine of the node being drained loses power while a migration from it copies
# the guest (the VMs there die with it and may restart; the run must go on or stop and resume). A stream of its own.
DRAINED_CUT = "drained_machine_power_off"
DRAINED_CUT_SHARE = 0.2


def draw(seed, length=None):
    """The schedule of run ``seed``: 1 to 3 (trigger, fault) pairs, the same for the same seed, with a chance of
    LATER_FAULT_SHARE one more from LATER_FAULTS at its end, and with one of DRAINED_CUT_SHARE a cut of the drained
    node's machine after that (at the next migration in flight)."""
    rng = random.Random(seed)
    count = length if length is not None else rng.randint(1, 3)
    schedule = []
    for _ in range(count):
        trigger, fault = rng.choice(TRIGGERS), rng.choice(FAULTS)
        schedule.append({"trigger": FAULT_TRIGGERS.get(fault, trigger), "fault": fault})
    later = random.Random("later faults of %d" % seed)
    if length is None and LATER_FAULTS and later.random() < LATER_FAULT_SHARE:
        fault = later.choice(LATER_FAULTS)
        schedule.append({"trigger": FAULT_TRIGGERS.get(fault, later.choice(TRIGGERS)), "fault": fault})
    if length is None and random.Random("drained machine of %d" % seed).random() < DRAINED_CUT_SHARE:
        schedule.append({"trigger": FAULT_TRIGGERS[DRAINED_CUT], "fault": DRAINED_CUT})
    return schedule


# About a third of the runs go in failure-domain batches (drawn from a stream of their own, so earlier seeds keep
# their schedules): three nodes, two of one zone and one of the other, at most two out at once and never two zones
# (rolling_maintenance_max_parallel 2, rolling_maintenance_failure_domain ZONE).
ZONE = "topology.kubernetes.io/zone"
BATCHED_SHARE = 0.3
MAX_PARALLEL = 2
# The role's tasks that stand for a trigger's task in a run in batches.
BATCH_TASKS = {
    "Enter maintenance (drain)": "Enter maintenance (drain) on every node of the batch at once",
    "Renew the cluster lock before the node": "Renew the cluster lock before the batch",
}


def batched(seed):
    """Whether run ``seed`` goes in failure-domain batches."""
    return random.Random("batches of %d" % seed).random() < BATCHED_SHARE


def zones(workers):
    """The failure domains of a run in batches over the lab's first four workers: the 1st and 3rd in zone-a, the
    2nd and 4th in zone-b."""
    return {name: "zone-a" if index % 2 == 0 else "zone-b" for index, name in enumerate(workers[:4])}


class Credentials:
    """The credentials of a run whose schedule lets its token expire: two identities (cluster-admin), an exec
    credential plugin that hands out the first one's token for TOKEN_TTL seconds at a time, and a kubeconfig of
    the lab that runs it."""

    def __init__(self, k8s, lab, directory):
        self.k8s = k8s
        directory.mkdir()
        self.first, self.next = (identities.create_identity(k8s, lab.kubeconfig, directory, cluster_roles=("cluster-admin",),
                                                            prefix="kvops-chaos-%s" % which) for which in ("a", "b"))
        self.token_file, user = credential_plugin(directory, self.first.token, directory / "invocations", ttl=TOKEN_TTL)
        self.kubeconfig = write(directory / "kubeconfig", dict(lab_context(lab), users=[user]))

    def expire(self):
        """The next identity's token from now on, the first one refused."""
        rotate(self.token_file, self.next.token)
        identities.delete_identity(self.k8s, self.first, until_refused=True)
        return "the token of %s (now %s)" % (self.first.name, self.next.name)

    def shown_in(self, text):
        """Whether a token of the run appears in ``text``."""
        return any(identity.token in text for identity in (self.first, self.next))

    def delete(self):
        for identity in (self.first, self.next):
            identities.delete_identity(self.k8s, identity)


def restarts_machines(seed, schedule):
    """Whether the run restarts its nodes' machines through their BMCs (``rolling_maintenance_reboot:
    bmc``): when a step of its schedule waits for that task, and on every even seed."""
    return seed % 2 == 0 or any(step["trigger"] == FAULT_TRIGGERS["bmc_unreachable"] for step in schedule)


# What a run raises KubeVirt's live-migration limits to, on every third seed (rolling_maintenance_migration_limits):
# a kill or a cancel then leaves them raised, and the run that completes must put the cluster's own back.
RAISED_LIMITS = {"parallel_migrations_per_cluster": 6, "parallel_outbound_migrations_per_node": 3}


# About a third of the runs (a stream of their own) shut down the VMs that cannot leave by eviction
# (rolling_maintenance_non_migratable: shutdown) instead of failing the node: their world adds such VMs, and a VM
# whose live migrations a fault made fail is shut down too (it may restart).
SHUTDOWN_SHARE = 0.3


def shuts_down(seed):
    """Whether run ``seed`` goes with ``rolling_maintenance_non_migratable: shutdown``."""
    return random.Random("non_migratable of %d" % seed).random() < SHUTDOWN_SHARE


def raises_limits(seed):
    """Whether the run raises the migration limits for itself (every third seed)."""
    return seed % 3 == 0


class Moment:
    """Whether a trigger has come, for one attempt (``started``: runs.Started)."""

    def __init__(self, k8s, started, nodes, namespace, batches=False):
        self.k8s = k8s
        self.started = started
        self.nodes = nodes
        self.namespace = namespace
        self.batches = batches
        self.seen = 0

    def passed(self):
        """What the run printed so far is behind us: a task trigger waits for a task that starts later
        (a fault that took its time must not land at a moment long gone)."""
        self.seen = len(self.started.output())

    def reached(self, trigger):
        kind, what = trigger.split(":", 1)
        if kind == "task":
            if self.batches:
                what = BATCH_TASKS.get(what, what)
            return (ROLE % what) in self.started.output()[self.seen:]
        if what == "a node cordoned":
            core = client.CoreV1Api(self.k8s)
            return any(core.read_node(n).spec.unschedulable for n in self.nodes)
        items = client.CustomObjectsApi(self.k8s).list_namespaced_custom_object(
            "kubevirt.io", "v1", self.namespace, "virtualmachineinstancemigrations")["items"]
        return any((m.get("status") or {}).get("phase") in safety.MIGRATION_IN_FLIGHT for m in items)


def annotate(k8s, namespace, name, value):
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachines", name,
        {"metadata": {"annotations": {FAIL_MIGRATION: value}}})


def _bound_to(vmi, node):
    """Whether ``vmi`` runs on ``node``, or is migrating to it (a migration neither failed nor completed)."""
    status = vmi.get("status") or {}
    state = status.get("migrationState") or {}
    return status.get("nodeName") == node or (
        state.get("targetNode") == node and not state.get("failed") and not state.get("completed"))


class Injector:
    """Carries out a fault on the lab; ``undo()`` ends what outlasts the moment (a failing migration)."""

    def __init__(self, lab, k8s, namespace, vm_names, nodes, bystanders=(), credentials=None):
        self.lab = lab
        self.credentials = credentials  # Credentials, for token_expires
        self.k8s = k8s
        self.namespace = namespace
        self.vm_names = vm_names
        self.nodes = nodes
        self.bystanders = bystanders  # {node: zone} of workers outside a run in batches
        self.annotated = []
        self.made_to_fail = set()  # every VM whose migrations a fault made fail
        self.unreachable = []
        self.cordoned = []
        # What a fault did that the run is not to blame for: machines it killed and the VMs that ran
        # there (they may restart, and budgets may drop there); processes it left to end on their own.
        self.killed_nodes = []
        self.killed_vms = []
        self.orphans = []
        self.heartbeat_gaps = []  # (from, to): API server restarts, and the grace period after each

    def inject(self, fault, started):
        """Carry the fault out; returns a note of what it hit, or None when its moment had passed."""
        if fault == "sigkill":
            started.kill()
        elif fault == "sigint":
            started.interrupt()
        elif fault == "awx_cancel":
            # ansible-runner's cancel: SIGKILL to ansible-playbook's process group only. Ansible's
            # workers and the async drains they started live in sessions of their own and must end
            # by themselves once the run's process is gone.
            self.orphans += started.tree()
            started.cancel()
        elif fault == "machine_power_off":
            return self._power_cut(started, "targetNode")
        elif fault == "drained_machine_power_off":
            return self._power_cut(started, "sourceNode")
        elif fault == "bmc_unreachable":
            node = self._cordoned()
            if node is None:
                return None
            lab_bmc.set_faults(self.lab.paths, node, unreachable=True)
            self.unreachable.append(node)
            return "the BMC of %s" % node
        elif fault == "apiserver_restart":
            began = time.time()
            self.lab.restart_apiserver(down_for=5)
            self.heartbeat_gaps.append((began, time.time() + HEARTBEAT_GAP_SECONDS))
        elif fault == "virt_controller_restart":
            self.lab.cli("stop", "virt-controller")
            self.lab.cli("start", "virt-controller")
        elif fault == "virt_api_outage":
            self.lab.cli("stop", "virt-api")
            time.sleep(VIRT_API_OUTAGE_SECONDS)  # the outage's length
            self.lab.cli("start", "virt-api")
        elif fault == "node_maintenance_operator_restart":
            self.lab.cli("restart", "node-maintenance-operator", timeout=300)
        elif fault == TOKEN_FAULT:
            return self.credentials.expire()
        elif fault == "migration_fails":
            for name in self.vm_names:
                annotate(self.k8s, self.namespace, name, "true")
                self.annotated.append(name)
                self.made_to_fail.add("%s/%s" % (self.namespace, name))
        elif fault == "sabotage_node_of_another_domain_cordoned":
            # Behind the run's back, while a batch is out: a worker outside the run, of another zone, taken out of
            # scheduling (a third node out, a second failure domain).
            core = client.CoreV1Api(self.k8s)
            out = set((node.metadata.labels or {}).get(ZONE) for node in map(core.read_node, self.nodes)
                      if node.spec.unschedulable)
            node = next((n for n, zone in sorted(self.bystanders.items()) if out and zone not in out), None)
            if node is None:
                return None
            core.patch_node(node, {"spec": {"unschedulable": True}})
            self.cordoned.append(node)
            return "node %s cordoned" % node
        elif fault == "sabotage_vmi_deleted":
            # Behind the run's back: the VM's controller starts a new VMI, a restart nobody reported.
            client.CustomObjectsApi(self.k8s).delete_namespaced_custom_object(
                "kubevirt.io", "v1", self.namespace, "virtualmachineinstances", self.vm_names[0])
        elif fault == "sabotage_pod_deleted_against_its_budget":
            # Two pods of the guarded Deployment (3 replicas, minAvailable 2) deleted directly: no
            # eviction, no budget check, one healthy pod left.
            core = client.CoreV1Api(self.k8s)
            pods = [p for p in core.list_namespaced_pod(self.namespace, label_selector="app=guarded").items
                    if not p.metadata.deletion_timestamp]
            for pod in pods[:2]:
                core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        else:
            raise ValueError("unknown fault %s" % fault)
        return ""

    def excused(self, violation):
        """Why a budget ``violation`` (safety.Violation) is a fault's doing, else None: a pod on a machine a
        fault killed, or one that was not deleted but lost its readiness while the nodes' heartbeats of an API
        server restart were missing."""
        if violation["node"] in self.killed_nodes:
            return "on the machine of %s, which a fault killed" % violation["node"]
        if violation["how"] == "deleted":
            return None
        for began, ended in self.heartbeat_gaps:
            if began <= violation["at"] <= ended:
                return "not Ready after the API server's restart (its node's heartbeats missed)"
        return None

    def _cordoned(self):
        core = client.CoreV1Api(self.k8s)
        return next((n for n in self.nodes if core.read_node(n).spec.unschedulable), None)

    def _vmis(self):
        return client.CustomObjectsApi(self.k8s).list_namespaced_custom_object(
            "kubevirt.io", "v1", self.namespace, "virtualmachineinstances")["items"]

    def _power_cut(self, started, side):
        """The machine on one side of a migration in flight (``targetNode``, or ``sourceNode``: the node being
        drained, once the migration started) loses power through its BMC, as a power cut would be seen, and comes
        back after MACHINE_OFF_SECONDS."""
        found = {}

        def in_flight():
            for vmi in self._vmis():
                state = (vmi.get("status") or {}).get("migrationState") or {}
                # The drained node's machine is cut once the guest is being copied (its migration started): the
                # moment KubeVirt is worst at (drain/migrations.py stranded).
                copying = side == "targetNode" or state.get("startTimestamp")
                if state.get(side) and copying and not state.get("completed") and not state.get("failed"):
                    found["node"], found["vm"] = state[side], vmi["metadata"]["name"]
                    return True
            return not started.running()

        wait_for(in_flight, 120, "a migration's %s" % side, interval=0.2)
        node = found.get("node")
        if node is None:
            return None
        machine = lab_bmc.Bmc(lab_bmc.load(self.lab.paths)[node])
        machine.reset("ForceOff")
        wait_for(lambda: machine.power_state() == "Off", 60, "the machine of %s to be off" % node, interval=0.2)
        # Off: its handler writes nothing any more, so the VMIs there now are the ones that died with it, and
        # so may be those of a migration to it that had not failed: its handler may have taken the guest over
        # in its last moment, and the VMI moves there once virt-controller has read that.
        there = ["%s/%s" % (self.namespace, vmi["metadata"]["name"]) for vmi in self._vmis() if _bound_to(vmi, node)]
        self.killed_nodes.append(node)
        self.killed_vms += there
        time.sleep(MACHINE_OFF_SECONDS)  # the outage's length
        machine.reset("On")
        return "the machine of %s (VMs there: %s; during the migration of %s)" % (
            node, ", ".join(there) or "none", found["vm"])

    def undo(self):
        for node in self.cordoned:
            client.CoreV1Api(self.k8s).patch_node(node, {"spec": {"unschedulable": None}})
        self.cordoned = []
        for name in self.annotated:
            annotate(self.k8s, self.namespace, name, None)
        self.annotated = []
        for node in self.unreachable:
            lab_bmc.set_faults(self.lab.paths, node)
        self.unreachable = []
