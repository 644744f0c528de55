"""The LiveMigratable and StorageLiveMigratable conditions, as virt-handler computes them.

Upstream: ``pkg/virt-handler/vm.go`` (kubevirt v1.7) ``calculateLiveMigrationCondition``,
``calculateLiveStorageMigrationCondition`` and ``checkVolumesForMigration``; the
interface check is ``pkg/network/vmispec/interface.go`` ``VerifyVMIMigratable``, which
changed in v1.8 (see ``interfaces_error``).

LiveMigratable reports the FIRST blocker, in upstream's order: interfaces, host-model
CPU, PCI host devices/GPUs, SEV/TDX, SCSI persistent reservation, TSC frequency,
Hyper-V passthrough, and only then the disks. The disks are judged from
``status.volumeStatus[].persistentVolumeClaimInfo.accessModes`` (filled by
virt-controller), not from the PVC objects. StorageLiveMigratable lists every blocker
but the disks, joined, with reason ``NotMigratable``.

Not blockers any more (v1.7): host-passthrough CPU, virtiofs filesystems (a virtiofs
volume is skipped by the disk check), read-only CD-ROMs. Local disks such as
containerDisk, cloudInit or emptyDisk make the migration a block migration
(``status.migrationMethod: BlockMigration``) but do not block it.

The lab's nodes all report a host CPU model, so the host-model check never blocks;
the TSC-frequency check (only for VMIs requiring ``invtsc`` without topology hints) is
not simulated.
"""

from lab.standins import objects as o

LIVE_MIGRATABLE = "LiveMigratable"
STORAGE_LIVE_MIGRATABLE = "StorageLiveMigratable"

# kubevirt.io/api core/v1 types.go reasons
DISKS = "DisksNotLiveMigratable"
INTERFACE = "InterfaceNotLiveMigratable"
HOST_DEVICE = "HostDeviceNotLiveMigratable"
SEV = "SEVNotLiveMigratable"
TDX = "TDXNotLiveMigratable"
PERSISTENT_RESERVATION = "PersistentReservationNotLiveMigratable"
HYPERV_PASSTHROUGH = "HypervPassthroughNotLiveMigratable"
NOT_MIGRATABLE = "NotMigratable"

LIVE_MIGRATION = "LiveMigration"
BLOCK_MIGRATION = "BlockMigration"

_SHARED = "ReadWriteMany"
_NOT_SHARED = (
    "cannot migrate VMI: PVC {} is not shared, live migration requires that all PVCs must be "
    "shared (using ReadWriteMany access mode)"
)
_UNKNOWN_SHARING = (
    "cannot migrate VMI: Unable to determine if PVC {} is shared, live migration requires that all "
    "PVCs must be shared (using ReadWriteMany access mode)"
)


def conditions(vmi, binding_plugins=None, release=(1, 7)):
    """(LiveMigratable condition, StorageLiveMigratable condition, migration method), as
    virt-handler of KubeVirt ``release`` ((major, minor)) reports them."""
    block_migration, disk_error = check_volumes(vmi)
    blockers = _non_storage_blockers(vmi, binding_plugins or {}, release)
    if blockers:
        reason, message = blockers[0]
        live = _false(LIVE_MIGRATABLE, reason, message)
    elif disk_error:
        live = _false(LIVE_MIGRATABLE, DISKS, disk_error)
    else:
        live = _true(LIVE_MIGRATABLE)
    if blockers:
        message = ", ".join(f"{reason}: {msg}" for reason, msg in blockers)
        storage = _false(STORAGE_LIVE_MIGRATABLE, NOT_MIGRATABLE, message)
    else:
        storage = _true(STORAGE_LIVE_MIGRATABLE)
    return live, storage, BLOCK_MIGRATION if block_migration else LIVE_MIGRATION


def _true(type_):
    return {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": None}


def _false(type_, reason, message):
    return {
        "type": type_,
        "status": "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": None,
    }


def _devices(vmi):
    return ((o.spec(vmi).get("domain") or {}).get("devices")) or {}


def _non_storage_blockers(vmi, binding_plugins, release):
    spec = o.spec(vmi)
    domain = spec.get("domain") or {}
    blockers = []
    iface_error = interfaces_error(vmi, binding_plugins, release)
    if iface_error:
        blockers.append((INTERFACE, iface_error))
    devices = _devices(vmi)
    if devices.get("hostDevices") or devices.get("gpus"):
        blockers.append((HOST_DEVICE, "VMI uses a PCI host devices"))
    security = domain.get("launchSecurity") or {}
    if "sev" in security:
        blockers.append((SEV, "VMI uses SEV"))
    elif "tdx" in security:
        blockers.append((TDX, "VMI uses TDX"))
    # pkg/storage/reservation: a LUN disk with reservation: true
    if any((disk.get("lun") or {}).get("reservation") for disk in devices.get("disks") or []):
        blockers.append((PERSISTENT_RESERVATION, "VMI uses SCSI persistent reservation"))
    passthrough = (domain.get("features") or {}).get("hypervPassthrough") or {}
    if passthrough.get("enabled"):
        blockers.append((HYPERV_PASSTHROUGH, "VMI uses hyperv passthrough"))
    return blockers


def interfaces_error(vmi, binding_plugins, release=(1, 7)):
    """``VerifyVMIMigratable``: None when the interfaces allow a live migration, else why not.

    Both releases: no interfaces, or no pod network (only secondary networks), migrate; the
    pod network's interface must use masquerade, bridge with the allow annotation (any value)
    or a binding plugin that declares a migration method. v1.7: a pod network without an
    interface of its name migrates too (``IsPodNetworkWithMasqueradeBindingInterface`` is true
    without one). v1.8: that is an error of its own, the core ``passtBinding`` migrates, and
    the message no longer names bridge."""
    spec = o.spec(vmi)
    ifaces = _devices(vmi).get("interfaces") or []
    if not ifaces:
        return None
    pod_network = next((n for n in spec.get("networks") or [] if "pod" in n), None)
    if pod_network is None:
        return None
    pod_iface = next((i for i in ifaces if i.get("name") == pod_network.get("name")), None)
    if pod_iface is None:
        if release >= (1, 8):
            return f"no primary interface found for network {pod_network.get('name')}"
        return None
    if "masquerade" in pod_iface or (release >= (1, 8) and "passtBinding" in pod_iface):
        return None
    if "bridge" in pod_iface and o.ALLOW_POD_BRIDGE_MIGRATION_ANNOTATION in o.annotations(vmi):
        return None
    binding = (pod_iface.get("binding") or {}).get("name")
    if binding and (binding_plugins.get(binding) or {}).get("migration") is not None:
        return None
    if release >= (1, 8):
        return "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network"
    return (
        "cannot migrate VMI which does not use masquerade, bridge with "
        f"{o.ALLOW_POD_BRIDGE_MIGRATION_ANNOTATION} VM annotation or a migratable plugin "
        "to connect to the pod network"
    )


def check_volumes(vmi):
    """``checkVolumesForMigration``: (block migration?, error message or None)."""
    status = o.status(vmi)
    by_name = {v.get("name"): v for v in status.get("volumeStatus") or []}
    migrated = {v.get("volumeName") for v in status.get("migratedVolumes") or []}
    block = bool(status.get("migratedVolumes"))
    skipped = _volumes_not_copied(vmi)
    for volume in o.spec(vmi).get("volumes") or []:
        info = (by_name.get(volume.get("name")) or {}).get("persistentVolumeClaimInfo")
        error = _volume_error(volume, info, migrated)
        if error:
            return True, error
        block = block or _is_local(volume, skipped)
    return block, None


def _volumes_not_copied(vmi):
    """Volumes that need no copy although they are local: virtiofs filesystems and
    read-only CD-ROMs."""
    filesystems = {fs.get("name") for fs in _devices(vmi).get("filesystems") or []}
    read_only_cdroms = {
        d.get("name")
        for d in _devices(vmi).get("disks") or []
        if "cdrom" in d and (d.get("cdrom") or {}).get("readonly", True) is not False
    }
    return filesystems | read_only_cdroms


def _volume_error(volume, info, migrated):
    """Why ``volume`` blocks the migration, or None. ``info`` is its
    ``persistentVolumeClaimInfo`` in ``status.volumeStatus``."""
    name = volume.get("name")
    if "persistentVolumeClaim" in volume or "dataVolume" in volume:
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
        else:
            claim = volume["dataVolume"].get("name")
        if not info:
            return _UNKNOWN_SHARING.format(claim)
        return _claim_error(info, name, migrated, claim)
    if "hostDisk" in volume:
        if info:
            return _claim_error(info, name, migrated, info.get("claimName"))
        if not (volume["hostDisk"] or {}).get("shared"):
            return "cannot migrate VMI with non-shared HostDisk"
    return None


def _claim_error(info, name, migrated, claim):
    """A claim blocks unless it is shared (ReadWriteMany) or its volume was migrated."""
    if _SHARED not in (info.get("accessModes") or []) and name not in migrated:
        return _NOT_SHARED.format(claim)
    return None


def _is_local(volume, skipped):
    """A volume copied by a block migration: neither a claim nor a host disk, and not
    one of ``skipped``."""
    if any(kind in volume for kind in ("persistentVolumeClaim", "dataVolume", "hostDisk")):
        return False
    return volume.get("name") not in skipped
