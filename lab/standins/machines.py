"""A machine's power reaches its node: what a real host does when it dies and when it boots.

The lab's BMCs (lab/machines) log every power state a machine reaches to ``power.jsonl``; this
controller follows that log and plays what the machine's software does. A machine also dies without
losing its power: ``lab node-fail`` crashes it (``crash``, a kernel panic: the BMC reports it On,
nothing runs on it any more), and ``lab node-recover`` resets it through its BMC; a machine without a
BMC (a control-plane node, a node a test made) boots through ``boot`` below, called by the lab itself.

- **Off** (ForceOff, GracefulShutdown, or the Off half of a restart), or a **crash**: the kubelet and
  virt-handler die with the machine (``power_off``, ``crash``). The node's Lease goes to a holder that
  never renews it, so KWOK stops renewing it, the API server refuses whatever KWOK still writes for the
  node and its pods (lab/dead_machines.py), the virt-handler stand-in does nothing there
  (handler_nodes.node_failed), and the node-lifecycle controller turns the node NotReady after its
  grace period. The guests are dead, yet nothing tells the API: their VMIs stay Running and their
  launcher pods stay as they were, as on a real cluster (virt-controller counts a pod it cannot
  confirm gone as alive: ``alivePodsOnNode`` in kubevirt ``pkg/virt-controller/watch/node/node.go``).
  A crashed machine stays so until it is reset or powered off and on.
- **On** (from Off: a power-on, the On half of a restart): the machine boots for ``boot_seconds``,
  then its kubelet starts (``boot``). It finds no container of the pods it ran: a pod with
  ``restartPolicy: Never`` (every virt-launcher pod) ends Failed; the others are started again (KWOK
  keeps them Running). It registers its node: a node deleted while the machine was down is created
  again from its kubelet's configuration (the lab's node manifest, lab/nodes.py ``registration``), as
  a kubelet registers at every start and only then (kubernetes ``pkg/kubelet/kubelet_node_status.go``,
  ``registerWithAPIServer`` and ``registrationCompleted``); an existing one gets a new
  ``status.nodeInfo.bootID`` (the kernel's boot id). It takes the Lease back (KWOK renews it, the node
  turns Ready). virt-handler starts again and finds no domain for the node's VMIs, and fails them
  (handler_vmi.py, ``calculateVmPhaseForStatusReason``); virt-controller then starts Always and
  RerunOnFailure VMs again as new VMIs, and leaves Once and Manual ones stopped.

A node fenced while its machine is down (the ``node.kubernetes.io/out-of-service`` taint) loses its
pods at once to kube-controller-manager's pod GC.
"""

import json
import logging
import threading
import time
import uuid
from pathlib import Path

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_nodes import (FAILED_LEASE_HOLDER, MACHINE_OFF_LEASE_HOLDER, NODE_LEASE_NAMESPACE,
                                        kill_kubelet, revive_kubelet)
from lab.standins.workqueue import Controller

TAIL_SECONDS = 0.2
log = logging.getLogger("lab.machines")


class MachinePower(Controller):
    name = "machine-power"
    resync_seconds = 30.0

    def __init__(self, sim, power_log, boot_seconds=5.0, registration=None):
        """``registration(node)``: the Node its kubelet registers when its machine boots (or None)."""
        super().__init__(sim)
        self.power_log = Path(power_log)
        self.boot_seconds = float(boot_seconds)
        self.registration = registration or (lambda node: None)
        self._power = {}  # node -> (power state, monotonic time it was reached)
        # Machines powered on since this process started that have not booted yet. A machine that
        # powered on before (the log is read from its start) boots here only if its node is still
        # down (its Lease held for the dead).
        self._powered_on = set()
        self._started = time.time()
        self._lock = threading.Lock()
        # The node's Lease is read from the cache: a change of it (a holder the cache had not seen
        # yet) brings the node back here.
        sim.leases.add_handler(self._on_lease)
        threading.Thread(target=self._follow, name="machine-power-log", daemon=True).start()

    def all_keys(self):
        with self._lock:
            return list(self._power)

    def _on_lease(self, event, lease, old):
        with self._lock:
            ours = o.meta(lease, "name") in self._power
        if ours and o.meta(lease, "namespace") == NODE_LEASE_NAMESPACE:
            self.enqueue(o.meta(lease, "name"))

    def _follow(self):
        offset = 0
        while True:
            try:
                with open(self.power_log) as power_log:
                    power_log.seek(offset)
                    for line in power_log:
                        if not line.endswith("\n"):
                            break
                        offset += len(line.encode())
                        self._reached(json.loads(line))
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - following the log must not stop
                self.log.warning("power log %s: %s", self.power_log, e)
            time.sleep(TAIL_SECONDS)

    def _reached(self, entry):
        name, power = entry["name"], entry["power_state"]
        with self._lock:
            self._power[name] = (power, time.monotonic())
            if power == "On" and entry.get("time", 0) >= self._started:
                self._powered_on.add(name)
            elif power != "On":
                self._powered_on.discard(name)
        self.log.info("machine %s: power %s", name, power)
        self.enqueue(name)

    def reconcile(self, node):
        with self._lock:
            power, since = self._power.get(node, (None, 0.0))
            powered_on = node in self._powered_on
        if power is None:
            return None
        lease = self.sim.leases.get_by(NODE_LEASE_NAMESPACE, node)
        down = o.spec(lease or {}).get("holderIdentity") == MACHINE_OFF_LEASE_HOLDER
        if power == "Off":
            if down or self.sim.nodes.get(node) is None:
                return None  # off already, or no node to kill (deleted while down)
            if not power_off(self.kube, node):
                return 1.0  # KWOK has not created the node's Lease yet
            self.log.info("node %s: machine off, kubelet and virt-handler dead", node)
            return None
        if not (down or powered_on):
            return None  # running: never taken down here, or booted already
        booting = self.boot_seconds - (time.monotonic() - since)
        if booting > 0:
            return booting
        self._boot(node)
        with self._lock:
            if self._power.get(node) == (power, since):  # no other power change meanwhile
                self._powered_on.discard(node)
        return None

    def _boot(self, node):
        boot(self.kube, self.sim, node, self.log, self.registration(node))


def power_off(kube, node):
    """The machine of ``node`` loses its power: its kubelet and virt-handler die with it (False while KWOK
    has not created the node's Lease)."""
    return kill_kubelet(kube, node, MACHINE_OFF_LEASE_HOLDER)


def crash(kube, node):
    """The machine of ``node`` crashes and stays powered on: its kubelet, virt-handler and guests die as at a
    power-off, until the machine is reset (False while KWOK has not created the node's Lease)."""
    return kill_kubelet(kube, node, FAILED_LEASE_HOLDER)


def boot(kube, sim, node, log=log, registration=None):
    """The machine of ``node`` boots: the virt-launcher pods its kubelet finds no container of end Failed, the
    kubelet registers the node (``registration``, when it was deleted meanwhile) or reports a new ``bootID``,
    and takes its Lease back. ``sim``: the stand-ins' caches, or None (the pods are listed). Returns False when
    the node is gone and there is no ``registration`` to register it again."""
    boot_id = str(uuid.uuid4())
    for pod in _pods(kube, sim, node):
        if (o.labels(pod).get(o.APP_LABEL) == o.LAUNCHER and not o.deleting(pod)
                and o.pod_phase(pod) not in ("Succeeded", "Failed")):
            _end_pod(kube, pod, log)
    if kube.get_or_none(k.NODES, node) is not None:
        kube.patch(k.NODES, node, {"status": {"nodeInfo": {"bootID": boot_id}}}, subresource="status")
        revive_kubelet(kube, node)
    elif registration is not None:
        # The kubelet may write before it registers: the dead machine's record and Lease go first.
        revive_kubelet(kube, node)
        _register(kube, registration, boot_id)
        log.info("node %s: registered again by its kubelet", node)
    else:
        log.warning("node %s: its machine booted, but the lab does not know what its kubelet registers", node)
        return False
    log.info("node %s: booted (bootID %s), kubelet back", node, boot_id)
    return True


def _pods(kube, sim, node):
    if sim is not None:
        return sim.pods.by_index("node", node)
    return kube.list(k.PODS, label_selector=f"{o.APP_LABEL}={o.LAUNCHER}",
                     field_selector=f"spec.nodeName={node}").get("items") or []


def _register(kube, registration, boot_id):
    body = json.loads(json.dumps(registration))
    body["status"]["nodeInfo"]["bootID"] = boot_id
    try:
        kube.create(k.NODES, body)
    except k.ApiError as e:
        if not e.already_exists:
            raise
    # Status sent with a create is kept today; should it ever be dropped, it is written here (KWOK keeps
    # whatever capacity the node reports).
    kube.patch(k.NODES, body["metadata"]["name"], {"status": body["status"]}, subresource="status")


def _end_pod(kube, pod, log):
    """What a kubelet that lost a ``restartPolicy: Never`` pod's containers to a reboot writes."""
    now = o.now()
    statuses = [dict(c, ready=False, started=False, state={"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": now,
        "message": "The container could not be located when the pod was terminated"}})
        for c in o.status(pod).get("containerStatuses") or []]
    conditions = [dict(c, status="False", lastTransitionTime=now) if c.get("type") in ("Ready", "ContainersReady")
                  else c for c in o.status(pod).get("conditions") or []]
    try:
        kube.patch(k.PODS, o.meta(pod, "name"), {"status": {
            "phase": "Failed", "conditions": conditions, "containerStatuses": statuses}},
            namespace=o.meta(pod, "namespace"), subresource="status")
    except k.ApiError as e:
        if e.not_found:  # gone meanwhile (the pod GC deletes the pods of a deleted node)
            return
        raise
    log.info("pod %s: Failed (its machine rebooted)", k.key_of(pod))
