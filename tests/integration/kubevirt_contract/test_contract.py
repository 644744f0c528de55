"""Contract tests: the behaviour page, checked against the real KubeVirt.

Every row of every table in the behaviour page (``kubevirt-behavior.md``: eviction
strategies, run strategies and the start/stop/restart actions) and the facts around them,
checked on a lab that runs the real virt-controller and virt-api (KubeVirt v1.7.0 by
default, ``--kubevirt-version`` for another release; see conftest.py) the way an operator
checks them on a real cluster: with kubectl (drain, get, the ``subresources.kubevirt.io``
actions) and the plain Kubernetes API. Where the page and the real components disagree,
the tests follow the real components and name the upstream code in a comment.

Run from the repository root: ``.venv/bin/python -m pytest tests/integration/kubevirt_contract``
(or point ``KUBEVIRT_OPS_LAB_DIR`` at a lab brought up with ``--kubevirt real``). The tests
drain and cordon nodes, so they run one at a time; every node is uncordoned after each
test. Waits are generous and nothing asserts on timing.
"""

import json
import re
import subprocess
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from lab import metal3
from lab import nodes as lab_nodes
from lab.machines import bmc as lab_bmc
from lab.paths import LabPaths
from lab.wait import wait_for

WAIT = 240
GROUP, VERSION = "kubevirt.io", "v1"
HCO = ("hco.kubevirt.io", "v1beta1", "kubevirt-hyperconverged", "hyperconvergeds", "kubevirt-hyperconverged")
# HCO >= 1.18 serves v1 beside v1beta1; kubectl prefers v1, so v1beta1 is named explicitly.
HCO_V1BETA1 = "hyperconvergeds.v1beta1.hco.kubevirt.io"
HCO_V1 = "hyperconvergeds.v1.hco.kubevirt.io"
WORKER_ROLE = "node-role.kubernetes.io/worker"
ACTIVE_MIGRATION_PHASES = {"Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"}
DRAIN_FLAGS = ("--ignore-daemonsets", "--delete-emptydir-data", "--force")
EVICTION_HOOK = "virt-launcher-eviction-interceptor.kubevirt.io"


def evacuation_triggered(namespace, name):
    """virt-api's answer (429) to the eviction of a launcher pod it marks for evacuation
    (pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go)."""
    return f'Eviction triggered evacuation of VMI "{namespace}/{name}"'


# -- manifests ------------------------------------------------------------------------------


def pvc(name, access_mode):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": [access_mode], "resources": {"requests": {"storage": "5Gi"}}},
    }


def vm(
    name,
    run_strategy="Always",
    eviction=None,
    claim=None,
    memory="1Gi",
    running=None,
    annotations=None,
    node_selector=None,
    extra_spec=None,
    devices=None,
):
    template_spec = {
        "domain": {
            "cpu": {"cores": 2},
            "memory": {"guest": memory},
            "resources": {"requests": {"memory": memory}},
            "devices": dict(devices or {}),
        },
        "networks": [{"name": "default", "pod": {}}],
    }
    template_spec["domain"]["devices"].setdefault("interfaces", [{"name": "default", "masquerade": {}}])
    if eviction:
        template_spec["evictionStrategy"] = eviction
    if claim:
        template_spec["domain"]["devices"]["disks"] = [{"name": "root", "disk": {"bus": "virtio"}}]
        template_spec["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": claim}}]
    if node_selector:
        template_spec["nodeSelector"] = node_selector
    template_spec.update(extra_spec or {})
    spec = {"template": {"metadata": {"labels": {"app": name}}, "spec": template_spec}}
    if running is not None:
        spec["running"] = running
    if run_strategy is not None:
        spec["runStrategy"] = run_strategy
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": spec,
    }


# -- kubectl helpers ----------------------------------------------------------------------


def apply(lab, namespace, *objects):
    lab.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def get(lab, namespace, kind, name):
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    result = lab.kubectl(*args, check=False)
    if result.returncode != 0:
        if "NotFound" in result.stderr or "not found" in result.stderr:
            return None
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)


def items(lab, namespace, kind, selector=None):
    args = ["get", kind, "-o", "json"] + (["-n", namespace] if namespace else ["-A"])
    if selector:
        args += ["-l", selector]
    return json.loads(lab.kubectl(*args).stdout)["items"]


def quantity(value):
    """A Kubernetes quantity ("3Gi", "3516923905", "500M") in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return int(float(value[: -len(suffix)]) * factor)
    return int(value)


def status(obj):
    return (obj or {}).get("status") or {}


def condition(obj, type_):
    return next((c for c in status(obj).get("conditions") or [] if c.get("type") == type_), None)


def wait(predicate, what, timeout=WAIT):
    return wait_for(predicate, timeout, what)


def wait_vmi_running(lab, namespace, name, other_than_uid=None):
    def running():
        vmi = get(lab, namespace, "vmi", name)
        if vmi is None or vmi["metadata"]["uid"] == other_than_uid:
            return None
        ready = condition(vmi, "Ready")
        if status(vmi).get("phase") == "Running" and ready and ready["status"] == "True":
            return vmi
        return None

    return wait(running, f"VMI {namespace}/{name} Running and Ready")


def wait_vm_stopped(lab, namespace, name):
    def stopped():
        obj = get(lab, namespace, "vm", name)
        vmi = get(lab, namespace, "vmi", name)
        vmi_ended = vmi is None or status(vmi).get("phase") in ("Succeeded", "Failed")
        return status(obj).get("printableStatus") == "Stopped" and vmi_ended

    wait(stopped, f"VM {namespace}/{name} stopped")


def vmi_uid(lab, namespace, name):
    return get(lab, namespace, "vmi", name)["metadata"]["uid"]


def drain(lab, node, timeout="180s", check=True, extra=DRAIN_FLAGS):
    return lab.kubectl("drain", node, *extra, f"--timeout={timeout}", check=check, timeout=900)


def virtctl(lab, namespace, name, action, check=True):
    """What ``virtctl <action>`` does: PUT on the subresources.kubevirt.io aggregated API."""
    return lab.kubectl(
        "replace",
        "--raw",
        f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/{action}",
        "-f",
        "-",
        input="{}",
        check=check,
    )


def workers(lab):
    nodes = json.loads(
        lab.kubectl("get", "nodes", "-l", "kubevirt.io/schedulable=true", "-o", "json").stdout
    )["items"]
    return sorted(n["metadata"]["name"] for n in nodes if not n["spec"].get("unschedulable"))


def launcher_pods(lab, namespace, vmi_uid_):
    return items(lab, namespace, "pods", f"kubevirt.io/created-by={vmi_uid_}")


def patch_hco(lab, spec):
    lab.kubectl(
        "patch", HCO_V1BETA1, HCO[2], "-n", HCO[4], "--type", "merge", "-p", json.dumps({"spec": spec})
    )


def kubevirt_configuration(lab):
    return get(lab, "kubevirt", "kubevirt", "kubevirt")["spec"].get("configuration") or {}


def patch_kubevirt(lab, body, subresource=None):
    """A merge patch of the KubeVirt CR (``subresource="status"``: as virt-operator writes it); the object after it."""
    extra = [f"--subresource={subresource}"] if subresource else []
    return json.loads(lab.kubectl("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--type", "merge", *extra,
                                  "-p", json.dumps(body), "-o", "json").stdout)


def kubevirt_jsonpatch(lab, operations):
    """Set (None: remove) HCO's ``kubevirt.kubevirt.io/jsonpatch`` annotation."""
    value = "kubevirt.kubevirt.io/jsonpatch" + ("-" if operations is None else "=" + json.dumps(operations))
    lab.kubectl("annotate", "--overwrite", HCO_V1BETA1, HCO[2], "-n", HCO[4], value)


def hco_conditions(lab):
    """{type: (status, reason, message)} of the HyperConverged, once HCO has reconciled its generation."""
    hco = get(lab, HCO[4], HCO_V1BETA1, HCO[2])
    if status(hco).get("observedGeneration") != hco["metadata"]["generation"]:
        return {}
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status(hco).get("conditions") or []}


def cordon_all_but(lab, keep):
    others = [n for n in workers(lab) if n not in keep]
    for node in others:
        lab.kubectl("cordon", node)
    return others


# -- the real KubeVirt is up --------------------------------------------------------------------


def test_real_kubevirt_deployed_and_cluster_crs(lab, kubevirt_version):
    ready = json.loads((lab.state_dir / "sim" / "ready").read_text())
    assert ready["mode"] == "real-kubevirt"  # only the virt-handler stand-in beside it
    assert kubevirt_version["gitVersion"] == f"v{lab.settings.kubevirt_version}"
    kubevirt = get(lab, "kubevirt", "kubevirt", "kubevirt")
    assert status(kubevirt)["phase"] == "Deployed"
    assert status(kubevirt)["observedKubeVirtVersion"] == kubevirt_version["gitVersion"]
    hco = get(lab, HCO[4], HCO_V1BETA1, HCO[2])
    assert condition(hco, "Available")["status"] == "True"
    # Defaulted (upstream's CR sets none): at least 2 workers = highly available = LiveMigrate.
    assert hco["spec"]["evictionStrategy"] == "LiveMigrate"
    assert status(hco)["infrastructureHighlyAvailable"] is True
    assert kubevirt_configuration(lab)["evictionStrategy"] == "LiveMigrate"
    apiservice = json.loads(
        lab.kubectl("get", "apiservice", "v1.subresources.kubevirt.io", "-o", "json").stdout
    )
    assert condition(apiservice, "Available")["status"] == "True"
    # The launcher eviction hook fails closed (page: failurePolicy Ignore).
    validator = json.loads(
        lab.kubectl("get", "validatingwebhookconfiguration", "virt-api-validator", "-o", "json").stdout
    )
    (hook,) = [h for h in validator["webhooks"] if h["name"] == EVICTION_HOOK]
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"][0]["resources"] == ["pods/eviction"]


def test_kubevirt_nodes_and_virt_handler(lab):
    nodes = json.loads(lab.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    handlers = items(lab, "kubevirt", "pods", "kubevirt.io=virt-handler")
    handler_nodes = {p["spec"].get("nodeName") for p in handlers}
    for node in nodes:
        labels = node["metadata"]["labels"]
        is_worker = "node-role.kubernetes.io/worker" in labels
        if is_worker:
            assert labels.get("kubevirt.io/schedulable") == "true", node["metadata"]["name"]
            assert node["metadata"]["name"] in handler_nodes
        else:
            assert labels.get("kubevirt.io/schedulable") != "true"
            assert node["metadata"]["name"] not in handler_nodes
    assert all(ref["kind"] == "DaemonSet" for p in handlers for ref in p["metadata"]["ownerReferences"])


def test_storage_provisions_claims_with_their_access_modes(lab, namespace):
    apply(lab, namespace, pvc("shared", "ReadWriteMany"), pvc("single", "ReadWriteOnce"))
    for name, mode in (("shared", "ReadWriteMany"), ("single", "ReadWriteOnce")):
        claim = wait(
            lambda: (c := get(lab, namespace, "pvc", name)) and status(c).get("phase") == "Bound" and c,
            f"PVC {name} bound",
        )
        assert claim["spec"]["storageClassName"] == "lab-storage"
        pv = get(lab, None, "pv", claim["spec"]["volumeName"])
        assert pv["spec"]["accessModes"] == [mode]
        assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    sc = get(lab, None, "storageclass", "lab-storage")
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"


# -- VM, VMI and launcher pod ----------------------------------------------------------------------


def test_vm_runs_in_a_launcher_pod_shaped_like_upstream(lab, namespace):
    tolerations = [{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                        ]
                    },
                }
            ]
        }
    }
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteMany"),
        vm(
            "shape",
            claim="disk",
            memory="3Gi",
            node_selector={"kubernetes.io/os": "linux"},
            extra_spec={"tolerations": tolerations, "affinity": affinity},
        ),
    )
    vmi = wait_vmi_running(lab, namespace, "shape")
    node = status(vmi)["nodeName"]
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == node
    assert condition(vmi, "LiveMigratable")["status"] == "True"
    assert status(vmi)["interfaces"][0]["ipAddress"]
    assert vmi["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachine"

    (pod,) = launcher_pods(lab, namespace, vmi["metadata"]["uid"])
    assert re.fullmatch(r"virt-launcher-shape-[a-z0-9]{5}", pod["metadata"]["name"])
    labels = pod["metadata"]["labels"]
    assert labels["kubevirt.io"] == "virt-launcher"
    assert labels["vm.kubevirt.io/name"] == "shape"
    assert pod["spec"]["nodeName"] == node
    assert pod["metadata"]["annotations"]["kubevirt.io/domain"] == "shape"
    # The VM's selector plus virt-controller's own (schedulable, architecture, machine type).
    selector = pod["spec"]["nodeSelector"]
    assert selector["kubevirt.io/schedulable"] == "true" and selector["kubernetes.io/os"] == "linux"
    assert selector["kubernetes.io/arch"] == "amd64" and selector["machine-type.node.kubevirt.io/q35"] == "true"
    assert all(t in pod["spec"]["tolerations"] for t in tolerations)
    # The VM's affinity is kept; host-model CPUs add "not on a node with an obsolete host model"
    # (pkg/virt-controller/services/template.go).
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == affinity["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"} in [
        e for t in node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in t["matchExpressions"]
    ]
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    # Guest memory plus virt-launcher's overhead (pkg/virt-controller/services/renderresources.go).
    assert quantity(compute["resources"]["requests"]["memory"]) > quantity("3Gi")
    for device in ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"):
        assert compute["resources"]["limits"][device] == "1"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("VirtualMachineInstance", vmi["metadata"]["uid"])
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["disk"]

    obj = get(lab, namespace, "vm", "shape")
    assert status(obj)["printableStatus"] == "Running"
    assert status(obj)["ready"] is True and status(obj)["created"] is True


@pytest.mark.parametrize(
    "case, expected",
    [
        ("rwx", ("True", None)),
        ("rwo", ("False", "DisksNotLiveMigratable")),
        ("bridge", ("False", "InterfaceNotLiveMigratable")),
        ("hostdevice", ("False", "HostDeviceNotLiveMigratable")),
        ("gpu", ("False", "HostDeviceNotLiveMigratable")),
        # Page: CPUModeLiveMigratable. virt-handler only blocks host-model on a node without
        # a host model; host-passthrough migrates (pkg/virt-handler/vm.go,
        # calculateLiveMigrationCondition).
        ("passthrough", ("True", None)),
    ],
)
def test_live_migratable_condition(lab, namespace, case, expected):
    objects = []
    kwargs = {}
    device = None
    if case in ("rwx", "rwo"):
        objects.append(pvc("disk", "ReadWriteMany" if case == "rwx" else "ReadWriteOnce"))
        kwargs["claim"] = "disk"
    elif case == "bridge":
        kwargs["devices"] = {"interfaces": [{"name": "default", "bridge": {}}]}
    elif case == "hostdevice":
        device = "example.com/nic"
        kwargs["devices"] = {"hostDevices": [{"name": "nic", "deviceName": device}]}
    elif case == "gpu":
        device = "nvidia.com/GA102"
        kwargs["devices"] = {"gpus": [{"name": "gpu", "deviceName": device}]}
    machine = vm("m", **kwargs)
    if case == "passthrough":
        machine["spec"]["template"]["spec"]["domain"]["cpu"]["model"] = "host-passthrough"
    node = workers(lab)[0]
    gate = case == "hostdevice"  # virt-api refuses hostDevices without the HostDevices gate
    if device:
        # The launcher pod requests the device: one node's device plugin offers it.
        advertise(lab, node, device, "1")
    if gate:
        feature_gate(lab, "HostDevices", True)
    try:
        if gate:  # until virt-api has seen the gate
            wait(lambda: lab.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(machine),
                                     check=False).returncode == 0, "virt-api to accept hostDevices")
        apply(lab, namespace, *objects, machine)
        vmi = wait_vmi_running(lab, namespace, "m")
        c = condition(vmi, "LiveMigratable")
        assert (c["status"], c.get("reason")) == expected
        if device:
            assert status(vmi)["nodeName"] == node
    finally:
        if device:
            lab.kubectl("delete", "vm", "m", "-n", namespace, "--wait=true", "--timeout=120s", check=False)
            advertise(lab, node, device, None)
        if gate:
            feature_gate(lab, "HostDevices", False)


def feature_gate(lab, name, enabled):
    """Turn a KubeVirt feature gate on or off as on an HCO cluster: HCO owns the KubeVirt CR's spec
    and puts back a direct edit, so the gate goes through its jsonpatch annotation."""
    if enabled:
        kubevirt_jsonpatch(lab, [{"op": "add", "path": "/spec/configuration/developerConfiguration/featureGates/-",
                                  "value": name}])
    else:
        kubevirt_jsonpatch(lab, None)
    wait(lambda: (name in ((kubevirt_configuration(lab).get("developerConfiguration") or {}).get("featureGates")
                           or [])) == enabled, f"HCO to {'add' if enabled else 'remove'} the {name} feature gate")


def advertise(lab, node, resource, count):
    """What a device plugin does: offer ``count`` of ``resource`` on the node (None: withdraw)."""
    key = resource.replace("~", "~0").replace("/", "~1")
    if count is None:
        ops = [{"op": "remove", "path": f"/status/{field}/{key}"} for field in ("capacity", "allocatable")]
    else:
        ops = [{"op": "add", "path": f"/status/{field}/{key}", "value": count} for field in ("capacity", "allocatable")]
    lab.kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(ops), check=count is not None)


def test_kubectl_get_vm_vmi_vmim_columns(lab, namespace):
    apply(lab, namespace, pvc("disk", "ReadWriteMany"), vm("cols", claim="disk"))
    wait_vmi_running(lab, namespace, "cols")
    virtctl(lab, namespace, "cols", "migrate")
    wait(
        lambda: any(status(m).get("phase") == "Succeeded" for m in items(lab, namespace, "vmim")),
        "the migration to succeed",
    )
    out = lab.kubectl("get", "vm,vmi,vmim", "-A").stdout
    headers = [line.split() for line in out.splitlines() if line.startswith("NAMESPACE")]
    assert ["NAMESPACE", "NAME", "AGE", "STATUS", "READY"] in headers
    assert ["NAMESPACE", "NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"] in headers
    assert ["NAMESPACE", "NAME", "PHASE", "VMI"] in headers
    assert re.search(rf"{namespace}\s+virtualmachine.kubevirt.io/cols\s+\S+\s+Running\s+True", out)
    assert re.search(
        rf"{namespace}\s+virtualmachineinstance.kubevirt.io/cols\s+\S+\s+Running\s+[\d.]+\s+lab-\S+\s+True",
        out,
    )
    assert re.search(
        rf"{namespace}\s+virtualmachineinstancemigration.kubevirt.io/kubevirt-migrate-vm-\S+\s+Succeeded\s+cols",
        out,
    )


# -- eviction strategy table ---------------------------------------------------------------------


def no_disruption_budgets(lab, namespace):
    """Page: a PodDisruptionBudget per VMI. Since 1.6 virt-controller keeps none (its
    disruption-budget controller only deletes old ones; pkg/virt-controller/watch/drain/disruptionbudget)."""
    assert items(lab, namespace, "pdb") == []


def test_live_migrate_migratable_drain_migrates_keeping_the_vmi(lab, namespace, restore_nodes):
    """LiveMigrate + migratable: the webhook marks the VMI and itself answers 429 (page: it
    allows and a PDB answers 429), a migration follows, the source pod completes and the
    drain sees it gone."""
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteMany"),
        vm("lm", eviction="LiveMigrate", claim="disk", memory="2Gi"),
    )
    before = wait_vmi_running(lab, namespace, "lm")
    source = status(before)["nodeName"]
    no_disruption_budgets(lab, namespace)

    result = drain(lab, source)
    assert evacuation_triggered(namespace, "lm") in result.stderr  # the 429 kubectl retried
    assert "disruption budget" not in result.stderr

    after = wait_vmi_running(lab, namespace, "lm")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert status(after)["nodeName"] != source
    assert after["metadata"]["labels"]["kubevirt.io/nodeName"] == status(after)["nodeName"]
    state = status(after)["migrationState"]
    assert state["sourceNode"] == source and state["targetNode"] == status(after)["nodeName"]
    assert state["completed"] is True and not state.get("failed")
    assert state["startTimestamp"] and state["endTimestamp"]
    assert not status(after).get("evacuationNodeName")
    (migration,) = items(lab, namespace, "vmim")
    assert migration["metadata"]["name"].startswith("kubevirt-evacuation-")
    assert migration["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == source
    assert status(migration)["phase"] == "Succeeded"
    pods = launcher_pods(lab, namespace, before["metadata"]["uid"])
    assert [p["spec"]["nodeName"] for p in pods] == [status(after)["nodeName"]]
    no_disruption_budgets(lab, namespace)

    # After maintenance ends, VMs do not move back on their own.
    lab.kubectl("uncordon", source)
    assert status(get(lab, namespace, "vmi", "lm"))["nodeName"] == status(after)["nodeName"]
    assert len(items(lab, namespace, "vmim")) == 1


def test_live_migrate_not_migratable_blocks_the_drain(lab, namespace, k8s, restore_nodes):
    """LiveMigrate + not migratable: the webhook denies with 429 forever; stopping the VM unblocks."""
    stuck_message = 'VMI stuck is configured with an eviction strategy but is not live-migratable'

    apply(lab, namespace, pvc("disk", "ReadWriteOnce"), vm("stuck", eviction="LiveMigrate", claim="disk"))
    before = wait_vmi_running(lab, namespace, "stuck")
    node = status(before)["nodeName"]

    result = drain(lab, node, timeout="20s", check=False)
    assert result.returncode != 0
    assert stuck_message in result.stderr
    (pod,) = launcher_pods(lab, namespace, before["metadata"]["uid"])
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(k8s).create_namespaced_pod_eviction(
            pod["metadata"]["name"],
            namespace,
            {"metadata": {"name": pod["metadata"]["name"], "namespace": namespace}},
        )
    assert refused.value.status == 429
    assert stuck_message in refused.value.body
    now = get(lab, namespace, "vmi", "stuck")
    assert (now["metadata"]["uid"], status(now)["nodeName"], status(now)["phase"]) == (
        before["metadata"]["uid"],
        node,
        "Running",
    )
    assert items(lab, namespace, "vmim") == []
    assert not status(now).get("evacuationNodeName")
    no_disruption_budgets(lab, namespace)

    virtctl(lab, namespace, "stuck", "stop")
    drain(lab, node)
    wait_vm_stopped(lab, namespace, "stuck")


def test_live_migrate_if_possible_migratable_migrates(lab, namespace, restore_nodes):
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteMany"),
        vm("lmip", eviction="LiveMigrateIfPossible", claim="disk"),
    )
    before = wait_vmi_running(lab, namespace, "lmip")
    no_disruption_budgets(lab, namespace)
    result = drain(lab, status(before)["nodeName"])
    assert evacuation_triggered(namespace, "lmip") in result.stderr
    after = wait_vmi_running(lab, namespace, "lmip")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert status(after)["nodeName"] != status(before)["nodeName"]
    (migration,) = items(lab, namespace, "vmim")
    assert migration["metadata"]["name"].startswith("kubevirt-evacuation-")
    assert status(migration)["phase"] == "Succeeded"


def test_live_migrate_if_possible_not_migratable_shuts_down_and_always_recreates(
    lab, namespace, restore_nodes
):
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteOnce"),
        vm("lmipx", eviction="LiveMigrateIfPossible", claim="disk"),
    )
    before = wait_vmi_running(lab, namespace, "lmipx")
    no_disruption_budgets(lab, namespace)
    node = status(before)["nodeName"]
    result = drain(lab, node)
    assert "evacuation" not in result.stderr  # granted at once
    after = wait_vmi_running(lab, namespace, "lmipx", other_than_uid=before["metadata"]["uid"])
    assert status(after)["nodeName"] != node
    assert items(lab, namespace, "vmim") == []


def test_external_marks_the_vmi_and_the_webhook_blocks(lab, namespace, restore_nodes):
    """External: marked for evacuation, the webhook itself answers 429 (page: a PDB does),
    then "Evacuation in progress" on every retry; nothing migrates it by itself."""
    apply(lab, namespace, pvc("disk", "ReadWriteOnce"), vm("ext", eviction="External", claim="disk"))
    before = wait_vmi_running(lab, namespace, "ext")
    node = status(before)["nodeName"]
    no_disruption_budgets(lab, namespace)
    result = drain(lab, node, timeout="20s", check=False)
    assert result.returncode != 0
    assert evacuation_triggered(namespace, "ext") in result.stderr
    assert "Evacuation in progress: " + evacuation_triggered(namespace, "ext") in result.stderr
    assert "disruption budget" not in result.stderr
    marked = get(lab, namespace, "vmi", "ext")
    assert status(marked)["evacuationNodeName"] == node
    assert marked["metadata"]["uid"] == before["metadata"]["uid"]
    assert items(lab, namespace, "vmim") == []


@pytest.mark.parametrize("claim_mode", ["ReadWriteMany", "ReadWriteOnce"])
def test_none_shuts_down_whatever_the_migratability(lab, namespace, restore_nodes, claim_mode):
    apply(lab, namespace, pvc("disk", claim_mode), vm("none", eviction="None", claim="disk"))
    before = wait_vmi_running(lab, namespace, "none")
    no_disruption_budgets(lab, namespace)
    result = drain(lab, status(before)["nodeName"])
    assert "evacuation" not in result.stderr and "disruption budget" not in result.stderr
    after = wait_vmi_running(lab, namespace, "none", other_than_uid=before["metadata"]["uid"])
    assert status(after)["nodeName"] != status(before)["nodeName"]
    assert items(lab, namespace, "vmim") == []


def test_unset_strategy_follows_the_cluster_default_frozen_at_vmi_creation(lab, namespace, restore_nodes):
    """No strategy on the VM: virt-api's VMI defaulting copies the cluster default (HCO's
    LiveMigrate, via the KubeVirt CR) into the VMI's spec at creation (pkg/defaults/defaults.go,
    setDefaultEvictionStrategy). Page: the effective value is read at eviction time. A change
    of the cluster default reaches a VMI only when it is re-created."""
    apply(lab, namespace, pvc("disk", "ReadWriteMany"), vm("dflt", claim="disk"))
    before = wait_vmi_running(lab, namespace, "dflt")
    assert "evictionStrategy" not in get(lab, namespace, "vm", "dflt")["spec"]["template"]["spec"]
    assert before["spec"]["evictionStrategy"] == "LiveMigrate"

    patch_hco(lab, {"evictionStrategy": "None"})
    try:
        wait(
            lambda: kubevirt_configuration(lab).get("evictionStrategy") == "None", "KubeVirt CR default None"
        )
        # The running VMI keeps the LiveMigrate it was created with: the drain migrates it.
        result = drain(lab, status(before)["nodeName"])
        assert evacuation_triggered(namespace, "dflt") in result.stderr
        migrated = wait_vmi_running(lab, namespace, "dflt")
        assert migrated["metadata"]["uid"] == before["metadata"]["uid"]
        assert migrated["spec"]["evictionStrategy"] == "LiveMigrate"
        (migration,) = items(lab, namespace, "vmim")
        assert migration["metadata"]["name"].startswith("kubevirt-evacuation-")
        lab.restore_nodes()

        # A new VMI gets the new default: the next drain shuts it down.
        virtctl(lab, namespace, "dflt", "restart")
        renewed = wait_vmi_running(lab, namespace, "dflt", other_than_uid=before["metadata"]["uid"])
        assert renewed["spec"]["evictionStrategy"] == "None"
        result = drain(lab, status(renewed)["nodeName"])
        assert "evacuation" not in result.stderr
        after = wait_vmi_running(lab, namespace, "dflt", other_than_uid=renewed["metadata"]["uid"])
        assert status(after)["nodeName"] != status(renewed)["nodeName"]
        # no migration for the None VMI (the first VMI's went with it)
        assert all(m["spec"]["vmiName"] != "dflt" or status(m).get("phase") == "Succeeded"
                   for m in items(lab, namespace, "vmim"))
    finally:
        patch_hco(lab, {"evictionStrategy": "LiveMigrate"})
        wait(
            lambda: kubevirt_configuration(lab).get("evictionStrategy") == "LiveMigrate",
            "KubeVirt CR default back",
        )


# Page: RerunOnFailure is re-created after an eviction shutdown. The guest is shut down
# (ACPI) and the VMI ends Succeeded, which RerunOnFailure does not restart
# (pkg/virt-controller/watch/vm/vm.go, RerunOnFailure branch).
@pytest.mark.parametrize(
    "run_strategy, recreated",
    [("Always", True), ("RerunOnFailure", False), ("Manual", False), ("Once", False)],
)
def test_run_strategy_after_shutdown_by_eviction(lab, namespace, restore_nodes, run_strategy, recreated):
    objects = [vm("evicted", run_strategy=run_strategy, eviction="None")]
    apply(lab, namespace, *objects)
    if run_strategy == "Manual":
        virtctl(lab, namespace, "evicted", "start")
    before = wait_vmi_running(lab, namespace, "evicted")
    node = status(before)["nodeName"]
    drain(lab, node)
    if recreated:
        after = wait_vmi_running(lab, namespace, "evicted", other_than_uid=before["metadata"]["uid"])
        assert status(after)["nodeName"] != node
    else:
        wait_vm_stopped(lab, namespace, "evicted")
        vmi = get(lab, namespace, "vmi", "evicted")
        assert vmi is None or (
            vmi["metadata"]["uid"] == before["metadata"]["uid"] and status(vmi)["phase"] == "Succeeded"
        )
        obj = get(lab, namespace, "vm", "evicted")
        assert status(obj)["printableStatus"] == "Stopped"
        assert obj["spec"]["runStrategy"] == run_strategy


# Page: RerunOnFailure is re-created after an eviction shutdown - when the guest does not shut down:
# virt-handler signals ACPI until terminationGracePeriodSeconds have passed, then kills the domain and
# the VMI ends Failed (pkg/virt-handler/vm.go helperVmShutdown, calculateVmPhaseForStatusReason with
# isACPIEnabled), which RerunOnFailure restarts.
def test_rerun_on_failure_after_an_eviction_the_guest_ignored(lab, namespace, restore_nodes):
    deaf = vm("deaf", run_strategy="RerunOnFailure", eviction="None",
              annotations={"kubevirt-ops.lab/guest-ignores-acpi": "true"},
              extra_spec={"terminationGracePeriodSeconds": 6})
    apply(lab, namespace, deaf)
    before = wait_vmi_running(lab, namespace, "deaf")
    node = status(before)["nodeName"]
    drain(lab, node)
    after = wait_vmi_running(lab, namespace, "deaf", other_than_uid=before["metadata"]["uid"])
    assert status(after)["nodeName"] != node
    assert get(lab, namespace, "vm", "deaf")["spec"]["runStrategy"] == "RerunOnFailure"


# -- run strategies and actions -----------------------------------------------------------------


def test_run_strategies_decide_whether_a_vmi_exists(lab, namespace):
    apply(
        lab,
        namespace,
        vm("always", run_strategy="Always"),
        vm("once", run_strategy="Once"),
        vm("rerun", run_strategy="RerunOnFailure"),
        vm("manual", run_strategy="Manual"),
        vm("halted", run_strategy="Halted"),
    )
    for name in ("always", "once", "rerun"):
        wait_vmi_running(lab, namespace, name)
    for name in ("manual", "halted"):
        wait(
            lambda n=name: status(get(lab, namespace, "vm", n)).get("printableStatus") == "Stopped",
            f"{name} Stopped",
        )
        assert get(lab, namespace, "vmi", name) is None


@pytest.mark.parametrize(
    "run_strategy, recreated", [("Always", True), ("RerunOnFailure", False), ("Once", False)]
)
def test_clean_guest_shutdown(lab, namespace, run_strategy, recreated):
    """Always re-creates after any stop; RerunOnFailure and Once not after a clean shutdown."""
    apply(lab, namespace, vm("guest", run_strategy=run_strategy))
    before = wait_vmi_running(lab, namespace, "guest")
    lab.kubectl("annotate", "vmi", "guest", "-n", namespace, "kubevirt-ops.lab/guest-shutdown=true")
    if recreated:
        wait_vmi_running(lab, namespace, "guest", other_than_uid=before["metadata"]["uid"])
    else:
        wait_vm_stopped(lab, namespace, "guest")


def test_always_recreates_a_deleted_vmi(lab, namespace):
    apply(lab, namespace, vm("again"))
    before = wait_vmi_running(lab, namespace, "again")
    lab.kubectl("delete", "vmi", "again", "-n", namespace)
    after = wait_vmi_running(lab, namespace, "again", other_than_uid=before["metadata"]["uid"])
    assert after["metadata"]["name"] == "again"


# The behaviour page's action table: (before, action) -> (strategy after, what happens to the
# VMI, virt-api's 409 message for a refused one). Page: stop on RerunOnFailure sets Halted;
# virt-api sends a stop request and the VM keeps RerunOnFailure (pkg/virt-api/rest/lifecycle.go,
# StopVMRequestHandler).
ACTION_TABLE = [
    ("Always", "start", "Always", "unchanged", "VM is already running"),
    ("Always", "stop", "Halted", "stopped", None),
    ("Always", "restart", "Always", "recreated", None),
    ("RerunOnFailure", "start", "RerunOnFailure", "unchanged", "VM is already running"),
    ("RerunOnFailure", "stop", "RerunOnFailure", "stopped", None),
    ("RerunOnFailure", "restart", "RerunOnFailure", "recreated", None),
    ("Manual", "start", "Manual", "started", None),
    ("Manual", "stop", "Manual", "stopped", None),
    ("Manual", "restart", "Manual", "recreated", None),
    ("Halted", "start", "Always", "started", None),
    ("Halted", "stop", "Halted", "none", "VM is not running"),
    ("Halted", "restart", "Halted", "none", "RunStategy Halted does not support manual restart requests"),
]


@pytest.mark.parametrize("before, action, after, effect, refusal", ACTION_TABLE)
def test_action_table(lab, namespace, before, action, after, effect, refusal):
    apply(lab, namespace, vm("act", run_strategy=before))
    if before == "Manual" and action != "start":
        virtctl(lab, namespace, "act", "start")
    uid = None
    if effect in ("unchanged", "stopped", "recreated"):
        uid = wait_vmi_running(lab, namespace, "act")["metadata"]["uid"]
    else:
        wait(
            lambda: status(get(lab, namespace, "vm", "act")).get("printableStatus") == "Stopped", "VM Stopped"
        )

    result = virtctl(lab, namespace, "act", action, check=False)
    if refusal:
        # A no-op: virt-api refuses it with 409 Conflict and nothing changes.
        assert result.returncode != 0 and "Conflict" in result.stderr, result.stderr
        assert refusal in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr

    if effect == "recreated":
        wait_vmi_running(lab, namespace, "act", other_than_uid=uid)
    elif effect == "started":
        wait_vmi_running(lab, namespace, "act")
    elif effect == "stopped":
        wait_vm_stopped(lab, namespace, "act")
    elif effect == "unchanged":
        assert vmi_uid(lab, namespace, "act") == uid
    else:
        assert get(lab, namespace, "vmi", "act") is None
    assert get(lab, namespace, "vm", "act")["spec"]["runStrategy"] == after


def test_deprecated_running_field(lab, namespace):
    apply(
        lab, namespace, vm("on", run_strategy=None, running=True), vm("off", run_strategy=None, running=False)
    )
    wait_vmi_running(lab, namespace, "on")
    assert status(get(lab, namespace, "vm", "on"))["runStrategy"] == "Always"
    wait(lambda: status(get(lab, namespace, "vm", "off")).get("printableStatus") == "Stopped", "off Stopped")
    assert get(lab, namespace, "vmi", "off") is None

    # start keeps using the field the VM uses
    virtctl(lab, namespace, "off", "start")
    wait_vmi_running(lab, namespace, "off")
    spec = get(lab, namespace, "vm", "off")["spec"]
    assert spec["running"] is True and "runStrategy" not in spec

    # both at once is refused by the admission webhook; replacing one with the other is fine
    both = lab.kubectl(
        "patch",
        "vm",
        "on",
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        '{"spec":{"runStrategy":"Manual"}}',
        check=False,
    )
    assert both.returncode != 0 and "mutually exclusive" in both.stderr
    lab.kubectl(
        "patch",
        "vm",
        "on",
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        '{"spec":{"runStrategy":"Manual","running":null}}',
    )
    assert get(lab, namespace, "vm", "on")["spec"]["runStrategy"] == "Manual"


def test_eviction_strategy_change_reaches_the_vmi_after_a_restart(lab, namespace):
    apply(lab, namespace, pvc("disk", "ReadWriteMany"), vm("change", eviction="None", claim="disk"))
    before = wait_vmi_running(lab, namespace, "change")
    lab.kubectl(
        "patch",
        "vm",
        "change",
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        '{"spec":{"template":{"spec":{"evictionStrategy":"LiveMigrate"}}}}',
    )
    wait(lambda: get(lab, namespace, "vm", "change")["metadata"]["generation"] == 2, "the VM spec change")
    assert get(lab, namespace, "vmi", "change")["spec"]["evictionStrategy"] == "None"
    # virt-controller tells the change is pending (condition RestartRequired on the VM).
    wait(
        lambda: (c := condition(get(lab, namespace, "vm", "change"), "RestartRequired")) and c["status"] == "True",
        "the VM to ask for a restart",
    )
    virtctl(lab, namespace, "change", "restart")
    after = wait_vmi_running(lab, namespace, "change", other_than_uid=before["metadata"]["uid"])
    assert after["spec"]["evictionStrategy"] == "LiveMigrate"
    no_disruption_budgets(lab, namespace)


# -- migrations ------------------------------------------------------------------------------


def watch_migrations(k8s, namespace, stop):
    """Record every (name, phase, annotations) the watch shows, in order, until ``stop`` is set."""
    events = []
    api = client.CustomObjectsApi(k8s)

    def run():
        resource_version = None
        while not stop.is_set():
            kwargs = {"timeout_seconds": 5}
            if resource_version:
                kwargs["resource_version"] = resource_version
            for event in watch.Watch().stream(
                api.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                "virtualmachineinstancemigrations",
                **kwargs,
            ):
                obj = event["object"]
                resource_version = obj["metadata"]["resourceVersion"]
                events.append(
                    (
                        obj["metadata"]["name"],
                        status(obj).get("phase") or "",
                        obj["metadata"].get("annotations") or {},
                    )
                )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return events, thread


def test_migration_phases_and_target_placement(lab, namespace, k8s, restore_nodes):
    pool = workers(lab)[:3]
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteMany"),
        vm(
            "mig",
            claim="disk",
            node_selector=None,
            extra_spec={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/hostname", "operator": "In", "values": pool}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
        ),
    )
    before = wait_vmi_running(lab, namespace, "mig")
    source = status(before)["nodeName"]
    # cordoned nodes are avoided, as the scheduler places the target pod
    cordoned = [n for n in pool if n != source][0]
    lab.kubectl("cordon", cordoned)
    expected_target = [n for n in pool if n not in (source, cordoned)][0]

    stop = threading.Event()
    events, thread = watch_migrations(k8s, namespace, stop)
    virtctl(lab, namespace, "mig", "migrate")
    after = wait(
        lambda: (v := get(lab, namespace, "vmi", "mig")) and status(v).get("nodeName") != source and v,
        "the VMI to move",
    )
    wait(lambda: any(p == "Succeeded" for _, p, _ in events), "the watch to see Succeeded")
    stop.set()
    thread.join(10)

    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert status(after)["nodeName"] == expected_target
    phases = []
    for _, phase, _ in events:
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)
    expected = [
        "Pending",
        "Scheduling",
        "Scheduled",
        "PreparingTarget",
        "TargetReady",
        "Running",
        "Succeeded",
    ]
    assert [p for p in phases if p in expected] == expected
    (migration,) = items(lab, namespace, "vmim")
    target_pod = status(migration)["migrationState"]["targetPod"]
    pod = get(lab, namespace, "pod", target_pod)
    # Kept off the source by a pod anti-affinity to the VMI's own pods, per hostname (page:
    # silent; pkg/virt-controller/watch/migration/migration.go, createMigrationPodAntiAffinityRule).
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {
        "labelSelector": {"matchLabels": {"kubevirt.io/created-by": before["metadata"]["uid"]}},
        "topologyKey": "kubernetes.io/hostname",
    } in anti
    assert pod["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == migration["metadata"]["uid"]


def test_migration_with_nowhere_to_go_stays_scheduling(lab, namespace, restore_nodes):
    apply(lab, namespace, pvc("disk", "ReadWriteMany"), vm("nowhere", claim="disk"))
    before = wait_vmi_running(lab, namespace, "nowhere")
    source = status(before)["nodeName"]
    others = cordon_all_but(lab, [source])
    virtctl(lab, namespace, "nowhere", "migrate")

    def target_unschedulable():
        pods = [
            p
            for p in launcher_pods(lab, namespace, before["metadata"]["uid"])
            if "kubevirt.io/migrationJobUID" in p["metadata"]["labels"]
        ]
        return (
            pods
            and condition(pods[0], "PodScheduled")
            and condition(pods[0], "PodScheduled")["reason"] == "Unschedulable"
        )

    wait(target_unschedulable, "the target pod to be reported unschedulable")
    (migration,) = items(lab, namespace, "vmim")
    assert status(migration)["phase"] in ("Pending", "Scheduling")
    assert status(get(lab, namespace, "vmi", "nowhere"))["nodeName"] == source

    lab.kubectl("uncordon", others[0])
    moved = wait(
        lambda: (v := get(lab, namespace, "vmi", "nowhere")) and status(v).get("nodeName") == others[0] and v,
        "the migration to complete once a node is free",
    )
    assert moved["metadata"]["uid"] == before["metadata"]["uid"]


def test_failing_migration_leaves_the_vm_on_its_node(lab, namespace, restore_nodes):
    apply(
        lab,
        namespace,
        pvc("disk", "ReadWriteMany"),
        vm(
            "flaky",
            claim="disk",
            eviction="LiveMigrate",
            annotations={"kubevirt-ops.lab/fail-migration": "true"},
        ),
    )
    before = wait_vmi_running(lab, namespace, "flaky")
    virtctl(lab, namespace, "flaky", "migrate")
    failed = wait(
        lambda: next((m for m in items(lab, namespace, "vmim") if status(m).get("phase") == "Failed"), None),
        "the migration to fail",
    )
    vmi = get(lab, namespace, "vmi", "flaky")
    assert vmi["metadata"]["uid"] == before["metadata"]["uid"]
    assert status(vmi)["nodeName"] == status(before)["nodeName"]
    assert status(vmi)["migrationState"]["failed"] is True
    assert status(vmi)["migrationState"]["migrationUid"] == failed["metadata"]["uid"]
    assert "kubevirt-ops.lab/fail-migration" in status(vmi)["migrationState"]["failureReason"]
    # The migration turns Failed first; a later sync of the final migration stores the VMI's migration
    # state in it (the IsFinal branch of pkg/virt-controller/watch/migration/migration.go). It copies
    # virt-controller's cached view of the VMI at each sync of the final migration, so the first Failed
    # object seen may carry none or an earlier one: only the state stored with the failure is judged.
    stored = wait(
        lambda: next((m for m in items(lab, namespace, "vmim") if m["metadata"]["uid"] == failed["metadata"]["uid"]
                      and (status(m).get("migrationState") or {}).get("failureReason")), None),
        "the failed migration to store its migration state",
    )
    assert status(stored)["migrationState"]["failureReason"] == status(vmi)["migrationState"]["failureReason"]
    assert status(stored)["migrationState"]["failed"] is True  # page: also a Failed condition; real: none
    # A drain keeps being refused while every migration fails: the webhook marked the VMI, and
    # virt-controller retries the evacuation after each failure, with a backoff
    # (pkg/virt-controller/watch/migration/migration.go, handleMigrationBackoff).
    source = status(before)["nodeName"]
    result = drain(lab, source, timeout="20s", check=False)
    assert result.returncode != 0 and evacuation_triggered(namespace, "flaky") in result.stderr

    def evacuations():
        return [m for m in items(lab, namespace, "vmim") if m["metadata"]["name"].startswith("kubevirt-evacuation-")]

    wait(lambda: sum(status(m).get("phase") == "Failed" for m in evacuations()) >= 2, "a retried evacuation to fail")
    failed_ones = sorted(
        (m for m in evacuations() if status(m).get("phase") == "Failed"),
        key=lambda m: m["metadata"]["creationTimestamp"],
    )
    first_end = next(t["phaseTransitionTimestamp"] for t in status(failed_ones[0])["phaseTransitionTimestamps"] if t["phase"] == "Failed")
    assert failed_ones[1]["metadata"]["creationTimestamp"] >= first_end  # one at a time, after the failure
    vmi = get(lab, namespace, "vmi", "flaky")
    assert status(vmi)["nodeName"] == source and status(vmi)["evacuationNodeName"] == source
    assert vmi["metadata"]["uid"] == before["metadata"]["uid"]


def test_migration_webhook_refusals(lab, namespace, restore_nodes):
    apply(lab, namespace, pvc("disk", "ReadWriteOnce"), vm("pinned", claim="disk"))
    wait_vmi_running(lab, namespace, "pinned")

    def migrate(vmi_name):
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "m-"},
            "spec": {"vmiName": vmi_name},
        }
        return lab.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)

    # virt-api's messages (pkg/virt-api/webhooks/validating-webhook/admitters/migration-create-admitter.go).
    refused = migrate("pinned")
    assert refused.returncode != 0
    assert "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC disk is not shared" in refused.stderr
    missing = migrate("ghost")
    assert missing.returncode != 0 and f'the VMI "{namespace}/ghost" does not exist' in missing.stderr
    assert items(lab, namespace, "vmim") == []

    # A second migration while one is in flight (held in Scheduling: nowhere else to go).
    apply(lab, namespace, pvc("shared", "ReadWriteMany"), vm("busy", claim="shared"))
    busy = wait_vmi_running(lab, namespace, "busy")
    cordon_all_but(lab, [status(busy)["nodeName"]])
    first = migrate("busy")
    assert first.returncode == 0, first.stderr
    (in_flight,) = items(lab, namespace, "vmim")
    second = migrate("busy")
    assert second.returncode != 0
    assert (
        f"in-flight migration detected. Active migration job ({in_flight['metadata']['uid']})"
        " is currently already in progress for VMI busy." in second.stderr
    )
    assert [m["metadata"]["uid"] for m in items(lab, namespace, "vmim")] == [in_flight["metadata"]["uid"]]

def test_migration_concurrency_caps_are_never_exceeded(lab, namespace, k8s, restore_nodes):
    per_cluster, per_node = 3, 2
    patch_hco(
        lab,
        {
            "liveMigrationConfig": {
                "parallelMigrationsPerCluster": per_cluster,
                "parallelOutboundMigrationsPerNode": per_node,
            }
        },
    )
    stop = threading.Event()
    try:
        wait(
            lambda: kubevirt_configuration(lab).get("migrations", {}).get("parallelMigrationsPerCluster")
            == per_cluster,
            "the KubeVirt CR to take the caps",
        )
        sources = workers(lab)[:2]
        cordon_all_but(lab, sources)
        names = [f"cap-{i}" for i in range(6)]
        apply(
            lab,
            namespace,
            *[pvc(f"{n}-disk", "ReadWriteMany") for n in names],
            *[vm(n, claim=f"{n}-disk", eviction="LiveMigrate", memory="3Gi") for n in names],
        )
        before = {n: wait_vmi_running(lab, namespace, n)["metadata"]["uid"] for n in names}
        lab.restore_nodes()

        events, thread = watch_migrations(k8s, namespace, stop)
        drains = [
            subprocess.Popen(
                ["kubectl", f"--kubeconfig={lab.kubeconfig}", "drain", node, *DRAIN_FLAGS, "--timeout=600s"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for node in sources
        ]
        for d in drains:
            _, err = d.communicate(timeout=900)
            assert d.returncode == 0, err
        wait(
            lambda: sum(1 for m in items(lab, namespace, "vmim") if status(m).get("phase") == "Succeeded")
            >= len(names),
            "every migration to succeed",
        )
        stop.set()
        thread.join(10)

        phase, source = {}, {}
        max_cluster, max_node = 0, 0
        for name, p, annotations in events:
            phase[name] = p
            source[name] = annotations.get("kubevirt.io/evacuationMigration")
            active = [m for m, ph in phase.items() if ph in ACTIVE_MIGRATION_PHASES]
            max_cluster = max(max_cluster, len(active))
            for node in sources:
                max_node = max(max_node, sum(1 for m in active if source[m] == node))
        assert 1 <= max_cluster <= per_cluster
        assert 1 <= max_node <= per_node
        for n in names:
            vmi = get(lab, namespace, "vmi", n)
            assert vmi["metadata"]["uid"] == before[n]
            assert status(vmi)["nodeName"] not in sources
    finally:
        stop.set()
        patch_hco(
            lab,
            {
                "liveMigrationConfig": {
                    "parallelMigrationsPerCluster": 5,
                    "parallelOutboundMigrationsPerNode": 2,
                }
            },
        )


# -- drains of launcher pods -------------------------------------------------------------------


def test_drain_needs_delete_emptydir_data_and_skips_virt_handler(lab, namespace, restore_nodes):
    apply(lab, namespace, vm("local", eviction="None"))
    before = wait_vmi_running(lab, namespace, "local")
    node = status(before)["nodeName"]
    refused = drain(lab, node, timeout="20s", check=False, extra=("--ignore-daemonsets", "--force"))
    assert refused.returncode != 0 and "local storage" in refused.stderr
    assert get(lab, namespace, "vmi", "local")["metadata"]["uid"] == before["metadata"]["uid"]
    refused = drain(lab, node, timeout="20s", check=False, extra=("--delete-emptydir-data", "--force"))
    assert refused.returncode != 0 and "DaemonSet" in refused.stderr
    drain(lab, node)
    handler = [
        p
        for p in items(lab, "kubevirt", "pods", "kubevirt.io=virt-handler")
        if p["spec"].get("nodeName") == node
    ]
    assert handler, "virt-handler stays on a drained node"


# -- HyperConverged -----------------------------------------------------------------------------


def test_hco_owns_the_kubevirt_configuration(lab):
    """HCO builds the KubeVirt CR's whole spec and puts back any edit of it
    (hyperconverged-cluster-operator v1.18.1 controllers/handlers/kubevirt.go, UpdateCR);
    what it does not expose goes through its jsonpatch annotation (operands/operand.go
    ApplyPatchToSpec), which taints the HyperConverged."""
    patch_hco(lab, {"evictionStrategy": "LiveMigrateIfPossible"})
    try:
        wait(
            lambda: kubevirt_configuration(lab).get("evictionStrategy") == "LiveMigrateIfPossible",
            "propagation",
        )
        edited = patch_kubevirt(lab, {"spec": {"configuration": {
            "evictionStrategy": "None",
            "migrations": {"bandwidthPerMigration": "64Mi"},
            "developerConfiguration": {"featureGates": ["HostDevices"]},
        }}})
        assert edited["spec"]["configuration"]["migrations"]["bandwidthPerMigration"] == "64Mi"

        def reverted():
            configuration = kubevirt_configuration(lab)
            return (configuration.get("evictionStrategy") == "LiveMigrateIfPossible"
                    and "bandwidthPerMigration" not in configuration["migrations"]
                    and configuration["developerConfiguration"]["featureGates"] == [])

        wait(reverted, "HCO to revert the edits (bandwidthPerMigration is not set in the HyperConverged)")
        assert kubevirt_configuration(lab)["migrations"]["parallelMigrationsPerCluster"] == 5

        kubevirt_jsonpatch(lab, [{"op": "add", "path": "/spec/configuration/migrations/bandwidthPerMigration",
                                  "value": "64Mi"}])
        wait(lambda: kubevirt_configuration(lab)["migrations"].get("bandwidthPerMigration") == "64Mi"
             and hco_conditions(lab).get("TaintedConfiguration", ("",))[0] == "True", "the jsonpatch annotation")
    finally:
        kubevirt_jsonpatch(lab, None)
        patch_hco(lab, {"evictionStrategy": "LiveMigrate"})
        wait(lambda: kubevirt_configuration(lab).get("evictionStrategy") == "LiveMigrate"
             and "bandwidthPerMigration" not in kubevirt_configuration(lab)["migrations"]
             and "TaintedConfiguration" not in hco_conditions(lab), "restore")


def test_hco_serves_v1_beside_stored_v1beta1(lab, k8s):
    # config/crd/bases/hco.kubevirt.io_hyperconvergeds.yaml at v1.18.1: v1beta1 stored (v1 only later).
    crd = get(lab, None, "crd", "hyperconvergeds.hco.kubevirt.io")
    assert {v["name"]: (v["served"], v["storage"]) for v in crd["spec"]["versions"]} == {
        "v1": (True, False),
        "v1beta1": (True, True),
    }
    assert status(crd)["storedVersions"] == ["v1beta1"]
    v1 = get(lab, HCO[4], HCO_V1, HCO[2])
    beta = get(lab, HCO[4], HCO_V1BETA1, HCO[2])
    assert v1["apiVersion"] == "hco.kubevirt.io/v1" and beta["apiVersion"] == "hco.kubevirt.io/v1beta1"
    assert v1["spec"]["virtualization"]["evictionStrategy"] == beta["spec"]["evictionStrategy"]
    assert v1["spec"]["virtualization"]["liveMigrationConfig"] == beta["spec"]["liveMigrationConfig"]
    assert "evictionStrategy" not in v1["spec"] and "virtualization" not in beta["spec"]
    # The obsolete CPU models are a list of type set in both versions: a duplicate is refused.
    custom = client.CustomObjectsApi(k8s)
    for version, spec in (
        ("v1beta1", {"obsoleteCPUs": {"cpuModels": ["Penryn", "Nehalem", "Penryn"]}}),
        ("v1", {"virtualization": {"obsoleteCPUModels": ["Penryn", "Penryn"]}}),
    ):
        with pytest.raises(ApiException) as refused:
            custom.patch_namespaced_custom_object(HCO[0], version, HCO[4], HCO[3], HCO[2], {"spec": spec})
        assert refused.value.status == 422 and "Duplicate value" in refused.value.body, refused.value.body
    assert "obsoleteCPUs" not in get(lab, HCO[4], HCO_V1BETA1, HCO[2])["spec"]
    # written through v1, read through v1beta1
    lab.kubectl(
        "patch", HCO_V1, HCO[2], "-n", HCO[4], "--type", "merge",
        "-p", json.dumps({"spec": {"virtualization": {"evictionStrategy": "LiveMigrateIfPossible"}}}),
    )
    try:
        assert get(lab, HCO[4], HCO_V1BETA1, HCO[2])["spec"]["evictionStrategy"] == "LiveMigrateIfPossible"
        wait(
            lambda: kubevirt_configuration(lab).get("evictionStrategy") == "LiveMigrateIfPossible",
            "propagation from v1",
        )
    finally:
        patch_hco(lab, {"evictionStrategy": "LiveMigrate"})
        wait(lambda: kubevirt_configuration(lab).get("evictionStrategy") == "LiveMigrate", "restore")


HEALTHY = {
    "ReconcileComplete": ("True", "ReconcileCompleted", "Reconcile completed successfully"),
    "Available": ("True", "ReconcileCompleted", "Reconcile completed successfully"),
    "Progressing": ("False", "ReconcileCompleted", "Reconcile completed successfully"),
    "Degraded": ("False", "ReconcileCompleted", "Reconcile completed successfully"),
    "Upgradeable": ("True", "ReconcileCompleted", "Reconcile completed successfully"),
}


def test_hco_conditions_follow_the_kubevirt_cr(lab):
    """HCO's conditions aggregate its components' (controllers/operands/generic_operand.go
    setConditionsByOperandConditions, hyperconverged_controller.go aggregateComponentConditions):
    the KubeVirt CR as virt-operator writes it when its deployment fails
    (pkg/virt-operator/util/client.go UpdateConditionsFailedError) makes HCO Degraded."""
    wait(lambda: hco_conditions(lab) == HEALTHY, "a healthy HCO")
    saved = status(get(lab, "kubevirt", "kubevirt", "kubevirt"))["conditions"]
    message = "An error occurred during deployment: virt-handler is not ready"
    failed = [{"type": t, "status": s, "reason": "DeploymentFailed", "message": message}
              for t, s in (("Synchronized", "False"), ("Available", "False"), ("Progressing", "False"),
                           ("Degraded", "True"))]
    patch_kubevirt(lab, {"status": {"conditions": failed}}, subresource="status")
    try:
        wait(lambda: hco_conditions(lab).get("Degraded", ("",))[0] == "True", "HCO to report Degraded")
        assert hco_conditions(lab) == {
            "ReconcileComplete": HEALTHY["ReconcileComplete"],
            "Available": ("False", "KubeVirtNotAvailable", "KubeVirt is not available: " + message),
            "Progressing": HEALTHY["Progressing"],
            "Degraded": ("True", "KubeVirtDegraded", "KubeVirt is degraded: " + message),
            "Upgradeable": ("False", "HCODegraded", "HCO is not Upgradeable due to degraded components"),
        }
        assert status(get(lab, HCO[4], HCO_V1BETA1, HCO[2]))["systemHealthStatus"] == "error"
    finally:
        patch_kubevirt(lab, {"status": {"conditions": saved}}, subresource="status")
    wait(lambda: hco_conditions(lab) == HEALTHY, "HCO healthy again")
    assert status(get(lab, HCO[4], HCO_V1BETA1, HCO[2]))["systemHealthStatus"] == "healthy"


def test_hco_upgrade_in_progress(lab):
    """An HCO operator of a newer version than the HyperConverged's status.versions upgrades it
    (hyperconverged_controller.go doReconcile, upgradeMode): Progressing HCOUpgrading until the
    KubeVirt CR reports the KubeVirt version that operator ships (operands CheckComponentVersion);
    the lab knob annotations stand for the operator Deployment's HCO_KV_IO_VERSION and KUBEVIRT_VERSION."""
    def operator_version():
        versions = status(get(lab, HCO[4], HCO_V1BETA1, HCO[2])).get("versions") or []
        return next(v["version"] for v in versions if v["name"] == "operator")

    observed = status(get(lab, "kubevirt", "kubevirt", "kubevirt"))["observedKubeVirtVersion"]
    assert operator_version() == "1.18.1"
    knob = ("annotate", "--overwrite", HCO_V1BETA1, HCO[2], "-n", HCO[4])
    lab.kubectl(*knob, "kubevirt-ops.lab/hco-version=1.18.2", "kubevirt-ops.lab/hco-kubevirt-version=v99.0.0")
    try:
        upgrading = ("True", "HCOUpgrading", "HCO is now upgrading to version 1.18.2")
        wait(lambda: hco_conditions(lab).get("Progressing") == upgrading, "HCO to be upgrading")
        assert hco_conditions(lab)["Available"] == HEALTHY["Available"]
        assert operator_version() == "1.18.1"  # recorded once the upgrade is complete
        # The operator ships the KubeVirt already running: the upgrade completes.
        lab.kubectl(*knob, f"kubevirt-ops.lab/hco-kubevirt-version={observed}")
        wait(lambda: operator_version() == "1.18.2", "the upgrade to complete")
        wait(lambda: hco_conditions(lab) == HEALTHY, "HCO healthy after the upgrade")
    finally:
        lab.kubectl(*knob, "kubevirt-ops.lab/hco-version-", "kubevirt-ops.lab/hco-kubevirt-version-")
    wait(lambda: operator_version() == "1.18.1" and hco_conditions(lab) == HEALTHY, "HCO back at 1.18.1")


def test_hco_defaults_the_eviction_strategy_from_the_worker_count(lab):
    def remove_strategy():
        lab.kubectl(
            "patch", HCO_V1BETA1, HCO[2], "-n", HCO[4], "--type", "json",
            "-p", '[{"op":"remove","path":"/spec/evictionStrategy"}]',
        )

    def defaulted(value):
        hco = get(lab, HCO[4], HCO_V1BETA1, HCO[2])
        return hco["spec"].get("evictionStrategy") == value and kubevirt_configuration(lab).get(
            "evictionStrategy"
        ) == value

    remove_strategy()
    wait(lambda: defaulted("LiveMigrate"), "LiveMigrate on a highly available infrastructure")
    kept = workers(lab)[0]
    others = [n for n in workers(lab) if n != kept]
    try:
        for node in others:
            lab.kubectl("label", "node", node, f"{WORKER_ROLE}-")
        wait(
            lambda: status(get(lab, HCO[4], HCO_V1BETA1, HCO[2])).get("infrastructureHighlyAvailable") is False,
            "one worker: not highly available",
        )
        # an explicit strategy stays; only an unset one is defaulted
        assert get(lab, HCO[4], HCO_V1BETA1, HCO[2])["spec"]["evictionStrategy"] == "LiveMigrate"
        remove_strategy()
        wait(lambda: defaulted("None"), "None with a single worker")
    finally:
        for node in others:
            lab.kubectl("label", "node", node, f"{WORKER_ROLE}=", "--overwrite")
        patch_hco(lab, {"evictionStrategy": "LiveMigrate"})
        wait(lambda: defaulted("LiveMigrate"), "restore")


def test_hco_obsolete_cpus_and_node_labeller(lab, restore_nodes):
    label = "cpu-model.node.kubevirt.io/Penryn"
    skipped, followed = workers(lab)[:2]

    def labels(node):
        return get(lab, None, "node", node)["metadata"]["labels"]

    assert labels(followed).get(label) == "true"
    assert "cpu-model.node.kubevirt.io/Conroe" not in labels(followed)  # built-in obsolete model
    lab.kubectl("annotate", "node", skipped, "node-labeller.kubevirt.io/skip-node=true", "--overwrite")
    try:
        patch_hco(lab, {"obsoleteCPUs": {"cpuModels": ["Penryn"], "minCPUModel": "Haswell-noTSX"}})
        wait(
            lambda: kubevirt_configuration(lab).get("obsoleteCPUModels", {}).get("Penryn") is True,
            "propagation",
        )
        models = kubevirt_configuration(lab)["obsoleteCPUModels"]
        assert models.get("486") is True and models.get("Opteron_G2-v1") is True
        hco = get(lab, HCO[4], HCO_V1BETA1, HCO[2])
        # minCPUModel is accepted, ignored and kept (v1beta1 is stored); v1 has no place for it.
        assert hco["spec"]["obsoleteCPUs"] == {"cpuModels": ["Penryn"], "minCPUModel": "Haswell-noTSX"}
        assert get(lab, HCO[4], HCO_V1, HCO[2])["spec"]["virtualization"]["obsoleteCPUModels"] == ["Penryn"]
        wait(lambda: label not in labels(followed), "the obsolete model's label to go")
        assert labels(skipped).get(label) == "true"
        lab.kubectl("annotate", "node", skipped, "node-labeller.kubevirt.io/skip-node-")
        wait(lambda: label not in labels(skipped), "labelling to resume on the skipped node")
    finally:
        lab.kubectl("annotate", "node", skipped, "node-labeller.kubevirt.io/skip-node-", check=False)
        lab.kubectl(
            "patch",
            HCO_V1BETA1,
            HCO[2],
            "-n",
            HCO[4],
            "--type",
            "json",
            "-p",
            '[{"op":"remove","path":"/spec/obsoleteCPUs"}]',
            check=False,
        )
    wait(lambda: labels(followed).get(label) == "true", "the label to come back")


# -- NodeMaintenance ---------------------------------------------------------------------------


def node_maintenance(name, node, group="nodemaintenance.medik8s.io"):
    return {
        "apiVersion": f"{group}/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "reason": "contract test"},
    }


def create(lab, obj, check=True):
    return lab.kubectl("create", "-f", "-", input=json.dumps(obj), check=check)


def taint_keys(lab, node):
    return {(t["key"], t["effect"]) for t in get(lab, None, "node", node)["spec"].get("taints") or []}


MAINTENANCE_TAINTS = {("node.kubernetes.io/unschedulable", "NoSchedule"), ("medik8s.io/drain", "NoSchedule")}
EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"


def test_node_maintenance_round_trip(lab, namespace, restore_nodes):
    apply(lab, namespace, pvc("disk", "ReadWriteMany"), vm("maint", claim="disk", eviction="LiveMigrate"))
    before = wait_vmi_running(lab, namespace, "maint")
    node = status(before)["nodeName"]
    name = f"nm-{namespace}"
    create(lab, node_maintenance(name, node))
    try:
        nm = wait(
            lambda: (m := get(lab, None, "nodemaintenances.nodemaintenance.medik8s.io", name))
            and status(m).get("phase") == "Succeeded"
            and m,
            "the NodeMaintenance to succeed",
        )
        st = status(nm)
        # NMO clears pendingPods on success (nil, so the key is left out).
        assert st["drainProgress"] == 100 and not st.get("pendingPods") and st["lastUpdate"]
        assert st["evictionPods"] >= 1 and st["totalpods"] >= st["evictionPods"] + 1  # + virt-handler
        assert MAINTENANCE_TAINTS <= taint_keys(lab, node)
        node_obj = get(lab, None, "node", node)
        assert node_obj["spec"]["unschedulable"] is True
        assert node_obj["metadata"]["labels"][EXCLUDE_LABEL] == "true"
        assert "foregroundDeleteNodeMaintenance" in nm["metadata"]["finalizers"]
        after = wait_vmi_running(lab, namespace, "maint")
        assert after["metadata"]["uid"] == before["metadata"]["uid"] and status(after)["nodeName"] != node
        assert lab.kubectl("get", "nm", name, "-o", "name").stdout.strip().endswith(name)
    finally:
        lab.kubectl(
            "delete", "nodemaintenances.nodemaintenance.medik8s.io", name, "--wait=true", "--timeout=120s"
        )
    node_obj = get(lab, None, "node", node)
    assert not node_obj["spec"].get("unschedulable")
    assert not MAINTENANCE_TAINTS & taint_keys(lab, node)
    assert EXCLUDE_LABEL not in node_obj["metadata"]["labels"]
    assert status(get(lab, namespace, "vmi", "maint"))["nodeName"] != node  # VMs do not move back


def test_node_maintenance_legacy_group_round_trip(lab, restore_nodes):
    node = workers(lab)[-1]
    name = "legacy-maintenance"
    group = "nodemaintenances.nodemaintenance.kubevirt.io"
    create(lab, node_maintenance(name, node, group="nodemaintenance.kubevirt.io"))
    try:
        wait(
            lambda: status(get(lab, None, group, name)).get("phase") == "Succeeded",
            "the legacy CR to succeed",
        )
        assert MAINTENANCE_TAINTS <= taint_keys(lab, node)
    finally:
        lab.kubectl("delete", group, name, "--wait=true", "--timeout=120s")
    assert not MAINTENANCE_TAINTS & taint_keys(lab, node)
    assert not get(lab, None, "node", node)["spec"].get("unschedulable")


def test_node_maintenance_blocked_by_a_non_migratable_vm(lab, namespace, restore_nodes):
    apply(lab, namespace, pvc("disk", "ReadWriteOnce"), vm("blocker", claim="disk", eviction="LiveMigrate"))
    before = wait_vmi_running(lab, namespace, "blocker")
    node = status(before)["nodeName"]
    (pod,) = launcher_pods(lab, namespace, before["metadata"]["uid"])
    name = f"nm-{namespace}"
    create(lab, node_maintenance(name, node))
    try:
        # NMO's drainer retries a refused eviction every 5 s for 30 s (DrainerTimeout), then
        # records kubectl's drain error, which names the pod but not the webhook's reason
        # (that is only in the operator's log), and tries again.
        nm = wait(
            lambda: (m := get(lab, None, "nm", name))
            and "global timeout reached" in status(m).get("lastError", "")
            and m,
            "the NodeMaintenance to report the refusal",
        )
        assert pod["metadata"]["name"] in status(nm)["lastError"]
        assert status(nm)["phase"] == "Running"
        assert pod["metadata"]["name"] in status(nm)["pendingPods"]
        assert status(nm).get("drainProgress", 0) < 100  # 0 is left out (omitempty)
        virtctl(lab, namespace, "blocker", "stop")
        wait(lambda: status(get(lab, None, "nm", name)).get("phase") == "Succeeded", "the drain to finish")
    finally:
        lab.kubectl("delete", "nm", name, "--wait=true", "--timeout=120s")


def test_node_maintenance_webhook_refusals(lab, restore_nodes):
    node = workers(lab)[0]
    unknown = create(lab, node_maintenance("nm-unknown", "no-such-node"), check=False)
    assert unknown.returncode != 0 and "no node with name no-such-node found" in unknown.stderr
    create(lab, node_maintenance("nm-first", node))
    try:
        second = create(lab, node_maintenance("nm-second", node), check=False)
        assert second.returncode != 0 and "already exists" in second.stderr
        legacy = create(
            lab, node_maintenance("nm-legacy", node, group="nodemaintenance.kubevirt.io"), check=False
        )
        assert legacy.returncode != 0 and "already exists" in legacy.stderr
        moved = lab.kubectl(
            "patch",
            "nm",
            "nm-first",
            "--type",
            "merge",
            "-p",
            json.dumps({"spec": {"nodeName": workers(lab)[-1]}}),
            check=False,
        )
        assert moved.returncode != 0 and "isn't allowed" in moved.stderr
    finally:
        lab.kubectl("delete", "nm", "nm-first", "--wait=true", "--timeout=120s")


# -- robustness -----------------------------------------------------------------------------------


def test_standins_survive_an_apiserver_restart(lab, namespace):
    apply(lab, namespace, vm("before-restart"))
    wait_vmi_running(lab, namespace, "before-restart")
    lab.restart_apiserver()
    apply(lab, namespace, vm("after-restart"))
    wait_vmi_running(lab, namespace, "after-restart")
    virtctl(lab, namespace, "before-restart", "stop")
    wait_vm_stopped(lab, namespace, "before-restart")


# -- node failure (last: it deletes and re-creates a node) --------------------------------------


def test_vmis_keep_their_place_on_a_failed_node_until_it_is_deleted(lab, namespace, restore_nodes):
    target = workers(lab)[-1]
    cordon_all_but(lab, [target])
    apply(lab, namespace, vm("keeper", run_strategy="Always"), vm("manual", run_strategy="Manual"))
    virtctl(lab, namespace, "manual", "start")
    keeper = wait_vmi_running(lab, namespace, "keeper")
    manual = wait_vmi_running(lab, namespace, "manual")
    assert status(keeper)["nodeName"] == status(manual)["nodeName"] == target
    lab.restore_nodes()
    try:
        lab.node_fail(target)
        # virt-controller's node controller drops the label once virt-handler's heartbeat is
        # 5 minutes old (pkg/virt-controller/watch/node/node.go, heartBeatTimeout).
        wait(
            lambda: get(lab, None, "node", target)["metadata"]["labels"].get("kubevirt.io/schedulable")
            == "false",
            "virt-controller to mark the node unschedulable",
            timeout=WAIT + 420,
        )
        for name, uid in (("keeper", keeper["metadata"]["uid"]), ("manual", manual["metadata"]["uid"])):
            vmi = get(lab, namespace, "vmi", name)
            assert (vmi["metadata"]["uid"], status(vmi)["nodeName"], status(vmi)["phase"]) == (
                uid,
                target,
                "Running",
            )

        lab.kubectl("delete", "node", target)
        moved = wait_vmi_running(lab, namespace, "keeper", other_than_uid=keeper["metadata"]["uid"])
        assert status(moved)["nodeName"] != target
        wait_vm_stopped(lab, namespace, "manual")
    finally:
        # The machine boots: its kubelet registers the node deleted meanwhile again (lab/standins/machines.py).
        lab.node_recover(target)
        wait(
            lambda: get(lab, None, "node", target)["metadata"]["labels"].get("kubevirt.io/schedulable")
            == "true",
            "the node to be a KubeVirt node again",
        )


@pytest.fixture
def machine_of(lab):
    """A worker's BMC (lab/machines), its BareMetalHost (``lab up`` makes one) detached and deleted first, as an
    administrator does before driving a Metal3 host's BMC (else the operator would power the machine back as
    ``spec.online`` says); the machine is powered on again at the end, its node Ready, its host made again."""
    bmcs = lab_bmc.load(LabPaths(lab.state_dir))
    api = lab_nodes.api_client(lab.kubeconfig)
    touched = []

    def machine(node):
        if node not in touched:
            metal3.release_host(api, node)
            touched.append(node)
        return lab_bmc.Bmc(bmcs[node])

    yield machine
    for node in touched:
        bmc = lab_bmc.Bmc(bmcs[node])
        if bmc.power_state() != "On":
            bmc.reset("On")
        wait(lambda n=node: lab_nodes._all(api, [n], lab_nodes.is_recovered), f"node {node} Ready again")
        metal3.restore_host(api, bmcs, node)


def _boot_id(lab, node):
    return status(get(lab, None, "node", node)).get("nodeInfo", {}).get("bootID")


def test_a_machine_powered_off_kills_its_guests_and_boots_with_a_new_boot_id(lab, namespace, machine_of):
    """ForceOff through the BMC: the node goes NotReady while its VMIs stay Running in the API (nothing
    tells KubeVirt the guests died). On: the node comes back Ready with a new bootID, virt-handler finds
    no domain and fails the VMIs, and virt-controller starts Always and RerunOnFailure VMs again as new
    VMIs while a Once VM stays down: the old VMIs never simply go on."""
    node = "lab-worker-4"
    pinned = {"kubernetes.io/hostname": node}
    apply(lab, namespace, *(vm(name, run_strategy=strategy, memory="256Mi", node_selector=pinned)
                            for name, strategy in (("always", "Always"), ("rerun", "RerunOnFailure"),
                                                   ("once", "Once"))))
    before = dict((name, wait_vmi_running(lab, namespace, name)["metadata"]["uid"])
                  for name in ("always", "rerun", "once"))
    boot_id = _boot_id(lab, node)
    assert boot_id
    bmc = machine_of(node)
    bmc.reset("ForceOff")
    api = lab_nodes.api_client(lab.kubeconfig)
    wait(lambda: lab_nodes._all(api, [node], lab_nodes.is_failed), f"node {node} NotReady")
    for name, uid in before.items():
        vmi = get(lab, namespace, "vmi", name)
        assert vmi["metadata"]["uid"] == uid and status(vmi)["phase"] == "Running", (name, status(vmi))
    assert bmc.power_state() == "Off"
    bmc.reset("On")
    wait(lambda: lab_nodes._all(api, [node], lab_nodes.is_recovered), f"node {node} Ready after its boot")
    assert _boot_id(lab, node) not in (None, boot_id)
    for name in ("always", "rerun"):
        again = wait_vmi_running(lab, namespace, name, other_than_uid=before[name])
        assert again["metadata"]["uid"] != before[name]
    once = wait(lambda: (lambda v: v if v and status(v).get("phase") == "Failed" else None)(
        get(lab, namespace, "vmi", "once")), "the Once VM's VMI Failed")
    assert once["metadata"]["uid"] == before["once"]


OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def test_a_fenced_node_whose_machine_is_off_gives_its_vms_up_at_once(lab, namespace, machine_of, k8s):
    """Non-graceful node shutdown: with the machine off and the node tainted out-of-service, the
    taint manager evicts the node's pods and the pod GC force-deletes them (kube-controller-manager),
    virt-controller fails the VMIs whose launcher pods are gone, and an Always VM starts on another
    node without waiting for the node."""
    apply(lab, namespace, vm("fenced", memory="256Mi"))
    before = wait_vmi_running(lab, namespace, "fenced")
    node = status(before)["nodeName"]
    bmc = machine_of(node)
    bmc.reset("ForceOff")
    api = lab_nodes.api_client(lab.kubeconfig)
    wait(lambda: lab_nodes._all(api, [node], lab_nodes.is_failed), f"node {node} NotReady")
    core = client.CoreV1Api(k8s)
    taints = k8s.sanitize_for_serialization(core.read_node(node).spec.taints or [])
    core.patch_node(node, {"spec": {"taints": taints + [OUT_OF_SERVICE]}})
    try:
        again = wait_vmi_running(lab, namespace, "fenced", other_than_uid=before["metadata"]["uid"])
        assert status(again)["nodeName"] != node
        assert bmc.power_state() == "Off"
    finally:
        kept = [t for t in k8s.sanitize_for_serialization(core.read_node(node).spec.taints or [])
                if t["key"] != OUT_OF_SERVICE["key"]]
        core.patch_node(node, {"spec": {"taints": kept}})


def test_a_vmi_whose_launcher_pod_failed_fails_and_always_starts_it_again(lab, namespace, k8s):
    """An OOM-killed virt-launcher (the pod ends Failed, as the kubelet writes it): virt-handler finds no
    domain and a launcher that does not answer, and fails the VMI (pkg/virt-handler/vm.go
    calculateVmPhaseForStatusReason); the Always VM starts again as a new VMI."""
    apply(lab, namespace, vm("oom", memory="256Mi"))
    before = wait_vmi_running(lab, namespace, "oom")
    core = client.CoreV1Api(k8s)
    pod = next(p for p in core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items
               if p.metadata.labels.get("kubevirt.io/created-by") == before["metadata"]["uid"])
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"phase": "Failed"}})
    again = wait_vmi_running(lab, namespace, "oom", other_than_uid=before["metadata"]["uid"])
    assert again["metadata"]["uid"] != before["metadata"]["uid"]


# -- a machine dies in the middle of a live migration -------------------------------------------

HOLD_MIGRATION = "kubevirt-ops.lab/hold-migration"
LOST_TARGET = "operation failed: Lost connection to destination host"


# How long a refused retry is watched for: the evacuation controller acts on the failure's event.
EVACUATION_QUIET = 20


def stays(predicate, seconds, what):
    """``predicate`` holds all along ``seconds`` (an absence can only be watched for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"no longer {what}"
        time.sleep(1)


def node_taints(k8s, node):
    return k8s.sanitize_for_serialization(client.CoreV1Api(k8s).read_node(node).spec.taints or [])


def migration_under_way(lab, namespace, vmi_name):
    """The VMI's migration Running, its target holding the incoming domain: (migration, VMI)."""
    def under_way():
        vmi = get(lab, namespace, "vmi", vmi_name)
        state = status(vmi).get("migrationState") or {}
        for migration in items(lab, namespace, "vmim"):
            if (status(migration).get("phase") == "Running" and state.get("targetNodeDomainDetected")
                    and state.get("migrationUid") == migration["metadata"]["uid"]):
                return migration, vmi
        return None

    return wait(under_way, f"the migration of {vmi_name} under way")


def migration_ended(lab, namespace, uid):
    return wait(lambda: next((m for m in items(lab, namespace, "vmim") if m["metadata"]["uid"] == uid
                              and status(m).get("phase") in ("Succeeded", "Failed")), None),
                "the migration to end")


def test_a_live_migration_fails_when_its_source_machine_dies_mid_transfer(lab, namespace, machine_of,
                                                                           restore_nodes):
    """The source machine powered off while the guest's memory is on its way: nothing more reaches
    the target, whose virt-handler reports nothing; its libvirt drops the source after its keepalive,
    the incoming domain goes and the target's virt-launcher exits, so virt-controller fails the
    migration (target pod down: pkg/virt-controller/watch/migration/migration.go updateStatus). The
    VM is not reported migrated: the VMI keeps its dead source node and a migration state nobody ends
    (page: silent)."""
    source, target = "lab-worker-3", "lab-worker-4"
    cordon_all_but(lab, [source])
    apply(lab, namespace, vm("doomed", memory="256Mi", annotations={HOLD_MIGRATION: "true"}))
    before = wait_vmi_running(lab, namespace, "doomed")
    assert status(before)["nodeName"] == source
    lab.kubectl("uncordon", target)
    virtctl(lab, namespace, "doomed", "migrate")
    migration, vmi = migration_under_way(lab, namespace, "doomed")
    assert status(vmi)["migrationState"]["targetNode"] == target

    machine_of(source).reset("ForceOff")
    api = lab_nodes.api_client(lab.kubeconfig)
    wait(lambda: lab_nodes._all(api, [source], lab_nodes.is_failed), f"node {source} NotReady")
    # Nothing holds the transfer back any more but the dead source.
    lab.kubectl("annotate", "vm", "doomed", f"{HOLD_MIGRATION}-", "-n", namespace)
    ended = migration_ended(lab, namespace, migration["metadata"]["uid"])
    assert status(ended)["phase"] == "Failed"
    vmi = get(lab, namespace, "vmi", "doomed")
    state = status(vmi)["migrationState"]
    assert vmi["metadata"]["uid"] == before["metadata"]["uid"]
    assert (status(vmi)["nodeName"], vmi["metadata"]["labels"]["kubevirt.io/nodeName"]) == (source, source)
    assert status(vmi)["phase"] == "Running"  # its launcher pod is still Running in the API
    assert not state.get("completed") and not state.get("targetNodeDomainReadyTimestamp"), state
    assert state["migrationUid"] == migration["metadata"]["uid"] and not state.get("endTimestamp"), state
    target_pod = get(lab, namespace, "pod", state["targetPod"])
    assert target_pod["spec"]["nodeName"] == target and status(target_pod)["phase"] == "Succeeded"


def test_a_migration_handed_over_but_never_started_does_not_keep_a_dead_guest_running(lab, namespace, machine_of,
                                                                                   restore_nodes):
    """The source machine is off before a migration of its VMI starts: virt-controller hands the migration to
    the handlers (the target pod runs, the VMI's migration state names the target), but the source's handler
    is dead and never starts it. When the machine boots, its handler finds no domain; a migration without a
    start is not in progress for it (``isMigrationInProgress`` in pkg/virt-handler/controller.go needs the
    start timestamp), so it fails the VMI (pkg/virt-handler/vm.go ``execute`` -> ``sync``) and the Always VM
    starts again as a new VMI. The VMI never stays Running on a machine that lost it."""
    source, target = "lab-worker-3", "lab-worker-4"
    cordon_all_but(lab, [source])
    apply(lab, namespace, vm("lost", memory="256Mi"))
    before = wait_vmi_running(lab, namespace, "lost")
    assert status(before)["nodeName"] == source
    lab.kubectl("uncordon", target)
    bmc = machine_of(source)
    bmc.reset("ForceOff")
    wait(lambda: bmc.power_state() == "Off", f"the machine of {source} off")
    virtctl(lab, namespace, "lost", "migrate")

    def handed_over():
        state = status(get(lab, namespace, "vmi", "lost")).get("migrationState") or {}
        return state if state.get("targetNode") == target and state.get("targetNodeAddress") else None

    state = wait(handed_over, "the migration handed to the handlers")
    assert not state.get("startTimestamp"), state
    bmc.reset("On")
    again = wait_vmi_running(lab, namespace, "lost", other_than_uid=before["metadata"]["uid"])
    assert again["metadata"]["uid"] != before["metadata"]["uid"]
    # The migration that never started is not in flight any more (virt-controller fails it, and deletes it
    # with the VMI it belonged to).
    wait(lambda: all(status(m).get("phase") == "Failed" for m in items(lab, namespace, "vmim")),
         "the migration that never started to end")


def test_a_live_migration_fails_when_its_target_machine_dies_mid_transfer(lab, namespace, k8s,
                                                                           restore_nodes):
    """The target node dies while an evacuation's transfer is under way: the source's libvirt loses
    the destination (keepalive) and virt-handler reports the failure, so virt-controller fails the
    migration ("source node reported migration failed"). The dead target's pod stays Running in the
    API, and while it does the evacuation is not retried (VMIActivePodsCount > 1 in
    pkg/virt-controller/watch/drain/evacuation/evacuation.go); once the node is fenced and the pod
    gone, the evacuation is retried and the VM moves elsewhere, the same VMI (page: silent)."""
    source, target, spare = "lab-worker-3", "lab-worker-4", "lab-worker-2"
    cordon_all_but(lab, [source])
    apply(lab, namespace, vm("stranded", memory="256Mi", eviction="LiveMigrate",
                              annotations={HOLD_MIGRATION: "true"}))
    before = wait_vmi_running(lab, namespace, "stranded")
    assert status(before)["nodeName"] == source
    lab.kubectl("uncordon", target)
    core = client.CoreV1Api(k8s)
    (pod,) = launcher_pods(lab, namespace, before["metadata"]["uid"])
    name = pod["metadata"]["name"]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction(
            name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace)))
    assert refused.value.status == 429
    assert evacuation_triggered(namespace, "stranded") in json.loads(refused.value.body)["message"]
    migration, vmi = migration_under_way(lab, namespace, "stranded")
    assert migration["metadata"]["name"].startswith("kubevirt-evacuation-")
    assert status(vmi)["migrationState"]["targetNode"] == target

    lab.node_fail(target)
    try:
        ended = migration_ended(lab, namespace, migration["metadata"]["uid"])
        assert status(ended)["phase"] == "Failed"
        vmi = get(lab, namespace, "vmi", "stranded")
        state = status(vmi)["migrationState"]
        assert vmi["metadata"]["uid"] == before["metadata"]["uid"] and status(vmi)["nodeName"] == source
        assert state["migrationUid"] == migration["metadata"]["uid"], state
        assert state["failed"] is True and state.get("endTimestamp") and not state.get("completed"), state
        assert LOST_TARGET in state["failureReason"], state
        dead_pod = get(lab, namespace, "pod", state["targetPod"])
        assert status(dead_pod)["phase"] == "Running"  # its kubelet is dead
        # A node to go to and nothing holding the transfer: still no second try while the dead pod
        # counts as active (the evacuation controller would create it at once, on the failure).
        lab.kubectl("uncordon", spare)
        lab.kubectl("annotate", "vm", "stranded", f"{HOLD_MIGRATION}-", "-n", namespace)
        stays(lambda: [m["metadata"]["uid"] for m in items(lab, namespace, "vmim")] == [migration["metadata"]["uid"]]
              and status(get(lab, namespace, "vmi", "stranded"))["nodeName"] == source,
              EVACUATION_QUIET, "the failed evacuation alone, the VMI on its source")
        # Fenced (non-graceful node shutdown): kube-controller-manager's pod GC deletes the dead pod.
        core.patch_node(target, {"spec": {"taints": node_taints(k8s, target) + [OUT_OF_SERVICE]}})
        moved = wait(lambda: (v := get(lab, namespace, "vmi", "stranded")) and status(v).get("nodeName") != source
                     and v, "the evacuation retried once the dead target pod is gone")
        assert moved["metadata"]["uid"] == before["metadata"]["uid"] and status(moved)["nodeName"] == spare
        retried = [m for m in items(lab, namespace, "vmim") if m["metadata"]["uid"] != migration["metadata"]["uid"]]
        assert [m["metadata"]["name"].startswith("kubevirt-evacuation-") for m in retried] == [True]
        assert wait(lambda: status(get(lab, namespace, "vmim", retried[0]["metadata"]["name"])).get("phase")
                    == "Succeeded", "the retried evacuation Succeeded")
    finally:
        kept = [t for t in node_taints(k8s, target) if t["key"] != OUT_OF_SERVICE["key"]]
        core.patch_node(target, {"spec": {"taints": kept}})
        lab.node_recover(target)
        wait(lambda: any(p["spec"].get("nodeName") == target and status(p).get("phase") == "Running"
                         for p in items(lab, "kubevirt", "pods", "kubevirt.io=virt-handler")),
             f"virt-handler running on {target} again")
