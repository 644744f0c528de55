"""The VMI's LiveMigratable condition, decided from its spec and its real PVCs.

The checks and reasons are upstream's (virt-controller's live-migration condition);
the first blocker found is reported, as upstream reports one reason at a time.
"""

from lab.kubevirt_sim import objects as o

DISKS = "DisksNotLiveMigratable"
INTERFACE = "InterfaceNotLiveMigratable"
HOST_DEVICE = "HostDeviceNotLiveMigratable"
CPU_MODE = "CPUModeLiveMigratable"  # sic: upstream's reason string for host-passthrough
VIRTIOFS = "VirtIOFSNotLiveMigratable"
SEV = "SEVNotLiveMigratable"


def live_migratable_condition(vmi, find_pvc):
    """The LiveMigratable condition dict; ``find_pvc(namespace, name)`` returns a PVC or None."""
    blocker = _first_blocker(vmi, find_pvc)
    if blocker is None:
        return {"type": "LiveMigratable", "status": "True"}
    reason, message = blocker
    return {"type": "LiveMigratable", "status": "False", "reason": reason, "message": message}


def _first_blocker(vmi, find_pvc):
    spec = o.spec(vmi)
    namespace = o.meta(vmi, "namespace")
    for check in (_disks, _interfaces, _host_devices, _cpu_mode, _virtiofs, _sev):
        blocker = check(vmi, spec, namespace, find_pvc)
        if blocker:
            return blocker
    return None


def _disks(vmi, spec, namespace, find_pvc):
    for volume in spec.get("volumes") or []:
        if "hostDisk" in volume:
            return DISKS, f"cannot migrate VMI with a hostDisk volume ({volume.get('name')})"
    for claim in o.claim_names(spec):
        pvc = find_pvc(namespace, claim)
        if pvc is None:
            return DISKS, f"cannot migrate VMI: PVC {claim} does not exist"
        modes = o.spec(pvc).get("accessModes") or []
        if "ReadWriteMany" not in modes:
            return (
                DISKS,
                f"cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs "
                "must be shared (using ReadWriteMany access mode)",
            )
    return None


def _interfaces(vmi, spec, namespace, find_pvc):
    devices = (spec.get("domain") or {}).get("devices") or {}
    pod_networks = {n.get("name") for n in spec.get("networks") or [] if "pod" in n}
    allowed = o.annotations(vmi).get(o.ALLOW_POD_BRIDGE_MIGRATION_ANNOTATION) == "true"
    for iface in devices.get("interfaces") or []:
        if iface.get("name") in pod_networks and "bridge" in iface and not allowed:
            return (
                INTERFACE,
                "cannot migrate VMI which does not use masquerade, bridge with "
                f"{o.ALLOW_POD_BRIDGE_MIGRATION_ANNOTATION} VM annotation or a migratable plugin "
                "to connect to the pod network",
            )
    return None


def _host_devices(vmi, spec, namespace, find_pvc):
    devices = (spec.get("domain") or {}).get("devices") or {}
    if devices.get("hostDevices"):
        return HOST_DEVICE, "VMI uses a PCI host devices"
    if devices.get("gpus"):
        return HOST_DEVICE, "VMI uses a GPU"
    return None


def _cpu_mode(vmi, spec, namespace, find_pvc):
    cpu = (spec.get("domain") or {}).get("cpu") or {}
    if cpu.get("model") == "host-passthrough":
        return CPU_MODE, "VMI uses host-passthrough CPU model"
    return None


def _virtiofs(vmi, spec, namespace, find_pvc):
    devices = (spec.get("domain") or {}).get("devices") or {}
    if any("virtiofs" in fs for fs in devices.get("filesystems") or []):
        return VIRTIOFS, "VMI uses virtiofs"
    return None


def _sev(vmi, spec, namespace, find_pvc):
    security = (spec.get("domain") or {}).get("launchSecurity") or {}
    if "sev" in security:
        return SEV, "VMI uses SEV"
    return None
