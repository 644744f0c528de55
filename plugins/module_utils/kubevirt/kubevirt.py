# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How KubeVirt treats a VM: its VMs, VMIs, launcher pods and migrations read as KubeVirt reads
them (live-migratability, run strategy, phases, where a migration stands). What the KubeVirt CR
sets for the whole cluster and what its eviction webhook answers are cluster_settings.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import meta_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migratability
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import parse_quantity

EVICTION_STRATEGIES = ("LiveMigrate", "LiveMigrateIfPossible", "None", "External")
RUN_STRATEGIES = ("Always", "RerunOnFailure", "Manual", "Halted", "Once")
LAUNCHER_LABEL = "kubevirt.io=virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
NODE_NAME_LABEL = "kubevirt.io/nodeName"
# The phases in which a pod, a VMI, a migration (and a NodeMaintenance) has finished.
FINISHED_PHASES = ("Succeeded", "Failed")


def live_migratable(vmi):
    """(True/False/None, reason, message) from the VMI's LiveMigratable condition."""
    for cond in (vmi.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "LiveMigratable":
            ok = cond.get("status") == "True"
            return ok, (None if ok else cond.get("reason")), cond.get("message")
    return None, None, None


def vm_run_strategy(vm):
    """The VM's run strategy, translating the deprecated ``spec.running``."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if "running" in spec:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def vmi_is_final(vmi):
    """True when the VMI has ended (Succeeded or Failed)."""
    return ((vmi or {}).get("status") or {}).get("phase") in FINISHED_PHASES


def vm_claim_names(vm):
    """Names of the PVCs behind a VM's volumes (a DataVolume is backed by a PVC of its name)."""
    spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
    names = []
    for volume in spec.get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            names.append((volume.get("persistentVolumeClaim") or {}).get("claimName"))
        elif "dataVolume" in volume:
            names.append((volume.get("dataVolume") or {}).get("name"))
    return [n for n in names if n]


def vm_not_migratable_reason(vm, vmi, find_pvc, rules=None):
    """Why a VM cannot live-migrate, or None when it can; ``"Unknown"`` when it cannot be told.

    A VMI that runs answers with its LiveMigratable condition. A stopped VM (or a VMI
    without the condition yet) is judged as virt-handler of the installed KubeVirt would
    judge it (``migratability.predict_not_migratable``; ``rules`` from the KubeVirt CR).
    ``find_pvc(namespace, name)`` returns the PVC or None.
    """
    if vmi and not vmi_is_final(vmi):
        migratable, reason, _message = live_migratable(vmi)
        if migratable is True:
            return None
        if migratable is False:
            return reason or "NotLiveMigratable"
    return migratability.predict_not_migratable(vm, find_pvc, rules or migratability.ClusterRules())


# -- VMIs, launcher pods and migrations as the drain sees them ---------------------------

VM_NAME_LABEL = "vm.kubevirt.io/name"
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
VMI_PDB_PREFIX = "kubevirt-disruption-budget-"


def vmi_node(vmi):
    return (vmi.get("status") or {}).get("nodeName")


def vmi_guest_memory(vmi):
    """Bytes of guest memory a live migration of the VMI copies: ``status.memory.guestCurrent``
    (what the guest has now, memory hotplug included), else ``spec.domain.memory.guest``, else the
    domain's memory request; 0 when none is set."""
    domain = (vmi.get("spec") or {}).get("domain") or {}
    for value in (((vmi.get("status") or {}).get("memory") or {}).get("guestCurrent"),
                  (domain.get("memory") or {}).get("guest"),
                  ((domain.get("resources") or {}).get("requests") or {}).get("memory")):
        if value:
            return int(parse_quantity(value))
    return 0


def vmi_phase(vmi):
    """The VMI's phase (Pending until KubeVirt reports one), None when there is no VMI."""
    if not vmi:
        return None
    return (vmi.get("status") or {}).get("phase") or "Pending"


def vmi_is_active(vmi):
    """The VMI exists, is not being deleted and has not ended (a finished VMI holds no launcher
    pod worth draining)."""
    return bool(vmi) and vmi_phase(vmi) not in FINISHED_PHASES and not meta_of(vmi).get("deletionTimestamp")


def vmi_phase_running(vmi):
    """The VMI is in phase Running, also while it is being deleted."""
    return vmi_phase(vmi) == "Running"


def vmi_is_running(vmi):
    """Phase Running and not being deleted, whether or not it is Ready (see vmi_in_service)."""
    return vmi_phase_running(vmi) and not meta_of(vmi).get("deletionTimestamp")


def vmi_in_service(vmi):
    """The VMI runs and serves: phase Running, not being deleted, and its Ready condition True.

    virt-controller copies the Ready condition from the launcher pod (readiness probes act
    through it), and keeps it False while a migration hands the guest over.
    """
    if not vmi_is_running(vmi):
        return False
    for cond in (vmi.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def vmi_running_not_ready(vmi):
    """Phase Running (not being deleted) but not in service: its Ready condition is not True."""
    return vmi_is_running(vmi) and not vmi_in_service(vmi)


def vm_name_of(vmi):
    """Name of the VirtualMachine owning the VMI, or None for a stand-alone VMI."""
    for ref in meta_of(vmi).get("ownerReferences") or []:
        if ref.get("kind") == "VirtualMachine":
            return ref.get("name")
    return None


def is_launcher_pod(pod):
    return (meta_of(pod).get("labels") or {}).get("kubevirt.io") == "virt-launcher"


def launcher_vmi_uid(pod):
    """UID of the VMI a virt-launcher pod runs (label, else controller owner reference)."""
    uid = (meta_of(pod).get("labels") or {}).get(CREATED_BY_LABEL)
    if uid:
        return uid
    for ref in meta_of(pod).get("ownerReferences") or []:
        if ref.get("kind") == "VirtualMachineInstance":
            return ref.get("uid")
    return None


def launcher_vmi_name(pod):
    """Name of the VMI a virt-launcher pod runs (owner reference, else KubeVirt's label)."""
    for ref in meta_of(pod).get("ownerReferences") or []:
        if ref.get("kind") == "VirtualMachineInstance":
            return ref.get("name")
    return (meta_of(pod).get("labels") or {}).get(VM_NAME_LABEL)


def is_vmi_pdb(pdb):
    """A PodDisruptionBudget virt-controller keeps over one VMI's launcher pod."""
    meta = meta_of(pdb)
    if (meta.get("name") or "").startswith(VMI_PDB_PREFIX):
        return True
    if any(ref.get("kind") in ("VirtualMachineInstance", "VirtualMachine") for ref in meta.get("ownerReferences") or []):
        return True
    match_labels = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return CREATED_BY_LABEL in match_labels


def migration_state(vmi):
    return (vmi.get("status") or {}).get("migrationState") or {}


def migration_target(vmi):
    """The node a completed migration moved the VMI to, else its current node."""
    state = migration_state(vmi)
    if state.get("completed") and not state.get("failed") and state.get("targetNode"):
        return state["targetNode"]
    return vmi_node(vmi)


def migration_in_flight(migration):
    """True while a migration has not reached a final phase (and is not being deleted).

    virt-controller moves a VirtualMachineInstanceMigration through Pending, Scheduling, Scheduled,
    PreparingTarget, TargetReady and Running to Succeeded or Failed (kubevirt.io/api core/v1
    types.go ``VirtualMachineInstanceMigrationPhase``); a migration without a phase is Pending.
    """
    phase = (migration.get("status") or {}).get("phase") or "Pending"
    return phase not in FINISHED_PHASES and not meta_of(migration).get("deletionTimestamp")


def describe_migration(migration, source=None, target=None):
    """'migration ns/name is in phase Scheduling (from node-a to no node yet)'."""
    meta = meta_of(migration)
    phase = (migration.get("status") or {}).get("phase") or "Pending"
    text = "migration %s/%s is in phase %s" % (meta.get("namespace"), meta.get("name"), phase)
    if source or target:
        text += " (from %s to %s)" % (source or "an unknown node", target or "no node yet")
    return text


def migration_failure_reason(migration, vmi=None):
    """Why a failed migration failed, in KubeVirt's words: the migration state's
    failureReason (the VMI's, when it describes this migration, else the migration's own),
    else the message of the migration's Failed condition; None when nothing says."""
    status = migration.get("status") or {}
    uid = meta_of(migration).get("uid")
    states = [status.get("migrationState") or {}]
    if vmi is not None and migration_state(vmi).get("migrationUid") == uid:
        states.insert(0, migration_state(vmi))
    for state in states:
        if state.get("failureReason"):
            return state["failureReason"].rstrip(".")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True" and (cond.get("message") or cond.get("reason")):
            return (cond.get("message") or cond.get("reason")).rstrip(".")
    return None


def failed_migrations(migrations):
    """The Failed ones of a VMI's migrations, oldest first."""
    failed = [m for m in migrations if (m.get("status") or {}).get("phase") == "Failed"]
    return sorted(failed, key=lambda m: (meta_of(m).get("creationTimestamp") or "", meta_of(m).get("name") or ""))
