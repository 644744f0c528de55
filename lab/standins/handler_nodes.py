"""virt-handler's part on each node object: heartbeat and device-plugin resources.

Upstream (kubevirt v1.7, ``pkg/virt-handler/heartbeat/heartbeat.go``) every virt-handler
patches its node once a minute (``wait.JitterUntil`` with a 1.2 jitter factor, so every
60 to 132 s): label ``kubevirt.io/schedulable=true`` (``false`` while its device plugins
are not initialised), label ``kubevirt.io/cpumanager`` and annotation
``kubevirt.io/heartbeat`` (the time, RFC 3339). When it stops it labels the node
``kubevirt.io/schedulable=false`` once more (``labelNodeUnschedulable``).
virt-controller's node controller (``pkg/virt-controller/watch/node/node.go``) labels a
node ``false`` when that annotation is older than 5 minutes and fails the VMIs there
whose launcher pods are gone.

The device plugins (``pkg/virt-handler/device-manager``) register
``devices.kubevirt.io/kvm``, ``tun`` and ``vhost-net`` with the kubelet, which puts them
in the node's capacity and allocatable; every virt-launcher pod requests them. KWOK runs
no device plugin, so the stand-in writes them into the node status itself and puts them
back whenever something drops them.

A node the lab fails (``lab/nodes.py fail``: its Lease handed to a holder that never
renews) or whose machine is off (machines.py) has a dead kubelet and so a dead virt-handler:
no heartbeat, no VMI work.
"""

import random

from lab import dead_machines
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.workqueue import Controller

HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
CPU_MANAGER_LABEL = "kubevirt.io/cpumanager"
# Upstream's device plugins advertise 1000 of each (device-manager's default count).
DEVICE_RESOURCES = {
    "devices.kubevirt.io/kvm": "1k",
    "devices.kubevirt.io/tun": "1k",
    "devices.kubevirt.io/vhost-net": "1k",
}
# The Lease holder lab/nodes.py gives a failed node (FAILED_HOLDER there).
FAILED_LEASE_HOLDER = "lab-node-fail"
# The Lease holder of a node whose machine is powered off (machines.py).
MACHINE_OFF_LEASE_HOLDER = "lab-machine-off"
DEAD_LEASE_HOLDERS = (FAILED_LEASE_HOLDER, MACHINE_OFF_LEASE_HOLDER)
# As lab/nodes.py FAILED_LEASE_SECONDS: long enough that KWOK never takes the Lease back.
DEAD_LEASE_SECONDS = 10 * 365 * 24 * 3600
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASES = k.Resource("coordination.k8s.io", "v1", "leases", "Lease")
# heartbeat.go: wait.JitterUntil(h.do, heartBeatInterval, 1.2, true, stopCh)
JITTER_FACTOR = 1.2


def handler_pod(sim, node_name):
    """The virt-handler DaemonSet pod running on the node, or None."""
    for pod in sim.pods.by_index("node", node_name):
        if (
            o.labels(pod).get(o.APP_LABEL) == o.HANDLER
            and o.pod_phase(pod) == "Running"
            and not o.deleting(pod)
        ):
            return pod
    return None


def node_failed(sim, node_name):
    lease = sim.leases.get_by(NODE_LEASE_NAMESPACE, node_name)
    return bool(lease) and o.spec(lease).get("holderIdentity") in DEAD_LEASE_HOLDERS


def mark_dead(kube, node_name, dead):
    """List (or strike) the node as one whose machine is dead, effective on return
    (lab/dead_machines.py)."""

    def patch_list(patch):
        kube.patch(k.CONFIGMAPS, dead_machines.NAME, patch, namespace=dead_machines.NAMESPACE)

    def probe_admitted(body):
        try:
            kube.create(k.CONFIGMAPS, body, namespace=dead_machines.NAMESPACE, dry_run=True)
            return True
        except k.ApiError as e:
            if dead_machines.refused(e.status, e.body):
                return False
            raise

    dead_machines.mark(patch_list, probe_admitted, [node_name], dead)


def kill_kubelet(kube, node_name, holder):
    """The node's kubelet dies: its Lease goes to ``holder``, who never renews it (renewTime is left
    alone: the death counts from the last heartbeat), and the API server refuses whatever KWOK
    still writes for the node and its pods. False while KWOK has not created the Lease."""
    if kube.get_or_none(LEASES, node_name, namespace=NODE_LEASE_NAMESPACE) is None:
        return False
    mark_dead(kube, node_name, True)
    try:
        kube.patch(LEASES, node_name, {"spec": {"holderIdentity": holder, "leaseDurationSeconds": DEAD_LEASE_SECONDS}},
                   namespace=NODE_LEASE_NAMESPACE)
        return True
    except k.ApiError as e:
        if e.not_found:
            return False
        raise


def forget_machine(kube, node_name):
    """A deleted node's name is struck from the dead machines: a node registered under it again is
    a new machine."""
    listed = kube.get_or_none(k.CONFIGMAPS, dead_machines.NAME, namespace=dead_machines.NAMESPACE) or {}
    if node_name in (listed.get("data") or {}):
        mark_dead(kube, node_name, False)


def revive_kubelet(kube, node_name):
    """The node's kubelet starts again: the API server takes its writes, and KWOK gets the Lease back
    (it creates a new one and renews it)."""
    mark_dead(kube, node_name, False)
    kube.delete(LEASES, node_name, namespace=NODE_LEASE_NAMESPACE)


def handler_alive(sim, node_name):
    """Whether a virt-handler works on this node: its pod runs and the node is not failed."""
    if not node_name or sim.nodes.get(node_name) is None:
        return False
    return handler_pod(sim, node_name) is not None and not node_failed(sim, node_name)


def migration_address(sim, node_name):
    """The address the target handler advertises for migrations: upstream's
    ``FindMigrationIP`` uses the virt-handler pod's IP (no migration network here)."""
    pod = handler_pod(sim, node_name)
    if pod and o.status(pod).get("podIP"):
        return o.status(pod)["podIP"]
    node = sim.nodes.get(node_name) or {}
    for address in o.status(node).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return ""


class Heartbeat(Controller):
    """Per node: device-plugin resources and the heartbeat, as long as the handler lives."""

    name = "handler-heartbeat"
    resync_seconds = 30.0

    def __init__(self, sim, interval_seconds=60.0):
        super().__init__(sim)
        self.interval = float(interval_seconds)
        self._beating = set()
        sim.nodes.add_handler(lambda event, node, old: self.enqueue(o.meta(node, "name")))
        sim.leases.add_handler(self._on_lease)
        sim.pods.add_handler(self._on_pod)

    def _on_lease(self, event, lease, old):
        if o.meta(lease, "namespace") == NODE_LEASE_NAMESPACE:
            self.enqueue(o.meta(lease, "name"))

    def _on_pod(self, event, pod, old):
        if o.labels(pod).get(o.APP_LABEL) == o.HANDLER and o.pod_node(pod):
            self.enqueue(o.pod_node(pod))

    def all_keys(self):
        return self.sim.nodes.keys()

    def reconcile(self, node_name):
        node = self.sim.nodes.get(node_name)
        if node is None:
            self._beating.discard(node_name)
            forget_machine(self.kube, node_name)
            return None
        if handler_pod(self.sim, node_name) is None:
            # The handler pod went away (not a node failure): upstream's Run() ends with
            # labelNodeUnschedulable().
            if node_name in self._beating or o.labels(node).get(o.SCHEDULABLE_LABEL) == "true":
                if not node_failed(self.sim, node_name):
                    self._label_unschedulable(node_name)
            self._beating.discard(node_name)
            return None
        if node_failed(self.sim, node_name):
            # A dead node: nothing is written; virt-controller notices the stale heartbeat.
            return None
        self._ensure_devices(node)
        self._beating.add(node_name)
        return self._heartbeat(node)

    def _ensure_devices(self, node):
        status = o.status(node)
        patch = {}
        for field in ("capacity", "allocatable"):
            current = status.get(field) or {}
            missing = {r: v for r, v in DEVICE_RESOURCES.items() if current.get(r) != v}
            if missing:
                patch[field] = missing
        if patch:
            self.kube.patch(k.NODES, o.meta(node, "name"), {"status": patch}, subresource="status")
            self.log.info("node %s: device plugin resources advertised", o.meta(node, "name"))

    def _heartbeat(self, node):
        name = o.meta(node, "name")
        age = o.seconds_since(o.annotations(node).get(HEARTBEAT_ANNOTATION))
        labels_ok = (
            o.labels(node).get(o.SCHEDULABLE_LABEL) == "true"
            and o.labels(node).get(CPU_MANAGER_LABEL) == "false"
        )
        if labels_ok and age is not None and 0 <= age < self.interval:
            return self.interval - age + random.random() * JITTER_FACTOR * self.interval
        self.kube.patch(
            k.NODES,
            name,
            {
                "metadata": {
                    "labels": {o.SCHEDULABLE_LABEL: "true", CPU_MANAGER_LABEL: "false"},
                    "annotations": {HEARTBEAT_ANNOTATION: o.now()},
                }
            },
        )
        if not labels_ok:
            self.log.info("node %s: %s=true", name, o.SCHEDULABLE_LABEL)
        return self.interval + random.random() * JITTER_FACTOR * self.interval

    def _label_unschedulable(self, node_name):
        self.kube.patch(
            k.NODES,
            node_name,
            {
                "metadata": {
                    "labels": {o.SCHEDULABLE_LABEL: "false", CPU_MANAGER_LABEL: "false"},
                    "annotations": {HEARTBEAT_ANNOTATION: o.now()},
                }
            },
        )
        self.log.info("node %s: virt-handler gone, %s=false", node_name, o.SCHEDULABLE_LABEL)

    def stop(self):
        """What upstream's handler does when it is stopped: every node it served
        becomes unschedulable for VMs (best effort, the apiserver may be gone)."""
        for node_name in sorted(self._beating):
            if node_failed(self.sim, node_name):
                continue
            try:
                self._label_unschedulable(node_name)
            except Exception as e:  # shutting down: never wait on a gone apiserver
                self.log.warning("node %s: could not mark unschedulable: %s", node_name, e)
                return
