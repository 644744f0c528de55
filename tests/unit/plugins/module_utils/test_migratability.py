"""A stopped VM judged as virt-handler of the installed release would judge it once it runs."""

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migratability as m


def kubevirt(version="v1.7.0", **configuration):
    configuration.setdefault("network", {"defaultNetworkInterface": "masquerade"})
    return {"spec": {"configuration": configuration}, "status": {"observedKubeVirtVersion": version}}


def stopped_vm(volumes=(), annotations=None, **domain):
    devices = domain.pop("devices", {})
    spec = {"domain": dict(domain, devices=devices), "volumes": list(volumes)}
    if "networks" in devices:
        spec["networks"] = devices.pop("networks")
    return {"metadata": {"namespace": "ns1", "name": "vm1"},
            "spec": {"runStrategy": "Halted",
                     "template": {"metadata": {"annotations": annotations or {}}, "spec": spec}}}


PVCS = {"rwx": {"spec": {"accessModes": ["ReadWriteMany"]}}, "rwo": {"status": {"accessModes": ["ReadWriteOnce"]}}}


def predict(vm, cr=None):
    return m.predict_not_migratable(vm, lambda ns, name: PVCS.get(name), m.ClusterRules(cr or kubevirt()))


POD_NET = [{"name": "default", "pod": {}}]


@pytest.mark.parametrize("vm, reason", [
    (stopped_vm([{"name": "d", "persistentVolumeClaim": {"claimName": "rwx"}}]), None),
    (stopped_vm([{"name": "d", "persistentVolumeClaim": {"claimName": "rwo"}}]), m.DISKS),
    (stopped_vm([{"name": "d", "dataVolume": {"name": "missing"}}]), m.UNKNOWN),
    (stopped_vm([{"name": "d", "hostDisk": {"path": "/x", "type": "Disk"}}]), m.DISKS),
    (stopped_vm([{"name": "d", "hostDisk": {"path": "/x", "type": "Disk", "shared": True}}]), None),
    (stopped_vm([{"name": "d", "containerDisk": {"image": "x"}}, {"name": "c", "cloudInitNoCloud": {}}]), None),
    # host-passthrough is not checked by calculateLiveMigrationCondition
    (stopped_vm(cpu={"model": "host-passthrough"}), None),
    # a virtiofs share of a ConfigMap is skipped by checkVolumesForMigration
    (stopped_vm([{"name": "cfg", "configMap": {"name": "x"}}], devices={"filesystems": [{"name": "cfg", "virtiofs": {}}]}),
     None),
    (stopped_vm(devices={"hostDevices": [{"name": "h", "deviceName": "x/y"}]}), m.HOST_DEVICE),
    (stopped_vm(devices={"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID"}]}), m.HOST_DEVICE),
    (stopped_vm(launchSecurity={"sev": {}}), m.SEV),
    (stopped_vm(launchSecurity={"tdx": {}}), m.TDX),
    (stopped_vm(features={"hypervPassthrough": {"enabled": True}}), m.HYPERV_PASSTHROUGH),
    (stopped_vm(devices={"disks": [{"name": "l", "lun": {"reservation": True}}]}), m.PERSISTENT_RESERVATION),
    # bridge on the pod network, with and without the annotation; SR-IOV on a secondary network
    (stopped_vm(devices={"interfaces": [{"name": "default", "bridge": {}}], "networks": POD_NET}), m.INTERFACE),
    (stopped_vm(devices={"interfaces": [{"name": "default", "bridge": {}}], "networks": POD_NET},
                annotations={m.ALLOW_POD_BRIDGE_MIGRATION: ""}), None),
    (stopped_vm(devices={"interfaces": [{"name": "default", "masquerade": {}}, {"name": "s", "sriov": {}}],
                         "networks": POD_NET + [{"name": "s", "multus": {"networkName": "sriov"}}]}), None),
])
def test_stopped_vm_on_kubevirt_1_7(vm, reason):
    assert predict(vm) == reason


def test_interface_blocks_before_disks_as_upstream_orders_them():
    vm = stopped_vm([{"name": "d", "persistentVolumeClaim": {"claimName": "rwo"}}],
                    devices={"interfaces": [{"name": "default", "bridge": {}}], "networks": POD_NET})
    assert predict(vm) == m.INTERFACE


def test_a_vm_without_interfaces_gets_the_cluster_default_binding():
    vm = stopped_vm()
    assert predict(vm, kubevirt(network={})) == m.INTERFACE  # plain KubeVirt: bridge
    assert predict(vm, kubevirt(network={"defaultNetworkInterface": "masquerade"})) is None
    assert predict(vm, kubevirt(network={"autoattachPodInterface": False})) is None


def test_migratable_binding_plugin():
    vm = stopped_vm(devices={"interfaces": [{"name": "default", "binding": {"name": "passt"}}], "networks": POD_NET})
    assert predict(vm, kubevirt(network={"binding": {"passt": {"migration": {}}}})) is None
    assert predict(vm, kubevirt(network={"binding": {"passt": {}}})) == m.INTERFACE


def test_one_mediated_gpu_migrates_from_1_9_with_the_feature_gate():
    vm = stopped_vm(devices={"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_T4"}]})
    gated = dict(developerConfiguration={"featureGates": [m.VGPU_LIVE_MIGRATION_GATE]},
                 permittedHostDevices={"mediatedDevices": [{"resourceName": "nvidia.com/GRID_T4"}]})
    assert predict(vm, kubevirt("v1.9.0", **gated)) is None
    assert predict(vm, kubevirt("v1.8.0", **gated)) == m.HOST_DEVICE
    assert predict(vm, kubevirt("v1.9.0")) == m.HOST_DEVICE
    two = stopped_vm(devices={"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_T4"},
                                       {"name": "h", "deviceName": "nvidia.com/GRID_T4"}]})
    assert predict(two, kubevirt("v1.9.0", **gated)) == m.HOST_DEVICE


def test_persistent_reservation_migrates_from_1_9_and_blocks_when_the_version_is_unknown():
    vm = stopped_vm(devices={"disks": [{"name": "l", "lun": {"reservation": True}}]})
    assert predict(vm, kubevirt("v1.9.1")) is None
    assert predict(vm, kubevirt("v1.8.2")) == m.PERSISTENT_RESERVATION
    assert predict(vm, kubevirt("")) == m.PERSISTENT_RESERVATION


def test_version_from_the_kubevirt_resource():
    assert m.kubevirt_version(kubevirt("v1.10.2")) == (1, 10)
    assert m.kubevirt_version({"status": {"targetKubeVirtVersion": "1.6.0"}}) == (1, 6)
    assert m.kubevirt_version(None) is None
