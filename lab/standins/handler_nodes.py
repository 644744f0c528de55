"""virt-handler's part on each node object: heartbeat and device-plugin resources.

Upstream (kubevirt v1.7/v1.8, ``pkg/virt-handler/heartbeat/heartbeat.go``, started by
``VirtualMachineController.Run`` in ``pkg/virt-handler/vm.go`` right after the device
plugins' controller) every virt-handler patches its node:

- label ``kubevirt.io/schedulable``: ``true`` only while every device plugin it started is
  initialised (``DeviceController.Initialized``: registered with the kubelet,
  ``pkg/virt-handler/device-manager``), else ``false``;
- the CPU-manager label, ``false`` here (no kubelet ``cpu_manager_state`` with policy
  ``static`` on these nodes, and the CPUManager feature gate is off): key ``cpumanager`` in
  v1.7 (``v1.CPUManager``, ``staging/src/kubevirt.io/api/core/v1/types.go``); v1.8 renamed
  it ``kubevirt.io/cpumanager`` and writes the old key beside it (``v1.DeprecatedCPUManager``);
- annotation ``kubevirt.io/heartbeat`` (the time, RFC 3339).

In this order: one beat at start (``schedulable=false``: the plugins have not registered
yet), then ``waitForDevicePlugins`` polls every second for up to 10 s, then a beat at once
and every minute after (``wait.JitterUntil`` with a 1.2 jitter factor, so every 60 to
132 s). When it stops it labels the node ``kubevirt.io/schedulable=false`` once more
(``labelNodeUnschedulable``). virt-controller's node controller
(``pkg/virt-controller/watch/node/node.go``) labels a node ``false`` when that annotation is
older than 5 minutes and fails the VMIs there whose launcher pods are gone.

The device plugins (``PermanentHostDevicePlugins``: ``devices.kubevirt.io/kvm``, ``tun`` and
``vhost-net``, 1000 each) register with the kubelet, which puts them in the node's capacity
and allocatable; every virt-launcher pod requests them. A plugin that stops sends the
kubelet an empty device list (``GenericDevicePlugin.ListAndWatch``), so the kubelet reports
0 of it. KWOK runs no device plugin, so the stand-in plays the kubelet's part too: it
writes the resources into the node status when the handler starts (the plugins are
registered once the node shows them), puts them back whenever something drops them, and
sets them to 0 when the handler's pod goes.

A node whose machine crashed (``lab node-fail``) or is off (machines.py: its Lease handed to
a holder that never renews) has a dead kubelet and so a dead virt-handler: no heartbeat, no
VMI work; a node cut off the network (``lab node-partition``) writes nothing either. When a
machine comes back, virt-handler starts again (and its plugins register again with the new
kubelet).
"""

import random

from lab import dead_machines
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.workqueue import Controller

HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
# v1.CPUManager of v1.7, v1.DeprecatedCPUManager of v1.8; v1.8's v1.CPUManager.
CPU_MANAGER_LABEL = "cpumanager"
CPU_MANAGER_LABEL_V1_8 = "kubevirt.io/cpumanager"
# Upstream's device plugins advertise 1000 of each (device-manager's default count).
DEVICE_RESOURCES = {
    "devices.kubevirt.io/kvm": "1k",
    "devices.kubevirt.io/tun": "1k",
    "devices.kubevirt.io/vhost-net": "1k",
}
# The Lease holder of a node whose machine crashed (``lab node-fail``: powered on, nothing runs; machines.py).
FAILED_LEASE_HOLDER = "lab-node-fail"
# The Lease holder of a node whose machine is powered off (machines.py).
MACHINE_OFF_LEASE_HOLDER = "lab-machine-off"
# The Lease holder of a node cut off the network (``lab node-partition``, lab/cluster.py): its kubelet and
# virt-handler run on, but nothing they write gets through.
PARTITIONED_LEASE_HOLDER = "lab-node-partition"
DEAD_LEASE_HOLDERS = (FAILED_LEASE_HOLDER, MACHINE_OFF_LEASE_HOLDER, PARTITIONED_LEASE_HOLDER)
# Long enough that KWOK never takes the Lease back.
DEAD_LEASE_SECONDS = 10 * 365 * 24 * 3600
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASES = k.Resource("coordination.k8s.io", "v1", "leases", "Lease")
# heartbeat.go: wait.JitterUntil(h.do, heartBeatInterval, 1.2, true, stopCh)
JITTER_FACTOR = 1.2
# heartbeat.go: devicePluginPollIntervall, how often waitForDevicePlugins looks.
DEVICE_PLUGIN_POLL_SECONDS = 1.0


def cpu_manager_labels(release):
    """The CPU-manager label(s) a heartbeat of KubeVirt ``release`` ((major, minor)) writes."""
    keys = [CPU_MANAGER_LABEL] + ([CPU_MANAGER_LABEL_V1_8] if release >= (1, 8) else [])
    return {key: "false" for key in keys}


def devices_advertised(node):
    """Whether the node's capacity and allocatable show every device plugin's resources."""
    status = o.status(node)
    return all(
        (status.get(field) or {}).get(resource) == count
        for field in ("capacity", "allocatable")
        for resource, count in DEVICE_RESOURCES.items()
    )


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
    """Per node, while its virt-handler lives: the device plugins (their resources in the node
    status) and the heartbeat, ``schedulable=true`` only once the plugins are advertised."""

    name = "handler-heartbeat"
    resync_seconds = 30.0

    def __init__(self, sim, interval_seconds=60.0):
        super().__init__(sim)
        self.interval = float(interval_seconds)
        self._handlers = {}  # node -> uid of the virt-handler pod whose heartbeat runs there
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
            self._handlers.pop(node_name, None)
            forget_machine(self.kube, node_name)
            return None
        pod = handler_pod(self.sim, node_name)
        if pod is None:
            # The handler pod went away (not a node failure): its device plugins stopped, and
            # upstream's Run() ends with labelNodeUnschedulable().
            if node_name in self._handlers or o.labels(node).get(o.SCHEDULABLE_LABEL) == "true":
                if not node_failed(self.sim, node_name):
                    self._handler_stopped(node_name)
            self._handlers.pop(node_name, None)
            return None
        if node_failed(self.sim, node_name):
            # A dead node: nothing is written; virt-controller notices the stale heartbeat.
            # virt-handler starts again when the node comes back.
            self._handlers.pop(node_name, None)
            return None
        if self._handlers.get(node_name) != o.meta(pod, "uid"):
            if node_name in self._handlers:
                self._handler_stopped(node_name)  # the pod was replaced before this saw it go
            return self._start(node_name, o.meta(pod, "uid"))
        self._ensure_devices(node)
        return self._heartbeat(node)

    def _start(self, node_name, uid):
        """A virt-handler starts on the node (``heartBeat``): a first beat while its device
        plugins have not registered (schedulable=false); they register and the kubelet
        advertises them; once the node shows them, a beat at once (schedulable=true). Each
        step reads the node the previous write returned, never an older cached copy."""
        node = self._beat(node_name, schedulable=False)
        node = self._ensure_devices(node)
        if not devices_advertised(node):
            return DEVICE_PLUGIN_POLL_SECONDS  # start over (waitForDevicePlugins polls every second)
        self._beat(node_name, schedulable=True)
        self._handlers[node_name] = uid
        self.log.info("node %s: virt-handler started, device plugins advertised, %s=true", node_name, o.SCHEDULABLE_LABEL)
        return self.interval + random.random() * JITTER_FACTOR * self.interval

    def _labels(self, schedulable):
        labels = {o.SCHEDULABLE_LABEL: "true" if schedulable else "false"}
        labels.update(cpu_manager_labels(self.sim.config.kubevirt_release()))
        return labels

    def _ensure_devices(self, node):
        """The device plugins' resources back in the node status if anything dropped them;
        returns the node as last written (or as given)."""
        status = o.status(node)
        patch = {}
        for field in ("capacity", "allocatable"):
            current = status.get(field) or {}
            missing = {r: v for r, v in DEVICE_RESOURCES.items() if current.get(r) != v}
            if missing:
                patch[field] = missing
        if not patch:
            return node
        node = self.kube.patch(k.NODES, o.meta(node, "name"), {"status": patch}, subresource="status")
        self.log.info("node %s: device plugin resources advertised", o.meta(node, "name"))
        return node

    def _heartbeat(self, node):
        """The periodic beat: written when due, or when the node lost a label."""
        name = o.meta(node, "name")
        age = o.seconds_since(o.annotations(node).get(HEARTBEAT_ANNOTATION))
        current = o.labels(node)
        labels_ok = all(current.get(key) == value for key, value in self._labels(True).items())
        if labels_ok and age is not None and 0 <= age < self.interval:
            return self.interval - age + random.random() * JITTER_FACTOR * self.interval
        self._beat(name, schedulable=True)
        return self.interval + random.random() * JITTER_FACTOR * self.interval

    def _beat(self, node_name, schedulable):
        """heartbeat.go ``do``: the labels and the heartbeat annotation in one patch; returns the node."""
        node = self.kube.patch(
            k.NODES,
            node_name,
            {"metadata": {"labels": self._labels(schedulable), "annotations": {HEARTBEAT_ANNOTATION: o.now()}}},
        )
        self.log.debug("node %s: heartbeat, %s=%s", node_name, o.SCHEDULABLE_LABEL, str(schedulable).lower())
        return node

    def _handler_stopped(self, node_name, devices=True):
        """virt-handler ends on the node: ``labelNodeUnschedulable``, and (``devices``) its device
        plugins' empty lists leave the kubelet 0 of each resource."""
        self._beat(node_name, schedulable=False)
        if devices:
            zero = {resource: "0" for resource in DEVICE_RESOURCES}
            self.kube.patch(k.NODES, node_name, {"status": {"capacity": zero, "allocatable": zero}},
                            subresource="status")
        self.log.info("node %s: virt-handler gone, %s=false", node_name, o.SCHEDULABLE_LABEL)

    def stop(self):
        """What upstream's handler does when it is stopped: every node it served
        becomes unschedulable for VMs (best effort, the apiserver may be gone). The device
        resources stay: whatever runs on after this process (bench/scale.py) keeps them."""
        for node_name in sorted(self._handlers):
            if node_failed(self.sim, node_name):
                continue
            try:
                self._handler_stopped(node_name, devices=False)
            except Exception as e:  # shutting down: never wait on a gone apiserver
                self.log.warning("node %s: could not mark unschedulable: %s", node_name, e)
                return
