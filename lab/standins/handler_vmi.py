"""virt-handler's VMI loop on the node that runs the guest (``pkg/virt-handler/vm.go``).

virt-controller schedules the launcher pod and moves the VMI to Scheduled with
``status.nodeName`` (and the ``kubevirt.io/nodeName`` label: ``pkg/virt-controller/watch/
vmi/lifecycle.go``). From there the handler on that node owns the phase
(``isVMIOwnedByNode``): it starts the domain in the launcher and reports, with one
``Update`` of the VMI per change:

- ``phase: Running`` once the domain runs (``calculateVmPhaseForStatusReason``), with a
  ``phaseTransitionTimestamps`` entry (``controller.SetVMIPhaseTransitionTimestamp``);
- the LiveMigratable and StorageLiveMigratable conditions and ``migrationMethod``
  (``updateLiveMigrationConditions``, see handler_migratability.py);
- ``interfaces`` from the domain and the pod-network cache (``pkg/network/setup/
  netstat.go``: name, MAC, ``infoSource: domain``, queue count, the pod IP for the pod
  network, the pod network first), ``volumeStatus[].target`` (``updateVolumeStatusesFromDomain``),
  ``machine``, ``memory.guestCurrent``, ``selinuxContext: none`` (no SELinux on these hosts).

The Ready condition is NOT the handler's: virt-controller copies it from the launcher
pod (``syncReadyConditionFromPod`` in lifecycle.go), so readiness probes act through the
pod. ``AgentConnected`` and ``guestOSInfo`` come only from a guest agent, and no guest
runs here, so they are never reported.

Ending (``sync``: graceful shutdown trigger, VMI deletion, guest shutting itself down):
when the launcher pod is being deleted (the kubelet's SIGTERM makes virt-launcher write
the graceful-shutdown trigger) or the VMI is being deleted, the handler shuts the domain
down through ACPI (``processVmShutdown``, ``helperVmShutdown``): it sends the ACPI signal,
looks again after 5 s (``shutdownVMI``: a booting OS can miss it) or when the grace period
ends if sooner, and sends it again, until the grace period has passed since the first
signal (``hasGracePeriodExpired``). The grace period is ``terminationGracePeriodSeconds``,
30 s when unset (``v1.DefaultGracePeriodSeconds``, the domain's, ``converter.go``
``GracePeriodSeconds``). Then it kills the domain (``KillVirtualMachine``).

A cooperating guest powers off ``--guest-shutdown-seconds`` (1 s) after the first signal:
``Succeeded`` (domain Shutoff, reason Shutdown). A killed domain (reason Destroyed: the grace
period ran out, or ``terminationGracePeriodSeconds: 0`` kills at once) gives ``Failed`` when
the domain has ACPI and the VMI a grace period, else ``Succeeded``
(``calculateVmPhaseForStatusReason``, ``isACPIEnabled``). The domain has ACPI unless the VMI
disables it (``converter.go`` ``Convert_v1_Features_To_api_Features``; virt-api defaults
``spec.domain.features.acpi.enabled: true`` on every VMI, ``kubevirt.io/api`` core/v1
``defaults.go``); without ACPI (and with no guest agent, which the lab has not) the signal
reaches no guest, which is killed at the end of the grace period. A crashed guest gives
``Failed``. Lab knobs:
``kubevirt-ops.lab/guest-ignores-acpi: "true"`` on the VM or VMI = the guest ignores ACPI
(it is killed at the end of the grace period),
``kubevirt-ops.lab/guest-shutdown: "true"`` on the VMI = the guest powers itself off (Succeeded),
``kubevirt-ops.lab/guest-crash: "true"`` on the VMI = the guest crashes (Failed).
The grace period is counted in this process: after a restart of the stand-ins a shutdown
under way starts it again (upstream keeps its start in the domain's metadata).

While a migration is in flight the VMI belongs to the migration loops
(handler_migration.py), as upstream's ``isMigrationInProgress`` check does.
"""

import copy
import time

from lab.standins import handler_migratability as migratability
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_nodes import handler_alive
from lab.standins.workqueue import Controller

GUEST_CRASH_ANNOTATION = "kubevirt-ops.lab/guest-crash"
# The lab's knob: on the VM or VMI, its guest ignores ACPI shutdown signals.
GUEST_IGNORES_ACPI_ANNOTATION = "kubevirt-ops.lab/guest-ignores-acpi"
# kubevirt.io/api core/v1 types.go DefaultGracePeriodSeconds.
DEFAULT_GRACE_PERIOD_SECONDS = 30
# pkg/virt-handler/vm.go shutdownVMI: the ACPI signal is sent again every 5 s at most.
ACPI_RESEND_SECONDS = 5.0
# What libvirt expands "q35" to with the QEMU of the v1.7 virt-launcher image.
Q35_MACHINE = "pc-q35-rhel9.6.0"


def vmi_pods(sim, vmi):
    return sim.pods.by_index("created-by", o.meta(vmi, "uid"))


def guest_pod(sim, vmi):
    """The launcher pod that holds the guest: on the VMI's node, not Succeeded or Failed,
    not the target of a migration still in flight; the newest if several."""
    node = o.status(vmi).get("nodeName")
    state = o.status(vmi).get("migrationState") or {}
    in_flight = state.get("migrationUid") if migration_in_progress(vmi) else None
    pods = [
        p
        for p in vmi_pods(sim, vmi)
        if o.pod_node(p) == node
        and o.pod_phase(p) not in ("Succeeded", "Failed")
        and not (in_flight and o.labels(p).get(o.MIGRATION_JOB_LABEL) == in_flight)
    ]
    pods.sort(key=lambda p: o.meta(p, "creationTimestamp") or "", reverse=True)
    return pods[0] if pods else None


def pod_running(pod):
    return pod is not None and o.pod_phase(pod) == "Running"


def migration_in_progress(vmi):
    """``isMigrationInProgress`` of ``pkg/virt-handler/controller.go`` (without the domain): the
    source reported the migration's start and nobody its end. A migration handed to the handlers
    but never started (its source machine died first) is not in progress: the source's handler,
    back after a boot, finds no domain and fails the VMI (``execute`` in ``pkg/virt-handler/vm.go``
    goes on to ``sync``; ``IsMigrationSource`` is only true for decentralized migrations)."""
    state = o.status(vmi).get("migrationState") or {}
    return bool(state.get("startTimestamp")) and not state.get("endTimestamp")


def phase_change(status, phase):
    """Status fields for a phase change, with upstream's transition timestamp entry."""
    stamps = list(status.get("phaseTransitionTimestamps") or [])
    stamps.append({"phase": phase, "phaseTransitionTimestamp": o.now()})
    return {"phase": phase, "phaseTransitionTimestamps": stamps}


def update_vmi(kube, vmi, status_changes, labels=None, annotations=None):
    """One ``Update`` of the whole VMI from the cached copy, as the handler does (the VMI
    CRD has no status subresource): the resourceVersion guards it, and fields are
    written as Go would (a condition's unset times stay explicit nulls, which
    virt-controller's JSON-patch ``test`` operations compare against). A None value
    removes a field, label or annotation."""
    body = copy.deepcopy(vmi)
    meta = body.setdefault("metadata", {})
    for field, changes in (("labels", labels), ("annotations", annotations)):
        if changes:
            merged = dict(meta.get(field) or {})
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            meta[field] = merged
    status = body.setdefault("status", {})
    for key, value in (status_changes or {}).items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    return kube.replace(k.VMIS, body)


def set_condition(conditions, condition, move_to_end):
    """LiveMigratable is removed and appended when it changes (``updateLiveMigrationConditions``);
    other conditions are replaced in place (``UpdateCondition``)."""
    conditions = [dict(c) for c in conditions or []]
    for i, existing in enumerate(conditions):
        if existing.get("type") != condition["type"]:
            continue
        if _same(existing, condition):
            return conditions
        if move_to_end:
            del conditions[i]
            conditions.append(condition)
        else:
            conditions[i] = condition
        return conditions
    conditions.append(condition)
    return conditions


def grace_period_seconds(vmi):
    """The VMI's shutdown grace period (``converter.go`` ``GracePeriodSeconds``)."""
    grace = o.spec(vmi).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_PERIOD_SECONDS if grace is None else int(grace)


def domain_has_acpi(vmi):
    """Whether the VMI's domain has ACPI: ``features`` without ``acpi.enabled: false``."""
    features = (o.spec(vmi).get("domain") or {}).get("features")
    return features is not None and (features.get("acpi") or {}).get("enabled") is not False


def acpi_enabled(vmi):
    """``isACPIEnabled`` of ``pkg/virt-handler/vm.go``: a grace period, and ACPI in the domain."""
    return grace_period_seconds(vmi) != 0 and domain_has_acpi(vmi)


def killed_phase(vmi):
    """The phase of a VMI whose domain was killed (Shutoff, reason Destroyed):
    ``calculateVmPhaseForStatusReason``. With ACPI the guest was asked first, so a kill
    means the grace period ran out."""
    return "Failed" if acpi_enabled(vmi) else "Succeeded"


def owner_vm(sim, vmi):
    """The VM that owns the VMI, from the cache, or None."""
    for ref in o.meta(vmi, "ownerReferences") or []:
        if ref.get("kind") == "VirtualMachine":
            return sim.vms.get_by(o.meta(vmi, "namespace"), ref.get("name"))
    return None


def _same(a, b):
    keys = ("status", "reason", "message")
    return all((a.get(key) or "") == (b.get(key) or "") for key in keys)


class VMIHandler(Controller):
    name = "handler-vmi"
    workers = 4
    resync_seconds = 30.0

    def __init__(self, sim, shutdown_seconds=1.0):
        super().__init__(sim)
        self.shutdown_seconds = float(shutdown_seconds)
        self._shutdown_started = {}
        sim.vmis.add_handler(lambda event, vmi, old: self.enqueue(k.key_of(vmi)))
        sim.pods.add_handler(self._on_pod)
        sim.nodes.add_handler(self._on_node)
        sim.leases.add_handler(self._on_node)

    def _on_pod(self, event, pod, old):
        if o.labels(pod).get(o.APP_LABEL) != o.LAUNCHER:
            return
        uid = o.labels(pod).get(o.CREATED_BY_LABEL)
        for vmi in self.sim.vmis.by_index("uid", uid) if uid else ():
            self.enqueue(k.key_of(vmi))

    def _on_node(self, event, obj, old):
        for vmi in self.sim.vmis.by_index("node", o.meta(obj, "name")):
            self.enqueue(k.key_of(vmi))

    def all_keys(self):
        return self.sim.vmis.keys()

    def reconcile(self, key):
        vmi = self.sim.vmis.get(key)
        if vmi is None or o.vmi_is_final(vmi):
            self._shutdown_started.pop(key, None)
            return None
        node = o.status(vmi).get("nodeName")
        phase = o.status(vmi).get("phase")
        if not node or phase not in ("Scheduled", "Running"):
            return None
        if not handler_alive(self.sim, node):
            return None  # a dead handler does nothing; virt-controller's node controller acts
        if migration_in_progress(vmi) and not o.deleting(vmi):
            return None
        pod = guest_pod(self.sim, vmi)
        if phase == "Scheduled":
            return self._start(vmi, pod)
        return self._running(key, vmi, pod)

    # -- start --------------------------------------------------------------------------

    def _start(self, vmi, pod):
        if not pod_running(pod) or o.deleting(pod) or o.deleting(vmi):
            return None  # no launcher to talk to (upstream waits for its socket)
        status = o.status(vmi)
        changes = phase_change(status, "Running")
        changes.update(self._reported(vmi, pod))
        update_vmi(self.kube, vmi, changes)
        self.log.info("%s: Running on %s", k.key_of(vmi), status.get("nodeName"))
        return None

    def _reported(self, vmi, pod):
        """Everything the handler reports from a running domain."""
        status = o.status(vmi)
        binding_plugins = ((self.sim.config.kubevirt().get("spec") or {}).get("configuration") or {})
        binding_plugins = (binding_plugins.get("network") or {}).get("binding") or {}
        release = self.sim.config.kubevirt_release()
        live, storage, method = migratability.conditions(vmi, binding_plugins, release)
        conditions = set_condition(status.get("conditions"), live, move_to_end=True)
        conditions = set_condition(conditions, storage, move_to_end=False)
        reported = {
            "conditions": conditions,
            "migrationMethod": method,
            "selinuxContext": "none",
        }
        interfaces = interface_statuses(vmi, pod)
        if interfaces is not None:
            reported["interfaces"] = interfaces
        volumes = volume_statuses(vmi)
        if volumes is not None:
            reported["volumeStatus"] = volumes
        machine = ((o.spec(vmi).get("domain") or {}).get("machine") or {}).get("type") or "q35"
        reported["machine"] = {"type": Q35_MACHINE if machine == "q35" else machine}
        guest = _guest_memory(vmi)
        if guest:
            reported["memory"] = dict(status.get("memory") or {}, guestCurrent=guest)
        return reported

    # -- running ------------------------------------------------------------------------

    def _running(self, key, vmi, pod):
        annotations = o.annotations(vmi)
        if annotations.get(GUEST_CRASH_ANNOTATION) == "true":
            return self._end(vmi, "Failed", "the guest crashed (lab knob)")
        if annotations.get(o.GUEST_SHUTDOWN_ANNOTATION) == "true":
            return self._end(vmi, "Succeeded", "the guest powered itself off (lab knob)")
        launcher_stopping = pod is None or o.deleting(pod) or not pod_running(pod)
        if o.deleting(vmi) or (pod is not None and o.deleting(pod)):
            return self._shutdown(key, vmi)
        if pod is None and self._launcher_ended(vmi):
            # No domain and a launcher that does not answer: upstream's handler fails the VMI
            # (pkg/virt-handler/vm.go calculateVmPhaseForStatusReason: domain nil, Running,
            # IsLauncherClientUnresponsive). virt-controller does not: the pod still exists.
            return self._end(vmi, "Failed", "its virt-launcher pod ended (no domain)")
        if launcher_stopping:
            return None  # the pod is gone or going: virt-controller fails the VMI
        changes = {}
        current = o.status(vmi)
        for field, value in self._reported(vmi, pod).items():
            if current.get(field) != value:
                if field == "conditions" and o.conditions_equal(current.get(field), value):
                    continue
                changes[field] = value
        if changes:
            update_vmi(self.kube, vmi, changes)
        return None

    def _launcher_ended(self, vmi):
        """The VMI's newest launcher pod on its node ended (Failed or Succeeded) and is not being
        deleted: an OOM-killed launcher, or one whose machine rebooted under it
        (lab/standins/machines.py). An older pod there (a failed migration's target) does not count."""
        node = o.status(vmi).get("nodeName")
        here = [p for p in vmi_pods(self.sim, vmi) if o.pod_node(p) == node]
        if not here:
            return False
        newest = max(here, key=lambda p: o.meta(p, "creationTimestamp") or "")
        return o.pod_phase(newest) in ("Failed", "Succeeded") and not o.deleting(newest)

    def _shutdown(self, key, vmi):
        """``processVmShutdown``: ACPI until the guest powers off or the grace period ends,
        then the domain is killed (a grace period of 0 kills it at once)."""
        grace = grace_period_seconds(vmi)
        started = self._shutdown_started.setdefault(key, time.monotonic())
        elapsed = time.monotonic() - started
        hears_acpi = domain_has_acpi(vmi) and not self._ignores_acpi(vmi)
        powers_off = self.shutdown_seconds if hears_acpi else None
        if powers_off is not None and powers_off < grace and elapsed >= powers_off:
            self._shutdown_started.pop(key, None)
            return self._end(vmi, "Succeeded", "the guest shut down on ACPI")
        if elapsed >= grace:
            self._shutdown_started.pop(key, None)
            return self._end(vmi, killed_phase(vmi), f"grace period of {grace}s over: domain killed")
        if powers_off is None:
            self.log.debug("%s: ACPI shutdown signalled (%.0fs of %ss)", key, elapsed, grace)
        next_look = grace - elapsed
        if powers_off is not None and powers_off < grace:
            next_look = powers_off - elapsed
        return min(next_look, ACPI_RESEND_SECONDS)

    def _ignores_acpi(self, vmi):
        return any(
            o.annotations(obj).get(GUEST_IGNORES_ACPI_ANNOTATION) == "true"
            for obj in (vmi, owner_vm(self.sim, vmi))
            if obj
        )

    def _end(self, vmi, phase, why):
        update_vmi(self.kube, vmi, phase_change(o.status(vmi), phase))
        self.log.info("%s: %s (%s)", k.key_of(vmi), phase, why)
        return None


def _guest_memory(vmi):
    domain = o.spec(vmi).get("domain") or {}
    value = (domain.get("memory") or {}).get("guest")
    if value is None:
        value = ((domain.get("resources") or {}).get("requests") or {}).get("memory")
    return str(value) if value is not None else None


def interface_statuses(vmi, pod):
    """``NetStat.UpdateStatus``: one entry per domain interface (the spec's interfaces,
    SR-IOV ones being host devices are left out), the pod network's gets the pod IPs,
    the primary first; Multus entries reported by virt-controller are kept."""
    spec = o.spec(vmi)
    previous = o.status(vmi).get("interfaces") or []
    ifaces = ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
    if not ifaces and not previous:
        return None
    pod_network = next((n.get("name") for n in spec.get("networks") or [] if "pod" in n), None)
    pod_status = o.status(pod) if pod else {}
    statuses = [
        _interface_status(vmi, index, iface, previous, pod_network, pod_status)
        for index, iface in enumerate(ifaces)
        if "sriov" not in iface
    ]
    if pod_network:
        statuses.sort(key=lambda s: s.get("name") != pod_network)
    _merge_multus(statuses, previous)
    return statuses


def _interface_status(vmi, index, iface, previous, pod_network, pod_status):
    """The entry of the domain interface ``iface`` (the ``index``-th of the spec)."""
    entry = {
        "name": iface.get("name"),
        "mac": iface.get("macAddress") or _mac(o.meta(vmi, "uid"), index),
        "infoSource": "domain",
        "queueCount": 1,
        "linkState": "up",
    }
    # virt-controller owns podInterfaceName (pkg/network/controllers/vmi.go); the
    # handler keeps what it finds, or the two would rewrite each other's status forever.
    known = next((p for p in previous if p.get("name") == iface.get("name")), {})
    if known.get("podInterfaceName"):
        entry["podInterfaceName"] = known["podInterfaceName"]
    if iface.get("name") == pod_network and pod_status.get("podIP"):
        entry["ipAddress"] = pod_status["podIP"]
        entry["ipAddresses"] = [ip.get("ip") for ip in pod_status.get("podIPs") or []] or [
            pod_status["podIP"]
        ]
    return entry


def _merge_multus(statuses, previous):
    """Keep the Multus entries virt-controller reported: one naming a domain interface
    marks that interface's entry, any other is added to ``statuses`` as it is."""
    multus = [i for i in previous if "multus-status" in (i.get("infoSource") or "")]
    names = {s["name"] for s in statuses}
    for entry in multus:
        if entry.get("name") in names:
            _mark_multus(statuses, entry)
        else:
            statuses.append(entry)


def _mark_multus(statuses, entry):
    """The entries of the interface the Multus ``entry`` names are reported by both."""
    for s in statuses:
        if s["name"] == entry.get("name"):
            s["infoSource"] = "domain, multus-status"
            if entry.get("podInterfaceName"):
                s["podInterfaceName"] = entry["podInterfaceName"]


def _mac(uid, index):
    """A stable locally administered MAC, as libvirt generates one per NIC."""
    digits = (uid or "").replace("-", "")[-8:].rjust(8, "0")
    return "02:{}:{}:{}:{}:{:02x}".format(digits[0:2], digits[2:4], digits[4:6], digits[6:8], index)


_BUS_PREFIX = {"virtio": "vd", "sata": "sd", "scsi": "sd", "usb": "sd"}


def volume_statuses(vmi):
    """``updateVolumeStatusesFromDomain``: virt-controller creates the entries, the
    handler fills ``target`` (the guest device name) and sorts them by name."""
    statuses = o.status(vmi).get("volumeStatus")
    if not statuses:
        return None
    counters = {}
    targets = {}
    for disk in ((o.spec(vmi).get("domain") or {}).get("devices") or {}).get("disks") or []:
        device = next((d for d in ("disk", "cdrom", "lun") if d in disk), "disk")
        bus = (disk.get(device) or {}).get("bus") or ("sata" if device == "cdrom" else "virtio")
        if device == "lun":
            bus = "scsi"
        prefix = _BUS_PREFIX.get(bus, "sd")
        n = counters.get(prefix, 0)
        counters[prefix] = n + 1
        targets[disk.get("name")] = prefix + chr(ord("a") + n)
    updated = []
    for entry in statuses:
        entry = dict(entry)
        target = targets.get(entry.get("name"), "")
        if target:
            entry["target"] = target
        else:
            entry.pop("target", None)
        updated.append(entry)
    updated.sort(key=lambda e: e.get("name") or "")
    return updated
