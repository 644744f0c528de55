# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a stopped VM would be live-migratable once it runs, as virt-handler of the
installed KubeVirt would judge it.

A running VMI carries the answer in its ``LiveMigratable`` condition and that is always read
first (``kubevirt.vm_not_migratable_reason``). A stopped VM has no VMI, so this module applies
virt-handler's rules to the VM's template. Upstream: ``pkg/virt-handler/vm.go``
``calculateLiveMigrationCondition`` and ``checkVolumesForMigration``, and
``pkg/network/vmispec/interface.go`` ``VerifyVMIMigratable``, per release:

- every release from 1.6: the pod network's interface must be masquerade, bridge with the
  ``kubevirt.io/allow-pod-bridge-network-live-migration`` annotation, or a binding plugin with
  ``migration`` configured (a VM without interfaces gets the cluster's
  ``network.defaultNetworkInterface``, ``bridge`` unless configured); secondary interfaces
  (SR-IOV included: KubeVirt unplugs and plugs them around the migration) do not block;
- PCI host devices block; GPUs block up to 1.8; from 1.9 one mediated GPU may migrate when
  the ``VGPULiveMigration`` feature gate is on (``vmiContainsNonMigratablePCIHostDevices``);
- SEV, TDX (a condition of its own from 1.7) and s390x Secure Execution block;
- a LUN disk with SCSI persistent reservation blocks up to 1.8 (1.9 migrates it);
- Hyper-V passthrough blocks;
- every PVC or DataVolume must be ReadWriteMany; a non-shared hostDisk blocks;
- NOT blockers: host-passthrough CPU (the condition does not check it), virtiofs filesystems
  of ConfigMaps/Secrets/ServiceAccounts, read-only CD-ROMs, container and cloud-init disks
  (they make the migration a block migration). A host-model CPU depends on the node the VM
  lands on and is not predicted.

The answer is the reason virt-handler would write (``kubevirt.io/api`` core/v1 types.go), or
None when it would migrate; ``"Unknown"`` when a PVC it needs cannot be found.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

RWX = "ReadWriteMany"
ALLOW_POD_BRIDGE_MIGRATION = "kubevirt.io/allow-pod-bridge-network-live-migration"
VGPU_LIVE_MIGRATION_GATE = "VGPULiveMigration"

INTERFACE = "InterfaceNotLiveMigratable"
HOST_DEVICE = "HostDeviceNotLiveMigratable"
SEV = "SEVNotLiveMigratable"
TDX = "TDXNotLiveMigratable"
SECURE_EXECUTION = "SecureExecutionNotLiveMigratable"
PERSISTENT_RESERVATION = "PersistentReservationNotLiveMigratable"
HYPERV_PASSTHROUGH = "HypervPassthroughNotLiveMigratable"
DISKS = "DisksNotLiveMigratable"
UNKNOWN = "Unknown"


def kubevirt_version(kubevirt_cr):
    """(major, minor) of the installed KubeVirt from its CR's status, None when unknown."""
    status = (kubevirt_cr or {}).get("status") or {}
    text = status.get("observedKubeVirtVersion") or status.get("targetKubeVirtVersion") or ""
    match = re.match(r"v?(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


class ClusterRules(object):
    """What of the KubeVirt CR (version and configuration) the prediction depends on."""

    def __init__(self, kubevirt_cr=None):
        configuration = ((kubevirt_cr or {}).get("spec") or {}).get("configuration") or {}
        network = configuration.get("network") or {}
        self.version = kubevirt_version(kubevirt_cr)
        self.default_interface = network.get("defaultNetworkInterface") or "bridge"
        self.autoattach_pod_interface = network.get("autoattachPodInterface")
        self.bindings = network.get("binding") or {}
        self.feature_gates = set(((configuration.get("developerConfiguration") or {}).get("featureGates")) or [])
        permitted = configuration.get("permittedHostDevices") or {}
        self.mediated_resources = set(d.get("resourceName") for d in permitted.get("mediatedDevices") or [])

    def at_least(self, major, minor):
        """True when the installed KubeVirt is known to be at least major.minor."""
        return self.version is not None and self.version >= (major, minor)


def _template_spec(vm):
    return (((vm.get("spec") or {}).get("template") or {}).get("spec")) or {}


def _template_annotations(vm):
    return ((((vm.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations")) or {}


def _default_interface_blocks(vm, devices, rules):
    """A VM without interfaces and networks: whether the pod network virt-api adds to it blocks."""
    # virt-api's VMI mutator adds the pod network with the cluster's default binding
    # unless autoattachPodInterface is false (on the cluster or the VM).
    if devices.get("autoattachPodInterface") is False or rules.autoattach_pod_interface is False:
        return False
    binding = rules.default_interface
    if binding == "masquerade":
        return False
    return not (binding == "bridge" and ALLOW_POD_BRIDGE_MIGRATION in _template_annotations(vm))


def _pod_interface(interfaces, networks):
    """The interface on the pod network, or None."""
    pod_network = next((n for n in networks if "pod" in n), None)
    if pod_network is None:
        return None
    return next((i for i in interfaces if i.get("name") == pod_network.get("name")), None)


def _interface_blocks(vm, rules):
    spec = _template_spec(vm)
    devices = (spec.get("domain") or {}).get("devices") or {}
    interfaces = devices.get("interfaces") or []
    networks = spec.get("networks") or []
    if not interfaces and not networks:
        return _default_interface_blocks(vm, devices, rules)
    if not interfaces:
        return False
    pod_iface = _pod_interface(interfaces, networks)
    if pod_iface is None or "masquerade" in pod_iface:
        return False
    if "bridge" in pod_iface and ALLOW_POD_BRIDGE_MIGRATION in _template_annotations(vm):
        return False
    plugin = (pod_iface.get("binding") or {}).get("name")
    return not (plugin and (rules.bindings.get(plugin) or {}).get("migration") is not None)


def _host_devices_block(devices, rules):
    if devices.get("hostDevices"):
        return True
    gpus = devices.get("gpus") or []
    if not gpus:
        return False
    if not rules.at_least(1, 9) or len(gpus) > 1:
        return True
    return not (VGPU_LIVE_MIGRATION_GATE in rules.feature_gates
                and gpus[0].get("deviceName") in rules.mediated_resources)


def pvc_access_modes(pvc):
    """The access modes of a PVC: what it was bound with, else what it asks for."""
    return list((pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or [])


def data_volume_template_access_modes(vm, name):
    """Access modes a VM's dataVolumeTemplate asks for (None when it does not say)."""
    for template in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
        if ((template.get("metadata") or {}).get("name")) == name:
            spec = template.get("spec") or {}
            modes = (spec.get("pvc") or {}).get("accessModes") or (spec.get("storage") or {}).get("accessModes")
            return list(modes) if modes else None
    return None


def _disks_block(vm, find_pvc):
    """(blocks, unknown): every PVC must be shared; a hostDisk must be shared."""
    namespace = (vm.get("metadata") or {}).get("namespace")
    for volume in _template_spec(vm).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName") or \
            (volume.get("dataVolume") or {}).get("name")
        if claim:
            pvc = find_pvc(namespace, claim)
            modes = pvc_access_modes(pvc) if pvc else data_volume_template_access_modes(vm, claim)
            if modes is None:
                return False, True
            if RWX not in modes:
                return True, False
        elif "hostDisk" in volume and not (volume.get("hostDisk") or {}).get("shared"):
            return True, False
    return False, False


def predict_not_migratable(vm, find_pvc, rules):
    """The LiveMigratable=False reason virt-handler would give the VM once it runs, None if it
    would migrate, ``"Unknown"`` when a PVC it needs cannot be found. Upstream's order."""
    spec = _template_spec(vm)
    domain = spec.get("domain") or {}
    devices = domain.get("devices") or {}
    if _interface_blocks(vm, rules):
        return INTERFACE
    if _host_devices_block(devices, rules):
        return HOST_DEVICE
    security = domain.get("launchSecurity")
    if security is not None:
        if "sev" in security:
            return SEV
        if "tdx" in security:
            return TDX
        return SECURE_EXECUTION
    if not rules.at_least(1, 9) and any((d.get("lun") or {}).get("reservation") for d in devices.get("disks") or []):
        return PERSISTENT_RESERVATION
    if ((domain.get("features") or {}).get("hypervPassthrough") or {}).get("enabled"):
        return HYPERV_PASSTHROUGH
    blocks, unknown = _disks_block(vm, find_pvc)
    if unknown:
        return UNKNOWN
    return DISKS if blocks else None
