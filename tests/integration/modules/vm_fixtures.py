"""VMs, PVCs and namespaces for the VM configuration module tests, and a way to run the
modules' logic in-process (to force the path used when the subresources API is absent)."""

import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.errors import LabError
from lab.wait import wait_for

GROUP, VERSION = "kubevirt.io", "v1"
TEST_LABEL = "kubevirt-ops.test/vm"


def custom(k8s):
    return client.CustomObjectsApi(k8s)


def vm_body(name, run_strategy="Always", running=None, eviction=None, claims=(), labels=None):
    spec = {"domain": {"devices": {"disks": []}, "resources": {"requests": {"memory": "256Mi", "cpu": "50m"}}},
            "terminationGracePeriodSeconds": 0, "volumes": []}
    if eviction:
        spec["evictionStrategy"] = eviction
    for claim in claims:
        spec["volumes"].append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
        spec["domain"]["devices"]["disks"].append({"name": claim, "disk": {"bus": "virtio"}})
    labels = dict(labels or {}, **{TEST_LABEL: name})
    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": labels},
            "spec": {"template": {"metadata": {"labels": {TEST_LABEL: name}}, "spec": spec}}}
    if running is not None:
        body["spec"]["running"] = running
    elif run_strategy:
        body["spec"]["runStrategy"] = run_strategy
    return body


def create_vm(k8s, namespace, name, **kwargs):
    return custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines",
                                                        vm_body(name, **kwargs))


def create_vms(k8s, specs, workers=8):
    """Create many VMs concurrently: specs are (namespace, name, kwargs)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda s: create_vm(k8s, s[0], s[1], **s[2]), specs))


def create_pvc(k8s, namespace, name, modes=("ReadWriteOnce",)):
    client.CoreV1Api(k8s).create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}},
    })


def get_vm(k8s, namespace, name):
    return custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", name)


def get_vmi(k8s, namespace, name):
    try:
        return custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_vms(k8s, namespace=None, label_selector=None):
    if namespace:
        data = custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines",
                                                         label_selector=label_selector)
    else:
        data = custom(k8s).list_cluster_custom_object(GROUP, VERSION, "virtualmachines",
                                                      label_selector=label_selector)
    return data["items"]


def versions(k8s, namespace=None, label_selector=None):
    """{namespace/name: resourceVersion} of VMs: proof that nothing was written."""
    return dict(("%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]), v["metadata"]["resourceVersion"])
                for v in list_vms(k8s, namespace, label_selector))


def _seen_generation(vm):
    """The VM generation KubeVirt's VM controller has seen: ``desiredGeneration`` (a spec change of a
    running VM waits for a restart, so ``observedGeneration``, the running VMI's, stays behind);
    a VM that never ran has neither."""
    status = vm.get("status") or {}
    return status.get("desiredGeneration", status.get("observedGeneration"))


def settled(k8s, namespace=None, label_selector=None, timeout=60):
    """Until the VM controller has caught up with every VM (status observed, nothing moving), so that
    resourceVersions compared afterwards change only by what the test does."""
    last = {}

    def quiet():
        vms = list_vms(k8s, namespace, label_selector)
        pending = ["%s/%s (generation %s, seen %s, %s)" % (
            v["metadata"]["namespace"], v["metadata"]["name"], v["metadata"].get("generation"),
            _seen_generation(v), (v.get("status") or {}).get("printableStatus"))
            for v in vms
            if _seen_generation(v) not in (v["metadata"].get("generation"), None)
            or (v.get("status") or {}).get("printableStatus") not in ("Running", "Stopped")]
        now = dict(("%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]), v["metadata"]["resourceVersion"])
                   for v in vms)
        changed = sorted(k for k, rv in now.items() if last.get("versions", {}).get(k) != rv)
        last["versions"], last["why"] = now, (pending or changed)[:5]
        return not pending and not changed and now

    try:
        return wait_for(quiet, timeout, "the VMs to settle", interval=1.0)
    except LabError as e:
        raise LabError("%s; still moving: %s" % (e, ", ".join(last.get("why") or []))) from e


def run_strategy_of(vm):
    return vm["spec"].get("runStrategy")


def own_eviction(vm):
    return vm["spec"]["template"]["spec"].get("evictionStrategy")


def phase(vmi):
    if vmi is None or vmi["metadata"].get("deletionTimestamp"):
        return None
    return (vmi.get("status") or {}).get("phase")


def uid(vmi):
    return vmi["metadata"]["uid"] if vmi else None


def wait_vmi(k8s, namespace, name, running=True, not_uid=None, timeout=120):
    """Until the VM's VMI runs (and, with ``not_uid``, is a new one), or is gone."""
    def done():
        vmi = get_vmi(k8s, namespace, name)
        if not running:
            return vmi is None
        return phase(vmi) == "Running" and uid(vmi) != not_uid and vmi

    return wait_for(done, timeout, "the VMI of %s/%s to be %s" % (namespace, name, "Running" if running else "gone"),
                    interval=0.3)


def wait_migratable_known(k8s, namespace, name, timeout=60):
    def known():
        vmi = get_vmi(k8s, namespace, name)
        conditions = ((vmi or {}).get("status") or {}).get("conditions") or []
        return vmi if any(c.get("type") == "LiveMigratable" for c in conditions) else None

    return wait_for(known, timeout, "the LiveMigratable condition of %s/%s" % (namespace, name), interval=0.3)


def launcher_pod(k8s, namespace, vmi):
    pods = client.CoreV1Api(k8s).list_namespaced_pod(
        namespace, label_selector="kubevirt.io=virt-launcher,kubevirt.io/created-by=%s" % uid(vmi)).items
    return pods[0] if pods else None


def evict(k8s, namespace, pod_name):
    """Ask the Eviction API; returns the HTTP status (201 granted, 429 refused, ...)."""
    try:
        client.CoreV1Api(k8s).create_namespaced_pod_eviction(pod_name, namespace, {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name, "namespace": namespace}})
        return 201
    except ApiException as exc:
        return exc.status


class Namespaces:
    """Extra namespaces for a test, deleted at the end."""

    def __init__(self, k8s):
        self.k8s = k8s
        self.names = []

    def create(self, prefix="vmcfg"):
        name = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
        client.CoreV1Api(self.k8s).create_namespace({"metadata": {"name": name}})
        self.names.append(name)
        return name

    def delete_all(self):
        for name in self.names:
            try:
                client.CoreV1Api(self.k8s).delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


class LocalModule:
    """What the module_utils functions use of a module, with a real client: for driving the logic
    in-process where a test must control something the module decides at run time."""

    def __init__(self, kubeconfig, params, defaults, check_mode=False, diff_mode=False):
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import resolve_settings
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import EventRecorder

        self.client = KubeClient(resolve_settings({"kubeconfig": kubeconfig}))
        self.params = dict(defaults)
        self.params.update(params)
        self.check_mode = check_mode
        self.diff_mode = diff_mode
        self.warnings = []
        self.events = EventRecorder(self.client, warn=self.warn, enabled=not check_mode)

    def warn(self, text):
        self.warnings.append(text)
