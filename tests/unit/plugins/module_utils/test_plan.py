"""The plan: pods, VM outcomes (the eviction table), placement, capacity, budgets, refusals."""

import pytest

from drain_cluster import cluster, kubevirt_cr, launcher, node, pdb, pod, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import plan as plan_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot as snapshot_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError


def plan_for(client, name="worker-1", **options):
    allow = dict((k, options.pop(k)) for k in ("allow_control_plane", "allow_last_schedulable_node") if k in options)
    snapshot = snapshot_mod.Snapshot.load(client, [name])
    return plan_mod.compute_plan(snapshot, name, plan_mod.PlanOptions(DrainOptions(**options), **allow))


def add_vm(server, name, node_name="worker-1", run_strategy="Always", **vmi_args):
    instance = vmi(name, node_name=node_name, **vmi_args)
    server.add("VirtualMachine", vm(name, run_strategy=run_strategy))
    server.add("VirtualMachineInstance", instance)
    server.add("Pod", launcher(instance))
    return instance


@pytest.mark.parametrize("cluster_default,own,migratable,run_strategy,outcome", [
    ("LiveMigrate", None, True, "Always", "migrate"),
    ("LiveMigrate", None, False, "Always", "block"),
    (None, "LiveMigrateIfPossible", True, "Manual", "migrate"),
    (None, "LiveMigrateIfPossible", False, "Always", "restart_elsewhere"),
    (None, "LiveMigrateIfPossible", False, "RerunOnFailure", "restart_elsewhere"),
    (None, "LiveMigrateIfPossible", False, "Manual", "stay_stopped"),
    ("LiveMigrate", "None", True, "Once", "stay_stopped"),
    (None, None, True, "Always", "restart_elsewhere"),
    # External: KubeVirt only marks the VMI; an external controller has to act.
    ("None", "External", False, "Always", "external"),
    ("None", "External", True, "Always", "external"),
])
def test_eviction_table(cluster_default, own, migratable, run_strategy, outcome):
    client, server = cluster()
    if cluster_default:
        server.add("KubeVirt", kubevirt_cr(cluster_default))
    add_vm(server, "vm1", run_strategy=run_strategy, eviction=own, migratable=migratable)
    plan = plan_for(client)
    (entry,) = plan.as_dict()["vms"]
    assert entry["outcome"] == outcome
    assert entry["eviction_strategy"] == (own or cluster_default)
    assert entry["run_strategy"] == run_strategy
    assert entry["live_migratable"] is migratable
    assert entry["restart_by"] == {"Always": "kubevirt", "RerunOnFailure": "collection"}.get(run_strategy) \
        if outcome == "restart_elsewhere" else entry["restart_by"] is None
    blockers = plan.as_dict()["blockers"]
    if outcome == "block":
        assert blockers == ["VM ns1/vm1 cannot leave node worker-1: its eviction strategy is LiveMigrate but it is not "
                            "live-migratable (DisksNotLiveMigratable: cannot migrate VMI: PVC disk is not shared); give it "
                            "LiveMigrateIfPossible or None, or use non_migratable=shutdown."]
        assert [b.kind for b in plan.fatal_blockers("shutdown")] == []
        assert [b.kind for b in plan.fatal_blockers("fail")] == ["vm"]
    elif outcome == "external":
        assert blockers == ["VM ns1/vm1 cannot leave node worker-1: its eviction strategy is External: KubeVirt only "
                            "marks it for evacuation and waits for an external controller to move or stop it; make "
                            "sure that controller runs, or use non_migratable=wait or shutdown."]
        assert [b.kind for b in plan.fatal_blockers("fail")] == ["vm"]
        assert [b.kind for b in plan.fatal_blockers("wait")] == []
    else:
        assert blockers == []
    assert plan.capacity_ok


def test_pods_classified_like_kubectl():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("Pod", pod("ds-a", owner=("DaemonSet", "node-exporter")))
    server.add("Pod", pod("static", owner=("Node", "worker-1"), mirror=True))
    server.add("Pod", pod("bare", owner=None))
    server.add("Pod", pod("cache", emptydir=True))
    server.add("Pod", pod("done", owner=None, phase="Succeeded"))
    server.add("Pod", pod("elsewhere", node_name="worker-2"))
    plan = plan_for(client).as_dict()
    assert plan["evict"] == ["ns1/bare", "ns1/cache", "ns1/done", "ns1/web-a"]
    assert dict((s["pod"], s["reason"]) for s in plan["skip"]) == {
        "ns1/ds-a": "managed by DaemonSet node-exporter", "ns1/static": "mirror pod of a static pod (the kubelet manages it)"}
    assert plan["blockers"] == []
    strict = plan_for(client, ignore_daemonsets=False, delete_emptydir_data=False, force=False)
    (blocker,) = strict.blockers
    assert blocker.kind == "pods"
    assert "ns1/ds-a is managed by DaemonSet node-exporter (set ignore_daemonsets=true" in blocker.text
    assert "ns1/bare is not managed by a controller (set force=true" in blocker.text
    assert "ns1/cache uses emptyDir volumes (set delete_emptydir_data=true" in blocker.text
    assert [b.kind for b in strict.fatal_blockers("wait")] == ["pods"]
    selected = plan_for(client, pod_selector="app=web,!nothing")
    assert "ns1/web-a" in selected.as_dict()["evict"]


def test_no_other_node_can_take_the_vm():
    client, server = cluster(workers=1)
    server.add("Node", node("worker-2", cordoned=True))
    server.add("Node", node("worker-3", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    server.add("Node", node("worker-4", labels={"kubevirt.io/schedulable": "false"}))
    server.add("Node", node("worker-5", cpu="500m"))
    add_vm(server, "vm1")
    plan = plan_for(client)
    (blocker,) = plan.blockers
    assert blocker.kind == "placement" and not plan.capacity_ok
    assert blocker.text.startswith("VM ns1/vm1 cannot move off node worker-1: no other node can take it (")
    for part in ("worker-2: cordoned", "worker-3: taint gpu:NoSchedule not tolerated",
                 "worker-4: nodeSelector kubevirt.io/schedulable=true not matched",
                 "worker-5: not enough cpu free (cpu 500m free, cpu 1 needed)",
                 "cp-1: taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated"):
        assert part in blocker.text
    assert [b.kind for b in plan.fatal_blockers("wait")] == []


def test_capacity_for_everything_at_once():
    client, server = cluster(workers=2, cpu="3")
    for i in range(4):
        server.add("Pod", pod("web-%d" % i, cpu="1"))
    plan = plan_for(client)
    assert plan.capacity_ok is False
    (blocker,) = plan.blockers
    assert blocker.kind == "capacity"
    assert blocker.text.startswith("The other nodes lack room for everything node worker-1 runs: 1 pod (cpu 1, ")
    server.add("Node", node("worker-3"))
    assert plan_for(client).capacity_ok is True


def test_budgets_that_never_allow_a_disruption():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("Pod", pod("db-a", labels={"app": "db"}))
    server.add("PodDisruptionBudget", pdb("web", allowed=0, expected=10, desired=9))
    server.add("PodDisruptionBudget", pdb("db", match={"app": "db"}, allowed=0, expected=3, desired=3))
    plan = plan_for(client)
    assert plan.as_dict()["pdbs"] == [
        {"namespace": "ns1", "name": "db", "disruptions_allowed": 0, "pods": ["ns1/db-a"], "never_allows": True},
        {"namespace": "ns1", "name": "web", "disruptions_allowed": 0, "pods": ["ns1/web-a"], "never_allows": False}]
    (blocker,) = plan.blockers
    assert blocker.kind == "pdb" and "PodDisruptionBudget ns1/db never allows a disruption" in blocker.text
    assert plan_for(client, disable_eviction=True).blockers == []


def test_per_vmi_budgets_are_not_pdb_blockers():
    client, server = cluster()
    server.add("KubeVirt", kubevirt_cr("LiveMigrate"))
    instance = add_vm(server, "vm1")
    server.add("PodDisruptionBudget", pdb("vm1", allowed=0, expected=1, desired=1, vmi_uid=instance["metadata"]["uid"]))
    plan = plan_for(client)
    assert plan.blockers == [] and plan.as_dict()["pdbs"] == []


def test_safety_refusals_and_overrides():
    client, server = cluster(workers=1)
    plan = plan_for(client)
    assert [b.kind for b in plan.blockers] == ["safety"]
    assert "last schedulable node" in plan.blockers[0].text
    assert plan_for(client, allow_last_schedulable_node=True).blockers == []
    cp = plan_for(client, "cp-1")
    assert any("etcd quorum" in b.text for b in cp.blockers)
    assert not any("etcd" in b.text for b in plan_for(client, "cp-1", allow_control_plane=True).blockers)


def test_node_held_by_someone_elses_node_maintenance():
    client, server = cluster()
    server.add("NodeMaintenance", {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
                                   "metadata": {"name": "by-hand"}, "spec": {"nodeName": "worker-1"}})
    (blocker,) = plan_for(client).blockers
    assert blocker.text == ("Node worker-1 is already held by NodeMaintenance by-hand, which this collection did not "
                            "create; end that maintenance first.")


def test_not_ready_node_and_unknown_node():
    client, server = cluster(workers=2)
    server.add("Node", node("worker-9", ready=False))
    plan = plan_for(client, "worker-9")
    assert [b.kind for b in plan.blockers] == ["node"]
    with pytest.raises(InvalidInputError) as err:
        plan_for(client, "worker-7")
    assert err.value.msg == "Node worker-7 does not exist."


def test_info_summary_for_every_node_reads_the_cluster_once():
    client, server = cluster(workers=3)
    add_vm(server, "vm1")
    before = len(server.requests)
    snapshot = snapshot_mod.Snapshot.load(client)
    options = plan_mod.PlanOptions(DrainOptions())
    summaries = [plan_mod.node_summary(snapshot, n, options) for n in sorted(snapshot.nodes)]
    assert len(server.requests) - before <= 12
    assert [s["name"] for s in summaries] == ["cp-1", "worker-1", "worker-2", "worker-3"]
    assert summaries[1]["plan"]["vms"][0]["outcome"] == "restart_elsewhere"
    assert summaries[1]["ready"] and summaries[1]["schedulable"] and not summaries[1]["in_maintenance"]


def test_a_vmi_without_a_vm_is_shut_down_for_good():
    client, server = cluster()
    instance = vmi("lonely", eviction="None", vm_owner=False)
    server.add("VirtualMachineInstance", instance)
    server.add("Pod", launcher(instance))
    (entry,) = plan_for(client).as_dict()["vms"]
    assert entry["outcome"] == "shutdown" and entry["run_strategy"] is None


def test_a_vm_that_migrated_here_may_go_back_where_it_came_from():
    """Its launcher pod is the target of the earlier migration and excludes that migration's
    source node; the next migration's target pod is made from the VMI's affinity again."""
    client, server = cluster(workers=2)
    bound = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": ["worker-1", "worker-2"]}]}]}}}
    instance = vmi("pair", node_name="worker-2")
    instance["spec"]["affinity"] = bound
    server.add("VirtualMachine", vm("pair"))
    server.add("VirtualMachineInstance", instance)
    target = launcher(instance)
    target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = "mig-1"
    terms = [dict(t, matchFields=[{"key": "metadata.name", "operator": "NotIn", "values": ["worker-1"]}])
             for t in bound["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]]
    target["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    server.add("Pod", target)
    plan = plan_for(client, "worker-2")
    assert plan.as_dict()["blockers"] == [] and plan.capacity_ok
    assert plan.targets == {"ns1/virt-launcher-pair-abcde": "worker-1"}
