"""Bad input on the lab: every module and role, given something wrong, fails with one clear
sentence naming the object and the cause, exits non-zero, and changes nothing: the
resourceVersions of nodes, VMs, VMIs, pods, PDBs, HCO, KubeVirt, NodeMaintenances and
Leases are the same before and after.

The cases without a cluster are in tests/unit/plugins/test_bad_input_matrix.py.
"""

import base64
import contextlib
import json
import os
import socket
import time
import uuid

import pytest
import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from kubernetes import client

import identities
import reliability
import runs
import safety
import workloads
from lab.certs import Pki, _ensure_ca
from lab.wait import wait_for

REPO = identities.REPO
ROLLING = os.path.join(REPO, "playbooks", "rolling_maintenance.yml")
DECOMMISSION = os.path.join(REPO, "playbooks", "decommission_node.yml")


# -- the cluster the cases run against ----------------------------------------------------------

@pytest.fixture(scope="module")
def world(k8s, lab, tmp_path_factory, operator_identity, planner_identity):
    """VMs that make the cases meaningful, and kubeconfigs that are wrong in every way."""
    core = client.CoreV1Api(k8s)
    namespace = "kvops-bad-%s" % uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": namespace}})
    directory = tmp_path_factory.mktemp("bad-input")
    try:
        workloads.wait_for_default_service_account(k8s, namespace)
        workloads.create_vm(k8s, namespace, "ok-vm")
        workloads.create_vm(k8s, namespace, "rwo-vm", migratable=False)
        workloads.create_vm(k8s, namespace, "once-vm", run_strategy="Once")
        workloads.wait_vms_running(k8s, namespace, ["ok-vm", "rwo-vm", "once-vm"])
        world = {
            "namespace": namespace,
            "blocked_node": workloads.vm_nodes(k8s, namespace)["rwo-vm"],
            "free_node": [n for n in workloads.node_names(k8s)
                          if n != workloads.vm_nodes(k8s, namespace)["rwo-vm"]][0],
            "kubeconfigs": bad_kubeconfigs(k8s, lab, directory),
            "planner": planner_identity.kubeconfig,
            "operator": operator_identity.kubeconfig,
        }
        yield world
    finally:
        workloads.delete_namespace(k8s, namespace)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def expired_token(lab, k8s, identity):
    """A ServiceAccount token signed by the lab's own key, valid in every way but expired an hour ago."""
    sa = client.CoreV1Api(k8s).read_namespaced_service_account(identity.name, identity.namespace)
    with open(os.path.join(str(lab.state_dir), "pki", "sa.key"), "rb") as handle:
        key = serialization.load_pem_private_key(handle.read(), None)
    now = int(time.time())
    claims = {
        "iss": "https://kubernetes.default.svc.cluster.local", "aud": ["https://kubernetes.default.svc.cluster.local"],
        "sub": identity.username, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600,
        "kubernetes.io": {"namespace": identity.namespace,
                          "serviceaccount": {"name": identity.name, "uid": sa.metadata.uid}},
    }
    head = _b64url(json.dumps({"alg": "ES256", "typ": "JWT"}).encode())
    body = _b64url(json.dumps(claims).encode())
    r, s = utils.decode_dss_signature(key.sign(("%s.%s" % (head, body)).encode(), ec.ECDSA(hashes.SHA256())))
    return "%s.%s.%s" % (head, body, _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")))


def bad_kubeconfigs(k8s, lab, directory):
    server, ca_data = identities.lab_cluster(lab.kubeconfig)
    out = {}
    # A token of a ServiceAccount that was deleted since.
    gone = identities.create_identity(k8s, lab.kubeconfig, directory, prefix="kvops-gone")
    out["expired"] = identities.write_kubeconfig(directory / "expired.kubeconfig", server, ca_data,
                                                 {"token": expired_token(lab, k8s, gone)})
    out["deleted_account"] = gone.kubeconfig
    identities.delete_identity(k8s, gone)
    out["invalid_token"] = identities.write_kubeconfig(directory / "invalid.kubeconfig", server, ca_data,
                                                       {"token": "not-a-token-%s" % uuid.uuid4().hex})
    wrong = Pki(directory / "wrong-ca")
    wrong.directory.mkdir()
    _ensure_ca(wrong, "ca", "not-the-lab-ca")
    wrong_ca = base64.b64encode(wrong.ca_cert.read_bytes()).decode()
    with open(lab.kubeconfig) as handle:
        admin = yaml.safe_load(handle)
    admin_user = admin["users"][0]["user"]
    out["wrong_ca"] = identities.write_kubeconfig(directory / "wrong-ca.kubeconfig", server, wrong_ca, admin_user)
    out["unreachable"] = identities.write_kubeconfig(directory / "unreachable.kubeconfig",
                                                     "https://127.0.0.1:%d" % _free_port(), ca_data, admin_user)
    malformed = directory / "malformed.kubeconfig"
    malformed.write_text("apiVersion: v1\nclusters: [{name: lab, cluster: {server: https://127.0.0.1\n")
    out["malformed"] = str(malformed)
    return out


# -- the cases ------------------------------------------------------------------------------------

class Case:
    def __init__(self, name, group, module=None, args=None, playbook=None, extra_vars=None, names=(),
                 kubeconfig=None, setup=None, check=False):
        self.name = name
        self.group = group
        self.module = module
        self.args = args or {}
        self.playbook = playbook
        self.extra_vars = extra_vars or {}
        self.names = names
        self.kubeconfig = kubeconfig  # a key of world["kubeconfigs"], "planner", or None (the lab admin)
        self.setup = setup
        self.check = check

    def __repr__(self):
        return self.name


NS = "{ns}"  # replaced by the test namespace
BLOCKED = "{blocked}"  # replaced by the node of the VM that cannot migrate
FREE = "{free}"  # replaced by a worker without that VM


def cases():
    node_ops = [
        Case("node_maintenance: unknown node", "node_maintenance", "node_maintenance", {"name": "no-such-node"},
             names=["no-such-node"]),
        Case("node_maintenance: control-plane node (etcd quorum)", "node_maintenance", "node_maintenance",
             {"name": "lab-cp-1"}, names=["lab-cp-1", "quorum"]),
        Case("node_maintenance: last schedulable node", "node_maintenance", "node_maintenance",
             {"name": "lab-worker-1"}, names=["lab-worker-1"], setup="cordon_other_workers"),
        Case("node_maintenance: non-migratable VM with LiveMigrate", "node_maintenance", "node_maintenance",
             {"name": BLOCKED}, names=[BLOCKED, "rwo-vm"]),
        Case("node_maintenance_info: unknown node", "node_maintenance_info", "node_maintenance_info",
             {"name": "no-such-node"}, names=["no-such-node"]),
        Case("node_decommission: control-plane node (etcd quorum)", "node_decommission", "node_decommission",
             {"name": "lab-cp-1"}, names=["lab-cp-1"]),
        Case("node_decommission: non-migratable VM with LiveMigrate", "node_decommission", "node_decommission",
             {"name": BLOCKED}, names=[BLOCKED, "rwo-vm"]),
        Case("node_labeller: unknown node", "node_labeller", "node_labeller", {"name": "no-such-node", "skip": True},
             names=["no-such-node"]),
        Case("maintenance_preflight: unknown node", "maintenance_preflight", "maintenance_preflight",
             {"nodes": ["no-such-node"]}, names=["no-such-node"]),
        Case("maintenance_preflight: selector matching nothing", "maintenance_preflight", "maintenance_preflight",
             {"label_selector": "kubevirt-ops.test/no-such-label=x"}, names=["kubevirt-ops.test/no-such-label=x"]),
        Case("maintenance_verify: unknown node", "maintenance_verify", "maintenance_verify",
             {"name": "no-such-node", "timeout": 5}, names=["no-such-node"]),
    ]
    vm_ops = [
        Case("vm_eviction_strategy: unknown VM", "vm_eviction_strategy", "vm_eviction_strategy",
             {"name": "no-such-vm", "namespace": NS, "strategy": "LiveMigrate"}, names=["no-such-vm"]),
        Case("vm_eviction_strategy: unknown namespace", "vm_eviction_strategy", "vm_eviction_strategy",
             {"namespace": "no-such-namespace", "strategy": "LiveMigrate"}, names=["no-such-namespace"]),
        Case("vm_eviction_strategy: invalid strategy name", "vm_eviction_strategy", "vm_eviction_strategy",
             {"name": "ok-vm", "namespace": NS, "strategy": "LiveMigration"}, names=["LiveMigration"]),
        Case("vm_run_strategy: unknown VM", "vm_run_strategy", "vm_run_strategy",
             {"name": "no-such-vm", "namespace": NS, "run_strategy": "Always"}, names=["no-such-vm"]),
        Case("vm_run_strategy: unknown namespace", "vm_run_strategy", "vm_run_strategy",
             {"namespace": "no-such-namespace", "action": "restart"}, names=["no-such-namespace"]),
        Case("vm_run_strategy: invalid run strategy name", "vm_run_strategy", "vm_run_strategy",
             {"name": "ok-vm", "namespace": NS, "run_strategy": "AlwaysOn"}, names=["AlwaysOn"]),
        Case("vm_run_strategy: both run_strategy and action", "vm_run_strategy", "vm_run_strategy",
             {"name": "ok-vm", "namespace": NS, "run_strategy": "Halted", "action": "stop"},
             names=["run_strategy", "action"]),
        Case("vm_run_strategy: restart of a Once VM", "vm_run_strategy", "vm_run_strategy",
             {"name": "once-vm", "namespace": NS, "action": "restart"}, names=["once-vm", "Once"]),
        Case("hco_obsolete_cpus: unknown HyperConverged", "hco_obsolete_cpus", "hco_obsolete_cpus",
             {"name": "no-such-hco", "cpu_models": ["Westmere"]}, names=["no-such-hco"]),
        Case("hco_obsolete_cpus: HyperConverged in an unknown namespace", "hco_obsolete_cpus", "hco_obsolete_cpus",
             {"namespace": "no-such-namespace", "cpu_models": ["Westmere"]}, names=["no-such-namespace"]),
        Case("cluster_lock: lock namespace does not exist", "cluster_lock", "cluster_lock",
             {"namespace": "no-such-namespace", "purpose": "bad input"}, names=["no-such-namespace"]),
    ]
    connection = [
        Case("expired token", "connection", "node_labeller", {"name": "lab-worker-1", "skip": True},
             kubeconfig="expired", names=["credentials were rejected"]),
        Case("token of a deleted ServiceAccount", "connection", "node_maintenance", {"name": "lab-worker-1"},
             kubeconfig="deleted_account", names=["credentials were rejected"]),
        Case("invalid token", "connection", "vm_run_strategy",
             {"name": "ok-vm", "namespace": NS, "action": "stop"}, kubeconfig="invalid_token",
             names=["credentials were rejected"]),
        Case("wrong CA certificate", "connection", "node_maintenance", {"name": "lab-worker-1"},
             kubeconfig="wrong_ca", names=["TLS", "CA"]),
        Case("unreachable API server", "connection", "node_labeller", {"name": "lab-worker-1", "skip": True},
             kubeconfig="unreachable", names=["unreachable"]),
        Case("malformed kubeconfig", "connection", "vm_eviction_strategy",
             {"scope": "cluster", "strategy": "None"}, kubeconfig="malformed", names=["not valid YAML"]),
        Case("RBAC denied: planner drains a node", "connection", "node_maintenance", {"name": FREE},
             kubeconfig="planner", names=["permission denied", FREE]),
        Case("RBAC denied: planner stops a VM", "connection", "vm_run_strategy",
             {"name": "ok-vm", "namespace": NS, "action": "stop"}, kubeconfig="planner",
             names=["permission denied", "ok-vm"]),
    ]
    roles = [
        Case("rolling_maintenance: window start 25:00", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"],
                         "rolling_maintenance_window": {"start": "25:00", "end": "06:00"}}, names=["25:00"]),
        Case("rolling_maintenance: window unknown day", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"],
                         "rolling_maintenance_window": {"days": ["someday"], "start": "22:00", "end": "06:00"}},
             names=["someday"]),
        Case("rolling_maintenance: window unknown time zone", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"],
                         "rolling_maintenance_window": {"start": "22:00", "end": "06:00", "timezone": "Moon/Base"}},
             names=["Moon/Base"]),
        Case("rolling_maintenance: nodes and selector", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"],
                         "rolling_maintenance_node_selector": "node-role.kubernetes.io/worker"},
             names=["rolling_maintenance_node_selector"]),
        Case("rolling_maintenance: selector matching nothing", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_node_selector": "kubevirt-ops.test/no-such-label=x"},
             names=["kubevirt-ops.test/no-such-label=x"]),
        Case("rolling_maintenance: unknown node", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1", "no-such-node"]}, names=["no-such-node"]),
        Case("rolling_maintenance: node with a VM that cannot migrate", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": [BLOCKED]}, names=[BLOCKED, "rwo-vm"]),
        Case("rolling_maintenance: invalid non_migratable policy", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"], "rolling_maintenance_non_migratable": "skip"},
             names=["skip"]),
        Case("rolling_maintenance: negative drain timeout", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"], "rolling_maintenance_drain_timeout": -5},
             names=["rolling_maintenance_drain_timeout (-5)"]),
        Case("rolling_maintenance: zero Ready timeout and a lock TTL of three years", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"], "rolling_maintenance_ready_timeout": 0,
                         "rolling_maintenance_lock_ttl": 99999999},
             names=["rolling_maintenance_ready_timeout (0)", "rolling_maintenance_lock_ttl (99999999)"]),
        Case("rolling_maintenance: negative max_failures", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1"], "rolling_maintenance_max_failures": -1},
             names=["rolling_maintenance_max_failures (-1)"]),
        Case("rolling_maintenance: empty node name", "roles", playbook=ROLLING,
             extra_vars={"rolling_maintenance_nodes": ["lab-worker-1", " "]}, names=["rolling_maintenance_nodes"]),
        Case("node_decommission role: control-plane node", "roles", playbook=DECOMMISSION,
             extra_vars={"node_decommission_node": "lab-cp-1"}, names=["lab-cp-1"]),
        Case("node_decommission role: no node given", "roles", playbook=DECOMMISSION, extra_vars={},
             names=["node_decommission_node"]),
    ]
    return node_ops + vm_ops + connection + roles


CASES = cases()


def _fill(value, world):
    if isinstance(value, str):
        return value.replace(NS, world["namespace"]).replace(BLOCKED, world["blocked_node"]).replace(
            FREE, world["free_node"])
    if isinstance(value, list):
        return [_fill(v, world) for v in value]
    if isinstance(value, dict):
        return dict((k, _fill(v, world)) for k, v in value.items())
    return value


@contextlib.contextmanager
def prepared(case, k8s):
    """Setup a case needs before the "before" snapshot, undone afterwards."""
    if case.setup != "cordon_other_workers":
        yield
        return
    core = client.CoreV1Api(k8s)
    others = [n for n in workloads.node_names(k8s) if n != "lab-worker-1"]
    for name in others:
        core.patch_node(name, {"spec": {"unschedulable": True}})

    def settled():
        # The node lifecycle controller taints a cordoned node by itself, a moment later: the
        # "before" snapshot must not see that as a change made by the module under test.
        return all(any(t.key == "node.kubernetes.io/unschedulable" for t in core.read_node(n).spec.taints or [])
                   for n in others)

    try:
        wait_for(settled, 60, "the cordoned nodes' unschedulable taint")
        yield
    finally:
        for name in others:
            core.patch_node(name, {"spec": {"unschedulable": None}})


def first_failure(run):
    """The message of the first failed task (a role's "always" tasks may fail after it)."""
    failures = run.failures()
    if not failures:
        return None, {}
    return failures[0][1].get("msg"), failures[0][1]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case, world, k8s, lab, tmp_path):
    figure = reliability.bad_input("lab: " + case.name, group=case.group)
    kubeconfig = lab.kubeconfig
    if case.kubeconfig == "planner":
        kubeconfig = world["planner"]
    elif case.kubeconfig:
        kubeconfig = world["kubeconfigs"][case.kubeconfig]
    names = _fill(list(case.names), world)
    with prepared(case, k8s):
        before = safety.ResourceVersions(k8s)
        if case.playbook:
            extra = _fill(dict(case.extra_vars, rolling_maintenance_report_dir=str(tmp_path / "reports"),
                               node_decommission_report_dir=str(tmp_path / "reports")), world)
            run = runs.playbook(kubeconfig, case.playbook, extra_vars=extra)
        else:
            run = runs.module(kubeconfig, case.module, _fill(case.args, world), check=case.check)
        changes = before.changes()
    msg, result = first_failure(run)
    assert run.returncode != 0, "exit status 0:\n%s" % run.output[-3000:]
    assert msg, "no failed task:\n%s" % run.output[-3000:]
    problems = reliability.clean_error_problems(result, rc=run.returncode)
    missing = [n for n in names if n not in msg]
    assert problems == [] and missing == [], "%s / missing %s: %r" % (problems, missing, msg)
    assert "Traceback" not in run.output, run.output[-3000:]
    assert changes == [], "changed despite bad input: %s" % changes
    figure.passed(message=msg)


def test_matrix_is_large_enough():
    assert len(CASES) >= 30
