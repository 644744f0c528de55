"""The virt-handler stand-in beside the real virt-controller (``--real-kubevirt``).

What virt-handler does at the API, checked with kubectl the way a user would on a real
cluster: node heartbeat and device-plugin resources, VMIs started and reported Running
by the handler of their node, the LiveMigratable conditions, live migrations that keep
the VMI and move it, failed migrations reported by the source, guests shut down when
their launcher pod is evicted (Succeeded), crashing (Failed) or ignoring ACPI (killed at
the end of the grace period), the node-labeller's skip annotation, a failed node whose
handler falls silent, and a restarted handler that marks its node schedulable only once
its device plugins are up.

Needs a lab whose KubeVirt is the real virt-controller plus this stand-in (the ``lab``
fixture of lab/pytest_plugin.py, or ``KUBEVIRT_OPS_LAB_DIR`` pointing at one). Tests
drain, cordon and fail nodes, so they run one at a time.
"""

import calendar
import json
import time

import pytest
from kubernetes import client, watch

from lab.wait import wait_for

WAIT = 180
DEVICES = ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net")
FAIL_MIGRATION = "kubevirt-ops.lab/fail-migration"
GUEST_CRASH = "kubevirt-ops.lab/guest-crash"
IGNORES_ACPI = "kubevirt-ops.lab/guest-ignores-acpi"
SCHEDULABLE = "kubevirt.io/schedulable"
SKIP_NODE = "node-labeller.kubevirt.io/skip-node"
MODEL_LABEL = "cpu-model.node.kubevirt.io/Haswell-noTSX"
DRAIN_FLAGS = ("--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")


# -- helpers --------------------------------------------------------------------------------


def get(lab, *args, namespace=None):
    ns = ("-n", namespace) if namespace else ()
    result = lab.kubectl("get", *args, *ns, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def apply(lab, manifest, namespace):
    lab.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def vm(name, run_strategy="Always", eviction="LiveMigrate", memory="2Gi", claim=None, annotations=None,
       grace=None, features=None):
    devices = {
        "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
        "interfaces": [{"name": "default", "masquerade": {}}],
    }
    volumes = [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
    if claim:
        devices["disks"].append({"name": "data", "disk": {"bus": "virtio"}})
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
    domain = {"devices": devices, "resources": {"requests": {"memory": memory, "cpu": "100m"}}}
    if features is not None:
        domain["features"] = features
    template = {
        "evictionStrategy": eviction,
        "domain": domain,
        "networks": [{"name": "default", "pod": {}}],
        "volumes": volumes,
    }
    if grace is not None:
        template["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "runStrategy": run_strategy,
            "template": {"spec": template},
        },
    }


def pvc(name, mode):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}},
    }


def migration(name, vmi_name):
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": vmi_name},
    }


def condition(obj, type_):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def running_vmi(lab, namespace, name):
    def ready():
        vmi = get(lab, "vmi", name, namespace=namespace)
        if vmi and vmi["status"].get("phase") == "Running" and (condition(vmi, "Ready") or {}).get("status") == "True":
            return vmi
        return None

    return wait_for(ready, WAIT, f"VMI {namespace}/{name} Running and Ready")


def launcher_pods(lab, namespace, name):
    pods = get(lab, "pods", "-l", f"vm.kubevirt.io/name={name}", namespace=namespace)
    return pods["items"] if pods else []


def worker_nodes(lab):
    nodes = get(lab, "nodes", "-l", "node-role.kubernetes.io/worker")["items"]
    return [n for n in nodes if not n["spec"].get("unschedulable")]


def seconds_between(start, end):
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return time.mktime(time.strptime(end, fmt)) - time.mktime(time.strptime(start, fmt))


def epoch(timestamp):
    return calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))


def release(kubevirt_version):
    major, minor = kubevirt_version["gitVersion"].lstrip("v").split(".")[:2]
    return int(major), int(minor)


def cpu_manager_labels(kubevirt_version):
    """The CPU-manager label keys virt-handler's heartbeat writes (pkg/virt-handler/heartbeat/heartbeat.go):
    v1.CPUManager, "cpumanager" in v1.7; v1.8 renamed it "kubevirt.io/cpumanager" and writes the old
    key beside it (v1.DeprecatedCPUManager)."""
    if release(kubevirt_version) >= (1, 8):
        return {"cpumanager": "false", "kubevirt.io/cpumanager": "false"}
    return {"cpumanager": "false"}


def virtctl(lab, namespace, name, action):
    lab.kubectl("replace", "--raw",
                f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/{action}",
                "-f", "-", input="{}")


def phase_time(vmi, phase):
    stamps = [t["phaseTransitionTimestamp"] for t in vmi["status"].get("phaseTransitionTimestamps") or []
              if t["phase"] == phase]
    return epoch(stamps[-1]) if stamps else None


def watch_until(list_call, args, resource_version, done, what, timeout=WAIT, **kwargs):
    """Every version of the objects ``list_call(*args, **kwargs)`` lists, from ``resource_version`` on,
    until ``done(seen)``; ``seen`` is the list of (event type, object) so far, oldest first."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stream = watch.Watch().stream(list_call, *args, resource_version=resource_version, timeout_seconds=10, **kwargs)
        for event in stream:
            obj = event["object"]
            meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata.to_dict()
            resource_version = meta["resource_version" if "resource_version" in meta else "resourceVersion"]
            seen.append((event["type"], obj))
            if done(seen):
                return seen
    raise AssertionError(f"{what}: not within {timeout}s")


@pytest.fixture
def uncordon(lab):
    drained = []
    yield drained
    for node in drained:
        lab.kubectl("uncordon", node, check=False)


# -- nodes ----------------------------------------------------------------------------------


def test_workers_heartbeat_and_advertise_device_plugins(lab, kubevirt_version):
    cpu_manager = cpu_manager_labels(kubevirt_version)
    for node in worker_nodes(lab):
        labels, status = node["metadata"]["labels"], node["status"]
        assert labels.get("kubevirt.io/schedulable") == "true", node["metadata"]["name"]
        assert "kubevirt.io/heartbeat" in node["metadata"]["annotations"]
        assert {key: value for key, value in labels.items() if key.endswith("cpumanager")} == cpu_manager
        for resource in DEVICES:
            assert status["capacity"].get(resource) == "1k", (node["metadata"]["name"], resource)
            assert status["allocatable"].get(resource) == "1k", (node["metadata"]["name"], resource)
        assert any(key.startswith("host-model-cpu.node.kubevirt.io/") for key in labels)


def test_device_plugin_resources_come_back(lab):
    name = worker_nodes(lab)[0]["metadata"]["name"]
    patch = [{"op": "remove", "path": "/status/allocatable/devices.kubevirt.io~1kvm"}]
    lab.kubectl("patch", "node", name, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    wait_for(
        lambda: get(lab, "node", name)["status"]["allocatable"].get(DEVICES[0]) == "1k",
        30,
        f"{DEVICES[0]} back in the allocatable of {name}",
    )


def test_restarted_handler_marks_its_node_schedulable_only_once_its_device_plugins_are_up(lab, k8s, kubevirt_version):
    """virt-handler's pod goes: its device plugins stop (the kubelet reports 0 of each) and it labels
    the node unschedulable. The new pod's first heartbeat still says false; only once its plugins
    are registered and advertised does a beat say true (heartbeat.go heartBeat, waitForDevicePlugins)."""
    core = client.CoreV1Api(k8s)
    name = worker_nodes(lab)[0]["metadata"]["name"]
    [old] = [p for p in get(lab, "pods", "-l", "kubevirt.io=virt-handler", namespace="kubevirt")["items"]
             if p["spec"].get("nodeName") == name]
    since = core.read_node(name).metadata.resource_version
    lab.kubectl("delete", "pod", "-n", "kubevirt", old["metadata"]["name"], "--wait=false")

    def devices(node, field):
        return {r: (getattr(node.status, field) or {}).get(r) for r in DEVICES}

    def back(seen):
        nodes = [obj for _, obj in seen]
        stopped = [i for i, n in enumerate(nodes) if set(devices(n, "allocatable").values()) == {"0"}]
        return bool(stopped) and any(n.metadata.labels.get(SCHEDULABLE) == "true" for n in nodes[stopped[0]:])

    seen = [obj for _, obj in watch_until(core.list_node, (), since, back, f"{name} schedulable again",
                                          field_selector=f"metadata.name={name}")]
    stopped = next(i for i, n in enumerate(seen) if set(devices(n, "allocatable").values()) == {"0"})
    assert seen[stopped].metadata.labels[SCHEDULABLE] == "false"
    assert set(devices(seen[stopped], "capacity").values()) == {"0"}
    for node in seen:
        if node.metadata.labels.get(SCHEDULABLE) == "true":
            assert set(devices(node, "capacity").values()) == set(devices(node, "allocatable").values()) == {"1k"}
    assert devices(seen[-1], "allocatable") == {r: "1k" for r in DEVICES}
    labels = seen[-1].metadata.labels
    assert {key: value for key, value in labels.items() if key.endswith("cpumanager")} == cpu_manager_labels(kubevirt_version)
    wait_for(lambda: any(p["spec"].get("nodeName") == name and p["status"].get("phase") == "Running"
                         for p in get(lab, "pods", "-l", "kubevirt.io=virt-handler", namespace="kubevirt")["items"]),
             60, f"virt-handler back on {name}")


def test_skip_node_annotation_freezes_labels_whatever_its_value(lab):
    name = worker_nodes(lab)[-1]["metadata"]["name"]
    lab.kubectl("annotate", "node", name, f"{SKIP_NODE}=false", "--overwrite")
    try:
        lab.kubectl("label", "node", name, f"{MODEL_LABEL}-")
        time.sleep(10)
        assert MODEL_LABEL not in get(lab, "node", name)["metadata"]["labels"]
    finally:
        lab.kubectl("annotate", "node", name, f"{SKIP_NODE}-")
    wait_for(
        lambda: get(lab, "node", name)["metadata"]["labels"].get(MODEL_LABEL) == "true",
        60,
        f"{MODEL_LABEL} back on {name}",
    )


# -- VMI lifecycle --------------------------------------------------------------------------


def test_vm_runs_and_handler_reports_it(lab, namespace):
    apply(lab, vm("web"), namespace)
    vmi = running_vmi(lab, namespace, "web")
    status = vmi["status"]
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == status["nodeName"]
    assert (condition(vmi, "LiveMigratable") or {}).get("status") == "True"
    assert (condition(vmi, "StorageLiveMigratable") or {}).get("status") == "True"
    assert status["migrationMethod"] == "BlockMigration"  # the containerDisk is local
    assert "Running" in [t["phase"] for t in status["phaseTransitionTimestamps"]]
    [pod] = [p for p in launcher_pods(lab, namespace, "web") if p["status"]["phase"] == "Running"]
    assert pod["spec"]["nodeName"] == status["nodeName"]
    assert status["interfaces"][0]["name"] == "default"
    assert status["interfaces"][0]["ipAddress"] == pod["status"]["podIP"]
    assert [v.get("target") for v in status["volumeStatus"] if v["name"] == "root"] == ["vda"]


def test_rwo_claim_blocks_live_migration_rwx_does_not(lab, namespace):
    apply(lab, pvc("rwo", "ReadWriteOnce"), namespace)
    apply(lab, pvc("rwx", "ReadWriteMany"), namespace)
    apply(lab, vm("pinned", claim="rwo", memory="1Gi"), namespace)
    apply(lab, vm("mobile", claim="rwx", memory="1Gi"), namespace)
    pinned = running_vmi(lab, namespace, "pinned")
    mobile = running_vmi(lab, namespace, "mobile")
    blocked = condition(pinned, "LiveMigratable")
    assert blocked["status"] == "False" and blocked["reason"] == "DisksNotLiveMigratable"
    assert "PVC rwo is not shared" in blocked["message"]
    # Storage migration does not mind the access mode.
    assert condition(pinned, "StorageLiveMigratable")["status"] == "True"
    assert condition(mobile, "LiveMigratable")["status"] == "True"


# -- live migration -------------------------------------------------------------------------


def test_migration_keeps_the_vmi_and_moves_it(lab, namespace):
    apply(lab, vm("mover", memory="2Gi"), namespace)
    before = running_vmi(lab, namespace, "mover")
    apply(lab, migration("move", "mover"), namespace)
    wait_for(
        lambda: (get(lab, "vmim", "move", namespace=namespace) or {}).get("status", {}).get("phase")
        in ("Succeeded", "Failed"),
        WAIT,
        "the migration to end",
    )
    assert get(lab, "vmim", "move", namespace=namespace)["status"]["phase"] == "Succeeded"
    after = get(lab, "vmi", "mover", namespace=namespace)
    state = after["status"]["migrationState"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["nodeName"] == state["targetNode"] != before["status"]["nodeName"]
    assert after["metadata"]["labels"]["kubevirt.io/nodeName"] == state["targetNode"]
    assert state["completed"] is True and state["targetNodeDomainDetected"] is True
    # 2Gi at the default 1Gi/s: whole-second timestamps at least a second apart.
    assert seconds_between(state["startTimestamp"], state["endTimestamp"]) >= 1
    # The target handler's final cleanup and the source launcher's exit follow the completion in writes of
    # their own (migration-target.go finalCleanup; virt-launcher exits once its domain left), so a reader that
    # saw the migration succeed may see either a moment later.
    wait_for(
        lambda: "kubevirt.io/migrationTargetNodeName"
        not in get(lab, "vmi", "mover", namespace=namespace)["metadata"]["labels"],
        60,
        "the target handler's final cleanup",
    )
    wait_for(
        lambda: any(
            p["metadata"]["name"] == state["sourcePod"] and p["status"]["phase"] == "Succeeded"
            for p in launcher_pods(lab, namespace, "mover")
        ),
        60,
        "the source launcher pod to complete",
    )


@pytest.fixture
def migration_link(lab):
    """Set the lab's migration link speed (lab/standins/links.py) for the test; none again afterwards."""
    def set_link(value):
        lab.kubectl("annotate", "--overwrite", "-n", "kubevirt", "kubevirt", "kubevirt",
                    f"kubevirt-ops.lab/migration-link={value}")

    yield set_link
    lab.kubectl("annotate", "-n", "kubevirt", "kubevirt", "kubevirt", "kubevirt-ops.lab/migration-link-", check=False)


def test_migrations_off_one_node_share_its_link(lab, namespace, migration_link):
    """Two 8Gi guests leave one node at once over a link of 1Gi/s, each migration capped at 1Gi/s: each gets half
    of the link while both copy, so both copies take 16 s less the head start of the first (the first copies alone
    until the second starts, then each at half the link; the second ends alone at the full link), where one alone
    would take 8 s; and the two together can take no less than the link needs for 16Gi, 16 s."""
    apply(lab, vm("first", memory="8Gi"), namespace)
    node = running_vmi(lab, namespace, "first")["status"]["nodeName"]
    second = vm("second", memory="8Gi")
    second["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}
    apply(lab, second, namespace)
    assert running_vmi(lab, namespace, "second")["status"]["nodeName"] == node
    migration_link("1Gi")
    for name in ("first", "second"):
        apply(lab, migration(f"move-{name}", name), namespace)
    for name in ("first", "second"):
        wait_for(lambda n=name: (get(lab, "vmim", f"move-{n}", namespace=namespace) or {}).get("status", {}).get(
            "phase") in ("Succeeded", "Failed"), WAIT, f"the migration of {name} to end")
    states = {}
    for name in ("first", "second"):
        assert get(lab, "vmim", f"move-{name}", namespace=namespace)["status"]["phase"] == "Succeeded"
        states[name] = get(lab, "vmi", name, namespace=namespace)["status"]["migrationState"]
        assert states[name]["sourceNode"] == node
    # Both copied together for most of the time (each started before the other ended), at half the link each.
    first, second = states["first"], states["second"]
    assert epoch(first["startTimestamp"]) < epoch(second["endTimestamp"])
    assert epoch(second["startTimestamp"]) < epoch(first["endTimestamp"])
    # The timestamps are whole seconds (each up to 1 s early), so each figure below may be off by up to 1 s; a slow
    # machine only makes the copies longer. How long the first had the link alone depends on when the second
    # started (the machine's load), so the bound is taken from the timestamps, not assumed.
    starts = sorted(epoch(state["startTimestamp"]) for state in states.values())
    head_start = starts[1] - starts[0]
    for state in states.values():
        assert seconds_between(state["startTimestamp"], state["endTimestamp"]) >= 16 - head_start - 2, (head_start, state)
    ends = [epoch(state["endTimestamp"]) for state in states.values()]
    assert max(ends) - starts[0] >= 16 - 1, states


def test_fail_migration_knob_fails_the_migration_at_the_source(lab, namespace):
    apply(lab, vm("stubborn", memory="1Gi", annotations={FAIL_MIGRATION: "true"}), namespace)
    before = running_vmi(lab, namespace, "stubborn")
    apply(lab, migration("try", "stubborn"), namespace)
    wait_for(
        lambda: (get(lab, "vmim", "try", namespace=namespace) or {}).get("status", {}).get("phase")
        in ("Succeeded", "Failed"),
        WAIT,
        "the migration to end",
    )
    assert get(lab, "vmim", "try", namespace=namespace)["status"]["phase"] == "Failed"
    after = get(lab, "vmi", "stubborn", namespace=namespace)
    state = after["status"]["migrationState"]
    assert state["failed"] is True and FAIL_MIGRATION in state["failureReason"]
    assert after["status"]["phase"] == "Running"
    assert after["status"]["nodeName"] == before["status"]["nodeName"]
    wait_for(
        lambda: "kubevirt.io/migrationTargetNodeName"
        not in get(lab, "vmi", "stubborn", namespace=namespace)["metadata"]["labels"],
        60,
        "the target handler's final cleanup",
    )


# -- ending ---------------------------------------------------------------------------------


def test_evicted_launcher_shuts_the_guest_down_succeeded(lab, namespace, uncordon):
    apply(lab, vm("plain", run_strategy="Manual", eviction="None", memory="1Gi"), namespace)
    lab.kubectl("patch", "vm", "plain", "-n", namespace, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"stateChangeRequests": [{"action": "Start"}]}}))
    vmi = running_vmi(lab, namespace, "plain")
    node = vmi["status"]["nodeName"]
    uncordon.append(node)
    lab.kubectl("drain", node, *DRAIN_FLAGS, "--pod-selector=vm.kubevirt.io/name=plain")
    ended = wait_for(
        lambda: (lambda v: v if v and v["status"].get("phase") in ("Succeeded", "Failed") else None)(
            get(lab, "vmi", "plain", namespace=namespace)
        ),
        WAIT,
        "the VMI to end",
    )
    assert ended["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert ended["status"]["phase"] == "Succeeded"
    wait_for(lambda: not launcher_pods(lab, namespace, "plain"), 60, "the launcher pod to go")


def test_guest_crash_knob_fails_the_vmi_and_rerun_on_failure_restarts_it(lab, namespace):
    apply(lab, vm("crashy", run_strategy="RerunOnFailure", memory="1Gi"), namespace)
    first = running_vmi(lab, namespace, "crashy")
    lab.kubectl("annotate", "vmi", "crashy", "-n", namespace, f"{GUEST_CRASH}=true")
    second = wait_for(
        lambda: (lambda v: v if v and v["metadata"]["uid"] != first["metadata"]["uid"] else None)(
            get(lab, "vmi", "crashy", namespace=namespace)
        ),
        WAIT,
        "a new VMI after the crash",
    )
    assert second is not None
    running_vmi(lab, namespace, "crashy")


def test_guest_ignoring_acpi_is_killed_at_the_grace_period(lab, namespace, k8s):
    """A guest that ignores ACPI keeps running while virt-handler signals it again every 5 s, and is
    killed once terminationGracePeriodSeconds have passed (pkg/virt-handler/vm.go helperVmShutdown,
    shutdownVMI). With ACPI in its domain (virt-api's default) the VMI then ends Failed; a guest
    whose VMI disables ACPI cannot hear the signal, whatever it would do, and its kill is no
    failure: Succeeded (calculateVmPhaseForStatusReason, isACPIEnabled). Run strategies act on
    that phase (pkg/virt-controller/watch/vm/vm.go): RerunOnFailure and Always start it again,
    Manual does not, and a stop (Halted) waits for the kill."""
    grace = 6
    ignoring = {IGNORES_ACPI: "true"}
    specs = {
        "rerun": dict(run_strategy="RerunOnFailure", annotations=ignoring),
        "always": dict(run_strategy="Always", annotations=ignoring),
        "manual": dict(run_strategy="Manual", annotations=ignoring),
        "halted": dict(run_strategy="Always", annotations=ignoring),
        "no-acpi": dict(run_strategy="RerunOnFailure", features={"acpi": {"enabled": False}}),
    }
    for name, kwargs in specs.items():
        apply(lab, vm(name, eviction="None", memory="512Mi", grace=grace, **kwargs), namespace)
    virtctl(lab, namespace, "manual", "start")
    first = {name: running_vmi(lab, namespace, name)["metadata"]["uid"] for name in specs}
    api = client.CustomObjectsApi(k8s)
    since = api.list_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachineinstances")
    since = since["metadata"]["resourceVersion"]

    asked = time.time()
    for name in ("rerun", "always", "manual", "no-acpi"):
        [pod] = [p for p in launcher_pods(lab, namespace, name) if p["status"].get("phase") == "Running"]
        lab.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait=false")
    virtctl(lab, namespace, "halted", "stop")

    def last(seen):
        latest = {}
        for kind, obj in seen:
            latest[obj["metadata"]["uid"]] = (kind, obj)
        return latest

    def running_again(latest, name):
        return any(obj["metadata"]["name"] == name and uid != first[name] and obj["status"].get("phase") == "Running"
                   for uid, (_, obj) in latest.items())

    def done(seen):
        latest = last(seen)
        ended = {name: latest.get(first[name], (None, {"status": {}}))[1]["status"].get("phase") for name in specs}
        return (running_again(latest, "rerun") and running_again(latest, "always") and ended["manual"] == "Failed"
                and ended["no-acpi"] == "Succeeded" and latest.get(first["halted"], ("",))[0] == "DELETED")

    latest = last(watch_until(api.list_namespaced_custom_object, ("kubevirt.io", "v1", namespace, "virtualmachineinstances"),
                              since, done, "the guests killed and the VMs restarted as their strategies say"))
    for name in specs:
        vmi = latest[first[name]][1]
        phase = "Succeeded" if name == "no-acpi" else "Failed"
        assert vmi["status"]["phase"] == phase, name
        # Not before the grace period (whole-second timestamps, the clock the test shares with the lab).
        assert phase_time(vmi, phase) >= int(asked) + grace, (name, vmi["status"]["phaseTransitionTimestamps"])
    for name in ("rerun", "always"):
        [again] = [obj for uid, (_, obj) in latest.items() if obj["metadata"]["name"] == name and uid != first[name]]
        assert epoch(again["metadata"]["creationTimestamp"]) >= int(asked) + grace
    # Manual keeps its Failed VMI, a stopped VM and RerunOnFailure after a clean end start nothing.
    assert get(lab, "vmi", "manual", namespace=namespace)["metadata"]["uid"] == first["manual"]
    for name in ("halted", "no-acpi"):
        wait_for(lambda n=name: (get(lab, "vm", n, namespace=namespace).get("status") or {}).get("printableStatus")
                 == "Stopped", WAIT, f"{name} Stopped")
    assert all(obj["metadata"]["name"] not in ("manual", "halted", "no-acpi") or uid == first[obj["metadata"]["name"]]
               for uid, (_, obj) in latest.items())


# -- a failed node --------------------------------------------------------------------------


def test_failed_node_handler_falls_silent(lab, namespace, restore_nodes):
    node = worker_nodes(lab)[0]["metadata"]["name"]
    lab.node_fail(node)
    beat = get(lab, "node", node)["metadata"]["annotations"]["kubevirt.io/heartbeat"]
    patch = [{"op": "remove", "path": "/status/allocatable/devices.kubevirt.io~1kvm"}]
    lab.kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    time.sleep(15)
    silent = get(lab, "node", node)
    assert DEVICES[0] not in silent["status"]["allocatable"], "a dead handler wrote its node"
    assert silent["metadata"]["annotations"]["kubevirt.io/heartbeat"] == beat
    lab.node_recover(node)
    wait_for(
        lambda: get(lab, "node", node)["status"]["allocatable"].get(DEVICES[0]) == "1k",
        60,
        f"the handler of {node} back at work",
    )
