"""The lab's nodes: Node objects that kwok keeps alive like kubelets would.

Control-plane nodes ``lab-cp-1..M`` carry the control-plane role label and taint;
workers ``lab-worker-1..N`` the worker role label. Capacity and addresses look like
bare-metal KubeVirt hosts; the addresses are only data.
"""

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lab import binaries, dead_machines, network
from lab import settings as lab_settings
from lab.errors import LabError
from lab.standins import handler_nodes
from lab.wait import wait_for

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
WORKER_ROLE = "node-role.kubernetes.io/worker"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NODE_LEASE_NAMESPACE = handler_nodes.NODE_LEASE_NAMESPACE
# Holders of a silent node's Lease; nobody renews it, and its duration keeps kwok from taking it back.
# A dead machine's (lab/standins/machines.py): crashed (``node-fail``) or powered off.
CRASHED_HOLDER = handler_nodes.FAILED_LEASE_HOLDER
MACHINE_OFF_HOLDER = handler_nodes.MACHINE_OFF_LEASE_HOLDER
DEAD_MACHINE_HOLDERS = (CRASHED_HOLDER, MACHINE_OFF_HOLDER)
# A partitioned node's (``node-partition``, lab/cluster.py).
PARTITION_HOLDER = handler_nodes.PARTITIONED_LEASE_HOLDER

CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "250", "ephemeral-storage": "900Gi"}
# What a kubelet would leave for pods after system and kube reservations.
ALLOCATABLE = {"cpu": "31500m", "memory": "250Gi", "pods": "250", "ephemeral-storage": "850Gi"}

READY_TIMEOUT = 180
# Labs with this many nodes to create create them from several threads.
PARALLEL_CREATE_FROM = 50
CREATE_WORKERS = 8
# node-monitor-grace-period (20s) plus the controller's sync period and slack.
FAIL_TIMEOUT = 180


@dataclass(frozen=True)
class NodePlan:
    name: str
    control_plane: bool
    ip: str
    pod_cidr: str
    provider_id: str = ""


def metal3_provider_id(name):
    """The providerID of a worker that is a Metal3 host: Cluster API Provider Metal3 writes
    ``metal3://<namespace>/<BareMetalHost>/<Metal3Machine>`` (the lab names all three after the node)."""
    from lab import metal3

    return f"metal3://{metal3.NAMESPACE}/{name}/{name}"


def plan(control_plane_nodes, workers, metal3_workers=None):
    """The lab's nodes; the first ``metal3_workers`` workers are Metal3 hosts (their providerID names their
    BareMetalHost), every other node's providerID is ``kwok://<name>``."""
    nodes = [
        NodePlan(f"lab-cp-{i}", True, network.control_plane_node_ip(i), "")
        for i in range(1, control_plane_nodes + 1)
    ]
    nodes += [
        NodePlan(f"lab-worker-{i}", False, network.worker_node_ip(i), "")
        for i in range(1, workers + 1)
    ]
    metal3_names = {f"lab-worker-{i}" for i in range(1, (metal3_workers or 0) + 1)}
    return [
        NodePlan(n.name, n.control_plane, n.ip, network.node_pod_cidr(ordinal),
                 metal3_provider_id(n.name) if n.name in metal3_names else f"kwok://{n.name}")
        for ordinal, n in enumerate(nodes, start=1)
    ]


def manifest(node, kubelet_version):
    role = CONTROL_PLANE_ROLE if node.control_plane else WORKER_ROLE
    spec = {
        "podCIDR": node.pod_cidr,
        "podCIDRs": [node.pod_cidr],
        "providerID": node.provider_id or f"kwok://{node.name}",
    }
    if node.control_plane:
        spec["taints"] = [{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            # No kwok NoSchedule taint: ordinary pods must land on these nodes.
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {
                role: "",
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            },
        },
        "spec": spec,
        "status": _status(node, kubelet_version),
    }


def _status(node, kubelet_version):
    return {
        "capacity": dict(CAPACITY),
        "allocatable": dict(ALLOCATABLE),
        "addresses": [
            {"type": "InternalIP", "address": node.ip},
            {"type": "Hostname", "address": node.name},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "kwok simulated node",
            "kubeletVersion": kubelet_version,
            # Deprecated and ignored, but the python client model still requires it.
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "kwok",
            "kernelVersion": "kwok",
            "machineID": node.name,
            "systemUUID": node.name,
            "bootID": node.name,
        },
    }


def api_client(kubeconfig):
    """A kubernetes ApiClient for the lab's admin kubeconfig."""
    return config.new_client_from_config(config_file=str(kubeconfig))


def ensure(api, nodes, kubelet_version):
    """Create the planned nodes that do not exist yet; return their names (created here, or registered since the
    list by the kubelet of a machine booting)."""
    core = client.CoreV1Api(api)
    existing = {n.metadata.name for n in core.list_node().items}
    missing = [node for node in nodes if node.name not in existing]
    # A dead machine's node deleted and now created again is a new machine.
    listed = core.read_namespaced_config_map(dead_machines.NAME, dead_machines.NAMESPACE).data or {}
    mark_dead(api, [node.name for node in missing if node.name in listed], False)

    def create(node):
        body = manifest(node, kubelet_version)
        # The response is not deserialized: with hundreds of nodes that costs more than the
        # request itself.
        try:
            result = core.create_node(body, _preload_content=False)
        except ApiException as e:
            if e.status != 409:
                raise
            # Registered since the list, with this same manifest, by the kubelet of its machine booting
            # (lab/standins/machines.py ``boot``): there, as planned.
            return node.name
        status = json.loads(result.data).get("status") or {}
        # Status sent with a create is kept today; should it ever be dropped, set it
        # explicitly, since kwok keeps whatever capacity the node already reports.
        if not status.get("capacity"):
            core.patch_node_status(node.name, {"status": body["status"]})
        return node.name

    if len(missing) < PARALLEL_CREATE_FROM:
        return [create(node) for node in missing]
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        return list(pool.map(create, missing))


def wait_ready(api, names, timeout=READY_TIMEOUT):
    shown = ", ".join(names) if len(names) <= 10 else f"{len(names)} nodes ({names[0]}, ...)"
    wait_for(
        lambda: _all(api, names, is_ready),
        timeout,
        f"nodes {shown} to become Ready",
        # Listing a thousand nodes takes a second or two of this process's CPU.
        interval=0.5 if len(names) < PARALLEL_CREATE_FROM else 5,
    )


def list_nodes(api):
    return sorted(client.CoreV1Api(api).list_node().items, key=lambda n: n.metadata.name)


def failed_names(api):
    """Nodes whose machine is dead (crashed with ``node-fail``, or powered off): their Lease held for the dead."""
    return _held_by(api, DEAD_MACHINE_HOLDERS)


def partitioned_names(api):
    """Nodes cut off the network with ``node-partition``."""
    return _held_by(api, (PARTITION_HOLDER,))


def _held_by(api, holders):
    leases = client.CoordinationV1Api(api).list_namespaced_lease(NODE_LEASE_NAMESPACE).items
    return sorted(lease.metadata.name for lease in leases if lease.spec.holder_identity in holders)


def lease_holder(api, name):
    """The holder of the node's Lease, or None when it has none (e.g. given back at boot)."""
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(name, NODE_LEASE_NAMESPACE).spec.holder_identity
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def boot_id(api, name):
    """The node's ``status.nodeInfo.bootID``, or None when there is no such node."""
    try:
        node = client.CoreV1Api(api).read_node(name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return node.status.node_info.boot_id if node.status and node.status.node_info else None


def booted(api, name, before):
    """Whether the node's kubelet is back after a boot: the node is registered with a boot ID other than
    ``before``, the API server takes its writes and its Lease is not held for the dead any more."""
    try:
        current = boot_id(api, name)
        return (current not in (None, before) and lease_holder(api, name) not in DEAD_MACHINE_HOLDERS
                and not writes_refused(api, name))
    except (ApiException, urllib3.exceptions.HTTPError):
        return False  # e.g. the apiserver is restarting


def registration(paths, name):
    """The Node the kubelet of the lab's node ``name`` registers when its machine boots (its labels, taints,
    capacity and addresses, as ``up`` creates it), or None for a node the lab did not plan."""
    settings = lab_settings.load(paths)
    if settings is None:
        return None
    for node in plan(settings.control_plane_nodes, settings.workers, settings.metal3_workers):
        if node.name == name:
            return manifest(node, binaries.kubernetes_version(settings.bin_dir))
    return None


def ensure_dead_machine_policy(api):
    """The policy that keeps a dead machine's kubelet (kwok) from writing, and its empty list
    (lab/dead_machines.py)."""
    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    for create, body in (
        (admission.create_validating_admission_policy, dead_machines.POLICY),
        (admission.create_validating_admission_policy_binding, dead_machines.BINDING),
        (lambda b: core.create_namespaced_config_map(dead_machines.NAMESPACE, b), dead_machines.LIST),
    ):
        try:
            create(body)
        except ApiException as e:
            if e.status != 409:
                raise


def mark_dead(api, names, dead):
    """List (or strike) the nodes as ones whose machine is dead, effective on return."""
    core = client.CoreV1Api(api)

    def patch_list(patch):
        core.patch_namespaced_config_map(dead_machines.NAME, dead_machines.NAMESPACE, patch)

    dead_machines.mark(patch_list, lambda body: _probe_admitted(core, body), names, dead)


def writes_refused(api, name):
    """Whether the API server refuses the kubelet's writes for the node (lab/dead_machines.py)."""
    return not _probe_admitted(client.CoreV1Api(api), dead_machines.probe(name))


def _probe_admitted(core, body):
    try:
        core.create_namespaced_config_map(dead_machines.NAMESPACE, body, dry_run="All")
        return True
    except ApiException as e:
        if dead_machines.refused(e.status, e.body):
            return False
        raise


def ready_condition(node):
    for condition in (node.status and node.status.conditions) or []:
        if condition.type == "Ready":
            return condition.status
    return None


def taint_keys(node):
    return {t.key for t in (node.spec.taints or [])}


def is_ready(node):
    return ready_condition(node) == "True" and NOT_READY_TAINT not in taint_keys(node)


def is_failed(node):
    return ready_condition(node) != "True" and UNREACHABLE_TAINT in taint_keys(node)


def is_recovered(node):
    return is_ready(node) and UNREACHABLE_TAINT not in taint_keys(node)


def get_node(api, name):
    """The node, or a LabError naming it."""
    try:
        return client.CoreV1Api(api).read_node(name)
    except ApiException as e:
        if e.status == 404:
            raise LabError(f"no node named {name}") from e
        raise


def _all(api, names, predicate):
    try:
        by_name = {n.metadata.name: n for n in client.CoreV1Api(api).list_node().items}
    except (ApiException, urllib3.exceptions.HTTPError):
        return False  # e.g. the apiserver is restarting
    return all(name in by_name and predicate(by_name[name]) for name in names)
