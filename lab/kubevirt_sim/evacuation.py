"""Evacuation controller: a VMI marked with status.evacuationNodeName gets a migration.

The eviction webhook marks a VMI when a drain asks its launcher pod to leave;
upstream's evacuation controller then creates a VirtualMachineInstanceMigration
(``kubevirt-evacuation-*``) for VMIs whose strategy is LiveMigrate or
LiveMigrateIfPossible, and another one after a failure, with backoff. External
is left to whoever implements it.
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import effective_eviction_strategy
from lab.kubevirt_sim.workqueue import Controller, Expectations

FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 40.0


class EvacuationController(Controller):
    name = "evacuation-controller"

    def __init__(self, sim):
        super().__init__(sim)
        self.expectations = Expectations()
        sim.vmis.add_handler(self._on_vmi)
        sim.vmims.add_handler(self._on_migration)

    def _on_vmi(self, event, vmi, old):
        if o.status(vmi).get("evacuationNodeName"):
            self.enqueue(k.key_of(vmi))

    def _on_migration(self, event, migration, old):
        self.enqueue(f"{o.meta(migration, 'namespace')}/{o.spec(migration).get('vmiName')}")

    def all_keys(self):
        return [k.key_of(v) for v in self.sim.vmis.list() if o.status(v).get("evacuationNodeName")]

    def reconcile(self, key):
        vmi = self.sim.vmis.get(key)
        if vmi is None or o.deleting(vmi) or o.status(vmi).get("phase") != "Running":
            return None
        node = o.status(vmi).get("evacuationNodeName")
        if not node or o.status(vmi).get("nodeName") != node:
            return None
        if effective_eviction_strategy(vmi, self.sim.config) not in ("LiveMigrate", "LiveMigrateIfPossible"):
            return None
        if not o.vmi_migratable(vmi):
            return None

        migrations = self.sim.vmims.by_index("vmi", key)
        expected = self.expectations.pending(key)
        if expected:
            if not any(o.meta(m, "name") == expected for m in migrations):
                return 0.5  # the migration we created is not in the cache yet
            self.expectations.observed(key)
        if any(o.status(m).get("phase") not in o.FINAL_MIGRATION_PHASES for m in migrations):
            return None

        wait = self._backoff_left(migrations, node)
        if wait > 0:
            return wait
        created = self.kube.create(
            k.VMIMS,
            {
                "apiVersion": k.VMIMS.api_version,
                "kind": k.VMIMS.kind,
                "metadata": {
                    "generateName": "kubevirt-evacuation-",
                    "namespace": o.meta(vmi, "namespace"),
                    "annotations": {o.EVACUATION_ANNOTATION: node},
                    "labels": {o.VMI_NAME_LABEL: o.meta(vmi, "name")},
                },
                "spec": {"vmiName": o.meta(vmi, "name")},
            },
        )
        self.expectations.expect(key, o.meta(created, "name"))
        self.log.info("%s: evacuating from %s with %s", key, node, o.meta(created, "name"))
        return None

    @staticmethod
    def _backoff_left(migrations, node):
        failed = [
            m
            for m in migrations
            if o.status(m).get("phase") == "Failed" and o.annotations(m).get(o.EVACUATION_ANNOTATION) == node
        ]
        if not failed:
            return 0.0
        last_end = max(
            (
                t.get("phaseTransitionTimestamp") or ""
                for m in failed
                for t in o.status(m).get("phaseTransitionTimestamps") or []
            ),
            default="",
        )
        delay = min(FIRST_RETRY_SECONDS * 2 ** (len(failed) - 1), MAX_RETRY_SECONDS)
        since = o.seconds_since(last_end) if last_end else delay
        return max(0.0, delay - since)
