"""Least privilege: the collection works with exactly the rights docs/rbac/ documents.

The key flows run as a ServiceAccount bound only to the operator ClusterRole (and the
lock Role); the planner plans, and gets one clear "permission denied" sentence naming
the object when it tries to change anything; a user whose rights end at one namespace
gets the same kind of sentence. Every request the collection made on the lab (the API
server's audit log, whoever ran the tests before) is allowed by the operator role.
"""

import json
import os
import subprocess

import pytest
from kubernetes import client

import identities
import runs
import safety
import workloads
from lab.nodes import plan as node_plan, ensure as ensure_nodes, wait_ready


def ok(run):
    result = run.result()
    assert run.returncode == 0 and not result.get("failed"), "%s\n%s" % (result.get("msg"), run.output[-3000:])
    return result


def denied(run, *names):
    """The run failed with one sentence saying 'permission denied' and naming the object
    (any of ``names``: the object asked for, or the kind the request for it was denied on)."""
    result = run.result()
    assert run.returncode != 0 and result.get("failed"), run.output[-3000:]
    msg = result["msg"]
    assert "permission denied" in msg, msg
    assert "\n" not in msg and "Traceback" not in run.output, run.output[-3000:]
    assert not names or any(name in msg for name in names), msg
    return msg


@pytest.fixture
def vms(k8s, namespace):
    """Two migratable VMs in the test namespace (once earlier tests' namespaces are gone: a drain
    refuses pods of a namespace being deleted, see test_drain_terminating_namespace.py)."""
    workloads.wait_no_namespace_terminating(k8s)
    workloads.create_vm(k8s, namespace, "rbac-a")
    workloads.create_vm(k8s, namespace, "rbac-b", run_strategy="RerunOnFailure")
    workloads.wait_vms_running(k8s, namespace, ["rbac-a", "rbac-b"])
    return namespace


# -- the operator role: every module's key flow ------------------------------------------------

@pytest.mark.parametrize("method", ["drain", "cr", "auto"])
def test_operator_node_maintenance_present_and_absent(k8s, vms, operator_identity, method, restore_nodes):
    kc = operator_identity.kubeconfig
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    check = ok(runs.module(kc, "node_maintenance", {"name": node, "method": method}, check=True))
    assert check["changed"]
    with safety.PdbWatcher(k8s) as watcher:
        vm_check = safety.VmSafety(k8s, [vms])
        entered = ok(runs.module(kc, "node_maintenance", {"name": node, "method": method, "reason": "rbac test"}))
        # auto on a lab with the NodeMaintenance operator: the VMs evicted first, then the CR.
        assert entered["phase"] == "Succeeded" and entered["method"] == {"auto": "cr"}.get(method, method)
        assert "%s/rbac-a" % vms in ["%s/%s" % (v["namespace"], v["name"]) for v in entered["vms"]["migrated"]]
        # The role's rights cover the Events too: none was refused.
        assert not [w for w in entered.get("warnings") or [] if "Event" in w], entered["warnings"]
        again = ok(runs.module(kc, "node_maintenance", {"name": node, "method": method}))
        assert not again["changed"]
        left = ok(runs.module(kc, "node_maintenance", {"name": node, "state": "absent", "method": method}))
        assert left["changed"]
    assert watcher.violations == []
    report = vm_check.verify(shut_down=safety.shut_down_vms(entered))
    assert report.problems == [], report
    assert not client.CoreV1Api(k8s).read_node(node).spec.unschedulable


def test_operator_node_maintenance_info(k8s, vms, operator_identity):
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    result = ok(runs.module(operator_identity.kubeconfig, "node_maintenance_info", {"name": node}))
    assert [n["name"] for n in result["nodes"]] == [node]


def test_operator_vm_eviction_strategy(k8s, vms, operator_identity):
    kc = operator_identity.kubeconfig
    args = {"name": "rbac-a", "namespace": vms, "strategy": "LiveMigrateIfPossible"}
    assert ok(runs.module(kc, "vm_eviction_strategy", args))["changed"]
    assert not ok(runs.module(kc, "vm_eviction_strategy", args))["changed"]
    assert ok(runs.module(kc, "vm_eviction_strategy", {"namespace": vms, "strategy": "LiveMigrate",
                                                       "restart": True}))["changed"]
    assert ok(runs.module(kc, "vm_eviction_strategy", {"name": "rbac-a", "namespace": vms,
                                                       "state": "absent"}))["changed"]


def test_operator_cluster_eviction_strategy(k8s, operator_identity):
    kc = operator_identity.kubeconfig
    before = ok(runs.module(kc, "vm_eviction_strategy", {"scope": "cluster", "strategy": "LiveMigrate"},
                            check=True))["cluster"]["before"]
    try:
        ok(runs.module(kc, "vm_eviction_strategy", {"scope": "cluster", "strategy": "LiveMigrateIfPossible"}))
    finally:
        restore = {"scope": "cluster", "strategy": before} if before else {"scope": "cluster", "state": "absent"}
        ok(runs.module(kc, "vm_eviction_strategy", restore))


def test_operator_vm_run_strategy(k8s, vms, operator_identity):
    kc = operator_identity.kubeconfig
    one = {"name": "rbac-b", "namespace": vms}
    assert ok(runs.module(kc, "vm_run_strategy", dict(one, action="restart")))["changed"]
    assert ok(runs.module(kc, "vm_run_strategy", dict(one, run_strategy="Manual")))["changed"]
    assert ok(runs.module(kc, "vm_run_strategy", dict(one, action="stop")))["changed"]
    assert ok(runs.module(kc, "vm_run_strategy", dict(one, action="start")))["changed"]
    assert ok(runs.module(kc, "vm_run_strategy", dict(one, run_strategy="Always")))["changed"]
    assert not ok(runs.module(kc, "vm_run_strategy", dict(one, run_strategy="Always")))["changed"]


def test_operator_hco_obsolete_cpus(k8s, operator_identity):
    kc = operator_identity.kubeconfig
    try:
        added = ok(runs.module(kc, "hco_obsolete_cpus", {"cpu_models": ["Westmere-rbac"]}))
        assert "Westmere-rbac" in added["cpu_models"]
    finally:
        removed = ok(runs.module(kc, "hco_obsolete_cpus", {"cpu_models": ["Westmere-rbac"], "state": "absent"}))
    assert "Westmere-rbac" not in removed["cpu_models"]


def test_operator_node_labeller(lab, operator_identity):
    kc = operator_identity.kubeconfig
    try:
        assert ok(runs.module(kc, "node_labeller", {"name": "lab-worker-1", "skip": True}))["changed"]
        assert not ok(runs.module(kc, "node_labeller", {"name": "lab-worker-1", "skip": True}))["changed"]
    finally:
        ok(runs.module(kc, "node_labeller", {"name": "lab-worker-1", "skip": False}))


def test_operator_cluster_lock(lab, operator_identity):
    kc = operator_identity.kubeconfig
    taken = ok(runs.module(kc, "cluster_lock", {"name": "kvops-rbac-test", "purpose": "rbac test", "ttl": 60}))
    assert taken["acquired"]
    released = ok(runs.module(kc, "cluster_lock",
                              {"name": "kvops-rbac-test", "state": "absent", "holder": taken["holder"]}))
    assert released["action"] == "released"


@pytest.fixture
def spare_node(k8s, lab):
    """A worker node that exists only for this test (decommission deletes it)."""
    spare = node_plan(1, 9)[-1]
    version = client.CoreV1Api(k8s).read_node("lab-worker-1").status.node_info.kubelet_version
    ensure_nodes(k8s, [spare], version)
    wait_ready(k8s, [spare.name])
    yield spare.name
    try:
        client.CoreV1Api(k8s).delete_node(spare.name)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


def test_operator_node_decommission(k8s, operator_identity, spare_node):
    kc = operator_identity.kubeconfig
    # The spare node's kubelet (KWOK) heartbeats: the operator vouches for its power-off.
    result = ok(runs.module(kc, "node_decommission", {"name": spare_node, "assume_powered_off": True,
                                                      "reregistration_watch": 3}))
    assert result["deleted"]
    assert not ok(runs.module(kc, "node_decommission", {"name": spare_node, "assume_powered_off": True}))["changed"]


RAISED_LIMITS = {"parallel_migrations_per_cluster": 7, "parallel_outbound_migrations_per_node": 3}


def test_operator_rolling_maintenance_role(k8s, vms, operator_identity, tmp_path, restore_nodes):
    """The operator's rights cover a whole run, the live-migration limits it raises and puts back included."""
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    playbook = os.path.join(identities.REPO, "playbooks", "rolling_maintenance.yml")
    own = workloads.hyperconverged(k8s)["spec"]["liveMigrationConfig"]
    run = runs.playbook(operator_identity.kubeconfig, playbook,
                        extra_vars={"rolling_maintenance_nodes": [node],
                                    "rolling_maintenance_migration_limits": RAISED_LIMITS,
                                    "rolling_maintenance_report_dir": str(tmp_path / "reports")})
    assert run.returncode == 0, (run.failures()[:1], run.output[-3000:])
    assert not client.CoreV1Api(k8s).read_node(node).spec.unschedulable
    assert "parallel_outbound_migrations_per_node 2 -> 3" in run.output
    assert workloads.hyperconverged(k8s)["spec"]["liveMigrationConfig"] == own


@pytest.fixture
def operator_without_hco_rights(k8s, lab, rbac_roles, tmp_path):
    """The operator's rights but for changing the HyperConverged resource (an administrator who keeps HCO's
    settings to themselves)."""
    documents = [d for d in identities.load_documents(identities.OPERATOR_FILE) if d and d["kind"] == "ClusterRole"]
    role = [d for d in documents if d["metadata"]["name"] == "kubevirt-ops-maintenance-operator"][0]
    name = "kvops-operator-without-hco-%s" % os.getpid()
    for rule in role["rules"]:
        if "hyperconvergeds" in rule.get("resources", []):
            rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    rbac = client.RbacAuthorizationV1Api(k8s)
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": role["rules"]})
    identity = identities.create_identity(k8s, lab.kubeconfig, tmp_path, prefix="kvops-nohco", cluster_roles=[name],
                                          roles=[("kube-system", "kubevirt-ops-maintenance-lock"),
                                                 ("kube-node-lease", "kubevirt-ops-maintenance-node-heartbeat")])
    yield identity
    identities.delete_identity(k8s, identity)
    rbac.delete_cluster_role(name)


def test_a_run_that_may_not_raise_the_migration_limits_is_refused_in_preflight(
        k8s, vms, operator_without_hco_rights, tmp_path):
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    before = workloads.hyperconverged(k8s)["metadata"]["resourceVersion"]
    spec_before = client.CoreV1Api(k8s).read_node(node).spec.to_dict()
    lock = "kvops-rbac-limits-%d" % os.getpid()
    playbook = os.path.join(identities.REPO, "playbooks", "rolling_maintenance.yml")
    run = runs.playbook(operator_without_hco_rights.kubeconfig, playbook,
                        extra_vars={"rolling_maintenance_nodes": [node], "rolling_maintenance_lock_name": lock,
                                    "rolling_maintenance_migration_limits": RAISED_LIMITS,
                                    "rolling_maintenance_report_dir": str(tmp_path / "reports")})
    assert run.returncode != 0
    refusal = [result.get("msg", "") for _task, result in run.failures()]
    assert any("Cannot change the live-migration limits in HyperConverged kubevirt-hyperconverged/"
               "kubevirt-hyperconverged: permission denied" in m and "patch hyperconvergeds.hco.kubevirt.io" in m
               for m in refusal), refusal
    # Nothing changed: not the HyperConverged resource, not the node, and no lock was taken.
    assert workloads.hyperconverged(k8s)["metadata"]["resourceVersion"] == before
    assert client.CoreV1Api(k8s).read_node(node).spec.to_dict() == spec_before
    with pytest.raises(client.exceptions.ApiException) as missing:
        client.CoordinationV1Api(k8s).read_namespaced_lease(lock, "kube-system")
    assert missing.value.status == 404


def test_operator_node_decommission_role(k8s, operator_identity, spare_node, tmp_path):
    # The role waits for every VM that ran before to run again: VMs of an earlier test's namespace
    # being deleted would never come back (see test_fault_vm_deleted_during_run.py).
    workloads.wait_no_namespace_terminating(k8s)
    playbook = os.path.join(identities.REPO, "playbooks", "decommission_node.yml")
    run = runs.playbook(operator_identity.kubeconfig, playbook,
                        extra_vars={"node_decommission_node": spare_node,
                                    "node_decommission_assume_powered_off": True,
                                    "node_decommission_report_dir": str(tmp_path / "reports")})
    assert run.returncode == 0, (run.failures()[:1], run.output[-3000:])


# -- the planner role: plans, and nothing else --------------------------------------------------

def test_planner_plans(k8s, vms, planner_identity):
    kc = planner_identity.kubeconfig
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    result = ok(runs.module(kc, "node_maintenance_info", {"name": node}))
    plan = result["nodes"][0]["plan"]
    assert "%s/rbac-a" % vms in ["%s/%s" % (v["namespace"], v["name"]) for v in plan["vms"]]
    ok(runs.module(kc, "node_maintenance_info", {"label_selector": "node-role.kubernetes.io/worker"}))
    ok(runs.module(kc, "node_maintenance", {"name": node}, check=True))
    preflight = ok(runs.module(kc, "maintenance_preflight", {
        "nodes": [node], "lock": {"name": "kubevirt-ops-maintenance"}, "fail_on_problems": False}))
    assert preflight["nodes"] == [node]
    ok(runs.module(kc, "maintenance_verify", {"name": node, "timeout": 30}))


def test_planner_runs_the_inventory_plugin(lab, planner_identity, tmp_path):
    config = tmp_path / "lab.nodes.yml"
    config.write_text("plugin: kubevirt_ops.maintenance.nodes\nkubeconfig: %s\n" % planner_identity.kubeconfig)
    proc = subprocess.run([os.path.join(runs.BIN, "ansible-inventory"), "-i", str(config), "--list"],
                          env=runs.ansible_env(planner_identity.kubeconfig, os.devnull), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inventory = json.loads(proc.stdout)
    assert "lab-worker-1" in inventory["_meta"]["hostvars"], proc.stdout[:2000]


def test_planner_cannot_change_anything(k8s, vms, planner_identity):
    kc = planner_identity.kubeconfig
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    before = safety.ResourceVersions(k8s)
    denied(runs.module(kc, "node_maintenance", {"name": node}), node)
    denied(runs.module(kc, "node_labeller", {"name": node, "skip": True}), node)
    denied(runs.module(kc, "vm_run_strategy", {"name": "rbac-a", "namespace": vms, "action": "restart"}), "rbac-a")
    denied(runs.module(kc, "vm_eviction_strategy", {"name": "rbac-a", "namespace": vms, "strategy": "None"}),
           "rbac-a")
    denied(runs.module(kc, "cluster_lock", {"name": "kvops-planner-test"}), "kvops-planner-test")
    assert before.changes() == []


# -- a user whose rights end at one namespace ---------------------------------------------------

def test_namespace_user_gets_clear_permission_errors(k8s, vms, namespace_user):
    kc = namespace_user.kubeconfig
    node = workloads.vm_nodes(k8s, vms)["rbac-a"]
    before = safety.ResourceVersions(k8s)
    denied(runs.module(kc, "node_maintenance", {"name": node}), node, "Node")
    denied(runs.module(kc, "node_maintenance_info", {"name": node}), node, "Node")
    denied(runs.module(kc, "vm_run_strategy", {"all_namespaces": True, "run_strategy": "Always"}), "VirtualMachine")
    denied(runs.module(kc, "vm_eviction_strategy", {"scope": "cluster", "strategy": "None"}), "HyperConverged")
    denied(runs.module(kc, "hco_obsolete_cpus", {"cpu_models": ["Westmere"]}), "HyperConverged")
    assert before.changes() == []
    # Within its namespace it may manage its VMs.
    ok(runs.module(kc, "vm_run_strategy", {"name": "rbac-b", "namespace": vms, "run_strategy": "RerunOnFailure"}))


# -- every request the collection made is covered ------------------------------------------------

def test_operator_role_covers_every_request_the_collection_made(lab, operator_identity):
    """Requests from the audit log (user agent kubevirt_ops.maintenance/...) of every test that ran
    on this lab so far, as whichever user; each must be allowed by the operator role."""
    requests = identities.audited_requests(os.path.join(str(lab.state_dir), "audit.log"))
    assert requests, "no request of the collection in the audit log"
    missing = sorted(r for r in requests if not identities.rbac_file_allows(identities.OPERATOR_FILE, *r))
    assert missing == [], "requests the operator role does not allow: %s" % missing
