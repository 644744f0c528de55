"""Workloads for the reliability tests: VMs of every kind the drain treats differently,
Deployments guarded by PodDisruptionBudgets, and waits for them."""

import json

import threading

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from lab.wait import wait_for

GROUP, VERSION = "kubevirt.io", "v1"
FAIL_MIGRATION = "kubevirt-ops.lab/fail-migration"


def vm_body(namespace, name, run_strategy="Always", eviction="LiveMigrate", migratable=True, memory="1Gi",
            annotations=None, running=None, node_selector=None, nodes=None, disk=None, labels=None, affinity=None):
    """A VirtualMachine. ``disk``: the access mode of a PVC as its root disk (a non-``migratable`` VM gets a
    ReadWriteOnce one); ``affinity``: added to the node affinity ``nodes`` makes."""
    disk = disk or (None if migratable else "ReadWriteOnce")
    spec = {
        "domain": {"devices": {}, "resources": {"requests": {"memory": memory, "cpu": "100m"}}},
        "evictionStrategy": eviction,
    }
    if eviction is None:
        spec.pop("evictionStrategy")
    if disk:
        spec["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": name + "-root"}}]
        spec["domain"]["devices"]["disks"] = [{"name": "root", "disk": {"bus": "virtio"}}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if nodes or affinity:
        spec["affinity"] = dict(only_on(nodes) if nodes else {}, **(affinity or {}))
    labels = dict(labels or {}, **{"kubevirt-ops.test/vm": name})
    body = {
        "apiVersion": "%s/%s" % (GROUP, VERSION),
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {}),
                     "labels": labels},
        "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}},
    }
    if running is not None:
        body["spec"]["running"] = running
    elif run_strategy:
        body["spec"]["runStrategy"] = run_strategy
    return body


def only_on(nodes):
    """Required node affinity: these nodes and no other."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}}}


def create_vm(k8s, namespace, name, **kwargs):
    """A VM; one with a ``disk`` (a non-migratable one: ReadWriteOnce, DisksNotLiveMigratable) gets its PVC."""
    disk = kwargs.get("disk") or (None if kwargs.get("migratable", True) else "ReadWriteOnce")
    if disk:
        client.CoreV1Api(k8s).create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": name + "-root"},
            "spec": {"accessModes": [disk], "resources": {"requests": {"storage": "1Gi"}}},
        })
    return client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "virtualmachines", vm_body(namespace, name, **kwargs))


def get_vmi(k8s, namespace, name):
    try:
        return client.CustomObjectsApi(k8s).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "virtualmachineinstances", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def vmis(k8s, namespace=None):
    custom = client.CustomObjectsApi(k8s)
    if namespace:
        data = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances")
    else:
        data = custom.list_cluster_custom_object(GROUP, VERSION, "virtualmachineinstances")
    return data.get("items") or []


def vmi_running(vmi):
    return bool(vmi) and (vmi.get("status") or {}).get("phase") == "Running" and \
        not (vmi.get("metadata") or {}).get("deletionTimestamp")


def vmi_migratable_known(vmi):
    return any(c.get("type") == "LiveMigratable" for c in (vmi.get("status") or {}).get("conditions") or [])


def wait_vms_running(k8s, namespace, names, timeout=180):
    """Until every named VM's VMI is Running (with its LiveMigratable condition set)."""
    def ready():
        found = dict(((v["metadata"]["name"]), v) for v in vmis(k8s, namespace))
        return all(vmi_running(found.get(n)) and vmi_migratable_known(found[n]) for n in names)

    wait_for(ready, timeout, "VMs %s in %s to run" % (", ".join(names), namespace))
    return dict((v["metadata"]["name"], v) for v in vmis(k8s, namespace))


def vm_nodes(k8s, namespace):
    """{vm name: node} of the running VMIs of a namespace."""
    return dict((v["metadata"]["name"], (v.get("status") or {}).get("nodeName"))
                for v in vmis(k8s, namespace) if vmi_running(v))


def annotate_vm(k8s, namespace, name, annotations):
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "virtualmachines", name, {"metadata": {"annotations": annotations}})
    vmi = get_vmi(k8s, namespace, name)
    if vmi:
        client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "virtualmachineinstances", name, {"metadata": {"annotations": annotations}})


def pod_ready(pod):
    """Whether a pod runs and its Ready condition is True."""
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def create_guarded_deployment(k8s, namespace, name, replicas=3, min_available=2, node_selector=None, nodes=None):
    """A Deployment and a PodDisruptionBudget over its pods."""
    labels = {"app": name}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                         "terminationGracePeriodSeconds": 0}}
    if node_selector:
        template["spec"]["nodeSelector"] = node_selector
    if nodes:
        template["spec"]["affinity"] = only_on(nodes)
    client.AppsV1Api(k8s).create_namespaced_deployment(namespace, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template},
    })
    client.PolicyV1Api(k8s).create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    })

    def ready():
        pods = client.CoreV1Api(k8s).list_namespaced_pod(namespace, label_selector="app=%s" % name).items
        return len([p for p in pods if pod_ready(p)]) >= replicas

    wait_for(ready, 120, "Deployment %s/%s to be ready" % (namespace, name))


def create_node_agent(k8s, namespace, name):
    """A DaemonSet: a pod on every worker, which a drain leaves where it is."""
    labels = {"app": name}
    client.AppsV1Api(k8s).create_namespaced_daemon_set(namespace, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
                     "terminationGracePeriodSeconds": 0}}},
    })


def create_scratch_deployment(k8s, namespace, name, nodes):
    """A Deployment of one pod with an emptyDir volume (scratch data a drain deletes), on ``nodes`` only."""
    labels = {"app": name}
    client.AppsV1Api(k8s).create_namespaced_deployment(namespace, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                     "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                     "volumes": [{"name": "scratch", "emptyDir": {}}],
                     "affinity": only_on(nodes), "terminationGracePeriodSeconds": 0}}},
    })


def not_whole(k8s, namespace, workers):
    """What is missing from the Deployments and DaemonSets of ``namespace`` now: a Deployment with fewer ready
    pods than its replicas, a DaemonSet without a ready pod on each of ``workers`` (none tainted or cordoned)."""
    apps = client.AppsV1Api(k8s)
    pods = client.CoreV1Api(k8s).list_namespaced_pod(namespace).items
    missing = []
    for deployment in apps.list_namespaced_deployment(namespace).items:
        ready = deployment.status.ready_replicas or 0
        if ready < deployment.spec.replicas:
            missing.append("Deployment %s: %d of %d pods ready" % (deployment.metadata.name, ready,
                                                                   deployment.spec.replicas))
    for daemon_set in apps.list_namespaced_daemon_set(namespace).items:
        selector = daemon_set.spec.selector.match_labels.items()
        on = set(p.spec.node_name for p in pods if selector <= (p.metadata.labels or {}).items() and pod_ready(p))
        without = sorted(set(workers) - on)
        if without:
            missing.append("DaemonSet %s: no ready pod on %s" % (daemon_set.metadata.name, ", ".join(without)))
    return missing


# The lab's HyperConverged resource (group, version, namespace, plural, name).
HCO = ("hco.kubevirt.io", "v1beta1", "kubevirt-hyperconverged", "hyperconvergeds", "kubevirt-hyperconverged")


def hyperconverged(k8s):
    """The lab's HyperConverged resource as it is now."""
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(*HCO)


def node_names(k8s, role="worker"):
    nodes = client.CoreV1Api(k8s).list_node(label_selector="node-role.kubernetes.io/%s" % role).items
    return sorted(n.metadata.name for n in nodes)


def cordoned(k8s):
    return sorted(n.metadata.name for n in client.CoreV1Api(k8s).list_node().items if n.spec.unschedulable)


def dumps(obj):
    return json.dumps(obj, indent=1, sort_keys=True, default=str)


def wait_for_default_service_account(k8s, namespace, timeout=120):
    """Pods (launcher pods too) are refused in a new namespace until its default ServiceAccount exists."""
    core = client.CoreV1Api(k8s)

    def exists():
        try:
            core.read_namespaced_service_account("default", namespace)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    wait_for(exists, timeout, "the default ServiceAccount of %s" % namespace)


def delete_namespace(k8s, namespace, timeout=180):
    """Delete a namespace and wait until it is gone, so that its pods leave the nodes before the next test."""
    core = client.CoreV1Api(k8s)
    try:
        core.delete_namespace(namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise

    def gone():
        try:
            core.read_namespace(namespace)
            return False
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise

    wait_for(gone, timeout, "namespace %s to be deleted" % namespace)


def wait_no_namespace_terminating(k8s, timeout=180):
    """Until no namespace is being deleted (an earlier test's VMs would vanish in the middle of ours)."""
    core = client.CoreV1Api(k8s)
    wait_for(lambda: not [n for n in core.list_namespace().items if n.metadata.deletion_timestamp], timeout,
             "namespaces being deleted to be gone")


def remove_node(k8s, name):
    """Delete a node a test made, dead or alive (the dead machines' record of it goes with it, and its Lease);
    gone already is fine."""
    try:
        client.CoreV1Api(k8s).delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def vms_start_on(k8s, namespace, pair, names, memory, guarded=False, annotations=None):
    """VMs that start on the first node of ``pair`` and may go to the second one only; with
    ``guarded`` also a Deployment "guarded" (3 pods, PodDisruptionBudget minAvailable 2) there.
    ``annotations``: {VM name: annotations} for some of them.

    The second node is cordoned while they start. A kube-scheduler whose node watch is still
    reconnecting (right after an API server restart) may not have seen the cordon yet and place a VM
    there: such a VM's VMI is deleted (its run strategy starts it again) until every VM runs on the
    first node."""
    first, second = pair
    core = client.CoreV1Api(k8s)
    core.patch_node(second, {"spec": {"unschedulable": True}})
    try:
        for name in names:
            create_vm(k8s, namespace, name, memory=memory, nodes=[first, second],
                      annotations=(annotations or {}).get(name))
        if guarded:
            create_guarded_deployment(k8s, namespace, "guarded", replicas=3, min_available=2, nodes=[first, second])
        wait_vms_running(k8s, namespace, names, timeout=300)

        def all_on_first():
            placed = vm_nodes(k8s, namespace)
            misplaced = [name for name in names if name in placed and placed[name] != first]
            for name in misplaced:
                try:
                    client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
                        GROUP, VERSION, namespace, "virtualmachineinstances", name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            return not misplaced and all(name in placed for name in names)

        wait_for(all_on_first, 300, "VMs %s to run on %s" % (", ".join(names), first), interval=2)
    finally:
        core.patch_node(second, {"spec": {"unschedulable": None}})


def migrations(k8s, namespace):
    return client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstancemigrations")["items"]


FINISHED_MIGRATION_PHASES = ("Succeeded", "Failed")


class MigrationRecorder:
    """Every state of every migration of the namespace (they go with their VMI when it is
    deleted), from a watch, as an operator running `kubectl get vmim -w` sees them.

    ``seen``: uid -> its latest state (a Failed one kept once seen); ``unfinished``: the uids not
    Succeeded or Failed yet; ``most_unfinished``: the most of them at once, in the order the API
    server sent the events."""

    def __init__(self, k8s, namespace):
        self.k8s, self.namespace = k8s, namespace
        self.seen = {}
        self.unfinished = set()
        self.most_unfinished = 0
        self._watch = watch.Watch()
        self._stopped = False
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _api(self):
        return client.CustomObjectsApi(self.k8s)

    def _run(self):
        while not self._stopped:
            listed = self._api().list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "virtualmachineinstancemigrations")
            self.unfinished &= set(item["metadata"]["uid"] for item in listed["items"])
            for item in listed["items"]:
                self._record(item)
            self._started.set()
            try:
                for event in self._watch.stream(self._api().list_namespaced_custom_object, GROUP, VERSION,
                                                self.namespace, "virtualmachineinstancemigrations",
                                                resource_version=listed["metadata"]["resourceVersion"],
                                                timeout_seconds=60):
                    self._record(event["object"], deleted=event["type"] == "DELETED")
            except (ProtocolError, ApiException):
                pass  # the watch ended early: list again (nothing between is lost, Failed is final)

    def _record(self, item, deleted=False):
        uid = item["metadata"]["uid"]
        known = self.seen.get(uid)
        if known is None or failed_at(known) is None or failed_at(item):
            self.seen[uid] = item
        if deleted or (item.get("status") or {}).get("phase") in FINISHED_MIGRATION_PHASES:
            self.unfinished.discard(uid)
        else:
            self.unfinished.add(uid)
        self.most_unfinished = max(self.most_unfinished, len(self.unfinished))

    def __enter__(self):
        self._thread.start()
        assert self._started.wait(30), "the migrations of %s could not be listed" % self.namespace
        return self

    def __exit__(self, *exc):
        self._stopped = True
        self._watch.stop()

    def of(self, vmi_name):
        return [m for m in self.seen.values() if (m.get("spec") or {}).get("vmiName") == vmi_name]


def failed_at(migration):
    """When virt-controller recorded the migration as Failed (its phase transition timestamp)."""
    for entry in (migration.get("status") or {}).get("phaseTransitionTimestamps") or []:
        if entry.get("phase") == "Failed":
            return entry.get("phaseTransitionTimestamp")
    return None


def wait_node_pods_ready(k8s, node, timeout=300):
    """Until every pod bound to ``node`` that has not ended is Ready: a node that came back (its kubelet
    alive again, its machine booted) puts back the readiness the node-lifecycle controller took from its
    pods within its status sync, after the node itself is Ready."""
    core = client.CoreV1Api(k8s)

    def ready():
        pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
        return all(pod_ready(p) for p in pods
                   if p.status.phase not in ("Succeeded", "Failed") and not p.metadata.deletion_timestamp)

    wait_for(ready, timeout, "the pods of node %s to be Ready again" % node, interval=1)
