"""VirtualMachineInstanceMigration controller: live migration, as the API shows it.

A migration waits in Pending until the cluster and per-node caps
(parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode) leave room, then
gets a target virt-launcher pod that the real scheduler places (kept off the source
node by a required node affinity), and walks through Scheduling -> Scheduled ->
PreparingTarget -> TargetReady -> Running -> Succeeded. The Running phase lasts
guest memory / bandwidthPerMigration, so benchmarks have a known lower bound. On
success the VMI moves (status.nodeName, kubevirt.io/nodeName, migrationState) and
its source pod is deleted; the VMI's UID never changes.

A target pod that cannot be scheduled keeps the migration in Scheduling, and fails
it after unschedulablePendingTimeoutSeconds as upstream does. A VM or VMI annotated
``kubevirt-ops.lab/fail-migration: "true"`` fails its migrations at the end of the
Running phase and stays on the source node.
"""

import threading
import time

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.launcher_pod import launcher_pod
from lab.kubevirt_sim.workqueue import Controller, Expectations

PHASE_ORDER = [
    "",
    "Pending",
    "Scheduling",
    "Scheduled",
    "PreparingTarget",
    "TargetReady",
    "Running",
    "Succeeded",
    "Failed",
]
# Upstream garbage-collects finished migrations beyond this many per VMI.
KEEP_FINISHED_PER_VMI = 5


def _rank(phase):
    if phase in ("Succeeded", "Failed"):
        return len(PHASE_ORDER)
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else 0


class MigrationController(Controller):
    name = "migration-controller"
    workers = 1  # one worker: admission against the caps is decided in one place

    def __init__(self, sim):
        super().__init__(sim)
        self.target_expectations = Expectations()
        self._slots = {}  # uid of an admitted, unfinished migration -> source node
        self._slot_keys = {}  # migration key -> uid, to release slots of deleted objects
        self._written = {}  # uid -> last phase we wrote, to see when the cache lags
        self._running_since = {}  # uid -> monotonic start of the Running phase
        self._lock = threading.Lock()
        sim.vmims.add_handler(self._on_migration)
        sim.pods.add_handler(self._on_pod)
        sim.vmis.add_handler(self._on_vmi)
        sim.vms.add_handler(self._on_vmi)
        sim.kubevirts.add_handler(lambda event, obj, old: self._enqueue_pending())

    # -- events -------------------------------------------------------------------------

    def _on_migration(self, event, migration, old):
        self.enqueue(k.key_of(migration))

    def _on_pod(self, event, pod, old):
        uid = o.labels(pod).get(o.MIGRATION_JOB_LABEL)
        if uid:
            for m in self.sim.vmims.by_index("uid", uid):
                self.enqueue(k.key_of(m))
        if event == "DELETED":
            owner = next(
                (
                    r["name"]
                    for r in o.meta(pod, "ownerReferences") or []
                    if r.get("kind") == "VirtualMachineInstance"
                ),
                None,
            )
            if owner:
                for m in self.sim.vmims.by_index("vmi", f"{o.meta(pod, 'namespace')}/{owner}"):
                    self.enqueue(k.key_of(m))

    def _on_vmi(self, event, obj, old):
        for m in self.sim.vmims.by_index("vmi", k.key_of(obj)):
            if o.status(m).get("phase") not in o.FINAL_MIGRATION_PHASES:
                self.enqueue(k.key_of(m))

    def _enqueue_pending(self):
        pending = [m for m in self.sim.vmims.list() if o.status(m).get("phase") in ("", "Pending")]
        pending.sort(key=lambda m: (o.meta(m, "creationTimestamp") or "", o.meta(m, "name")))
        for m in pending:
            self.enqueue(k.key_of(m))

    def all_keys(self):
        return self.sim.vmims.keys()

    def start(self):
        # Migrations already under way (the simulator restarted) hold their slots
        # before any pending one is considered.
        for m in self.sim.vmims.list():
            if o.status(m).get("phase") in o.ACTIVE_MIGRATION_PHASES:
                vmi = self.sim.vmis.get(self._vmi_key(m)) or {}
                state = o.status(m).get("migrationState") or {}
                source = state.get("sourceNode") or o.status(vmi).get("nodeName", "")
                self._slots[o.meta(m, "uid")] = source
                self._slot_keys[k.key_of(m)] = o.meta(m, "uid")
        super().start()

    # -- slots --------------------------------------------------------------------------

    def _admit(self, migration, source_node):
        uid = o.meta(migration, "uid")
        with self._lock:
            if uid in self._slots:
                return True
            if len(self._slots) >= self.sim.config.parallel_migrations_per_cluster():
                return False
            outbound = sum(1 for node in self._slots.values() if node == source_node)
            if outbound >= self.sim.config.parallel_outbound_migrations_per_node():
                return False
            self._slots[uid] = source_node
            self._slot_keys[k.key_of(migration)] = uid
            return True

    def _release(self, uid):
        with self._lock:
            released = self._slots.pop(uid, None) is not None
            for key, value in list(self._slot_keys.items()):
                if value == uid:
                    del self._slot_keys[key]
        self._running_since.pop(uid, None)
        if released:
            self._enqueue_pending()

    # -- reconcile ----------------------------------------------------------------------

    @staticmethod
    def _vmi_key(migration):
        return f"{o.meta(migration, 'namespace')}/{o.spec(migration).get('vmiName')}"

    def reconcile(self, key):
        migration = self.sim.vmims.get(key)
        if migration is None:
            uid = self._slot_keys.get(key)
            if uid:
                self._written.pop(uid, None)
                self._release(uid)
            return None
        uid = o.meta(migration, "uid")
        phase = o.status(migration).get("phase") or ""
        written = self._written.get(uid)
        if written is not None and _rank(phase) < _rank(written):
            return 0.2  # our own last write has not reached the cache yet

        if o.deleting(migration):
            return self._abort(migration, phase)
        if phase in o.FINAL_MIGRATION_PHASES:
            self._release(uid)
            if phase == "Failed":
                self._delete_target_pods(uid)
            return None

        vmi = self.sim.vmis.get(self._vmi_key(migration))
        if phase == "":
            self._initialize(migration)
            return None
        if vmi is None or o.deleting(vmi) or o.vmi_is_final(vmi):
            self._fail(migration, vmi, "the VMI is gone or no longer running")
            return None
        if phase == "Pending":
            return self._pending(migration, vmi)
        return self._in_flight(migration, vmi, phase)

    def _initialize(self, migration):
        meta_patch = {"labels": {o.VMI_NAME_LABEL: o.spec(migration).get("vmiName")}}
        finalizers = o.meta(migration, "finalizers") or []
        if o.MIGRATION_FINALIZER not in finalizers:
            meta_patch["finalizers"] = finalizers + [o.MIGRATION_FINALIZER]
        self.kube.patch(
            k.VMIMS, o.meta(migration, "name"), {"metadata": meta_patch}, o.meta(migration, "namespace")
        )
        self._set_phase(migration, ["Pending"])

    def _pending(self, migration, vmi):
        if o.status(vmi).get("phase") != "Running":
            return None  # VMI events bring us back
        if not o.vmi_migratable(vmi):
            c = o.condition(vmi, "LiveMigratable") or {}
            self._fail(migration, vmi, f"VMI is not live migratable: {c.get('reason', 'unknown')}")
            return None
        uid = o.meta(migration, "uid")
        for other in self.sim.vmims.by_index("vmi", self._vmi_key(migration)):
            if o.meta(other, "uid") != uid and o.status(other).get("phase") in o.ACTIVE_MIGRATION_PHASES:
                return None  # one migration per VMI at a time; its end requeues us
        source = o.status(vmi).get("nodeName", "")
        if not self._admit(migration, source):
            return None  # stays Pending; a released slot requeues it
        if self.target_expectations.pending(uid) is None and not self.sim.pods.by_index("migration", uid):
            pod = launcher_pod(vmi, migration=migration, source_node=source)
            try:
                self.kube.create(k.PODS, pod)
            except Exception:
                self._release(uid)
                raise
            self.target_expectations.expect(uid, True)
        self.log.info("%s: migrating %s off %s", k.key_of(migration), k.key_of(vmi), source)
        self._set_phase(migration, ["Scheduling"])
        return None

    def _in_flight(self, migration, vmi, phase):
        uid = o.meta(migration, "uid")
        self._admit(migration, o.status(vmi).get("nodeName", ""))  # re-hold a slot after a restart
        targets = [p for p in self.sim.pods.by_index("migration", uid)]
        target = targets[0] if targets else None
        if target is None:
            if self.target_expectations.pending(uid):
                return 0.5
            self._fail(migration, vmi, "the target pod disappeared")
            return None
        self.target_expectations.observed(uid)
        if o.deleting(target) or o.pod_phase(target) in ("Failed", "Succeeded"):
            self._fail(migration, vmi, "the target pod was terminated")
            return None

        source_node = o.status(vmi).get("nodeName", "")
        source_pods = [
            p
            for p in self.sim.pods.by_index("created-by", o.meta(vmi, "uid"))
            if o.pod_node(p) == source_node and p is not target
        ]
        if not source_pods:
            self._fail(migration, vmi, "the source pod disappeared")
            return None

        if phase == "Scheduling":
            if not o.pod_node(target):
                return self._check_unschedulable(migration, vmi, target)
            phase = "Scheduled"
            self._set_phase(migration, ["Scheduled"])
        if phase == "Scheduled":
            if not (o.pod_phase(target) == "Running" and o.pod_ready(target)):
                return None
            state = {
                "migrationUid": uid,
                "sourceNode": source_node,
                "targetNode": o.pod_node(target),
                "sourcePod": o.meta(source_pods[0], "name"),
                "targetPod": o.meta(target, "name"),
                "mode": "PreCopy",
                "completed": False,
                "failed": False,
            }
            self._patch_vmi(
                vmi,
                status={"migrationState": state},
                labels={o.MIGRATION_TARGET_NODE_LABEL: o.pod_node(target)},
            )
            self._set_phase(migration, ["PreparingTarget", "TargetReady"], migration_state=state)
            phase = "TargetReady"
        if phase in ("PreparingTarget", "TargetReady"):
            state = dict(o.status(vmi).get("migrationState") or {})
            state["startTimestamp"] = o.now()
            self._patch_vmi(vmi, status={"migrationState": state})
            self._set_phase(migration, ["Running"], migration_state=state)
            self._running_since[uid] = time.monotonic()
            return self._duration(vmi)
        if phase == "Running":
            remaining = self._remaining(migration, vmi)
            if remaining > 0:
                return remaining
            vm = self.sim.vms.get(k.key_of(vmi))
            if o.fails_migrations(vm, vmi):
                self._fail(
                    migration,
                    vmi,
                    f"Live migration failed: the VM is annotated {o.FAIL_MIGRATION_ANNOTATION}",
                )
            else:
                self._succeed(migration, vmi, source_pods, target)
        return None

    # -- timing -------------------------------------------------------------------------

    def _duration(self, vmi):
        bandwidth = self.sim.config.bandwidth_bytes_per_second()
        if bandwidth <= 0:
            return 0.0
        return o.guest_memory_bytes(o.spec(vmi)) / bandwidth

    def _remaining(self, migration, vmi):
        uid = o.meta(migration, "uid")
        started = self._running_since.get(uid)
        if started is None:  # started before a restart of the simulator
            state = o.status(migration).get("migrationState") or {}
            elapsed = o.seconds_since(state.get("startTimestamp")) or 0.0
            self._running_since[uid] = started = time.monotonic() - elapsed
        return self._duration(vmi) - (time.monotonic() - started)

    def _check_unschedulable(self, migration, vmi, target):
        if not o.pod_unschedulable(target):
            return None
        timeout = self.sim.config.unschedulable_pending_timeout()
        since = o.seconds_since(o.meta(target, "creationTimestamp")) or 0.0
        if since >= timeout:
            self._fail(migration, vmi, f"target pod was unschedulable for {timeout}s")
            return None
        return timeout - since

    # -- outcomes -------------------------------------------------------------------------

    def _succeed(self, migration, vmi, source_pods, target):
        uid = o.meta(migration, "uid")
        target_node = o.pod_node(target)
        state = dict(o.status(vmi).get("migrationState") or {})
        state.update({"endTimestamp": o.now(), "completed": True, "failed": False, "targetNode": target_node})
        vmi_status = {"nodeName": target_node, "migrationState": state}
        if o.status(vmi).get("evacuationNodeName"):
            vmi_status["evacuationNodeName"] = None
        self._patch_vmi(
            vmi,
            status=vmi_status,
            labels={o.NODE_NAME_LABEL: target_node, o.MIGRATION_TARGET_NODE_LABEL: None},
        )
        self._set_phase(migration, ["Succeeded"], migration_state=state)
        self._release(uid)
        for pod in source_pods:
            self.kube.delete(k.PODS, o.meta(pod, "name"), o.meta(pod, "namespace"))
        self.log.info("%s: %s now runs on %s", k.key_of(migration), k.key_of(vmi), target_node)
        self._collect_garbage(migration)

    def _fail(self, migration, vmi, message):
        """Phase Failed with a Failed condition; the migration state (the VMI's, when the
        migration got that far, and the migration's own) says failed, with failureReason."""
        uid = o.meta(migration, "uid")
        self.log.info("%s: migration failed: %s", k.key_of(migration), message)
        ended = {"endTimestamp": o.now(), "completed": True, "failed": True, "failureReason": message}
        if vmi is not None and (o.status(vmi).get("migrationState") or {}).get("migrationUid") == uid:
            state = dict(o.status(vmi)["migrationState"])
            state.update(ended)
            self._patch_vmi(
                vmi, status={"migrationState": state}, labels={o.MIGRATION_TARGET_NODE_LABEL: None}
            )
        else:
            state = dict(o.status(migration).get("migrationState") or {}, migrationUid=uid, **ended)
        self._set_phase(
            migration,
            ["Failed"],
            migration_state=state,
            conditions=[
                {"type": "Failed", "status": "True", "reason": "MigrationFailed", "message": message}
            ],
        )
        self._release(uid)
        self._delete_target_pods(uid)
        self._collect_garbage(migration)

    def _abort(self, migration, phase):
        uid = o.meta(migration, "uid")
        if phase not in o.FINAL_MIGRATION_PHASES:
            vmi = self.sim.vmis.get(self._vmi_key(migration))
            if vmi is not None and (o.status(vmi).get("migrationState") or {}).get("migrationUid") == uid:
                state = dict(o.status(vmi)["migrationState"])
                state.update(
                    {"endTimestamp": o.now(), "completed": True, "failed": True, "abortStatus": "Succeeded"}
                )
                self._patch_vmi(
                    vmi, status={"migrationState": state}, labels={o.MIGRATION_TARGET_NODE_LABEL: None}
                )
        self._delete_target_pods(uid)
        self._release(uid)
        finalizers = o.meta(migration, "finalizers") or []
        if o.MIGRATION_FINALIZER in finalizers:
            self.kube.patch(
                k.VMIMS,
                o.meta(migration, "name"),
                {"metadata": {"finalizers": [f for f in finalizers if f != o.MIGRATION_FINALIZER] or None}},
                o.meta(migration, "namespace"),
            )
        return None

    def _delete_target_pods(self, uid):
        for pod in self.sim.pods.by_index("migration", uid):
            if not o.deleting(pod):
                self.kube.delete(k.PODS, o.meta(pod, "name"), o.meta(pod, "namespace"))

    def _collect_garbage(self, migration):
        finished = [
            m
            for m in self.sim.vmims.by_index("vmi", self._vmi_key(migration))
            if o.status(m).get("phase") in o.FINAL_MIGRATION_PHASES
            and o.meta(m, "uid") != o.meta(migration, "uid")
        ]
        finished.sort(key=lambda m: o.meta(m, "creationTimestamp") or "")
        for m in finished[: max(0, len(finished) + 1 - KEEP_FINISHED_PER_VMI)]:
            self.kube.delete(k.VMIMS, o.meta(m, "name"), o.meta(m, "namespace"))

    # -- writes ---------------------------------------------------------------------------

    def _set_phase(self, migration, phases, migration_state=None, conditions=None):
        """Write each phase in turn (watchers see every transition)."""
        uid = o.meta(migration, "uid")
        timestamps = list(o.status(migration).get("phaseTransitionTimestamps") or [])
        for phase in phases:
            timestamps.append({"phase": phase, "phaseTransitionTimestamp": o.now()})
            status = {"phase": phase, "phaseTransitionTimestamps": timestamps}
            if migration_state is not None:
                status["migrationState"] = migration_state
            if conditions is not None and phase == phases[-1]:
                status["conditions"] = conditions
            self.kube.patch(
                k.VMIMS,
                o.meta(migration, "name"),
                {"status": status},
                o.meta(migration, "namespace"),
                subresource="status",
            )
            self._written[uid] = phase

    def _patch_vmi(self, vmi, status=None, labels=None):
        # Status first: the VMI controller keeps the node label in line with
        # status.nodeName, so a label written ahead of the status would be undone.
        name, namespace = o.meta(vmi, "name"), o.meta(vmi, "namespace")
        if status:
            self.kube.patch(k.VMIS, name, {"status": status}, namespace, subresource="status")
        if labels:
            self.kube.patch(k.VMIS, name, {"metadata": {"labels": labels}}, namespace)
