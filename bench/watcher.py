"""Correctness while a peer runs: a watch on the scenario's pods and VMIs.

- PodDisruptionBudgets: after every pod event the watcher counts, per PDB, the pods
  that are available the way the disruption controller counts them (Ready and not
  being deleted) and records the lowest count seen. A PDB is violated when that
  count ever fell below ``expected - maxUnavailable``. The watch replays the
  apiserver's sequence of states, so a dip between two events cannot hide.
- VMs: a VMI that disappears, changes UID or leaves phase Running during the run
  counts as a VM that did not stay running (a live migration keeps both).
"""

import threading
import time


def _ready(pod):
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


class Budget:
    def __init__(self, name, selector, expected, max_unavailable):
        self.name = name
        self.selector = selector  # matchLabels
        self.min_available = expected - max_unavailable
        self.lowest = None

    def matches(self, pod):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.selector.items())


class Watcher:
    def __init__(self, kube, namespace, budgets=(), watch_vmis=False):
        self.kube = kube
        self.namespace = namespace
        self.budgets = list(budgets)
        self.watch_vmis = watch_vmis
        self.pods = {}
        self.vmis = {}
        self.initial_vmis = {}
        self.vm_disruptions = {}  # name -> what happened
        self.errors = []
        self._watches = []
        self._threads = []
        self._lock = threading.Lock()
        self.events = 0

    # -- lifecycle ----------------------------------------------------------------------

    def start(self):
        pods, rv = self.kube.list("Pod", self.namespace)
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self._evaluate()
        self._start_watch("Pod", rv, self._on_pod)
        if self.watch_vmis:
            vmis, vrv = self.kube.list("VirtualMachineInstance", self.namespace)
            self.vmis = {v["metadata"]["name"]: v for v in vmis}
            self.initial_vmis = {n: v["metadata"]["uid"] for n, v in self.vmis.items()}
            self._start_watch("VirtualMachineInstance", vrv, self._on_vmi)
        return self

    def stop(self):
        time.sleep(0.3)  # let the last events of the run arrive
        for watch in self._watches:
            watch.close()
        for thread in self._threads:
            thread.join(5)

    def _start_watch(self, kind, rv, handler):
        watch = self.kube.watch(kind, self.namespace, resource_version=rv)
        self._watches.append(watch)

        def loop():
            try:
                for event_type, obj in watch.events():
                    if event_type in ("BOOKMARK",):
                        continue
                    if event_type == "ERROR":
                        self.errors.append(f"{kind} watch error: {obj.get('message')}")
                        return
                    with self._lock:
                        self.events += 1
                        handler(event_type, obj)
            except Exception as e:  # noqa: BLE001 - recorded and reported with the run
                if not watch.closed:
                    self.errors.append(f"{kind} watch failed: {e}")

        thread = threading.Thread(target=loop, name=f"watch-{kind}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- events -------------------------------------------------------------------------

    def _on_pod(self, event_type, pod):
        name = pod["metadata"]["name"]
        if event_type == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = pod
        self._evaluate(pod)

    def _evaluate(self, changed=None):
        for budget in self.budgets:
            if changed is not None and not budget.matches(changed):
                continue
            available = sum(1 for p in self.pods.values() if budget.matches(p) and _ready(p))
            if budget.lowest is None or available < budget.lowest:
                budget.lowest = available

    def _on_vmi(self, event_type, vmi):
        name = vmi["metadata"]["name"]
        if name not in self.initial_vmis:
            return
        if event_type == "DELETED":
            self.vm_disruptions.setdefault(name, "VMI deleted")
            return
        if vmi["metadata"]["uid"] != self.initial_vmis[name]:
            self.vm_disruptions.setdefault(name, "VMI re-created (the VM was restarted)")
        elif (vmi.get("status") or {}).get("phase") != "Running":
            self.vm_disruptions.setdefault(name, f"VMI phase {(vmi.get('status') or {}).get('phase')}")

    # -- results ------------------------------------------------------------------------

    def violated_budgets(self):
        return [
            {"pdb": b.name, "lowest_available": b.lowest, "min_available": b.min_available}
            for b in self.budgets
            if b.lowest is not None and b.lowest < b.min_available
        ]
