"""What a chaos run may do to a rolling run, and when: the faults and the moments, drawn from a seed.

A schedule is a list of (trigger, fault) pairs, one per attempt of the run: the first attempt gets the
first pair, a resumed attempt the next, and an attempt past the schedule runs undisturbed to its end.
Triggers are read from the run's own output (a task of the role starting) and from the cluster (a node
cordoned, a live migration in flight), so a fault lands in its phase whatever the machine's speed.
"""

import random
import time

from kubernetes import client

import safety

ROLE = "TASK [kubevirt_ops.maintenance.rolling_maintenance : %s]"
FAIL_MIGRATION = "kubevirt-ops.lab/fail-migration"

# Moments: a role task starting (its title), or a state of the cluster.
TRIGGERS = (
    "task:Take the cluster lock",
    "task:Enter maintenance (drain)",
    "task:Leave maintenance",
    "task:Verify the node is schedulable and every VM that ran still runs",
    "task:Renew the cluster lock before the node",
    "cluster:a node cordoned",
    "cluster:a migration in flight",
)

# Faults: what ends the attempt (kill, interrupt), and what it survives (restarts, a failing migration
# that stops it at that node: the next attempt resumes once the migration may succeed again).
FAULTS = (
    "sigkill",
    "sigint",
    "apiserver_restart",
    "virt_controller_restart",
    "virt_api_outage",
    "node_maintenance_operator_restart",
    "migration_fails",
)
ENDS_ATTEMPT = ("sigkill", "sigint")
# Violations made on purpose, never drawn: the observer must report them (test_chaos.py).
SABOTAGE = ("sabotage_vmi_deleted", "sabotage_pod_deleted_against_its_budget")
VIRT_API_OUTAGE_SECONDS = 20


def draw(seed, length=None):
    """The schedule of run ``seed``: 1 to 3 (trigger, fault) pairs, the same for the same seed."""
    rng = random.Random(seed)
    count = length if length is not None else rng.randint(1, 3)
    return [{"trigger": rng.choice(TRIGGERS), "fault": rng.choice(FAULTS)} for _ in range(count)]


class Moment:
    """Whether a trigger has come, for one attempt (``started``: runs.Started)."""

    def __init__(self, k8s, started, nodes, namespace):
        self.k8s = k8s
        self.started = started
        self.nodes = nodes
        self.namespace = namespace

    def reached(self, trigger):
        kind, what = trigger.split(":", 1)
        if kind == "task":
            return (ROLE % what) in self.started.output()
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


class Injector:
    """Carries out a fault on the lab; ``undo()`` ends what outlasts the moment (a failing migration)."""

    def __init__(self, lab, k8s, namespace, vm_names):
        self.lab = lab
        self.k8s = k8s
        self.namespace = namespace
        self.vm_names = vm_names
        self.annotated = []

    def inject(self, fault, started):
        if fault == "sigkill":
            started.kill()
        elif fault == "sigint":
            started.interrupt()
        elif fault == "apiserver_restart":
            self.lab.restart_apiserver(down_for=5)
        elif fault == "virt_controller_restart":
            self.lab.cli("stop", "virt-controller")
            self.lab.cli("start", "virt-controller")
        elif fault == "virt_api_outage":
            self.lab.cli("stop", "virt-api")
            time.sleep(VIRT_API_OUTAGE_SECONDS)  # the outage's length
            self.lab.cli("start", "virt-api")
        elif fault == "node_maintenance_operator_restart":
            self.lab.cli("restart", "node-maintenance-operator", timeout=300)
        elif fault == "migration_fails":
            for name in self.vm_names:
                annotate(self.k8s, self.namespace, name, "true")
                self.annotated.append(name)
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

    def undo(self):
        for name in self.annotated:
            annotate(self.k8s, self.namespace, name, None)
        self.annotated = []
