"""The snapshot keeps VMIs, VMs and nodes trimmed page by page to what a plan reads: every question
the plan asks of the trimmed object gets the answer the whole object gives."""

import copy

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot as snapshot_mod

# A running VMI as KubeVirt v1.7.0 writes it (virt-controller and virt-handler), managed fields added.
VMI = {
    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
    "metadata": {
        "annotations": {"kubevirt.io/latest-observed-api-version": "v1", "kubevirt.io/vm-generation": "1",
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": \"" + "x" * 4000 + "\"}"},
        "creationTimestamp": "2026-11-26T19:50:56Z",
        "finalizers": ["kubevirt.io/virtualMachineControllerFinalize", "kubevirt.io/foregroundDeleteVirtualMachine"],
        "generation": 5,
        "labels": {"app": "web", "kubevirt.io/nodeName": "worker-1", "vm": "web-1"},
        "managedFields": [{"manager": "virt-controller", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        "name": "web-1", "namespace": "apps",
        "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "blockOwnerDeletion": True, "controller": True,
                             "kind": "VirtualMachine", "name": "web-1", "uid": "c4168893"}],
        "resourceVersion": "1948", "uid": "866d2147",
    },
    "spec": {
        "architecture": "amd64",
        "domain": {"cpu": {"cores": 1, "model": "host-model"},
                   "devices": {"disks": [{"disk": {"bus": "virtio"}, "name": "root"}],
                               "interfaces": [{"masquerade": {}, "name": "default"}]},
                   "memory": {"guest": "2Gi", "maxGuest": "8Gi"}, "resources": {"requests": {"memory": "2Gi"}}},
        "evictionStrategy": "LiveMigrateIfPossible",
        "networks": [{"name": "default", "pod": {}}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "web-1-root"}}],
    },
    "status": {
        "activePods": {"8577708e": "worker-1"},
        "conditions": [{"lastProbeTime": None, "lastTransitionTime": "2026-11-26T19:50:56Z", "status": "True",
                        "type": "Ready"},
                       {"lastProbeTime": None, "lastTransitionTime": None, "status": "False", "type": "LiveMigratable",
                        "reason": "DisksNotLiveMigratable", "message": "PVC web-1-root is not shared"}],
        "guestOSInfo": {}, "interfaces": [{"ipAddress": "10.244.94.2", "name": "default"}],
        "launcherContainerImageVersion": "quay.io/kubevirt/virt-launcher:v1.7.0",
        "memory": {"guestAtBoot": "2Gi", "guestCurrent": "3Gi", "guestRequested": "3Gi"},
        "migrationMethod": "LiveMigration",
        "migrationState": {"completed": True, "sourceNode": "worker-2", "targetNode": "worker-1"},
        "evacuationNodeName": "worker-1",
        "nodeName": "worker-1", "phase": "Running",
        "phaseTransitionTimestamps": [{"phase": "Running", "phaseTransitionTimestamp": "2026-11-26T19:50:56Z"}],
        "qosClass": "Burstable",
        "volumeStatus": [{"name": "root", "target": "vda",
                          "persistentVolumeClaimInfo": {"claimName": "web-1-root", "accessModes": ["ReadWriteOnce"]}}],
    },
}


def _answers(vmi):
    """Everything the plan, the fates and the rolling run ask of a snapshot VMI."""
    return {
        "node": kubevirt.vmi_node(vmi),
        "active": kubevirt.vmi_is_active(vmi),
        "running": kubevirt.vmi_is_running(vmi),
        "in_service": kubevirt.vmi_in_service(vmi),
        "final": kubevirt.vmi_is_final(vmi),
        "live_migratable": kubevirt.live_migratable(vmi),
        "memory": kubevirt.vmi_guest_memory(vmi),
        "vm": kubevirt.vm_name_of(vmi),
        "migration": kubevirt.migration_state(vmi),
        "strategy": fates.effective_strategy(vmi, "LiveMigrate"),
        "fate": fates.decide(vmi, "Always", "LiveMigrate", "fail", "apps/web-1", "worker-1").outcome,
        "spec": vmi["spec"],
        "uid": vmi["metadata"]["uid"],
        "labels": vmi["metadata"]["labels"],
    }


@pytest.mark.parametrize("change", [
    {},
    {"status": {"phase": "Succeeded"}},
    {"metadata": {"deletionTimestamp": "2026-11-26T20:00:00Z"}},
    {"status": {"conditions": []}},
])
def test_a_trimmed_vmi_answers_as_the_whole_one(change):
    vmi = copy.deepcopy(VMI)
    for part, values in change.items():
        vmi[part].update(values)
    slim = snapshot_mod._slim_vmi(vmi)  # pylint: disable=protected-access
    assert _answers(slim) == _answers(vmi)
    assert "annotations" not in slim["metadata"] and "managedFields" not in slim["metadata"]
    assert set(slim["status"]) <= set(snapshot_mod._VMI_STATUS_KEYS)  # pylint: disable=protected-access
    assert "volumeStatus" not in slim["status"] and "interfaces" not in slim["status"]


def test_vmis_of_one_template_share_what_is_equal():
    share = snapshot_mod._Shared()  # pylint: disable=protected-access
    first, second = copy.deepcopy(VMI), copy.deepcopy(VMI)
    second["metadata"].update(name="web-2", uid="1234")
    second["spec"]["domain"]["firmware"] = {"uuid": "other"}
    second["spec"]["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": "web-2-root"}}]
    for cond in second["status"]["conditions"]:
        cond["lastTransitionTime"] = "2026-11-26T21:00:00Z"  # when differs, what is the same
    a = snapshot_mod._slim_vmi(first, share)  # pylint: disable=protected-access
    b = snapshot_mod._slim_vmi(second, share)  # pylint: disable=protected-access
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["status"]["conditions"] is b["status"]["conditions"]
    for key in ("devices", "cpu", "memory", "resources"):
        assert a["spec"]["domain"][key] is b["spec"]["domain"][key]
    assert a["spec"]["networks"] is b["spec"]["networks"] and a["spec"]["nodeSelector"] is b["spec"]["nodeSelector"]
    # What differs stays each VMI's own.
    assert a["spec"]["volumes"] != b["spec"]["volumes"]
    assert a["spec"]["domain"].get("firmware") != b["spec"]["domain"]["firmware"]
    assert _answers(b)["spec"] == second["spec"] and a["metadata"]["uid"] != b["metadata"]["uid"]


@pytest.mark.parametrize("spec,strategy", [
    ({"runStrategy": "Manual"}, "Manual"),
    ({"running": True}, "Always"),
    ({"running": False}, "Halted"),
    ({}, "Halted"),
])
def test_a_trimmed_vm_keeps_its_run_strategy_and_identity(spec, strategy):
    vm = {"metadata": {"name": "web-1", "namespace": "apps", "uid": "c4168893", "managedFields": [{}],
                       "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}},
          "spec": dict(spec, template={"spec": copy.deepcopy(VMI["spec"])}, dataVolumeTemplates=[{}]),
          "status": {"printableStatus": "Running", "volumeSnapshotStatuses": [{"name": "root"}]}}
    slim = snapshot_mod._slim_vm(vm)  # pylint: disable=protected-access
    assert kubevirt.vm_run_strategy(slim) == kubevirt.vm_run_strategy(vm) == strategy
    assert slim == {"metadata": {"name": "web-1", "namespace": "apps", "uid": "c4168893"},
                    "spec": spec}


def test_a_trimmed_node_loses_only_its_image_list_and_managed_fields():
    node = {"metadata": {"name": "worker-1", "labels": {"a": "b"}, "annotations": {"x": "y"}, "managedFields": [{}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}],
                       "images": [{"names": ["quay.io/x:%d" % i], "sizeBytes": i} for i in range(50)]}}
    whole = copy.deepcopy(node)
    slim = snapshot_mod._slim_node(node)  # pylint: disable=protected-access
    assert node == whole  # the page's object is not changed
    assert "images" not in slim["status"] and "managedFields" not in slim["metadata"]
    del whole["status"]["images"], whole["metadata"]["managedFields"]
    assert slim == whole
    # Nothing to trim: the node itself, not a copy.
    assert snapshot_mod._slim_node(slim) is slim  # pylint: disable=protected-access
    only_images = {"metadata": {"name": "worker-2"}, "status": {"images": []}}
    assert snapshot_mod._slim_node(only_images) == {"metadata": {"name": "worker-2"}, "status": {}}  # pylint: disable=protected-access
