"""NodeMaintenance controller (node-maintenance-operator), for both API groups.

Creating a NodeMaintenance cordons its node, adds the taints
``node.kubernetes.io/unschedulable:NoSchedule`` and ``medik8s.io/drain:NoSchedule`` and
the label ``remediation.medik8s.io/exclude-from-remediation=true``, then drains the
node the way NMO's drainer does (ignore DaemonSet pods, delete emptyDir data, force
unmanaged pods): every other pod is evicted through the Eviction API, and refused
evictions (429) are retried every 5 seconds. Status follows the drain: phase
Running -> Succeeded (Failed when the node disappears), drainProgress, pendingPods,
totalpods, evictionPods, lastError, lastUpdate. Deleting the CR (held by a
finalizer until then) removes the taints and the label and uncordons the node.
"""

import threading
import time

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.workqueue import Controller

FINALIZER = "foregroundDeleteNodeMaintenance"
DRAIN_TAINT = {"key": "medik8s.io/drain", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"
EVICTION_RETRY_SECONDS = 5.0
POLL_SECONDS = 1.0


def _evictable(pod):
    if o.annotations(pod).get("kubernetes.io/config.mirror"):
        return False
    return not any(ref.get("kind") == "DaemonSet" for ref in o.meta(pod, "ownerReferences") or [])


class NodeMaintenanceController(Controller):
    name = "node-maintenance"

    def __init__(self, sim):
        super().__init__(sim)
        self._kinds = {
            "medik8s": (k.NODEMAINTENANCES, sim.nms),
            "kubevirt": (k.LEGACY_NODEMAINTENANCES, sim.legacy_nms),
        }
        # Without its informer the medik8s group is the real operator's (--no-node-maintenance).
        self._kinds = {p: kind for p, kind in self._kinds.items() if kind[1] is not None}
        self._drains = {}
        self._drains_lock = threading.Lock()
        for prefix, (_, informer) in self._kinds.items():
            informer.add_handler(lambda event, nm, old, p=prefix: self.enqueue(f"{p}:{o.meta(nm, 'name')}"))

    def all_keys(self):
        return [f"{p}:{name}" for p, (_, informer) in self._kinds.items() for name in informer.keys()]

    def _all_maintenances(self):
        return [nm for _, informer in self._kinds.values() for nm in informer.list()]

    # -- reconcile ----------------------------------------------------------------------

    def reconcile(self, key):
        prefix, _, name = key.partition(":")
        resource, informer = self._kinds[prefix]
        nm = informer.get(name)
        if nm is None:
            self._stop_drain(key)
            return None
        node_name = o.spec(nm).get("nodeName")
        if o.deleting(nm):
            self._stop_drain(key)
            others = [
                m
                for m in self._all_maintenances()
                if o.spec(m).get("nodeName") == node_name and not o.deleting(m)
            ]
            if not others and self.sim.nodes.get(node_name) is not None:
                self._restore_node(node_name)
            self._remove_finalizer(resource, nm)
            return None
        finalizers = o.meta(nm, "finalizers") or []
        if FINALIZER not in finalizers:
            self.kube.patch(resource, name, {"metadata": {"finalizers": finalizers + [FINALIZER]}})
            return None

        phase = o.status(nm).get("phase")
        if self.kube.get_or_none(k.NODES, node_name) is None:
            self._stop_drain(key)
            if phase != "Failed":
                self._patch_status(
                    resource,
                    name,
                    {"phase": "Failed", "lastError": f'nodes "{node_name}" not found', "lastUpdate": o.now()},
                )
            return None
        self._prepare_node(node_name)
        if phase == "Succeeded":
            return None
        if not phase:
            self._patch_status(
                resource,
                name,
                {
                    "phase": "Running",
                    "drainProgress": 0,
                    "lastUpdate": o.now(),
                    "lastError": "",
                    "errorOnLeaseCount": 0,
                    "pendingPods": [],
                },
            )
        self._start_drain(key, resource, name, node_name)
        return None

    # -- node ---------------------------------------------------------------------------

    def _update_node(self, node_name, change):
        """Read-modify-write the node with its resourceVersion, retrying conflicts."""
        for _ in range(10):
            node = self.kube.get(k.NODES, node_name)
            patch = change(node)
            if not patch:
                return
            patch.setdefault("metadata", {})["resourceVersion"] = o.meta(node, "resourceVersion")
            try:
                self.kube.patch(k.NODES, node_name, patch)
                return
            except k.ApiError as e:
                if not e.conflict:
                    raise
        raise RuntimeError(f"node {node_name} kept changing under us")

    def _prepare_node(self, node_name):
        def change(node):
            taints = list(o.spec(node).get("taints") or [])
            present = {(t.get("key"), t.get("effect")) for t in taints}
            added = [
                dict(t, timeAdded=o.now())
                for t in (UNSCHEDULABLE_TAINT, DRAIN_TAINT)
                if (t["key"], t["effect"]) not in present
            ]
            patch = {}
            if added:
                patch["spec"] = {"taints": taints + added}
            if not o.spec(node).get("unschedulable"):
                patch.setdefault("spec", {})["unschedulable"] = True
            if o.labels(node).get(EXCLUDE_LABEL) != "true":
                patch["metadata"] = {"labels": {EXCLUDE_LABEL: "true"}}
            return patch

        self._update_node(node_name, change)

    def _restore_node(self, node_name):
        ours = {(t["key"], t["effect"]) for t in (UNSCHEDULABLE_TAINT, DRAIN_TAINT)}

        def change(node):
            taints = list(o.spec(node).get("taints") or [])
            kept = [t for t in taints if (t.get("key"), t.get("effect")) not in ours]
            patch = {}
            if len(kept) != len(taints):
                patch["spec"] = {"taints": kept or None}
            if o.spec(node).get("unschedulable"):
                patch.setdefault("spec", {})["unschedulable"] = None
            if EXCLUDE_LABEL in o.labels(node):
                patch["metadata"] = {"labels": {EXCLUDE_LABEL: None}}
            return patch

        self._update_node(node_name, change)
        self.log.info("node %s: maintenance over, uncordoned", node_name)

    def _remove_finalizer(self, resource, nm):
        finalizers = o.meta(nm, "finalizers") or []
        if FINALIZER in finalizers:
            self.kube.patch(
                resource,
                o.meta(nm, "name"),
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                        "resourceVersion": o.meta(nm, "resourceVersion"),
                    }
                },
            )

    def _patch_status(self, resource, name, status):
        self.kube.patch(resource, name, {"status": status}, subresource="status")

    # -- drain --------------------------------------------------------------------------

    def _start_drain(self, key, resource, name, node_name):
        with self._drains_lock:
            if key in self._drains and self._drains[key][0].is_alive():
                return
            stop = threading.Event()
            thread = threading.Thread(
                target=self._drain,
                args=(key, resource, name, node_name, stop),
                name=f"drain-{name}",
                daemon=True,
            )
            self._drains[key] = (thread, stop)
            thread.start()

    def _stop_drain(self, key):
        with self._drains_lock:
            entry = self._drains.pop(key, None)
        if entry:
            entry[1].set()

    def _drain(self, key, resource, name, node_name, stop):
        self.log.info("%s: draining node %s", name, node_name)
        last_attempt = {}
        totals = None
        last_error = ""
        written = {}
        while not stop.is_set():
            try:
                pods = self.kube.list(k.PODS, field_selector=f"spec.nodeName={node_name}").get("items") or []
                evictable = [p for p in pods if _evictable(p)]
                if totals is None:
                    totals = {"totalpods": len(pods), "evictionPods": len(evictable)}
                now = time.monotonic()
                for pod in evictable:
                    if o.deleting(pod):
                        continue
                    uid = o.meta(pod, "uid")
                    if now - last_attempt.get(uid, -1e9) < EVICTION_RETRY_SECONDS:
                        continue
                    last_attempt[uid] = now
                    error = self._evict(pod)
                    if error:
                        last_error = error
                pending = [o.meta(p, "name") for p in evictable]
                total = max(totals["evictionPods"], len(pending))
                progress = 100 if total == 0 else max(0, min(100, (total - len(pending)) * 100 // total))
                status = dict(
                    totals, phase="Running", drainProgress=progress, pendingPods=pending, lastError=last_error
                )
                if not pending:
                    status.update(phase="Succeeded", drainProgress=100, pendingPods=[], lastError="")
                if status != written:
                    self._patch_status(resource, name, dict(status, lastUpdate=o.now()))
                    written = status
                if not pending:
                    self.log.info("%s: node %s drained", name, node_name)
                    return
            except Exception as e:
                self.log.warning("%s: drain round failed: %s", name, e)
            stop.wait(POLL_SECONDS)

    def _evict(self, pod):
        """Evict one pod; returns the error text of a refusal, or "" (granted or gone)."""
        namespace, name = o.meta(pod, "namespace"), o.meta(pod, "name")
        try:
            self.kube.evict(namespace, name)
            return ""
        except k.ApiError as e:
            if e.not_found:
                return ""
            return f'error when evicting pods/"{name}" -n "{namespace}": {e.message}'
