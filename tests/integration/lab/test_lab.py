"""Acceptance tests of the lab: the Kubernetes behaviour the collection relies on.

Run from the repository root: ``.venv/bin/python -m pytest tests/integration/lab``.
Waits are generous and nothing asserts on timing: the lab shares a small machine.
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab import network, nodes, processes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

pytest_plugins = ["lab.pytest_plugin"]

ROLLOUT_TIMEOUT = "300s"
WAIT = 300
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def deployment(name, replicas, labels=None):
    labels = labels or {"app": name}
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {name}
        spec:
          replicas: {replicas}
          selector:
            matchLabels: {json.dumps(labels)}
          template:
            metadata:
              labels: {json.dumps(labels)}
            spec:
              terminationGracePeriodSeconds: 5
              containers:
                - name: main
                  image: {PAUSE_IMAGE}
                  resources:
                    requests: {{cpu: 10m, memory: 16Mi}}
                  volumeMounts:
                    - {{name: scratch, mountPath: /scratch}}
              volumes:
                - {{name: scratch, emptyDir: {{}}}}
        """)


def apply(lab, namespace, manifest):
    lab.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)


def rollout(lab, namespace, kind_name):
    lab.kubectl("rollout", "status", "-n", namespace, kind_name, f"--timeout={ROLLOUT_TIMEOUT}")


def pods(k8s, namespace, selector):
    return client.CoreV1Api(k8s).list_namespaced_pod(namespace, label_selector=selector).items


def live_pods(k8s, namespace, selector):
    return [p for p in pods(k8s, namespace, selector) if p.metadata.deletion_timestamp is None]


def is_running_and_ready(pod):
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod.status.phase == "Running" and ready


def all_running(k8s, namespace, selector, count):
    current = live_pods(k8s, namespace, selector)
    return len(current) == count and all(is_running_and_ready(p) for p in current)


def lab_node_names(k8s):
    return {n.metadata.name for n in nodes.list_nodes(k8s)}


def worker_names(k8s):
    return sorted(
        n.metadata.name
        for n in nodes.list_nodes(k8s)
        if nodes.WORKER_ROLE in (n.metadata.labels or {})
    )


def test_all_nodes_ready_with_roles_and_capacity(k8s):
    all_nodes = nodes.list_nodes(k8s)
    control_plane = [n for n in all_nodes if nodes.CONTROL_PLANE_ROLE in n.metadata.labels]
    workers = [n for n in all_nodes if nodes.WORKER_ROLE in n.metadata.labels]
    assert control_plane and len(workers) >= 2
    assert len(control_plane) + len(workers) == len(all_nodes)
    for node in all_nodes:
        assert nodes.is_ready(node), node.metadata.name
        assert node.metadata.annotations[nodes.KWOK_ANNOTATION] == "fake"
        assert node.status.capacity["cpu"] == "32"
        assert node.status.capacity["memory"] == "256Gi"
        assert node.status.node_info.kubelet_version.startswith("v1.")
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
        assert "kwok.x-k8s.io/node" not in nodes.taint_keys(node)
    for node in control_plane:
        assert node.metadata.name.startswith("lab-cp-")
        assert {"key": nodes.CONTROL_PLANE_ROLE, "effect": "NoSchedule"} in [
            {"key": t.key, "effect": t.effect} for t in node.spec.taints
        ]
    for node in workers:
        assert node.metadata.name.startswith("lab-worker-")
        assert not node.spec.taints
    internal_ips = [
        a.address for n in all_nodes for a in n.status.addresses if a.type == "InternalIP"
    ]
    assert len(set(internal_ips)) == len(all_nodes)


def test_twenty_replica_deployment_runs_on_lab_nodes(lab, k8s, namespace):
    apply(lab, namespace, deployment("web", 20))
    rollout(lab, namespace, "deployment/web")

    wait_for(lambda: all_running(k8s, namespace, "app=web", 20), WAIT, "20 Running web pods")
    workers = set(worker_names(k8s))
    placed = {p.spec.node_name for p in live_pods(k8s, namespace, "app=web")}
    # The control-plane taint keeps ordinary pods on workers; the scheduler spreads them.
    assert placed <= workers
    assert len(placed) > 1
    for pod in live_pods(k8s, namespace, "app=web"):
        assert pod.status.pod_ip and pod.status.host_ip


def test_cordoned_node_receives_no_new_pods(lab, k8s, namespace, restore_nodes):
    cordoned = worker_names(k8s)[0]
    lab.kubectl("cordon", cordoned)

    apply(lab, namespace, deployment("spread", 12))
    rollout(lab, namespace, "deployment/spread")

    placed = [p.spec.node_name for p in live_pods(k8s, namespace, "app=spread")]
    assert len(placed) == 12
    assert cordoned not in placed


def test_pdb_is_computed_and_eviction_beyond_it_is_refused(lab, k8s, namespace):
    apply(lab, namespace, deployment("guarded", 3))
    rollout(lab, namespace, "deployment/guarded")
    apply(
        lab,
        namespace,
        textwrap.dedent("""\
            apiVersion: policy/v1
            kind: PodDisruptionBudget
            metadata:
              name: guarded
            spec:
              minAvailable: 3
              selector:
                matchLabels: {app: guarded}
            """),
    )
    policy = client.PolicyV1Api(k8s)

    def pdb_observed(disruptions_allowed):
        pdb = policy.read_namespaced_pod_disruption_budget("guarded", namespace)
        status = pdb.status
        return (
            status is not None
            and status.observed_generation == pdb.metadata.generation
            and status.current_healthy == 3
            and status.disruptions_allowed == disruptions_allowed
        )

    wait_for(lambda: pdb_observed(0), WAIT, "the PDB status to allow 0 disruptions")

    victim = live_pods(k8s, namespace, "app=guarded")[0].metadata.name
    with pytest.raises(ApiException) as refused:
        evict(k8s, namespace, victim)
    assert refused.value.status == 429
    assert "disruption budget" in str(refused.value.body)

    # Relax the budget: the controller recomputes it and the same eviction goes through.
    lab.kubectl(
        "patch",
        "pdb",
        "guarded",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"minAvailable":2}}',
    )
    wait_for(lambda: pdb_observed(1), WAIT, "the PDB status to allow 1 disruption")
    evict(k8s, namespace, victim)
    wait_for(
        lambda: victim not in {p.metadata.name for p in pods(k8s, namespace, "app=guarded")}
        and all_running(k8s, namespace, "app=guarded", 3),
        WAIT,
        "the evicted pod to be replaced",
    )


def evict(k8s, namespace, pod_name):
    client.CoreV1Api(k8s).create_namespaced_pod_eviction(
        pod_name,
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
        },
    )


def test_drain_moves_pods_elsewhere(lab, k8s, namespace, restore_nodes):
    apply(lab, namespace, deployment("movable", 8))
    rollout(lab, namespace, "deployment/movable")
    drained = live_pods(k8s, namespace, "app=movable")[0].spec.node_name

    lab.kubectl(
        "drain",
        drained,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        f"--timeout={ROLLOUT_TIMEOUT}",
    )

    assert client.CoreV1Api(k8s).read_node(drained).spec.unschedulable
    wait_for(
        lambda: all_running(k8s, namespace, "app=movable", 8),
        WAIT,
        "the ReplicaSet to re-create the drained pods",
    )
    placed = {p.spec.node_name for p in live_pods(k8s, namespace, "app=movable")}
    assert drained not in placed
    assert placed <= set(worker_names(k8s))


def test_daemonset_has_a_pod_on_every_node(lab, k8s, namespace):
    apply(
        lab,
        namespace,
        textwrap.dedent(f"""\
            apiVersion: apps/v1
            kind: DaemonSet
            metadata:
              name: agent
            spec:
              selector:
                matchLabels: {{app: agent}}
              template:
                metadata:
                  labels: {{app: agent}}
                spec:
                  tolerations:
                    - {{key: {nodes.CONTROL_PLANE_ROLE}, operator: Exists, effect: NoSchedule}}
                  containers:
                    - name: agent
                      image: {PAUSE_IMAGE}
            """),
    )
    rollout(lab, namespace, "daemonset/agent")

    expected = lab_node_names(k8s)
    wait_for(
        lambda: all_running(k8s, namespace, "app=agent", len(expected)),
        WAIT,
        "a Running agent pod per node",
    )
    assert {p.spec.node_name for p in live_pods(k8s, namespace, "app=agent")} == expected


def _status_line(lab, name):
    """The node's line of ``lab status``."""
    lines = [line for line in lab.cli("status", check=False).stdout.splitlines() if line.split()[:2] == ["node", name]]
    assert len(lines) == 1, lines
    return lines[0]


def _power_states(lab, name):
    """Every power state the node's machine reached, as its BMC logged them (lab/machines)."""
    with open(lab.paths.machines / lab_bmc.POWER_LOG) as log:
        return [entry["power_state"] for entry in map(json.loads, log) if entry["name"] == name]


def test_node_fail_and_recover(lab, k8s, restore_nodes):
    """node-fail: the node's machine crashes (powered on, nothing runs), the node turns NotReady and is tainted
    unreachable. node-recover: the machine is reset through its BMC and boots with a new boot ID; a node deleted
    while the machine was dead is registered again by its kubelet, as the lab made it, and becomes a KubeVirt
    node again. node-partition and node-heal: the heartbeat stops while the machine runs on, and the same boot
    goes on."""
    name = worker_names(k8s)[-1]
    core = client.CoreV1Api(k8s)
    machine = lab_bmc.Bmc(lab_bmc.load(lab.paths)[name])
    before = core.read_node(name)

    lab.cli("node-partition", name, "--no-wait")
    assert "partitioned" in _status_line(lab, name) and machine.power_state() == "On"
    lab.cli("node-heal", name)
    healed = core.read_node(name)
    assert nodes.is_recovered(healed) and "partitioned" not in _status_line(lab, name)
    assert (healed.metadata.uid, healed.status.node_info.boot_id) == (before.metadata.uid, before.status.node_info.boot_id)

    lab.cli("node-fail", name)

    node = core.read_node(name)
    assert nodes.ready_condition(node) != "True"
    assert nodes.UNREACHABLE_TAINT in nodes.taint_keys(node)
    effects = {t.effect for t in node.spec.taints if t.key == nodes.UNREACHABLE_TAINT}
    assert "NoExecute" in effects
    assert machine.power_state() == "On"  # a crash, not a power-off
    assert "machine dead" in _status_line(lab, name)

    # Deleted while its machine is dead: its kubelet registers it again when the machine boots.
    core.delete_node(name)
    wait_for(lambda: name not in lab_node_names(k8s), WAIT, f"node {name} to be deleted")
    powered = len(_power_states(lab, name))
    lab.cli("node-recover", name)

    node = core.read_node(name)
    assert _power_states(lab, name)[powered:] == ["Off", "On"] and machine.power_state() == "On"
    assert node.metadata.uid != before.metadata.uid
    assert node.status.node_info.boot_id not in (None, before.status.node_info.boot_id)
    registered = nodes.manifest(nodes.NodePlan(name, False, "", ""), "")
    assert registered["metadata"]["labels"].items() <= (node.metadata.labels or {}).items()
    assert node.metadata.annotations[nodes.KWOK_ANNOTATION] == nodes.KWOK_ANNOTATION_VALUE
    assert (node.spec.provider_id, node.spec.pod_cidr) == (before.spec.provider_id, before.spec.pod_cidr)
    assert [a.to_dict() for a in node.status.addresses] == [a.to_dict() for a in before.status.addresses]
    assert nodes.is_recovered(node) and "machine dead" not in _status_line(lab, name)
    wait_for(lambda: (core.read_node(name).metadata.labels or {}).get("kubevirt.io/schedulable") == "true", WAIT,
             f"node {name} to be a KubeVirt node again")


def bare_pod(name, node):
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": PAUSE_IMAGE}],
        },
    }


def pod_ready(core, namespace, name):
    pod = core.read_namespaced_pod(name, namespace)
    return {c.type: c.status for c in pod.status.conditions or []}.get("Ready")


def test_a_live_kubelet_puts_back_the_readiness_the_node_controller_took(lab, k8s, namespace, restore_nodes):
    """The node-lifecycle controller marks the pods of a node with a stale Lease not Ready
    (MarkPodsNotReady: Ready False, containers untouched). A kubelet that still runs writes
    its own status back; a dead machine's does not, until the machine boots again and its
    kubelet starts the pod again."""
    live, dead = worker_names(k8s)[:2]
    core = client.CoreV1Api(k8s)
    for name, node in (("on-live", live), ("on-dead", dead)):
        core.create_namespaced_pod(namespace, bare_pod(name, node))
        wait_for(lambda name=name: pod_ready(core, namespace, name) == "True", WAIT, f"pod {name} to be Ready")

    # What MarkPodsNotReady writes, on a node whose kubelet lives.
    pod = core.read_namespaced_pod("on-live", namespace)
    conditions = [{"type": c.type, "status": "False" if c.type == "Ready" else c.status,
                   "lastTransitionTime": c.last_transition_time.isoformat()}
                  for c in pod.status.conditions]
    core.patch_namespaced_pod_status("on-live", namespace, {"status": {"conditions": conditions}})
    assert pod_ready(core, namespace, "on-live") == "False"
    wait_for(lambda: pod_ready(core, namespace, "on-live") == "True", WAIT, "the kubelet to put Ready back")

    # A dead machine: the controller itself marks the pod not Ready, and it stays so, even when
    # kwok had taken up a status sync before the death (lab/dead_machines.py).
    lab.cli("node-fail", dead)
    wait_for(lambda: pod_ready(core, namespace, "on-dead") == "False", WAIT,
             "the node-lifecycle controller to mark the pod not Ready")
    deadline = time.monotonic() + 15  # beyond the kubelet's 10 s status sync
    while time.monotonic() < deadline:
        assert pod_ready(core, namespace, "on-dead") == "False", "a dead kubelet wrote a pod status"
        time.sleep(1)
    lab.cli("node-recover", dead)
    wait_for(lambda: pod_ready(core, namespace, "on-dead") == "True", WAIT,
             "the kubelet of the booted machine to run the pod again")


def test_restart_apiserver_keeps_port_and_cluster(lab, k8s):
    port = lab.settings.ports["kube-apiserver"]
    before = processes.tracked(lab.paths, "kube-apiserver")

    lab.restart_apiserver()

    after = processes.tracked(lab.paths, "kube-apiserver")
    assert after is not None and after.pid != before.pid
    assert lab.settings.ports["kube-apiserver"] == port
    assert network.port_in_use(port)
    # The cluster's data lives in etcd: nodes are still there and stay Ready.
    names = sorted(lab_node_names(k8s))
    nodes.wait_ready(k8s, names)
    assert "ok" in lab.kubectl("get", "--raw", "/readyz").stdout


def _component_child(record):
    """The component's own process under its restart loop (the loop's child, not its sleep)."""
    try:
        with open(f"/proc/{record.pid}/task/{record.pid}/children") as f:
            pids = [int(p) for p in f.read().split()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "sleep":
                    return pid
        except OSError:
            continue
    return None


def test_a_kubevirt_component_that_exits_is_restarted_as_its_pod_would_be(lab, k8s):
    """virt-controller exits on purpose when it loses its leader lease (an API server away
    longer than its renew deadline); in a cluster the kubelet restarts its container, and the lab
    does the same, so it leads again."""
    record = processes.tracked(lab.paths, "virt-controller")
    assert record is not None
    first = _component_child(record)
    assert first is not None, "virt-controller does not run under its restart loop"
    coordination = client.CoordinationV1Api(k8s)
    killed_at = datetime.datetime.now(datetime.timezone.utc)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: _component_child(record) not in (None, first), 60, "virt-controller to be started again")
    assert processes.tracked(lab.paths, "virt-controller") == record, "the restart loop itself ended"

    def leads_again():
        lease = coordination.read_namespaced_lease("virt-controller", "kubevirt")
        return lease.spec.renew_time is not None and lease.spec.renew_time > killed_at

    wait_for(leads_again, 120, "the restarted virt-controller to renew its leader lease")


def test_virt_api_keeps_its_temporary_directories_in_the_lab(lab):
    """virt-api makes a directory for its certificates in the temporary directory at every start
    and never removes it (kubevirt pkg/virt-api/api.go, os.MkdirTemp("", "certsdir")): in the
    lab's state directory, which `down` removes, never in the machine's /tmp."""
    record = processes.tracked(lab.paths, "virt-api")
    assert record is not None
    pid = _component_child(record)
    assert pid is not None, "virt-api does not run under its restart loop"
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    assert env.get(b"TMPDIR") == str(lab.paths.tmp / "virt-api").encode()
    assert list((lab.paths.tmp / "virt-api").glob("certsdir*")), "virt-api made no certsdir in its TMPDIR"
    assert lab.paths.tmp in lab.paths.cluster_files()


def test_audit_log_records_requests_with_user_agent(lab):
    lab.kubectl("get", "nodes")
    events = []
    with open(lab.paths.audit_log) as log:
        for line in log:
            events.append(json.loads(line))
    assert events
    assert all(e["level"] == "Metadata" for e in events)
    kubectl_events = [e for e in events if e.get("userAgent", "").startswith("kubectl")]
    assert kubectl_events
    assert any(
        e["objectRef"].get("resource") == "nodes" for e in kubectl_events if "objectRef" in e
    )
    assert "requestObject" not in kubectl_events[-1]


def test_second_lab_runs_alongside_up_twice_then_down(lab, tmp_path):
    """A second lab in its own state dir: parallel labs, idempotent up, clean down."""
    state_dir = tmp_path / "second-lab"
    paths = LabPaths(state_dir)
    try:
        lab.cli("up", "--nodes", "1", "--no-kubevirt", state_dir=state_dir)
        first = {n: processes.tracked(paths, n) for n in processes.recorded_names(paths)}
        ports = json.loads(paths.settings.read_text())["ports"]
        assert ports != lab.settings.ports
        assert all(first.values())

        again = lab.cli("up", "--nodes", "1", "--no-kubevirt", state_dir=state_dir)
        assert "starting" not in again.stderr
        second = {n: processes.tracked(paths, n) for n in processes.recorded_names(paths)}
        assert second == first

        second_nodes = subprocess.run(
            ["kubectl", f"--kubeconfig={paths.kubeconfig}", "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert sorted(second_nodes) == ["node/lab-cp-1", "node/lab-worker-1"]
        assert lab.cli("status", state_dir=state_dir).returncode == 0
    finally:
        lab.cli("down", state_dir=state_dir)

    for record in first.values():
        assert not processes.is_running(record)
    for name, port in ports.items():
        assert not network.port_in_use(port), f"{name} still listens on {port}"
    assert not paths.kubeconfig.exists()
    assert lab.cli("status", check=False, state_dir=state_dir).returncode == 1
    lab.cli("down", state_dir=state_dir)  # down twice is fine too
    # The session lab was not touched.
    assert lab.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_labs_started_side_by_side_never_choose_the_same_port(tmp_path):
    """The ports of labs started at the same moment (the test tiers run two streams of labs)
    are reserved machine-wide between choosing and binding: processes choosing at once, each
    again and again after releasing its sockets, never get a port twice (600 ports: without the
    reservations the kernel's random choices would repeat one almost surely)."""
    reservations = str(tmp_path / "ports.json")
    script = ("import sys; from lab import network\n"
              "for _ in range(5): print(' '.join(map(str, network.free_ports(20, sys.argv[1]))))")
    procs = [subprocess.Popen([sys.executable, "-c", script, reservations], stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    chosen = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert len(chosen) == 600 and len(set(chosen)) == 600


def test_the_api_server_refuses_every_status_write_of_a_dead_machines_kubelet(lab, k8s, namespace, restore_nodes):
    """A dead machine writes nothing, ever: from the machine's death until it boots again the API server
    refuses kwok's status writes for the node and its pods (lab/dead_machines.py), whatever kwok
    had already taken up. Once the machine has booted they go through again."""
    node = worker_names(k8s)[2]
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod(namespace, bare_pod("on-dead-machine", node))
    wait_for(lambda: pod_ready(core, namespace, "on-dead-machine") == "True", WAIT, "the pod to be Ready")
    kwok = client.CoreV1Api(nodes.api_client(lab.paths.component_kubeconfig("kwok")))
    pod_status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    node_status = {"status": {"nodeInfo": {"bootID": "written-by-a-dead-kubelet"}}}
    lab.cli("node-fail", node, "--no-wait")
    for write in (lambda: kwok.patch_namespaced_pod_status("on-dead-machine", namespace, pod_status),
                  lambda: kwok.patch_node_status(node, node_status)):
        with pytest.raises(ApiException) as refused:
            write()
        assert refused.value.status == 422 and "its kubelet writes nothing" in refused.value.body
    assert core.read_node(node).status.node_info.boot_id != "written-by-a-dead-kubelet"
    lab.cli("node-recover", node, "--no-wait")
    kwok.patch_namespaced_pod_status("on-dead-machine", namespace, pod_status)
