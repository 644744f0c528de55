"""Scenario 5: node_maintenance_info and the role's preflight on a large lab.

The size is OKD's tested maximum: N workers (default 500), V VirtualMachines per worker
(default 20, so 10,000 VMs) and P other pods per node in total (default 60: 59 ReplicaSet
pods plus the simulator's virt-handler DaemonSet pod, so 30,000 at the default size). The
ReplicaSets' pod templates name their node, so the pods bypass the scheduler (which would
take longer than anything measured here) but are otherwise ordinary ReplicaSet pods that
KWOK marks Running.

The VMs are created as their controllers would leave them, without the controllers doing
it (planning only reads, and 10,000 VMs started by virt-controller and the virt-handler
stand-in would take hours on 2 cores): two VMs are started for real first (one
live-migratable on a ReadWriteMany PVC, one on a ReadWriteOnce PVC), and every VM is a copy
of one of them, with its own name, node, PVC and uids (see :func:`populate_vms`).

Measured, each as a user runs it (``ansible localhost -m ...``, start-up included):
``node_maintenance_info`` for every node, the preflight of the ``rolling_maintenance``
role over every worker (its ``maintenance_preflight`` module, which is what the role's
preflight step runs), and, for reference, ``kubectl get`` of the same objects (nodes,
pods, VMIs, VMs, PVCs).
Wall time and peak memory (the sum over the process tree, sampled, and the largest
single process from wait4).
"""

import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import labs, measure, peers as peers_mod, workloads as w
from bench.bootstrap import say
from bench.kube import ApiError, Kube, path_of

NAMESPACE = "bench-scale"
# The VMs are spread over this many namespaces (``bench-scale-vms-00`` ...), as on a cluster
# shared by teams; the two real VMs they are copied from live in the first.
VM_NAMESPACES = 10
# Objects are created from this many threads (the ReplicaSets' pods by the lab's
# controller-manager): the machine has 2 cores.
CREATE_WORKERS = 4
# Every this-many-th VM is a copy of the one on a ReadWriteOnce PVC (eviction strategy
# LiveMigrateIfPossible: shut down and started elsewhere), the others of the live-migratable one.
NOT_MIGRATABLE_EVERY = 20
VM_MEMORY = "2Gi"
TEMPLATES = {"migratable": ("ReadWriteMany", "LiveMigrate"),
             "rwo": ("ReadWriteOnce", "LiveMigrateIfPossible")}
TEMPLATE_PREFIX = "scale-template-"
TEMPLATE_TIMEOUT = 300
# Who writes what, as in a real cluster: virt-controller the VM's status, virt-handler the
# running VMI's (virt-api's mutating webhook resets the status of a VMI created or updated
# by anyone else, see VmFactory).
CONTROLLER_USER = "system:serviceaccount:kubevirt:kubevirt-controller"
HANDLER_USER = "system:serviceaccount:kubevirt:kubevirt-handler"
# The finalizer virt-api's mutating webhook adds to every new VMI (v1.VirtualMachineInstanceFinalizer).
VMI_FINALIZER = "kubevirt.io/foregroundDeleteVirtualMachine"
# The lab's process name of the virt-handler (and HCO, storage, ...) stand-in (lab/cluster.py SIM).
SIM = "kubevirt-sim"
# What virt-handler keeps on its node (lab/standins/handler_nodes.py, handler_node_labeller.py).
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
MACHINE_TYPE_LABEL = "machine-type.node.kubevirt.io/q35"
DEVICE_RESOURCES = ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net")
HANDLER_TIMEOUT = 300
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")
KUBECTL_RESOURCES = "nodes,pods,vmis,vms,pvc"
RAW_LISTS = "the API server alone: nodes, pods, VMIs, VMs, PDBs read page by page, undecoded (reference)"


def _namespace(kube, name):
    if kube.get_or_none("Namespace", name) is None:
        kube.create("Namespace", {"metadata": {"name": name}})
    w.wait_for(lambda: kube.get_or_none("ServiceAccount", "default", name), 300,
               f"the default ServiceAccount of namespace {name}")


def populate(kube, workers, pods_per_node):
    """ReplicaSets pinned to each node, so that the lab holds ``pods_per_node`` pods per worker
    besides the VMs' (the controller-manager creates the pods: :func:`wait_for_pods` waits)."""
    _namespace(kube, NAMESPACE)
    existing = dict((rs["metadata"]["name"], rs["spec"].get("replicas"))
                    for rs in kube.list("ReplicaSet", NAMESPACE)[0])
    daemon_pods = 1 if kube.list("Pod", "kubevirt", limit=1)[0] else 0
    replicas = max(0, pods_per_node - daemon_pods)

    def create(node):
        name = f"rs-{node}"
        if name in existing:
            # Left by an earlier run of another size: scaled to this one's.
            kube.patch("ReplicaSet", name, {"spec": {"replicas": replicas}}, NAMESPACE)
            return
        rs = w.replica_set(name, replicas)
        rs["spec"]["template"]["spec"]["nodeName"] = node
        kube.create("ReplicaSet", rs, NAMESPACE)

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(create, [n for n in workers if existing.get(f"rs-{n}") != replicas]))
    return replicas * len(workers), daemon_pods * len(workers)


def wait_for_pods(kube, want, timeout):
    """Until ``want`` pods of the ReplicaSets exist and KWOK has marked them Running."""
    started = time.monotonic()
    last = -1
    running_deadline = None
    while True:
        created = _count(kube, NAMESPACE)
        not_running = len(kube.list("Pod", NAMESPACE, field_selector="status.phase!=Running")[0])
        running = created - not_running
        if created >= want:
            # KWOK marks pods Running at its own pace; Pending pods count for the plan as well.
            running_deadline = running_deadline or time.monotonic() + 300
            if not_running == 0 or time.monotonic() > running_deadline:
                break
        if running != last:
            say(f"scale: {created}/{want} pods created, {running} Running "
                f"({time.monotonic() - started:.0f}s)")
            last = running
        if time.monotonic() - started > timeout:
            raise w.Timeout(f"only {created} of {want} pods created after {timeout}s")
        time.sleep(10)
    return running


# -- VirtualMachines ------------------------------------------------------------------------

def _vm_namespace(index):
    return f"bench-scale-vms-{index % VM_NAMESPACES:02d}"


def _template_objects(kind, namespace):
    """The PVC and VM of a template VM (bench/workloads.py's VM: masquerade, one PVC disk)."""
    access, strategy = TEMPLATES[kind]
    name = TEMPLATE_PREFIX + kind
    claim = w.rwx_claim(f"{name}-root")
    claim["spec"]["accessModes"] = [access]
    vm = w.virtual_machine(name, VM_MEMORY, eviction_strategy=strategy)
    claim["metadata"]["namespace"] = vm["metadata"]["namespace"] = namespace
    return claim, vm


def start_templates(kube, timeout=TEMPLATE_TIMEOUT):
    """Start the template VMs for real (virt-controller, virt-api, the virt-handler stand-in and
    the storage stand-in all at work) and return, per template, the objects they made:
    {kind: {"pvc", "pv", "vm", "vmi", "pod"}} once the VMI runs, is Ready and has its
    LiveMigratable condition."""
    namespace = _vm_namespace(0)
    for kind in TEMPLATES:
        claim, vm = _template_objects(kind, namespace)
        if kube.get_or_none("VirtualMachine", vm["metadata"]["name"], namespace) is None:
            kube.create("PersistentVolumeClaim", claim, namespace)
            kube.create("VirtualMachine", vm, namespace)

    def done(kind):
        name = TEMPLATE_PREFIX + kind
        vm = kube.get_or_none("VirtualMachine", name, namespace)
        vmi = kube.get_or_none("VirtualMachineInstance", name, namespace)
        pvc = kube.get_or_none("PersistentVolumeClaim", f"{name}-root", namespace)
        if not (vm and vmi and pvc) or (vmi.get("status") or {}).get("phase") != "Running":
            return None
        conditions = {c.get("type"): c.get("status") for c in vmi["status"].get("conditions") or []}
        if conditions.get("Ready") != "True" or "LiveMigratable" not in conditions:
            return None
        if (vm.get("status") or {}).get("printableStatus") != "Running" or not pvc["spec"].get("volumeName"):
            return None
        selector = f"kubevirt.io/created-by={vmi['metadata']['uid']}"
        pods = [p for p in kube.list("Pod", namespace, label_selector=selector)[0]
                if (p.get("status") or {}).get("phase") == "Running"]
        if not pods:
            return None
        pv = kube.request("GET", f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
        return {"pvc": pvc, "pv": pv, "vm": vm, "vmi": vmi, "pod": pods[0]}

    found = {}

    def all_done():
        for kind in TEMPLATES:
            found[kind] = found.get(kind) or done(kind)
        return all(found.values())

    w.wait_for(all_done, timeout, "the template VMs to run", interval=2)
    return found


def stop_controllers(state_dir):
    """Stop virt-controller and the virt-handler stand-in (kubevirt-sim) of the lab.

    virt-controller would otherwise act on the copies (a VMI it did not schedule gets a launcher
    pod of its own; once virt-handler's heartbeat stops, its node controller marks the nodes
    unschedulable and their VMIs Failed), and the stand-in would take the 2 cores for
    heartbeats and caches of 10,000 VMIs. virt-api keeps running: its webhooks admit and
    default every VM and VMI created, as on a real cluster. ``lab up`` starts both again.
    """
    from lab import processes
    from lab.paths import LabPaths

    result = labs.lab_cli(state_dir, "stop", "virt-controller", timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"python -m lab stop virt-controller failed: {result.stderr.strip()[-500:]}")
    processes.stop(LabPaths(Path(state_dir)), SIM, processes.DEFAULT_STOP_GRACE)


def _server_fields_dropped(obj):
    meta = obj["metadata"]
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    return obj


def _renamed(obj, names):
    """A deep copy of ``obj`` with every template string of ``names`` (old -> new) replaced."""
    text = json.dumps(obj)
    for old, new in names.items():
        text = text.replace(old, new)
    return json.loads(text)


class VmFactory:
    """Copies of a template VM: PV, PVC, VM, VMI and launcher pod, in the order and by the
    identities that make them on a cluster (one VM per :meth:`create` call, thread-safe).

    - PV and PVC: the template's PV (provisioned by the lab's storage stand-in) is copied
      pre-bound to the new claim (``claimRef``); the controller-manager's PV controller binds
      them (both Bound) as it binds any pre-bound pair.
    - VM: created by the user (virt-api's webhooks default and validate it); its status
      (``printableStatus: Running``, ``created``, ``ready``, conditions) written by
      virt-controller's identity through ``/status``, as virt-controller does.
    - VMI: created by virt-controller's identity, as its VM controller does, from the
      template's spec and metadata (owner reference to the VM, labels, annotations, the
      firmware UUID and serial virt-api gave the VM); virt-api's mutating webhook defaults it, adds
      its finalizer and sets phase Pending, as for any new VMI (it resets the status of every
      create, and of every update not made by one of KubeVirt's ServiceAccounts). The running
      status (phase Running, ``nodeName``, the ``kubevirt.io/nodeName`` label, ``activePods``,
      conditions Ready and LiveMigratable as KubeVirt wrote them for the template, volume
      status of the new PVC) is then written by virt-handler's identity, as virt-controller
      (Scheduled) and virt-handler (Running) do. The interfaces' IP addresses are left out:
      they are the launcher pod's, which KWOK assigns once the pod exists.
    - Launcher pod: created by virt-controller's identity from the template's pod (labels
      ``kubevirt.io=virt-launcher``, ``kubevirt.io/created-by=<VMI uid>``,
      ``vm.kubevirt.io/name``, controller owner reference to the VMI, requests, node selector,
      PVC volume) with ``nodeName`` set, as if scheduled; KWOK marks it Running. Its priority
      is left to the Priority admission plugin, which computes it from ``priorityClassName``.
    """

    def __init__(self, kubeconfig, templates):
        self.kube = Kube(kubeconfig)
        self.controller = Kube(kubeconfig)
        self.controller.headers["Impersonate-User"] = CONTROLLER_USER
        self.handler = Kube(kubeconfig)
        self.handler.headers["Impersonate-User"] = HANDLER_USER
        self.templates = templates

    def create(self, index, node):
        t = self.templates["rwo" if index % NOT_MIGRATABLE_EVERY == NOT_MIGRATABLE_EVERY - 1 else "migratable"]
        template_name = t["vm"]["metadata"]["name"]
        name = f"vm-{index:05d}"
        namespace = _vm_namespace(index)
        names = {template_name: name, f'"{t["vm"]["metadata"]["namespace"]}"': f'"{namespace}"',
                 f'"{t["vmi"]["status"]["nodeName"]}"': f'"{node}"', t["pv"]["metadata"]["name"]: f"pvc-{uuid.uuid4()}"}
        pv = _server_fields_dropped(_renamed(t["pv"], names))
        pv.pop("status", None)
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": namespace, "name": f"{name}-root"}
        self._create("/api/v1/persistentvolumes", pv)
        pvc = _server_fields_dropped(_renamed(t["pvc"], names))
        pvc.pop("status", None)
        for key in ("pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller"):
            (pvc["metadata"].get("annotations") or {}).pop(key, None)
        pvc["spec"].pop("volumeName", None)
        self._create(path_of("PersistentVolumeClaim", namespace), pvc)

        vm = _server_fields_dropped(_renamed(t["vm"], names))
        vm_status = vm.pop("status", {})
        # virt-api's VM mutator gives every new VM a firmware UUID and serial of its own.
        firmware = vm["spec"]["template"]["spec"]["domain"].pop("firmware", {})
        for key in ("uuid", "serial"):
            firmware.pop(key, None)
        if firmware:
            vm["spec"]["template"]["spec"]["domain"]["firmware"] = firmware
        vm = self._create(path_of("VirtualMachine", namespace), vm)
        names[t["vm"]["metadata"]["uid"]] = vm["metadata"]["uid"]
        template_firmware = t["vm"]["spec"]["template"]["spec"]["domain"].get("firmware") or {}
        new_firmware = vm["spec"]["template"]["spec"]["domain"].get("firmware") or {}
        for key in ("uuid", "serial"):
            if template_firmware.get(key) and new_firmware.get(key):
                names[template_firmware[key]] = new_firmware[key]
        vm_status = _renamed(vm_status, names)
        vm_status["observedGeneration"] = vm_status["desiredGeneration"] = vm["metadata"].get("generation", 1)
        _retried(lambda: self.controller.request("PUT", path_of("VirtualMachine", namespace, name, "status"),
                                                 body=dict(vm, status=vm_status)))

        vmi = _server_fields_dropped(_renamed(t["vmi"], names))
        vmi_status = vmi.pop("status")
        labels = vmi["metadata"].pop("labels", {})
        vmi["metadata"]["labels"] = {k: v for k, v in labels.items() if k != "kubevirt.io/nodeName"}
        vmi["metadata"]["finalizers"] = [f for f in vmi["metadata"].get("finalizers") or [] if f != VMI_FINALIZER]
        vmi = self._create(path_of("VirtualMachineInstance", namespace), vmi, self.controller)
        names[t["vmi"]["metadata"]["uid"]] = vmi["metadata"]["uid"]

        pod = _server_fields_dropped(_renamed(t["pod"], names))
        pod.pop("status", None)
        pod["metadata"].pop("name", None)
        for key in ("priority", "preemptionPolicy"):
            pod["spec"].pop(key, None)
        pod = self._create(path_of("Pod", namespace), pod, self.controller)
        names[t["pod"]["metadata"]["uid"]] = pod["metadata"]["uid"]

        vmi_status = _renamed(vmi_status, names)
        for interface in vmi_status.get("interfaces") or []:
            interface.pop("ipAddress", None)
            interface.pop("ipAddresses", None)
        running = dict(vmi, metadata=dict(vmi["metadata"], labels=labels), status=vmi_status)
        _retried(lambda: self.handler.request("PUT", path_of("VirtualMachineInstance", namespace, name),
                                              body=running))

    def _create(self, path, obj, client=None):
        """POST as ``client`` (the user by default); an object left by an earlier run is reused."""
        try:
            return _retried(lambda: (client or self.kube).request("POST", path, body=obj))
        except ApiError as e:
            if e.status != 409 or not obj["metadata"].get("name"):
                raise
            return self.kube.request("GET", f"{path}/{obj['metadata']['name']}")


def _retried(call, attempts=4):
    """``call()``, again after a pause when the API server is briefly overwhelmed (429, 5xx,
    a timed-out connection), as client-go's clients retry."""
    for attempt in range(attempts):
        try:
            return call()
        except ApiError as e:
            if e.status not in (429, 500, 502, 503, 504) or attempt == attempts - 1:
                raise
        except OSError:
            if attempt == attempts - 1:
                raise
        time.sleep(1 + attempt * 2)


def prepare_vms(kube, kubeconfig, state_dir, workers):
    """The VMs' namespaces and the two template VMs, started for real while the lab is still
    quiet; once the virt-handler stand-in has done its part on every worker, virt-controller
    and the stand-in are stopped and the workers keep what a running virt-handler keeps on
    them. Returns the templates."""
    for i in range(VM_NAMESPACES):
        _namespace(kube, _vm_namespace(i))
    say("scale: starting the two template VMs for real")
    templates = start_templates(kube)
    wait_for_handlers(kube, workers)
    stop_controllers(state_dir)
    handler = Kube(kubeconfig)
    handler.headers["Impersonate-User"] = HANDLER_USER
    heartbeat(handler, workers)
    say("scale: virt-controller and the virt-handler stand-in stopped")
    return templates


def _handled(node):
    """Whether the virt-handler stand-in has done its part on ``node``: heartbeat
    (``kubevirt.io/schedulable=true``), device plugins (the ``devices.kubevirt.io`` resources
    every launcher pod requests) and node labeller (the machine type launcher pods select)."""
    labels = node["metadata"].get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return labels.get(SCHEDULABLE_LABEL) == "true" and labels.get(MACHINE_TYPE_LABEL) == "true" and all(
        allocatable.get(resource) for resource in DEVICE_RESOURCES)


def wait_for_handlers(kube, workers, timeout=HANDLER_TIMEOUT):
    """Until the stand-in has done its part on every worker: it goes through the nodes at its
    own pace (a heartbeat a minute, with jitter), and the plan places launcher pods only on
    nodes that carry it."""
    wanted = set(workers)
    started = time.monotonic()
    last_said = [0.0]

    def done():
        handled = sum(1 for n in kube.list("Node")[0] if n["metadata"]["name"] in wanted and _handled(n))
        if time.monotonic() - last_said[0] >= 10:
            last_said[0] = time.monotonic()
            say(f"scale: virt-handler stand-in done on {handled}/{len(wanted)} workers "
                f"({time.monotonic() - started:.0f}s)")
        return handled == len(wanted)

    w.wait_for(done, timeout, "the virt-handler stand-in on every worker", interval=5)


def heartbeat(handler, workers):
    """virt-handler's heartbeat on every worker (``pkg/virt-handler/heartbeat``), as virt-handler's
    identity: the stand-in labelled the nodes ``kubevirt.io/schedulable=false`` as it stopped
    (``labelNodeUnschedulable``, what virt-handler does when it ends), and the cluster modelled
    is one where virt-handler runs. Nothing renews it afterwards, and nothing reads its age:
    virt-controller, whose node controller would, is stopped as well. The CPU-manager label(s) of the
    lab's release stay as the stand-in's heartbeat wrote them."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    patch = {"metadata": {"labels": {SCHEDULABLE_LABEL: "true"},
                          "annotations": {HEARTBEAT_ANNOTATION: now}}}
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(lambda node: _retried(lambda: handler.patch("Node", node, patch)), workers))


def populate_vms(kube, kubeconfig, templates, workers, vms_per_node):
    """``vms_per_node`` running VMs on every worker, copies of the templates (:func:`prepare_vms`).

    Faithful where the plan looks (KubeVirt's own objects as its components write them,
    see :class:`VmFactory`), and cheap: 7 writes per VM instead of the scheduling,
    launcher start-up and status traffic of 10,000 real starts. VMs already there are kept
    (a kept lab is topped up). Returns the number of VMs, the two templates included.
    """
    existing = {(vm["metadata"]["namespace"], vm["metadata"]["name"]) for vm in kube.list("VirtualMachine")[0]}
    wanted = [(i, workers[i % len(workers)]) for i in range(vms_per_node * len(workers))]
    todo = [(i, node) for i, node in wanted if (_vm_namespace(i), f"vm-{i:05d}") not in existing]
    factory = VmFactory(kubeconfig, templates)
    started = time.monotonic()
    done = [0]
    lock = threading.Lock()
    last_said = [started]

    def create(item):
        factory.create(*item)
        with lock:
            done[0] += 1
            if time.monotonic() - last_said[0] >= 10 or done[0] == len(todo):
                last_said[0] = time.monotonic()
                say(f"scale: {len(wanted) - len(todo) + done[0]}/{len(wanted)} VMs created "
                    f"({time.monotonic() - started:.0f}s)")

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(create, todo))
    return len(wanted) + len(TEMPLATES)


def _ready_workers(kube):
    nodes, _ = kube.list("Node")
    return sum(1 for n in nodes if n["metadata"]["name"].startswith("lab-worker-") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (n.get("status") or {}).get("conditions") or []))


def _count(kube, namespace=None):
    """Objects in a list, from one page of one (remainingItemCount), without fetching them."""
    from bench.kube import path_of

    page = kube.request("GET", path_of("Pod", namespace), {"limit": 1})
    return len(page.get("items") or []) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


def _median_run(runs):
    """The run with the median wall time (every run's wall time and peak memory listed with it)."""
    ok = sorted((r for r in runs if r["ok"]), key=lambda r: r["wall_seconds"]) or runs
    chosen = dict(ok[(len(ok) - 1) // 2])
    chosen["all_wall_seconds"] = [r["wall_seconds"] for r in runs]
    chosen["all_peak_tree_rss_mib"] = [r["peak_tree_rss_mib"] for r in runs]
    return chosen



def _reference_runs(argv, iterations, figures, cwd=None):
    """A reference command ``iterations`` times: the median run, with ``figures(stdout)`` of each
    run that succeeded."""
    runs = []
    for _ in range(max(1, iterations)):
        m = measure.run(argv, timeout=600, cwd=cwd)
        summary = m.summary()
        summary.update({"ok": m.returncode == 0, "error": None if m.returncode == 0 else m.stderr[-300:]})
        if m.returncode == 0:
            summary.update(figures(m.stdout))
        m = None  # the output of kubectl's reference is hundreds of MiB
        runs.append(summary)
    return _median_run(runs)


def _count_all(kube, kind):
    """Objects of ``kind`` in the cluster, from one page of one (remainingItemCount)."""
    page = kube.request("GET", path_of(kind), {"limit": 1})
    return len(page.get("items") or []) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


def run(ctx_env_factory, nodes, pods_per_node, state_dir, keep_lab, populate_timeout=3600, iterations=1,
        vms_per_node=20):
    """Bring the scale lab up, fill it, measure (``iterations`` runs each, the median reported)."""
    record = {"nodes": nodes, "pods_per_node": pods_per_node, "vms_per_node": vms_per_node,
              "iterations": iterations, "lab": f"python -m lab up --scale --nodes {nodes}"}
    started = time.monotonic()
    # The lab's scale profile: a pod CIDR with a /24 for every node and Lease heartbeats
    # every 30 s (see lab/README.md). Re-running `up` on a lab already up adds missing nodes
    # (and starts virt-controller and the virt-handler stand-in again).
    labs.up(state_dir, nodes, extra=("--scale",))
    kubeconfig = state_dir / "kubeconfig"
    kube = Kube(kubeconfig)
    record["workers_ready_before"] = _ready_workers(kube)
    workers = w.workers(kube)
    record["lab_up_seconds"] = round(time.monotonic() - started, 1)
    say(f"scale: lab with {len(workers)} workers up in {record['lab_up_seconds']}s; creating pods and VMs")
    started = time.monotonic()
    # The template VMs start while the lab is quiet; then the ReplicaSets, whose pods the
    # controller-manager creates while the VMs are copied.
    templates = prepare_vms(kube, kubeconfig, state_dir, workers) if vms_per_node > 0 else None
    want, daemon_pods = populate(kube, workers, pods_per_node)
    record["vms"] = populate_vms(kube, kubeconfig, templates, workers, vms_per_node) if templates else 0
    record["vms_seconds"] = round(time.monotonic() - started, 1)
    record["pods_running"] = wait_for_pods(kube, want, populate_timeout)
    record["pods"] = want + daemon_pods
    record["nodes"] = len(workers)
    record["populate_seconds"] = round(time.monotonic() - started, 1)
    record["workers_ready"] = _ready_workers(kube)
    all_pods = _count(kube)
    record["pods_total_in_cluster"] = all_pods
    # Counted without listing them: the harness's own memory would be charged to the forked commands.
    record["vmis"] = _count_all(kube, "VirtualMachineInstance") if vms_per_node > 0 else 0
    record["launcher_pods"] = sum(_count(kube, _vm_namespace(i)) for i in range(VM_NAMESPACES)) \
        if vms_per_node > 0 else 0
    record["pvcs"] = _count_all(kube, "PersistentVolumeClaim")
    say(f"scale: {all_pods} pods ({record['launcher_pods']} of them virt-launcher), {record['vms']} VMs, "
        f"{record['vmis']} VMIs, {record['pvcs']} PVCs in the cluster after {record['populate_seconds']}s; measuring")
    env = ctx_env_factory(state_dir, kubeconfig, kube)
    # The machine is shared: the load while measuring says how much of a figure is queueing.
    record["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    results = measure_commands(env, kubeconfig, iterations)
    record["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    record["results"] = results
    if not keep_lab:
        labs.down(state_dir)
    return record


def measure_commands(env, kubeconfig, iterations, reference=True):
    """Each command ``iterations`` times; per command the median run, every run's figures with it.
    ``reference``: kubectl's as well."""
    results = {}
    commands = {
        "node_maintenance_info (all nodes)": ["kubevirt_ops.maintenance.node_maintenance_info", {}],
        "preflight (maintenance_preflight, all workers)": [
            "kubevirt_ops.maintenance.maintenance_preflight",
            {"label_selector": w.WORKER_ROLE, "fail_on_problems": False}],
    }
    for key, (module, args) in commands.items():
        argv = [str(env.our_bin / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", module]
        if args:
            argv += ["-a", json.dumps(args)]
        runs = []
        for _ in range(max(1, iterations)):
            m = measure.run(argv, env=env.our_ansible_env(), timeout=1800)
            result = peers_mod.ansible_result(m.stdout)
            error = peers_mod.ansible_error(m, result)
            summary = m.summary()
            summary.update({"ok": error is None, "error": error})
            if result and key.startswith("node_maintenance_info"):
                summary["nodes_returned"] = len(result.get("nodes") or [])
            if result and key.startswith("preflight"):
                summary["problems"] = len(result.get("problems") or [])
                summary["running_vms"] = len(result.get("running_vms") or [])
                summary["expected_stopped"] = len(result.get("expected_stopped") or [])
            runs.append(summary)
            result = None
        results[key] = _median_run(runs)
    if not reference:
        return results
    # The API server alone: the same lists read undecoded (bench/raw_lists.py), the floor of any client.
    results[RAW_LISTS] = _reference_runs(
        [sys.executable, "-m", "bench.raw_lists", str(kubeconfig)], iterations,
        lambda stdout: {"extra": json.loads(stdout)}, cwd=str(Path(__file__).resolve().parent.parent))
    # kubectl's reference: the same objects (VMIs and VMs are KubeVirt's short names).
    results[f"kubectl get {KUBECTL_RESOURCES} -A -o json (reference)"] = _reference_runs(
        ["kubectl", f"--kubeconfig={kubeconfig}", "get", KUBECTL_RESOURCES, "-A", "-o", "json"], iterations,
        lambda stdout: {"output_mib": round(len(stdout) / 2**20, 1)})
    return results
