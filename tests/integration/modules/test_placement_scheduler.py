"""The plan's placement judged by the real kube-scheduler: what the plan says fits runs where the
plan put it, and what it says does not fit stays Pending for the reason the plan gave.

Pod anti-affinity (a VM kept away from a Deployment's pods), topology spread (the node being
drained counts as a domain) and huge pages (a resource only some nodes offer) are rules the
scheduler applies beyond node selection and CPU and memory.
"""

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from test_node_maintenance import GROUP, VERSION, core, custom, workers

from lab.wait import wait_for

HOST = "kubernetes.io/hostname"


def deployment(k8s, namespace, name, replicas, affinity=None, spread=None):
    spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
            "terminationGracePeriodSeconds": 0}
    if affinity:
        spec["affinity"] = affinity
    if spread:
        spec["topologySpreadConstraints"] = spread
    client.AppsV1Api(k8s).create_namespaced_deployment(namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})


def pods(k8s, namespace, app):
    return [p for p in core(k8s).list_namespaced_pod(namespace, label_selector="app=%s" % app).items
            if not p.metadata.deletion_timestamp]


def running_nodes(k8s, namespace, app):
    return sorted(p.spec.node_name for p in pods(k8s, namespace, app) if p.status.phase == "Running")


def unschedulable_message(pod):
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return condition.message or ""
    return None


def anti(app):
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST}]}}


def vmi_node(k8s, namespace, name):
    try:
        vmi = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    status = vmi.get("status") or {}
    return status.get("nodeName") if status.get("phase") == "Running" else None


def migration_target_verdict(k8s, namespace, vmi):
    """Migrate ``vmi`` and return why the scheduler leaves the migration's target pod Pending;
    the migration is deleted again and its target pod gone when this returns."""
    custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstancemigrations", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "judge"}, "spec": {"vmiName": vmi}})

    def target_pod_verdict():
        for pod in core(k8s).list_namespaced_pod(namespace, label_selector="kubevirt.io/migrationJobUID").items:
            message = unschedulable_message(pod)
            if message is not None:
                return message
        return None

    wait_for(target_pod_verdict, 120, "the migration's target pod to be found unschedulable")
    verdict = target_pod_verdict()
    custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstancemigrations", "judge")
    wait_for(lambda: not core(k8s).list_namespaced_pod(
        namespace, label_selector="kubevirt.io/migrationJobUID").items, 120, "the target pod to go")
    return verdict


def plan_of(run_module, node):
    info = run_module("node_maintenance_info", {"name": node})
    assert not info.get("failed"), info
    return info["nodes"][0]["plan"]


def test_pod_anti_affinity_verdicts_match_the_scheduler(k8s, namespace, run_module):
    first, others = workers(k8s)[0], workers(k8s)[1:]
    # One "web" pod on each other worker, none on the first.
    not_first = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": [first]}]}]}}}
    deployment(k8s, namespace, "web", len(others), affinity=dict(not_first, **anti("web")))
    wait_for(lambda: running_nodes(k8s, namespace, "web") == others, 180, "one web pod on each of %s" % others)
    # A VM that keeps away from the web pods: only the first worker takes it.
    spec = {"domain": {"devices": {}, "resources": {"requests": {"memory": "256Mi", "cpu": "50m"}}},
            "evictionStrategy": "LiveMigrate", "terminationGracePeriodSeconds": 0, "affinity": anti("web")}
    custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "db"},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"app": "db"}}, "spec": spec}}})
    wait_for(lambda: vmi_node(k8s, namespace, "db") == first, 180, "VM db to run on %s" % first)

    # The plan: no node for the VM, because of the web pods.
    plan = plan_of(run_module, first)
    (entry,) = [v for v in plan["vms"] if v["namespace"] == namespace]
    assert entry["target"] is None and plan["capacity_ok"] is False
    (blocker,) = [b for b in plan["blockers"] if b.startswith("VM %s/db" % namespace)]
    assert "pod anti-affinity (%s) with pod %s/web-" % (HOST, namespace) in blocker, blocker

    # The scheduler agrees: a migration's target pod stays Pending on the anti-affinity rule.
    assert "anti-affinity" in migration_target_verdict(k8s, namespace, "db")

    # One web pod fewer: the plan names the node it frees, and the drain puts the VM there.
    client.AppsV1Api(k8s).patch_namespaced_deployment_scale(namespace=namespace, name="web",
                                                            body={"spec": {"replicas": len(others) - 1}})
    wait_for(lambda: len(pods(k8s, namespace, "web")) == len(others) - 1, 120, "web to scale down")
    freed = sorted(set(others) - set(running_nodes(k8s, namespace, "web")))
    plan = plan_of(run_module, first)
    (entry,) = [v for v in plan["vms"] if v["namespace"] == namespace]
    assert entry["target"] == freed[0] and not [b for b in plan["blockers"] if namespace in b], plan
    try:
        done = run_module("node_maintenance", {"name": first, "method": "drain", "wait_timeout": 300})
        assert not done.get("failed"), done
        assert vmi_node(k8s, namespace, "db") == freed[0]
    finally:
        run_module("node_maintenance", {"name": first, "state": "absent"})


def test_topology_spread_verdicts_match_the_scheduler(k8s, namespace, run_module):
    nodes = workers(k8s)
    first = nodes[0]
    spread = [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "spread"}}}]
    deployment(k8s, namespace, "spread", len(nodes), spread=spread)
    wait_for(lambda: running_nodes(k8s, namespace, "spread") == nodes, 180, "one spread pod on each worker")
    (leaving,) = [p.metadata.name for p in pods(k8s, namespace, "spread") if p.spec.node_name == first]

    # The plan: the pod that leaves finds no node (the drained node counts as a domain with none).
    plan = plan_of(run_module, first)
    pending = dict((p["pod"], p["reason"]) for p in plan["pending"])
    assert "topology spread (%s, maxSkew 1)" % HOST in pending["%s/%s" % (namespace, leaving)], plan["pending"]
    assert not [b for b in plan["blockers"] if namespace in b], plan["blockers"]

    try:
        done = run_module("node_maintenance", {"name": first, "method": "drain", "wait_timeout": 300})
        assert not done.get("failed"), done

        # The scheduler agrees: the replacement pod stays Pending on the spread constraint.
        def replacement_verdict():
            waiting = [unschedulable_message(p) for p in pods(k8s, namespace, "spread") if not p.spec.node_name]
            return next((m for m in waiting if m is not None), None)

        wait_for(replacement_verdict, 120, "the replacement pod to be found unschedulable")
        assert "topology spread" in replacement_verdict()
    finally:
        run_module("node_maintenance", {"name": first, "state": "absent"})
    # Back in service, the node takes the pod again (the only place the rule allows).
    wait_for(lambda: running_nodes(k8s, namespace, "spread") == nodes, 120, "the pending pod to run on %s" % first)


HUGEPAGES = "hugepages-2Mi"


def offer_hugepages(k8s, node, amount):
    """The node reports ``amount`` of 2 MiB huge pages (None: none), as a kubelet would; kwok keeps
    the capacity a node reports."""
    core(k8s).patch_node_status(node, {"status": {"capacity": {HUGEPAGES: amount},
                                                  "allocatable": {HUGEPAGES: amount}}})


def test_hugepages_verdicts_match_the_scheduler(k8s, namespace, run_module):
    """A VM backed by huge pages: its launcher pod requests them (virt-controller's template), and
    only nodes that offer them take it. The plan's verdict, and the node it names once a second
    node offers them, are the scheduler's."""
    first, second = workers(k8s)[0], workers(k8s)[1]
    offer_hugepages(k8s, first, "1Gi")
    try:
        spec = {"domain": {"devices": {}, "memory": {"hugepages": {"pageSize": "2Mi"}},
                           "resources": {"requests": {"memory": "256Mi", "cpu": "50m"}}},
                "evictionStrategy": "LiveMigrate", "terminationGracePeriodSeconds": 0}
        custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "huge"},
            "spec": {"runStrategy": "Always", "template": {"spec": spec}}})
        # Only the first node offers huge pages: the scheduler puts the VM there.
        wait_for(lambda: vmi_node(k8s, namespace, "huge") == first, 180, "VM huge to run on %s" % first)
        launchers = core(k8s).list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items
        (launcher,) = [p for p in launchers if p.spec.node_name == first]
        requested = [c.resources.requests.get(HUGEPAGES) for c in launcher.spec.containers
                     if c.resources and c.resources.requests and c.resources.requests.get(HUGEPAGES)]
        assert requested, "virt-controller's launcher pod requests no %s: %s" % (HUGEPAGES, launcher.spec.containers)
        # The plan: no other node offers huge pages.
        plan = plan_of(run_module, first)
        (entry,) = [v for v in plan["vms"] if v["namespace"] == namespace]
        assert entry["target"] is None and plan["capacity_ok"] is False, plan
        (blocker,) = [b for b in plan["blockers"] if b.startswith("VM %s/huge" % namespace)]
        assert HUGEPAGES in blocker, blocker

        # The scheduler agrees: a migration's target pod stays Pending for want of huge pages.
        assert HUGEPAGES in migration_target_verdict(k8s, namespace, "huge")

        # A second node offers huge pages: the plan names it, and the drain puts the VM there.
        offer_hugepages(k8s, second, "1Gi")
        plan = plan_of(run_module, first)
        (entry,) = [v for v in plan["vms"] if v["namespace"] == namespace]
        assert entry["target"] == second and not [b for b in plan["blockers"] if namespace in b], plan
        try:
            done = run_module("node_maintenance", {"name": first, "method": "drain", "wait_timeout": 300})
            assert not done.get("failed"), done
            assert vmi_node(k8s, namespace, "huge") == second
        finally:
            run_module("node_maintenance", {"name": first, "state": "absent"})
    finally:
        # The VM goes first, then the huge pages of both nodes (other tests share the lab).
        try:
            custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", "huge")
        except ApiException:
            pass
        wait_for(lambda: vmi_node(k8s, namespace, "huge") is None, 120, "VM huge to stop")
        offer_hugepages(k8s, first, None)
        offer_hugepages(k8s, second, None)
