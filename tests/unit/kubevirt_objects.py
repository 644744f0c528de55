"""Builders of KubeVirt objects, a stand-in module and a minimal VM controller for unit tests."""

import threading

from fake_apiserver import fake_client

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import EventRecorder


def vm(name, namespace="ns1", run_strategy="Always", running=None, eviction=None, labels=None, claims=(),
       data_volumes=(), status=None):
    spec = {"template": {"metadata": {"labels": {"kubevirt.io/vm": name}},
                         "spec": {"domain": {"devices": {}}, "volumes": []}}}
    if running is not None:
        spec["running"] = running
    elif run_strategy:
        spec["runStrategy"] = run_strategy
    if eviction:
        spec["template"]["spec"]["evictionStrategy"] = eviction
    for claim in claims:
        spec["template"]["spec"]["volumes"].append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
    for dv in data_volumes:
        spec["template"]["spec"]["volumes"].append({"name": dv, "dataVolume": {"name": dv}})
    obj = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def vmi(name, namespace="ns1", phase="Running", eviction=None, migratable=None, node="worker-1"):
    obj = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": name, "namespace": namespace}, "spec": {"domain": {}},
           "status": {"phase": phase, "nodeName": node, "conditions": []}}
    if eviction:
        obj["spec"]["evictionStrategy"] = eviction
    if migratable is not None:
        cond = {"type": "LiveMigratable", "status": "True" if migratable else "False"}
        if not migratable:
            cond["reason"] = "DisksNotLiveMigratable"
        obj["status"]["conditions"].append(cond)
    return obj


def pvc(name, namespace="ns1", modes=("ReadWriteOnce",)):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"accessModes": list(modes)},
            "status": {"phase": "Bound", "accessModes": list(modes)}}


def namespace(name):
    return {"metadata": {"name": name}}


def hyperconverged(namespace="kubevirt-hyperconverged", name="kubevirt-hyperconverged", spec=None, version=None):
    obj = {"apiVersion": "hco.kubevirt.io/v1beta1", "kind": "HyperConverged",
           "metadata": {"name": name, "namespace": namespace}, "spec": dict(spec or {})}
    if version:
        obj["status"] = {"versions": [{"name": "operator", "version": version}]}
    return obj


def kubevirt(eviction=None):
    spec = {"configuration": {}}
    if eviction:
        spec["configuration"]["evictionStrategy"] = eviction
    return {"metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": spec}


def cluster(namespaces=("ns1",), served=None):
    """(client, server) with the given namespaces."""
    from fake_apiserver import FakeApiServer

    client, server = fake_client(FakeApiServer(served=served))
    for name in namespaces:
        server.add("Namespace", namespace(name))
    return client, server


class FakeModule:
    """What module_utils functions use of MaintenanceModule, with the module's defaults applied."""

    def __init__(self, client, params, defaults, check_mode=False, diff_mode=False):
        self.client = client
        self.params = dict(defaults)
        self.params.update(params)
        self.check_mode = check_mode
        self.diff_mode = diff_mode
        self.warnings = []
        self.events = EventRecorder(client, warn=self.warn, enabled=not check_mode, instance="unit")

    def warn(self, text):
        self.warnings.append(text)


def defaults(*fragments, **options):
    values = {}
    for fragment in fragments + (options,):
        for name, spec in fragment.items():
            values[name] = spec.get("default")
    return values


SELECTION_DEFAULTS = defaults(args.VM_SELECTION, args.WAIT)


class VmController:
    """Just enough of virt-controller: VMIs follow run strategies and stateChangeRequests."""

    def __init__(self, server):
        self.server = server
        self.strategies = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)

    def _run(self):
        while not self._stop.wait(0.02):
            with self.server.lock:
                machines = [o for (k, _ns, _n), o in self.server.objects.items() if k == "VirtualMachine"]
            for machine in machines:
                self.reconcile(machine)

    def reconcile(self, machine):
        meta = machine["metadata"]
        ns, name = meta["namespace"], meta["name"]
        spec = machine.get("spec") or {}
        strategy = spec.get("runStrategy") or ("Always" if spec.get("running") else "Halted")
        current = self.server.get("VirtualMachineInstance", name, ns)
        requests = (machine.get("status") or {}).get("stateChangeRequests") or []
        if requests:
            request = requests[0]
            if request["action"] == "Stop":
                if current is not None and request.get("uid") in (None, current["metadata"]["uid"]):
                    self._delete(name, ns)
                    current = None
            elif current is None:
                self.server.add("VirtualMachineInstance", vmi(name, ns))
                current = True
            remaining = requests[1:]
            fresh = self.server.get("VirtualMachine", name, ns)
            fresh = dict(fresh, status=dict(fresh.get("status") or {}, stateChangeRequests=remaining))
            if not remaining:
                fresh["status"].pop("stateChangeRequests")
            self.server.add("VirtualMachine", fresh)
            return
        previous = self.strategies.get((ns, name))
        self.strategies[(ns, name)] = strategy
        if strategy == "Halted" and current is not None:
            self._delete(name, ns)
        elif strategy == "Always" and current is None:
            self.server.add("VirtualMachineInstance", vmi(name, ns))
        elif strategy == "RerunOnFailure" and current is None and previous != strategy:
            # As upstream: started when coming from another strategy, not after a deletion.
            self.server.add("VirtualMachineInstance", vmi(name, ns))

    def _delete(self, name, ns):
        with self.server.lock:
            current = self.server.objects.pop(("VirtualMachineInstance", ns, name), None)
            if current is not None:
                self.server.rv += 1
                self.server.events.append((self.server.rv, "VirtualMachineInstance", "DELETED", current))
                self.server.lock.notify_all()
