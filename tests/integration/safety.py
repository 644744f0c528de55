"""Safety checks the reliability tests run around an operation.

* ``PdbWatcher``: threads list and watch every pod, PodDisruptionBudget and VMI while an
  operation runs. Afterwards the recorded changes are replayed in etcd order (by
  resourceVersion, which one API server hands out from a single counter), and every
  moment where a pod covered by a budget stopped being available while the budget's
  other available pods were below its minimum is a violation::

      with PdbWatcher(k8s) as watcher:
          run the operation
      assert watcher.violations == []

  KubeVirt's own budget over a VMI's launcher pod (owned by the VMI) is counted with a
  minimum of one pod: virt-controller widens it to two during a migration only to stop
  evictions of either pod, and the source pod goes away once the migration is done.
  Pods of a namespace being deleted (other tests cleaning up) do not count.

* ``VmSafety``: a snapshot of every VM and VMI before; ``verify()`` afterwards checks that
  every VM with Always or RerunOnFailure runs, that no VM vanished, and that every change
  of a VMI's UID is explained (a live migration keeps the UID; a shutdown and restart
  changes it, and the operation must have said it shut that VM down).

* ``ResourceVersions``: resourceVersions of nodes, VMs, VMIs, pods, HCO, KubeVirt,
  NodeMaintenances and Leases, to prove an operation that failed changed nothing.
"""

import json
import math
import threading
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.wait import wait_for

KUBEVIRT = ("kubevirt.io", "v1")
RESTARTING_STRATEGIES = ("Always", "RerunOnFailure")
WATCH_SECONDS = 5


# -- list + watch streams ---------------------------------------------------------------

def _lister(k8s, kind):
    """A function (watch, resource_version, timeout) -> raw urllib3 response, for ``kind``."""
    core = client.CoreV1Api(k8s)
    policy = client.PolicyV1Api(k8s)
    custom = client.CustomObjectsApi(k8s)
    calls = {
        "Pod": core.list_pod_for_all_namespaces,
        "Node": core.list_node,
        "Namespace": core.list_namespace,
        "PodDisruptionBudget": policy.list_pod_disruption_budget_for_all_namespaces,
        "VirtualMachineInstance": lambda **kw: custom.list_cluster_custom_object(
            KUBEVIRT[0], KUBEVIRT[1], "virtualmachineinstances", **kw),
        "VirtualMachine": lambda **kw: custom.list_cluster_custom_object(
            KUBEVIRT[0], KUBEVIRT[1], "virtualmachines", **kw),
        "VirtualMachineInstanceMigration": lambda **kw: custom.list_cluster_custom_object(
            KUBEVIRT[0], KUBEVIRT[1], "virtualmachineinstancemigrations", **kw),
    }
    return calls[kind]


def _rv(obj):
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:  # opaque on other API servers; one lab API server uses etcd revisions
        return 0


def _key(obj):
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name"))


class _Stream(threading.Thread):
    """List, then watch one kind for all namespaces; re-list after any interruption."""

    def __init__(self, k8s, kind, record):
        super().__init__(name="safety-%s" % kind, daemon=True)
        self.kind = kind
        self.call = _lister(k8s, kind)
        self.record = record
        self.stop_event = threading.Event()
        self.synced = threading.Event()
        self.known = {}
        self.interruptions = 0

    def run(self):
        while not self.stop_event.is_set():
            try:
                rv = self._relist()
                self._watch(rv)
            except Exception:  # the API server restarts in some tests: re-list when it is back
                self.interruptions += 1
                self.stop_event.wait(0.5)

    def _relist(self):
        resp = self.call(_preload_content=False, _request_timeout=30)
        data = json.loads(resp.data)
        rv = int(data["metadata"]["resourceVersion"])
        items = dict((_key(o), o) for o in data.get("items") or [])
        first = not self.synced.is_set()
        # What changed while we were not watching, as events at the list's resourceVersion.
        for key, obj in items.items():
            old = self.known.get(key)
            if old is None or _rv(old) != _rv(obj):
                self.record(rv, self.kind, "SYNC" if first else "MODIFIED", obj)
        for key, obj in self.known.items():
            if key not in items:
                self.record(rv, self.kind, "DELETED", obj)
        self.known = items
        self.synced.set()
        return rv

    def _watch(self, rv):
        while not self.stop_event.is_set():
            resp = self.call(watch=True, resource_version=str(rv), timeout_seconds=WATCH_SECONDS,
                             allow_watch_bookmarks=True, _preload_content=False,
                             _request_timeout=WATCH_SECONDS + 10)
            buf = b""
            try:
                for chunk in resp.stream(65536):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype == "ERROR":
                            return  # 410 Gone: re-list
                        rv = _rv(obj) or rv
                        if etype == "BOOKMARK":
                            continue
                        if etype == "DELETED":
                            self.known.pop(_key(obj), None)
                        else:
                            self.known[_key(obj)] = obj
                        self.record(_rv(obj) or rv, self.kind, etype, obj)
            finally:
                resp.release_conn()


class _Recorder:
    """Starts the streams, collects (resourceVersion, seq, kind, type, object)."""

    def __init__(self, k8s, kinds):
        self.k8s = k8s
        self.kinds = kinds
        self.events = []
        self.times = []  # when each event arrived (by its seq), to line violations up with faults
        self.lock = threading.Lock()
        self.streams = []

    def record(self, rv, kind, etype, obj):
        with self.lock:
            self.events.append((rv, len(self.events), kind, etype, obj))
            self.times.append(time.time())

    def start(self, timeout=60):
        self.streams = [_Stream(self.k8s, kind, self.record) for kind in self.kinds]
        for stream in self.streams:
            stream.start()
        for stream in self.streams:
            if not stream.synced.wait(timeout):
                raise AssertionError("the safety watcher could not list %ss" % stream.kind)

    def stop(self):
        for stream in self.streams:
            stream.stop_event.set()
        for stream in self.streams:
            stream.join(WATCH_SECONDS + 15)

    def ordered(self):
        with self.lock:
            return sorted(self.events)


# -- pods and budgets -------------------------------------------------------------------

def pod_available(pod):
    """As the disruption controller counts: not being deleted, and Ready."""
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def selector_matches(selector, labels):
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _scaled(value, expected, round_up):
    if isinstance(value, str) and value.endswith("%"):
        amount = float(value[:-1]) * expected / 100.0
        return int(math.ceil(amount) if round_up else math.floor(amount))
    return int(value)


def _owner_vmi(pdb):
    for ref in (pdb.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "VirtualMachineInstance":
            return ref.get("name"), ref.get("uid")
    return None


def pdb_minimum(pdb, matching, vmis):
    """The fewest available pods the budget allows, or None when it does not apply now."""
    meta = pdb.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    owner = _owner_vmi(pdb)
    if owner is not None:
        vmi = vmis.get((meta.get("namespace") or "", owner[0]))
        if vmi is None or (vmi.get("metadata") or {}).get("deletionTimestamp") or \
                (vmi.get("metadata") or {}).get("uid") != owner[1] or \
                (vmi.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None  # the VM is being stopped or has ended: its budget no longer protects anything
        return 1
    spec = pdb.get("spec") or {}
    expected = max(len(matching), int((pdb.get("status") or {}).get("expectedPods") or 0))
    if spec.get("minAvailable") is not None:
        return _scaled(spec["minAvailable"], expected, True)
    if spec.get("maxUnavailable") is not None:
        return expected - _scaled(spec["maxUnavailable"], expected, True)
    return None


class Violation(dict):
    """{pdb, pod, node, available, minimum, resource_version, at (when seen), how (deleted, or its state)}."""

    def __repr__(self):
        return ("PDB %(pdb)s: pod %(pod)s on %(node)s went away (%(how)s, at %(at)s) with %(available)d available, "
                "minimum %(minimum)d" % self)


def _disrupted(etype, pod):
    """Whether a pod that was available went away through a disruption (deleted, being deleted, or ended), as an
    eviction, a deletion or a VM's shutdown takes it away; a pod that only turned unready while it runs (its node's
    heartbeat lapsed while the test stopped the API server, say) was disrupted by nothing anyone asked for, and no
    budget is violated by it (the disruption controller counts it as unhealthy, so that an eviction is then
    refused: a removal at such a moment is still counted, with the unready pod as unavailable)."""
    if etype == "DELETED" or pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return (pod.get("status") or {}).get("phase") != "Running"


def _gone_how(etype, pod):
    """How a pod stopped being available: deleted, or its phase and Ready condition."""
    if etype == "DELETED" or pod is None:
        return "deleted"
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return "%s, Ready %s (%s)" % (status.get("phase"), ready.get("status"), ready.get("reason") or ready.get("message"))


class PdbWatcher:
    """Watches pods, PodDisruptionBudgets and VMIs while an operation runs."""

    def __init__(self, k8s):
        self._recorder = _Recorder(k8s, ("Namespace", "PodDisruptionBudget", "VirtualMachineInstance", "Pod"))
        self._violations = None
        self.budgets_seen = set()
        self.disruptions = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        self._recorder.start()
        return self

    def stop(self):
        self._recorder.stop()
        self._violations = self._replay()

    @property
    def violations(self):
        if self._violations is None:
            raise AssertionError("stop the PdbWatcher (leave its with-block) before reading violations")
        return self._violations

    def violations_excluding(self, nodes):
        """Violations of pods on other nodes (pods of a node the test broke are not disrupted by us)."""
        return [v for v in self.violations if v["node"] not in set(nodes)]

    @property
    def interruptions(self):
        return sum(s.interruptions for s in self._recorder.streams)

    def _replay(self):
        pods, pdbs, vmis, namespaces = {}, {}, {}, {}
        state = {"Pod": pods, "PodDisruptionBudget": pdbs, "VirtualMachineInstance": vmis, "Namespace": namespaces}
        violations = []
        for rv, seq, kind, etype, obj in self._recorder.ordered():
            store = state[kind]
            key = _key(obj)
            if kind == "PodDisruptionBudget":
                self.budgets_seen.add("%s/%s" % key)
            if kind != "Pod" or etype == "SYNC":
                if etype == "DELETED":
                    store.pop(key, None)
                else:
                    store[key] = obj
                continue
            before = pods.get(key)
            if etype == "DELETED":
                pods.pop(key, None)
            else:
                pods[key] = obj
            if not pod_available(before) or pod_available(pods.get(key)) or not _disrupted(etype, pods.get(key)):
                continue
            namespace = key[0]
            ns = namespaces.get(("", namespace))
            if ns is None or (ns.get("metadata") or {}).get("deletionTimestamp"):
                continue  # a namespace being deleted takes everything in it down, budgets included
            self.disruptions += 1
            labels = (before.get("metadata") or {}).get("labels") or {}
            for pdb_key, pdb in pdbs.items():
                if pdb_key[0] != namespace or not selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                    continue
                matching = [p for k, p in pods.items() if k[0] == namespace and
                            selector_matches((pdb.get("spec") or {}).get("selector"),
                                             (p.get("metadata") or {}).get("labels"))]
                # The pod that just went still counts towards the expected total.
                minimum = pdb_minimum(pdb, matching + ([] if key in pods else [before]), vmis)
                if minimum is None:
                    continue
                available = sum(1 for p in matching if pod_available(p))
                if available < minimum:
                    violations.append(Violation(
                        pdb="%s/%s" % pdb_key, pod="%s/%s" % key, node=(before.get("spec") or {}).get("nodeName"),
                        available=available, minimum=minimum, resource_version=rv,
                        at=round(self._recorder.times[seq], 1), how=_gone_how(etype, pods.get(key))))
        return violations


# -- several nodes at once ---------------------------------------------------------------

# The phases of a live migration that KubeVirt counts against its limits (in flight).
MIGRATION_IN_FLIGHT = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")


class ParallelWatcher:
    """Watches nodes and live migrations while a run maintains several nodes at once.

    Replayed in etcd order afterwards: ``most_cordoned`` (the most of ``nodes`` cordoned at one
    moment), ``mixed_domains`` (moments where the cordoned ones had two values of
    ``domain_label``) and ``most_migrations`` (the most migrations in flight at one moment)."""

    def __init__(self, k8s, nodes, domain_label=None):
        self._recorder = _Recorder(k8s, ("Node", "VirtualMachineInstanceMigration"))
        self.nodes = set(nodes)
        self.domain_label = domain_label
        self.most_cordoned = 0
        self.cordoned_sets = []
        self.mixed_domains = []
        self.most_migrations = 0

    def __enter__(self):
        self._recorder.start()
        return self

    def __exit__(self, *exc):
        self._recorder.stop()
        self._replay()

    def _replay(self):
        cordoned, domains, in_flight = {}, {}, {}
        for _rv, _seq, kind, etype, obj in self._recorder.ordered():
            key = _key(obj)
            if kind == "VirtualMachineInstanceMigration":
                phase = (obj.get("status") or {}).get("phase")
                if etype != "DELETED" and phase in MIGRATION_IN_FLIGHT:
                    in_flight[key] = True
                else:
                    in_flight.pop(key, None)
                self.most_migrations = max(self.most_migrations, len(in_flight))
                continue
            name = key[1]
            if name not in self.nodes:
                continue
            domains[name] = ((obj.get("metadata") or {}).get("labels") or {}).get(self.domain_label or "")
            if etype != "DELETED" and (obj.get("spec") or {}).get("unschedulable"):
                cordoned[name] = True
            else:
                cordoned.pop(name, None)
            now = sorted(cordoned)
            if not self.cordoned_sets or self.cordoned_sets[-1] != now:
                self.cordoned_sets.append(now)
            self.most_cordoned = max(self.most_cordoned, len(now))
            if self.domain_label and len(set(domains.get(n) for n in now)) > 1:
                self.mixed_domains.append(now)


# -- VMs ---------------------------------------------------------------------------------

def run_strategy(vm):
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if "running" in spec:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def _list_custom(k8s, plural, namespace=None):
    custom = client.CustomObjectsApi(k8s)
    try:
        if namespace:
            data = custom.list_namespaced_custom_object(KUBEVIRT[0], KUBEVIRT[1], namespace, plural)
        else:
            data = custom.list_cluster_custom_object(KUBEVIRT[0], KUBEVIRT[1], plural)
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return data.get("items") or []


def _vmi_view(vmi):
    if vmi is None:
        return None
    meta, status = vmi.get("metadata") or {}, vmi.get("status") or {}
    return {"uid": meta.get("uid"), "node": status.get("nodeName"), "phase": status.get("phase"),
            "deleting": bool(meta.get("deletionTimestamp"))}


class VmReport:
    def __init__(self):
        self.problems = []
        # The problems that time may still mend (a VM that must run and does not, yet); the others are final (a VM
        # gone, a VMI replaced without the operation saying so): no wait undoes them.
        self.unsettled = []
        self.lost = []
        self.migrated = []
        self.restarted = []
        self.untouched = []

    def __repr__(self):
        return "VmReport(problems=%r, lost=%r, migrated=%r, restarted=%r)" % (
            self.problems, self.lost, self.migrated, self.restarted)


class VmSafety:
    """Snapshot of VMs and VMIs before an operation; ``verify`` after it."""

    def __init__(self, k8s, namespaces=None):
        self.k8s = k8s
        self.namespaces = namespaces
        self.before = self._read()

    @classmethod
    def snapshot(cls, k8s, namespaces=None):
        return cls(k8s, namespaces)

    def _read(self):
        vms, vmis = {}, {}
        for namespace in (self.namespaces or [None]):
            for vm in _list_custom(self.k8s, "virtualmachines", namespace):
                vms[_key(vm)] = vm
            for vmi in _list_custom(self.k8s, "virtualmachineinstances", namespace):
                vmis[_key(vmi)] = vmi
        return dict((key, {"run_strategy": run_strategy(vm), "vmi": _vmi_view(vmis.get(key)),
                           "deleting": bool((vm.get("metadata") or {}).get("deletionTimestamp"))})
                    for key, vm in vms.items())

    def verify(self, shut_down=(), stopped=(), timeout=180):
        """Wait (up to ``timeout``) until every VM is safe, or until what is wrong can no longer change (a VM
        restarted behind the operation's back stays restarted); return a VmReport.

        ``shut_down``: VMs ((namespace, name) or 'namespace/name') the operation said it
        shut down or restarted; their VMI UID may change. ``stopped``: VMs the test
        stopped on purpose (they need not run).
        """
        shut_down = set(_as_key(v) for v in shut_down)
        stopped = set(_as_key(v) for v in stopped)
        report = {}

        def settled():
            report["value"] = self._check(self._read(), shut_down, stopped)
            return not report["value"].unsettled

        try:
            wait_for(settled, timeout, "every VM to be safe", interval=1.0)
        except Exception:  # the report explains what is still wrong
            pass
        return report["value"]

    def _check(self, after, shut_down, stopped):
        report = VmReport()
        for key, old in sorted(self.before.items()):
            name = "%s/%s" % key
            new = after.get(key)
            if key in stopped:
                continue
            if new is None:
                if not old["deleting"]:
                    report.problems.append("VirtualMachine %s disappeared" % name)
                    report.lost.append(name)
                continue
            old_vmi, new_vmi = old["vmi"], new["vmi"]
            must_run = new["run_strategy"] in RESTARTING_STRATEGIES
            running = bool(new_vmi and new_vmi["phase"] == "Running" and not new_vmi["deleting"])
            if must_run and not running:
                problem = "VirtualMachine %s (%s) is not running (VMI %s)" % (
                    name, new["run_strategy"], new_vmi["phase"] if new_vmi else "absent")
                report.problems.append(problem)
                report.unsettled.append(problem)
                report.lost.append(name)
                continue
            if not old_vmi or old_vmi["phase"] in ("Succeeded", "Failed"):
                continue
            if new_vmi and new_vmi["uid"] == old_vmi["uid"]:
                if new_vmi["node"] != old_vmi["node"]:
                    report.migrated.append(name)
                else:
                    report.untouched.append(name)
                continue
            # The VMI ended or was replaced: only a shutdown the operation reported explains it.
            if key not in shut_down:
                report.problems.append("VirtualMachine %s: its VMI %s (on %s) %s, and the operation did not report "
                                       "shutting it down" % (name, old_vmi["uid"], old_vmi["node"],
                                                             "was replaced" if new_vmi else "is gone"))
                if not running and new["run_strategy"] not in ("Halted",):
                    report.lost.append(name)
            else:
                report.restarted.append(name)
        return report


def _as_key(value):
    if isinstance(value, dict):
        return (value.get("namespace") or "", value.get("name"))
    if isinstance(value, str):
        namespace, _, name = value.partition("/")
        return (namespace, name)
    return tuple(value)


def shut_down_vms(result):
    """The VMs a node_maintenance / node_decommission / role result says it shut down or restarted."""
    vms = (result or {}).get("vms") or {}
    names = []
    for group in ("shut_down", "rescheduled", "not_restarted"):
        names.extend(_as_key(v) for v in vms.get(group) or [])
    return names


# -- "nothing changed" ---------------------------------------------------------------------

# Node fields the cluster's own controllers change at any time (see ResourceVersions._version).
# Every node.kubernetes.io/* taint is the node-lifecycle controller's, written on its own schedule, even
# node.kubernetes.io/unschedulable, which trails spec.unschedulable (a cordon is judged by that field).
# virt-handler's heartbeat labels (pkg/virt-handler/heartbeat/heartbeat.go), written once its pod
# runs on a node and on every beat after: the CPU-manager label is "cpumanager" in v1.7, both keys in v1.8.
SYSTEM_NODE_LABELS = ("kubevirt.io/schedulable", "kubevirt.io/cpumanager", "cpumanager")
# virt-handler's node-labeller keeps these in line with the cluster's obsolete CPU models on its own cycle.
SYSTEM_NODE_LABEL_PREFIXES = ("cpu-model.node.kubevirt.io/", "host-model-cpu.node.kubevirt.io/",
                              "cpu-vendor.node.kubevirt.io/")
# virt-handler's heartbeat (pkg/virt-handler/heartbeat), renewed every minute.
SYSTEM_NODE_ANNOTATIONS = ("node.alpha.kubernetes.io/ttl", "kubevirt.io/heartbeat")
# Every label under *.node.kubevirt.io/ is the node-labeller's (CPU features, timers, machine types).
SYSTEM_NODE_LABEL_DOMAIN = "node.kubevirt.io"


class ResourceVersions:
    """resourceVersion of every object of the kinds an operation may touch (for nodes and pods, what a client
    changes of them: see _version)."""

    KINDS = (
        ("Node", lambda k8s: client.CoreV1Api(k8s).list_node),
        ("Pod", lambda k8s: client.CoreV1Api(k8s).list_pod_for_all_namespaces),
        ("Lease", lambda k8s: client.CoordinationV1Api(k8s).list_lease_for_all_namespaces),
        ("PodDisruptionBudget", lambda k8s: client.PolicyV1Api(k8s).list_pod_disruption_budget_for_all_namespaces),
    )
    CUSTOM = (
        ("VirtualMachine", "kubevirt.io", "v1", "virtualmachines"),
        ("VirtualMachineInstance", "kubevirt.io", "v1", "virtualmachineinstances"),
        ("VirtualMachineInstanceMigration", "kubevirt.io", "v1", "virtualmachineinstancemigrations"),
        ("KubeVirt", "kubevirt.io", "v1", "kubevirts"),
        ("HyperConverged", "hco.kubevirt.io", "v1beta1", "hyperconvergeds"),
        ("NodeMaintenance", "nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances"),
        ("LegacyNodeMaintenance", "nodemaintenance.kubevirt.io", "v1beta1", "nodemaintenances"),
        ("NodeHealthCheck", "remediation.medik8s.io", "v1alpha1", "nodehealthchecks"),
        ("MachineHealthCheck", "machine.openshift.io", "v1beta1", "machinehealthchecks"),
        ("CapiMachineHealthCheck", "cluster.x-k8s.io", "v1beta1", "machinehealthchecks"),
        ("BareMetalHost", "metal3.io", "v1alpha1", "baremetalhosts"),
    )
    # Objects that change by themselves all the time: node heartbeats, API server identity leases,
    # and the leader-election Leases the cluster's controllers renew every few seconds in their own
    # namespaces (virt-controller's kubevirt/virt-controller, the node-maintenance-operator's).
    IGNORED_LEASE_NAMESPACES = ("kube-node-lease", "kubevirt", "node-maintenance-operator-system")

    def __init__(self, k8s):
        self.k8s = k8s
        self.pod_nodes = {}
        self.nodes = set()
        self.versions = self._read()

    def _read(self):
        versions = {}
        namespaces = json.loads(client.CoreV1Api(self.k8s).list_namespace(_preload_content=False).data)
        # Namespaces being deleted (other tests cleaning up) change by themselves.
        self.leaving = set(n["metadata"]["name"] for n in namespaces.get("items") or []
                           if n["metadata"].get("deletionTimestamp"))
        for kind, call in self.KINDS:
            data = json.loads(call(self.k8s)(_preload_content=False).data)
            for obj in data.get("items") or []:
                namespace, name = _key(obj)
                if namespace in self.leaving:
                    continue
                if kind == "Lease" and (namespace in self.IGNORED_LEASE_NAMESPACES or name.startswith(("kube-", "apiserver-"))):
                    continue
                if kind == "Node":
                    self.nodes.add(name)
                if kind == "Pod":
                    self.pod_nodes[(namespace, name)] = (obj.get("spec") or {}).get("nodeName")
                versions[(kind, namespace, name)] = self._version(kind, obj)
        custom = client.CustomObjectsApi(self.k8s)
        for kind, group, version, plural in self.CUSTOM:
            try:
                data = custom.list_cluster_custom_object(group, version, plural)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            for obj in data.get("items") or []:
                namespace, name = _key(obj)
                if namespace not in self.leaving:
                    versions[(kind, namespace, name)] = self._version(kind, obj)
        return versions

    @staticmethod
    def _version(kind, obj):
        """What identifies a change by a client: the resourceVersion, except for nodes, whose
        status kwok rewrites with every heartbeat. For a node the spec, labels and annotations
        count, less what the cluster itself keeps changing: the node-lifecycle controller's
        taints (a node late with its heartbeat on a loaded machine is tainted not-ready or
        unreachable for a moment), the TTL controller's annotation and virt-handler's labels."""
        if kind == "Node":
            meta = obj.get("metadata") or {}
            spec = dict(obj.get("spec") or {})
            spec["taints"] = [t for t in spec.get("taints") or []
                              if not t.get("key", "").startswith("node.kubernetes.io/")]
            labels = dict((k, v) for k, v in (meta.get("labels") or {}).items()
                          if k not in SYSTEM_NODE_LABELS and not k.startswith(SYSTEM_NODE_LABEL_PREFIXES)
                          and not k.split("/", 1)[0].endswith(SYSTEM_NODE_LABEL_DOMAIN))
            annotations = dict((k, v) for k, v in (meta.get("annotations") or {}).items()
                               if k not in SYSTEM_NODE_ANNOTATIONS)
            return {"spec": spec, "labels": labels, "annotations": annotations}
        if kind == "Pod":
            # What a client changes on a pod (its spec, labels, annotations, finalizers, owners, a deletion); its
            # status belongs to the node's kubelet (the lab's kwok), which rewrites it on its own schedule - a
            # virt-handler pod's readiness, say, after its node came back.
            meta = obj.get("metadata") or {}
            return {"spec": obj.get("spec"), "labels": meta.get("labels"), "annotations": meta.get("annotations"),
                    "finalizers": meta.get("finalizers"), "owners": meta.get("ownerReferences"),
                    "deletion": meta.get("deletionTimestamp")}
        return (obj.get("metadata") or {}).get("resourceVersion")

    def changes(self):
        """Objects added, removed or changed since the snapshot: ['Node lab-worker-1 changed', ...]."""
        self.nodes = set()
        after = self._read()
        out = []
        for key in sorted(set(self.versions) | set(after)):
            kind, namespace, name = key
            if namespace in self.leaving:
                continue
            if kind == "Pod" and key not in after and self.pod_nodes.get((namespace, name)) not in self.nodes:
                continue  # garbage-collected after its node was deleted (by an earlier test)
            label = "%s %s" % (kind, "%s/%s" % (namespace, name) if namespace else name)
            if key not in after:
                out.append(label + " removed")
            elif key not in self.versions:
                out.append(label + " added")
            elif after[key] != self.versions[key]:
                out.append(label + " changed" + self._what_changed(kind, self.versions[key], after[key]))
        return out

    @staticmethod
    def _what_changed(kind, before, after):
        """For a node, which of spec, labels and annotations changed, from what to what."""
        if kind != "Node":
            return ""
        fields = []
        for part in ("spec", "labels", "annotations"):
            keys = set(before[part]) | set(after[part])
            fields += ["%s.%s: %s -> %s" % (part, k, json.dumps(before[part].get(k))[:300],
                                              json.dumps(after[part].get(k))[:300])
                       for k in sorted(keys) if before[part].get(k) != after[part].get(k)]
        return " (%s)" % ", ".join(fields)


def wait_stable(seconds=2.0):
    """A short pause for controllers to settle before a snapshot (never used to assert timing)."""
    time.sleep(seconds)
