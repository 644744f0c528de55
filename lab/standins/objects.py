"""Names, labels and small helpers about KubeVirt objects shared by the controllers."""

import datetime

from kubernetes.utils import parse_quantity

# Labels and annotations as upstream KubeVirt spells them.
APP_LABEL = "kubevirt.io"
LAUNCHER = "virt-launcher"
HANDLER = "virt-handler"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VM_NAME_LABEL = "vm.kubevirt.io/name"
NODE_NAME_LABEL = "kubevirt.io/nodeName"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
MIGRATION_TARGET_NODE_LABEL = "kubevirt.io/migrationTargetNodeName"
VMI_NAME_LABEL = "kubevirt.io/vmi-name"
DOMAIN_ANNOTATION = "kubevirt.io/domain"
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"
ALLOW_POD_BRIDGE_MIGRATION_ANNOTATION = "kubevirt.io/allow-pod-bridge-network-live-migration"
VMI_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
MIGRATION_FINALIZER = "kubevirt.io/migrationJobFinalize"

# The lab's own knob: a VM (or VMI) with this annotation set to "true" fails every
# live migration, for reliability tests.
FAIL_MIGRATION_ANNOTATION = "kubevirt-ops.lab/fail-migration"
# Another: a VM (or VMI) with this annotation set to "true" holds every live migration at
# the end of its transfer (phase Running) until the annotation goes, so that a test knows a
# migration is in flight for as long as it wants.
HOLD_MIGRATION_ANNOTATION = "kubevirt-ops.lab/hold-migration"
# Another: a VMI annotated with this set to "true" behaves as if its guest powered
# itself off (the VMI ends Succeeded), to exercise run strategies that tell a clean
# shutdown from a failure.
GUEST_SHUTDOWN_ANNOTATION = "kubevirt-ops.lab/guest-shutdown"

FINAL_VMI_PHASES = ("Succeeded", "Failed")
FINAL_MIGRATION_PHASES = ("Succeeded", "Failed")
ACTIVE_MIGRATION_PHASES = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value):
    if not value:
        return None
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def seconds_since(value):
    when = parse_time(value)
    if when is None:
        return None
    return (datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()


def meta(obj, field, default=None):
    return (obj.get("metadata") or {}).get(field, default)


def labels(obj):
    return meta(obj, "labels") or {}


def annotations(obj):
    return meta(obj, "annotations") or {}


def status(obj):
    return obj.get("status") or {}


def spec(obj):
    return obj.get("spec") or {}


def deleting(obj):
    return bool(meta(obj, "deletionTimestamp"))


def condition(obj, type_):
    for c in status(obj).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def condition_true(obj, type_):
    c = condition(obj, type_)
    return bool(c) and c.get("status") == "True"


def merge_conditions(existing, desired):
    """``desired`` conditions with lastTransitionTime kept from ``existing`` where the
    status did not change (so a status patch only changes what really changed)."""
    old = {c.get("type"): c for c in existing or []}
    merged = []
    for c in desired:
        c = dict(c)
        prev = old.get(c["type"])
        if prev and prev.get("status") == c.get("status"):
            c["lastTransitionTime"] = prev.get("lastTransitionTime") or now()
        else:
            c["lastTransitionTime"] = now()
        c.setdefault("lastProbeTime", None)
        merged.append(c)
    return merged


def conditions_equal(a, b):
    def strip(cs):
        return sorted(
            (
                (c.get("type"), c.get("status"), c.get("reason") or "", c.get("message") or "")
                for c in (cs or [])
            )
        )

    return strip(a) == strip(b)


# -- VMI helpers ----------------------------------------------------------------------


def vmi_is_final(vmi):
    return status(vmi).get("phase") in FINAL_VMI_PHASES


def vmi_migratable(vmi):
    return condition_true(vmi, "LiveMigratable")


def guest_memory_bytes(vmi_spec):
    """The guest's memory as upstream sizes it: memory.guest, else the memory request."""
    domain = (vmi_spec or {}).get("domain") or {}
    value = (domain.get("memory") or {}).get("guest")
    if value is None:
        value = ((domain.get("resources") or {}).get("requests") or {}).get("memory")
    if value is None:
        return 0
    return int(parse_quantity(str(value)))


def vcpus(vmi_spec):
    cpu = ((vmi_spec or {}).get("domain") or {}).get("cpu") or {}
    return max(1, int(cpu.get("cores") or 1) * int(cpu.get("sockets") or 1) * int(cpu.get("threads") or 1))


def claim_names(vmi_spec):
    """PVC names behind the VMI's volumes (a DataVolume is backed by a PVC of its name)."""
    names = []
    for volume in (vmi_spec or {}).get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            names.append(volume["persistentVolumeClaim"].get("claimName"))
        elif "dataVolume" in volume:
            names.append(volume["dataVolume"].get("name"))
    return [n for n in names if n]


def fails_migrations(*objs):
    return any(annotations(o).get(FAIL_MIGRATION_ANNOTATION) == "true" for o in objs if o)


def holds_migrations(*objs):
    return any(annotations(o).get(HOLD_MIGRATION_ANNOTATION) == "true" for o in objs if o)


# -- pod helpers ----------------------------------------------------------------------


def pod_ready(pod):
    return condition_true(pod, "Ready")


def pod_phase(pod):
    return status(pod).get("phase") or "Pending"


def pod_node(pod):
    return spec(pod).get("nodeName") or ""


def pod_unschedulable(pod):
    c = condition(pod, "PodScheduled")
    return bool(c) and c.get("status") == "False" and c.get("reason") == "Unschedulable"


def is_migration_target(pod):
    return MIGRATION_JOB_LABEL in labels(pod)


def node_ready(node):
    return condition_true(node, "Ready")
