"""The plan's placement judged by the real kube-scheduler: what the plan says fits runs where the
plan put it, and what it says does not fit stays Pending for the reason the plan gave.

Pod anti-affinity (a VM kept away from a Deployment's pods) and topology spread (the node being
drained counts as a domain) are the rules the scheduler applies beyond node selection and room.
"""

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.wait import wait_for

GROUP, VERSION = "kubevirt.io", "v1"
HOST = "kubernetes.io/hostname"


def core(k8s):
    return client.CoreV1Api(k8s)


def custom(k8s):
    return client.CustomObjectsApi(k8s)


def workers(k8s):
    items = core(k8s).list_node(label_selector="node-role.kubernetes.io/worker").items
    return sorted(n.metadata.name for n in items if not n.spec.unschedulable)


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
    custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstancemigrations", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "judge"}, "spec": {"vmiName": "db"}})

    def target_pod_verdict():
        for pod in core(k8s).list_namespaced_pod(namespace, label_selector="kubevirt.io/migrationJobUID").items:
            message = unschedulable_message(pod)
            if message is not None:
                return message
        return None

    wait_for(target_pod_verdict, 120, "the migration's target pod to be found unschedulable")
    assert "anti-affinity" in target_pod_verdict()
    custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstancemigrations", "judge")
    wait_for(lambda: not core(k8s).list_namespaced_pod(
        namespace, label_selector="kubevirt.io/migrationJobUID").items, 120, "the target pod to go")

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
