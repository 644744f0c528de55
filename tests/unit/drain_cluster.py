"""A small cluster for the maintenance engine's unit tests: nodes, pods, VMIs and
PodDisruptionBudgets in the in-memory API server, with the Eviction API answered as the
real API server answers it (PDB check, 429, 404) and access reviews allowed by default."""

import copy
import json
import threading
import time

from fake_apiserver import FakeApiServer, FakeResponse

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import ConnectionSettings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import selector_matches

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class DrainApiServer(FakeApiServer):
    """The fake API server plus ``pods/eviction`` and SelfSubjectAccessReviews."""

    def __init__(self, served=None):
        super().__init__(served=served)
        self.denied = set()        # (verb, resource[/subresource]) access reviews answer "no" for
        self.evictions = []        # (pod key, status) in order
        self.on_evicted = None     # hook(pod) after a granted eviction
        self.webhook = None        # hook(pod) -> None or (status, message) before the PDB check
        self.handlers[SSAR_PATH] = self._review

    def _review(self, method, _path, body):
        attrs = body["spec"]["resourceAttributes"]
        what = attrs["resource"] + ("/" + attrs["subresource"] if attrs.get("subresource") else "")
        allowed = (attrs["verb"], what) not in self.denied
        return FakeResponse(201, dict(body, status={"allowed": allowed}))

    def request(self, method, url, body=None, headers=None, preload_content=True, timeout=None):
        path = url.split("?")[0].split("://", 1)[-1]
        path = path[path.index("/"):]
        if method == "POST" and path.endswith("/eviction"):
            parts = path.split("/")
            return self._evict(parts[4], parts[6])
        return super().request(method, url, body=body, headers=headers, preload_content=preload_content,
                               timeout=timeout)

    def _evict(self, namespace, name):
        self.requests.append(("POST", "eviction", "%s/%s" % (namespace, name)))
        with self.lock:
            pod = self.objects.get(("Pod", namespace, name))
            if pod is None:
                self.evictions.append(("%s/%s" % (namespace, name), 404))
                return FakeResponse(404, {"kind": "Status", "message": 'pods "%s" not found' % name})
        denial = self.webhook(pod) if self.webhook else None
        if denial:
            self.evictions.append(("%s/%s" % (namespace, name), denial[0]))
            return FakeResponse(denial[0], {"kind": "Status", "message": denial[1]})
        with self.lock:
            labels = pod["metadata"].get("labels") or {}
            budgets = [o for (k, ns, _n), o in self.objects.items()
                       if k == "PodDisruptionBudget" and ns == namespace and selector_matches(o["spec"].get("selector"), labels)]
            if len(budgets) > 1:
                self.evictions.append(("%s/%s" % (namespace, name), 500))
                return FakeResponse(500, {"kind": "Status", "message": "This pod has more than one "
                                          "PodDisruptionBudget, which the eviction subresource does not support."})
            if budgets:
                budget = budgets[0]
                if (budget.get("status") or {}).get("disruptionsAllowed", 0) < 1:
                    self.evictions.append(("%s/%s" % (namespace, name), 429))
                    return FakeResponse(429, {"kind": "Status", "message": "Cannot evict pod as it would violate "
                                              "the pod's disruption budget."})
                updated = copy.deepcopy(budget)
                updated["status"]["disruptionsAllowed"] -= 1
                self._store("PodDisruptionBudget", namespace, budget["metadata"]["name"], updated, "MODIFIED")
            del self.objects[("Pod", namespace, name)]
            self.rv += 1
            self.events.append((self.rv, "Pod", "DELETED", copy.deepcopy(pod)))
            self.lock.notify_all()
            self.evictions.append(("%s/%s" % (namespace, name), 201))
        if self.on_evicted:
            self.on_evicted(pod)
        return FakeResponse(201, {"kind": "Status", "status": "Success"})

    def set_pdb_allowed(self, namespace, name, allowed):
        with self.lock:
            budget = copy.deepcopy(self.objects[("PodDisruptionBudget", namespace, name)])
            budget["status"]["disruptionsAllowed"] = allowed
            self._store("PodDisruptionBudget", namespace, name, budget, "MODIFIED")

    def pods_on(self, node):
        return sorted("%s/%s" % (ns, n) for (k, ns, n), o in self.objects.items()
                      if k == "Pod" and o["spec"].get("nodeName") == node)


def make_client(server=None):
    server = server or DrainApiServer()
    client = KubeClient(ConnectionSettings("https://fake.example:6443", token="t0ken-value"), retry_budget=0.0)
    client._pool = server
    return client, server


# -- builders -----------------------------------------------------------------------------------

def node(name, ready=True, cordoned=False, taints=None, labels=None, cpu="8", memory="32Gi", pods="110",
         control_plane=False, annotations=None):
    node_labels = {"kubernetes.io/hostname": name, "kubevirt.io/schedulable": "true"}
    node_labels["node-role.kubernetes.io/control-plane" if control_plane else "node-role.kubernetes.io/worker"] = ""
    node_labels.update(labels or {})
    obj = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": node_labels, "annotations": dict(annotations or {})},
           "spec": {},
           "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                      "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown",
                                      "reason": "KubeletReady" if ready else "NodeStatusUnknown"}]}}
    if cordoned:
        obj["spec"]["unschedulable"] = True
    if taints:
        obj["spec"]["taints"] = list(taints)
    return obj


def pod(name, namespace="ns1", node_name="worker-1", owner=("ReplicaSet", "web-1"), labels=None, cpu="100m",
        memory="128Mi", phase="Running", emptydir=False, mirror=False, node_selector=None, tolerations=None,
        affinity=None, uid=None):
    meta = {"name": name, "namespace": namespace, "labels": dict(labels or {"app": "web"})}
    if uid:
        meta["uid"] = uid
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                    "uid": "owner-" + owner[1], "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    spec = {"nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            "volumes": [{"name": "scratch", "emptyDir": {}}] if emptydir else []}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def vmi(name, namespace="ns1", node_name="worker-1", uid=None, eviction=None, migratable=True,
        reason="DisksNotLiveMigratable", vm_owner=True, phase="Running", ready=None):
    meta = {"name": name, "namespace": namespace, "uid": uid or "vmi-" + name,
            "labels": {"kubevirt.io/nodeName": node_name}}
    if vm_owner:
        meta["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
                                    "uid": "vm-" + name, "controller": True}]
    cond = {"type": "LiveMigratable", "status": "True" if migratable else "False"}
    if not migratable:
        cond["reason"] = reason
        cond["message"] = "cannot migrate VMI: PVC disk is not shared"
    # virt-controller copies Ready from the launcher pod: True while a Running guest serves.
    ready = phase == "Running" if ready is None else ready
    conditions = [cond, {"type": "Ready", "status": "True" if ready else "False"}]
    spec = {"domain": {}}
    if eviction:
        spec["evictionStrategy"] = eviction
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta, "spec": spec,
            "status": {"phase": phase, "nodeName": node_name, "conditions": conditions}}


def vm(name, namespace="ns1", run_strategy="Always"):
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": namespace, "uid": "vm-" + name},
            "spec": {"runStrategy": run_strategy, "template": {"spec": {"domain": {}}}}}


def launcher(vmi_obj, suffix="abcde", cpu="1", memory="1Gi"):
    meta = vmi_obj["metadata"]
    obj = pod("virt-launcher-%s-%s" % (meta["name"], suffix), meta["namespace"], vmi_obj["status"]["nodeName"],
              owner=None, labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": meta["uid"],
                                  "vm.kubevirt.io/name": meta["name"]},
              cpu=cpu, memory=memory, emptydir=True, node_selector={"kubevirt.io/schedulable": "true"})
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    return obj


def pdb(name, namespace="ns1", match=None, allowed=1, expected=10, desired=9, vmi_uid=None):
    obj = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"selector": {"matchLabels": dict(match or {"app": "web"})}},
           "status": {"disruptionsAllowed": allowed, "expectedPods": expected, "desiredHealthy": desired,
                      "currentHealthy": expected, "observedGeneration": 1}}
    if vmi_uid:
        obj["metadata"]["name"] = "kubevirt-disruption-budget-" + name
        obj["spec"]["selector"] = {"matchLabels": {"kubevirt.io/created-by": vmi_uid}}
    return obj


def kubevirt_cr(strategy="LiveMigrate"):
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {"evictionStrategy": strategy}}}


def cluster(workers=3, control_planes=1, **node_args):
    """A client and server with ``workers`` worker nodes (worker-1..) and control-plane nodes."""
    client, server = make_client()
    for i in range(control_planes):
        server.add("Node", node("cp-%d" % (i + 1), control_plane=True,
                                taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))
    for i in range(workers):
        server.add("Node", node("worker-%d" % (i + 1), **node_args))
    return client, server


class ReplicaSetSimulator:
    """After each granted eviction, re-create the pod on another node and, once it is
    'ready', give its PodDisruptionBudget its disruption back - like the ReplicaSet and
    disruption controllers do. Records the most pods ever unavailable at once."""

    def __init__(self, server, target="worker-2", delay=0.05):
        self.server = server
        self.target = target
        self.delay = delay
        self.unavailable = 0
        self.max_unavailable = 0
        self.lock = threading.Lock()
        self.count = 0
        server.on_evicted = self.evicted

    def evicted(self, evicted_pod):
        with self.lock:
            self.unavailable += 1
            self.max_unavailable = max(self.max_unavailable, self.unavailable)
            self.count += 1
            number = self.count
        timer = threading.Timer(self.delay, self.replace, args=(evicted_pod, number))
        timer.daemon = True
        timer.start()

    def replace(self, evicted_pod, number):
        fresh = copy.deepcopy(evicted_pod)
        fresh["metadata"]["name"] = "%s-r%d" % (evicted_pod["metadata"]["name"], number)
        fresh["metadata"].pop("uid", None)
        fresh["spec"]["nodeName"] = self.target
        self.server.add("Pod", fresh)
        with self.lock:
            self.unavailable -= 1
        labels = evicted_pod["metadata"].get("labels") or {}
        for (kind, ns, name), obj in list(self.server.objects.items()):
            if kind == "PodDisruptionBudget" and ns == evicted_pod["metadata"]["namespace"] and \
                    selector_matches(obj["spec"].get("selector"), labels):
                self.server.set_pdb_allowed(ns, name, obj["status"]["disruptionsAllowed"] + 1)


def dump(obj):
    return json.dumps(obj, indent=1, sort_keys=True)


def module_cluster(monkeypatch, operator=False):
    """The server the node modules run against: three workers, KubeVirt (LiveMigrate), quick
    eviction retries, and the node-maintenance operator's API only when ``operator``."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import engine as drain
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod

    monkeypatch.setattr(drain, "BACKOFF_START", 0.05)
    monkeypatch.setattr(drain, "BACKOFF_CAP", 0.4)
    client, server = cluster(workers=3)
    server.add("KubeVirt", kubevirt_cr("LiveMigrate"))
    server.served -= {"NodeMaintenance", "LegacyNodeMaintenance"}
    if operator:
        server.served.add("NodeMaintenance")
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    return server


FAILED_REASON = "Live migration failed: the VM is annotated kubevirt-ops.lab/fail-migration"


def failed_migration(name, vmi_name="web", reason=FAILED_REASON, in_state=True):
    status = {"phase": "Failed", "conditions": [
        {"type": "Failed", "status": "True", "reason": "MigrationFailed", "message": reason}]}
    if in_state:
        status["migrationState"] = {"failed": True, "completed": True, "failureReason": reason}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "ns1", "creationTimestamp": "2024-01-01T00:00:0%sZ" % name[-1]},
            "spec": {"vmiName": vmi_name}, "status": status}


class EvacuatingKubeVirt:
    """virt-api's eviction webhook and the migrations: an evicted virt-launcher pod is refused as virt-api refuses it
    ("Eviction triggered evacuation") and its VM leaves for worker-2 ``seconds`` later (its VMI moves there, its old
    pod goes). Records the VMs asked, in order (``asked``), and the most evacuating at once (``most``). VMs named in
    ``failing`` never leave: each request adds a Failed migration and a Pending retry (KubeVirt backing off); VMs in
    ``stuck`` are marked but leave only once ``release``d. ``pod_lingers``: seconds the old pod stays after its
    migration Succeeded (``asked_while_lingering`` counts the VMs asked meanwhile). ``source_pod_stays``: the old pod
    stays on the node Succeeded, as KubeVirt leaves it until the VMI is deleted, and virt-api lets it be evicted
    (``finished_refusal``: refused with this (status, message) instead)."""

    def __init__(self, server, seconds=0.2, failing=(), stuck=(), pod_lingers=0.0, source_pod_stays=False,
                 finished_refusal=None):
        self.server = server
        self.seconds = seconds
        self.source_pod_stays = source_pod_stays
        self.finished_refusal = finished_refusal
        self.failing = set(failing)
        self.stuck = set(stuck)
        self.pod_lingers = pod_lingers
        self.evacuating = set()
        self.lingering = set()
        self.most = 0
        self.asked = []
        self.asked_while_lingering = 0
        server.webhook = self.webhook

    def webhook(self, target):
        name = target["metadata"]["name"]
        if not name.startswith("virt-launcher-"):
            return None
        if (target.get("status") or {}).get("phase") == "Succeeded":
            return self.finished_refusal  # not the pod its VMI runs in
        vmi_name = name[len("virt-launcher-"):].rsplit("-", 1)[0]
        with self.server.lock:
            if name not in self.evacuating and vmi_name not in self.asked:
                self.asked.append(vmi_name)
                self.asked_while_lingering += bool(self.lingering)
                if vmi_name in self.failing:
                    # The failed try, and the next one KubeVirt creates at once and holds Pending (backoff).
                    self.server.add("VirtualMachineInstanceMigration",
                                    failed_migration("evacuation-%s" % vmi_name[-1], vmi_name))
                    retry = failed_migration("evacuation-%s-retry" % vmi_name[-1], vmi_name)
                    retry["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
                    retry["status"] = {"phase": "Pending"}
                    self.server.add("VirtualMachineInstanceMigration", retry)
                else:
                    self.evacuating.add(name)
                    self.most = max(self.most, len(self.evacuating))
                    if vmi_name not in self.stuck:
                        self._leave_later(vmi_name, name)
        return 429, ('admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '
                     'Eviction triggered evacuation of VMI "ns1/%s"' % vmi_name)

    def _leave_later(self, vmi_name, pod_name):
        timer = threading.Timer(self.seconds, self.migrated, (vmi_name, pod_name))
        timer.daemon = True
        timer.start()

    def release(self, vmi_name):
        """A stuck VM leaves after all (its next evacuation request is answered)."""
        self.stuck.discard(vmi_name)
        with self.server.lock:
            self.asked = [n for n in self.asked if n != vmi_name]
            self.evacuating = set(n for n in self.evacuating if not n.startswith("virt-launcher-%s-" % vmi_name))

    def migrated(self, vmi_name, pod_name):
        if self.pod_lingers:
            with self.server.lock:
                self.evacuating.discard(pod_name)
                self.lingering.add(pod_name)
            self.server.add("VirtualMachineInstanceMigration", {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": "evacuation-ok-%s" % vmi_name, "namespace": "ns1",
                             "creationTimestamp": "2024-01-01T00:00:00Z"},
                "spec": {"vmiName": vmi_name}, "status": {"phase": "Succeeded"}})
            time.sleep(self.pod_lingers)
        with self.server.lock:
            current = self.server.get("VirtualMachineInstance", vmi_name, "ns1")
            if current is not None:
                current = copy.deepcopy(current)
                current["status"]["nodeName"] = "worker-2"
                current["status"]["migrationState"] = {"completed": True, "sourceNode": "worker-1",
                                                       "targetNode": "worker-2"}
                self.server._store("VirtualMachineInstance", "ns1", vmi_name, current, "MODIFIED")
            self.evacuating.discard(pod_name)
            self.lingering.discard(pod_name)
            if self.source_pod_stays:
                finished = copy.deepcopy(self.server.get("Pod", pod_name, "ns1"))
                finished["status"]["phase"] = "Succeeded"
                self.server._store("Pod", "ns1", pod_name, finished, "MODIFIED")
                return
            gone = self.server.objects.pop(("Pod", "ns1", pod_name), None)
            if gone is not None:
                self.server.rv += 1
                self.server.events.append((self.server.rv, "Pod", "DELETED", gone))
                self.server.lock.notify_all()
