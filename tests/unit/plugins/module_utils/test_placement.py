"""Placement with what the scheduler checks beyond node selection: every requested resource,
inter-pod affinity and anti-affinity, topology spread, the last node for the workloads, and
plans made node after node."""

from drain_cluster import cluster, launcher, node, pod, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import plan as plan_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot as snapshot_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import preflight as rolling
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import format_amount, pod_requests

HOST = "kubernetes.io/hostname"


def plan_for(client, name="worker-1", **allow):
    snapshot = snapshot_mod.Snapshot.load(client, [name])
    return plan_mod.compute_plan(snapshot, name, plan_mod.PlanOptions(DrainOptions(), **allow))


def add_vm(server, name, node_name="worker-1", affinity=None, spread=None, labels=None, requests=None,
           tolerations=None, uid=None):
    """A live-migratable VM; its VMI's placement rules are copied to its launcher pod, as KubeVirt does."""
    instance = vmi(name, node_name=node_name, eviction="LiveMigrate", uid=uid)
    instance["metadata"]["labels"].update(labels or {})
    for key, value in (("affinity", affinity), ("topologySpreadConstraints", spread), ("tolerations", tolerations)):
        if value:
            instance["spec"][key] = value
    server.add("VirtualMachine", vm(name))
    server.add("VirtualMachineInstance", instance)
    launcher_pod = launcher(instance, cpu="1", memory="1Gi")
    launcher_pod["metadata"]["labels"].update(labels or {})
    for key, value in (("affinity", affinity), ("topologySpreadConstraints", spread), ("tolerations", tolerations)):
        if value:
            launcher_pod["spec"][key] = value
    launcher_pod["spec"]["containers"][0]["resources"]["requests"].update(requests or {})
    server.add("Pod", launcher_pod)
    return instance


def anti(labels, key=HOST):
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


def with_allocatable(obj, **extra):
    obj["status"]["allocatable"].update(extra)
    return obj


# -- resources -------------------------------------------------------------------------------------

def test_every_requested_resource_counts():
    need = pod_requests({"containers": [{"resources": {"requests": {
        "cpu": "1", "hugepages-2Mi": "1Gi", "nvidia.com/gpu": "1", "devices.kubevirt.io/kvm": "1"}}}],
        "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]})
    assert need["hugepages-2Mi"] == 2 ** 30 and need["nvidia.com/gpu"] == 2 and need["devices.kubevirt.io/kvm"] == 1
    assert format_amount("hugepages-2Mi", 2 ** 30) == "hugepages-2Mi 1Gi"
    assert format_amount("nvidia.com/gpu", 1) == "nvidia.com/gpu 1"


def test_a_gpu_vm_goes_to_the_node_with_a_free_gpu():
    client, server = cluster(workers=1)
    server.add("Node", node("worker-2"))
    server.add("Node", with_allocatable(node("worker-3", memory="16Gi"), **{"nvidia.com/gpu": "1"}))
    add_vm(server, "gpu", requests={"nvidia.com/gpu": "1"})
    plan = plan_for(client)
    assert plan.blockers == [] and plan.targets == {"ns1/virt-launcher-gpu-abcde": "worker-3"}
    # The GPU is taken: nowhere to go, and the sentence says which resource is short.
    cuda = pod("cuda", node_name="worker-3", cpu="100m")
    cuda["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    server.add("Pod", cuda)
    (blocker,) = plan_for(client).blockers
    assert blocker.kind == "placement"
    assert "worker-2, worker-3: not enough nvidia.com/gpu free (nvidia.com/gpu 0 free, nvidia.com/gpu 1 needed)" \
        in blocker.text


def test_hugepages_are_room_like_memory():
    client, server = cluster(workers=1)
    server.add("Node", with_allocatable(node("worker-2"), **{"hugepages-1Gi": "2Gi"}))
    server.add("Node", with_allocatable(node("worker-3"), **{"hugepages-1Gi": "8Gi"}))
    add_vm(server, "big", requests={"hugepages-1Gi": "4Gi"})
    plan = plan_for(client)
    assert plan.targets == {"ns1/virt-launcher-big-abcde": "worker-3"}


# -- pods beside pods ------------------------------------------------------------------------------

def test_anti_affine_vms_need_a_node_each():
    client, server = cluster(workers=3)
    add_vm(server, "db-1", affinity=anti({"app": "db"}), labels={"app": "db"})
    add_vm(server, "db-2", affinity=anti({"app": "db"}), labels={"app": "db"})
    add_vm(server, "db-1b", affinity=anti({"app": "db"}), labels={"app": "db"})
    plan = plan_for(client)
    # Three VMs of one anti-affinity group, two other nodes: the third has no node.
    assert sorted(plan.targets.values()) == ["worker-2", "worker-3"]
    (blocker,) = plan.blockers
    assert blocker.kind == "placement"
    assert "pod anti-affinity (kubernetes.io/hostname) with pod ns1/virt-launcher-db-" in blocker.text


def test_an_existing_pods_anti_affinity_keeps_the_vm_away():
    client, server = cluster(workers=3)
    server.add("Pod", pod("loner", node_name="worker-2", labels={"app": "loner"}, affinity=anti({"app": "db"})))
    add_vm(server, "db", labels={"app": "db"})
    plan = plan_for(client)
    assert plan.targets == {"ns1/virt-launcher-db-abcde": "worker-3"}
    server.add("Pod", pod("loner-2", node_name="worker-3", labels={"app": "loner"}, affinity=anti({"app": "db"})))
    (blocker,) = plan_for(client).blockers
    assert "worker-3: pod anti-affinity (kubernetes.io/hostname) of pod ns1/loner-2" in blocker.text


def test_required_pod_affinity_follows_the_other_pod():
    client, server = cluster(workers=3)
    server.add("Pod", pod("cache", node_name="worker-3", labels={"app": "cache"}))
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}]}}
    add_vm(server, "app", affinity=affinity)
    assert plan_for(client).targets == {"ns1/virt-launcher-app-abcde": "worker-3"}


def test_topology_spread_counts_the_drained_node_as_a_domain():
    client, server = cluster(workers=3)
    spread = [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    for i in (1, 2, 3):
        web = pod("web-%d" % i, node_name="worker-%d" % i)
        web["spec"]["topologySpreadConstraints"] = spread
        server.add("Pod", web)
    plan = plan_for(client)
    # Evicted first, re-created later: worker-1 then has 0 of them, another node would have 2.
    assert plan.blockers == [] and plan.targets == {}
    (pending,) = plan.as_dict()["pending"]
    assert pending["pod"] == "ns1/web-1" and "topology spread (kubernetes.io/hostname, maxSkew 1)" in pending["reason"]
    # A migrating VM's source pod runs until its target runs, so the same rule lets it move (cp-1, a
    # domain without VMs, is left out by nodeTaintsPolicy Honor: it counts otherwise).
    vm_spread = [dict(spread[0], labelSelector={"matchLabels": {"app": "vm"}}, nodeTaintsPolicy="Honor")]
    add_vm(server, "vm-1", spread=vm_spread, labels={"app": "vm"})
    add_vm(server, "vm-2", node_name="worker-2", labels={"app": "vm"})
    add_vm(server, "vm-3", node_name="worker-3", labels={"app": "vm"})
    assert plan_for(client).targets["ns1/virt-launcher-vm-1-abcde"] in ("worker-2", "worker-3")
    # Without nodeTaintsPolicy Honor the empty control-plane domain makes the skew 2.
    server.objects[("VirtualMachineInstance", "ns1", "vm-1")]["spec"]["topologySpreadConstraints"] = spread[:1]
    server.objects[("VirtualMachineInstance", "ns1", "vm-1")]["spec"]["topologySpreadConstraints"][0] = dict(
        vm_spread[0], nodeTaintsPolicy="Ignore")
    (blocker,) = plan_for(client).blockers
    assert "2 matching pods in worker-2 against 0 in the emptiest domain" in blocker.text


# -- the last node for the workloads ---------------------------------------------------------------

def test_last_node_counts_taints_the_workloads_tolerate():
    dedicated = [{"key": "dedicated", "value": "virt", "effect": "NoSchedule"}]
    tolerate = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    client, server = cluster(workers=0)
    server.add("Node", node("worker-1", taints=dedicated))
    server.add("Node", node("worker-2", taints=dedicated, cordoned=True))
    add_vm(server, "vm", tolerations=tolerate)
    (blocker,) = [b for b in plan_for(client).blockers if b.kind == "safety"]
    assert blocker.text.startswith("Node worker-1 is the last schedulable node for its workloads")
    assert plan_for(client, allow_last_schedulable_node=True).blockers[0].kind == "placement"
    server.objects[("Node", "", "worker-2")]["spec"]["unschedulable"] = False
    assert plan_for(client).blockers == []


def test_last_node_with_nothing_to_move_compares_taints():
    client, server = cluster(workers=1)
    plan = plan_for(client)
    assert [b.kind for b in plan.blockers] == ["safety"]
    server.add("Node", node("worker-2", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    assert [b.kind for b in plan_for(client).blockers] == ["safety"]
    server.add("Node", node("worker-3"))
    assert plan_for(client).blockers == []


# -- node after node -------------------------------------------------------------------------------

def test_plans_are_cumulative_and_prefer_the_nodes_done():
    client, server = cluster(workers=3, cpu="2")
    add_vm(server, "a", "worker-1")
    add_vm(server, "b", "worker-2")
    snapshot = snapshot_mod.Snapshot.load(client)
    options = plan_mod.PlanOptions(DrainOptions())
    first = plan_mod.compute_plan(snapshot, "worker-1", options)
    assert first.targets == {"ns1/virt-launcher-a-abcde": "worker-3"}  # the most free memory
    snapshot.apply_plan(first)
    second = plan_mod.compute_plan(snapshot, "worker-2", options, prefer={"worker-1"})
    assert second.targets == {"ns1/virt-launcher-b-abcde": "worker-1"}
    snapshot.apply_plan(second)
    # worker-3 now runs "a" (moved there by the first plan): its plan moves it once more.
    third = plan_mod.compute_plan(snapshot, "worker-3", options, prefer={"worker-1", "worker-2"})
    assert [v["name"] for v in third.as_dict()["vms"]] == ["a"]
    assert third.targets == {"ns1/virt-launcher-a-abcde": "worker-2"}


def test_preflight_plans_in_the_order_of_the_run():
    # Two CPUs per node, 1 CPU per VM: alone each node's VMs fit elsewhere, together they do not.
    client, server = cluster(workers=3, cpu="2")
    add_vm(server, "a1", "worker-1")
    add_vm(server, "a2", "worker-1", uid="vmi-a2")
    add_vm(server, "b1", "worker-2")
    add_vm(server, "c1", "worker-3")
    result = rolling.preflight(client, {"nodes": ["worker-1", "worker-2", "worker-3"], "order": "given",
                                        "non_migratable": "fail", "fail_on_problems": False, "settle_timeout": 0})
    details = dict((d["name"], d) for d in result["details"])
    assert details["worker-1"]["plan"]["capacity_ok"] is True
    # worker-1's VMs went to worker-2 and worker-3; worker-2 then runs two VMs and worker-1 has room again.
    assert details["worker-2"]["vms"] == 2 and details["worker-2"]["plan"]["capacity_ok"] is True


def test_a_pinned_vm_is_a_placement_blocker_not_the_last_node():
    client, server = cluster(workers=3)
    instance = vmi("pinned", node_name="worker-1", eviction="LiveMigrate")
    server.add("VirtualMachine", vm("pinned"))
    server.add("VirtualMachineInstance", instance)
    pinned = launcher(instance)
    pinned["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "worker-1"
    server.add("Pod", pinned)
    assert [b.kind for b in plan_for(client).blockers] == ["placement"]
