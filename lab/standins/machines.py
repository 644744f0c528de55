"""A machine's power reaches its node: what a real host does when its BMC powers it off and on.

The lab's BMCs (lab/machines) log every power state a machine reaches to ``power.jsonl``; this
controller follows that log and plays what the machine's software does:

- **Off** (ForceOff, GracefulShutdown, or the Off half of a restart): the kubelet and virt-handler
  die with the machine. The node's Lease goes to a holder that never renews it (as
  ``lab/nodes.py fail`` does), so KWOK stops renewing it and stops writing the node and its pods,
  the virt-handler stand-in does nothing there (handler_nodes.node_failed), and the node-lifecycle
  controller turns the node NotReady after its grace period. The guests are dead, yet nothing
  tells the API: their VMIs stay Running and their launcher pods stay as they were, as on a real
  cluster (virt-controller counts a pod it cannot confirm gone as alive: ``alivePodsOnNode`` in
  kubevirt ``pkg/virt-controller/watch/node/node.go``).
- **On**: the machine boots for ``boot_seconds``, then its kubelet registers again with a new
  ``status.nodeInfo.bootID`` (the kernel's boot id) and takes the Lease back (KWOK renews it, the
  node turns Ready). The kubelet finds no container of the pods it ran: a pod with
  ``restartPolicy: Never`` (every virt-launcher pod) ends Failed; the others are started again
  (KWOK keeps them Running). virt-handler starts again and finds no domain for the node's VMIs,
  and fails them (handler_vmi.py, ``calculateVmPhaseForStatusReason``); virt-controller then
  starts Always and RerunOnFailure VMs again as new VMIs, and leaves Manual ones stopped.

A node fenced while its machine is off (the ``node.kubernetes.io/out-of-service`` taint) loses its
pods at once to kube-controller-manager's pod GC; a node deleted while off is not registered
again here (a real kubelet would register it at boot).
"""

import json
import threading
import time
import uuid
from pathlib import Path

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_nodes import MACHINE_OFF_LEASE_HOLDER, NODE_LEASE_NAMESPACE, kill_kubelet, revive_kubelet
from lab.standins.workqueue import Controller

TAIL_SECONDS = 0.2


class MachinePower(Controller):
    name = "machine-power"
    resync_seconds = 30.0

    def __init__(self, sim, power_log, boot_seconds=5.0):
        super().__init__(sim)
        self.power_log = Path(power_log)
        self.boot_seconds = float(boot_seconds)
        self._power = {}  # node -> (power state, monotonic time it was reached)
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
                with open(self.power_log) as log:
                    log.seek(offset)
                    for line in log:
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
        with self._lock:
            self._power[entry["name"]] = (entry["power_state"], time.monotonic())
        self.log.info("machine %s: power %s", entry["name"], entry["power_state"])
        self.enqueue(entry["name"])

    def reconcile(self, node):
        with self._lock:
            power, since = self._power.get(node, (None, 0.0))
        if power is None or self.sim.nodes.get(node) is None:
            return None
        lease = self.sim.leases.get_by(NODE_LEASE_NAMESPACE, node)
        if power == "Off":
            if o.spec(lease or {}).get("holderIdentity") == MACHINE_OFF_LEASE_HOLDER:
                return None
            if not kill_kubelet(self.kube, node, MACHINE_OFF_LEASE_HOLDER):
                return 1.0  # KWOK has not created the node's Lease yet
            self.log.info("node %s: machine off, kubelet and virt-handler dead", node)
            return None
        if lease is None or o.spec(lease).get("holderIdentity") != MACHINE_OFF_LEASE_HOLDER:
            return None  # never taken down here, or booted already
        booting = self.boot_seconds - (time.monotonic() - since)
        if booting > 0:
            return booting
        self._boot(node)
        return None

    def _boot(self, node):
        boot(self.kube, self.sim, node, self.log)


def boot(kube, sim, node, log):
    """The machine of ``node`` boots: a new ``bootID``, the virt-launcher pods its kubelet finds no container of
    end Failed, and the kubelet is back. Also the BareMetalHost stand-in's power-on (baremetal.py)."""
    boot_id = str(uuid.uuid4())
    kube.patch(k.NODES, node, {"status": {"nodeInfo": {"bootID": boot_id}}}, subresource="status")
    for pod in sim.pods.by_index("node", node):
        if (o.labels(pod).get(o.APP_LABEL) == o.LAUNCHER and not o.deleting(pod)
                and o.pod_phase(pod) not in ("Succeeded", "Failed")):
            _end_pod(kube, pod, log)
    revive_kubelet(kube, node)
    log.info("node %s: booted (bootID %s), kubelet back", node, boot_id)


def _end_pod(kube, pod, log):
    """What a kubelet that lost a ``restartPolicy: Never`` pod's containers to a reboot writes."""
    now = o.now()
    statuses = [dict(c, ready=False, started=False, state={"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": now,
        "message": "The container could not be located when the pod was terminated"}})
        for c in o.status(pod).get("containerStatuses") or []]
    conditions = [dict(c, status="False", lastTransitionTime=now) if c.get("type") in ("Ready", "ContainersReady")
                  else c for c in o.status(pod).get("conditions") or []]
    kube.patch(k.PODS, o.meta(pod, "name"), {"status": {
        "phase": "Failed", "conditions": conditions, "containerStatuses": statuses}},
        namespace=o.meta(pod, "namespace"), subresource="status")
    log.info("pod %s: Failed (its machine rebooted)", k.key_of(pod))
