"""The PodDisruptionBudget virt-controller keeps over each VMI's launcher pod.

It is what makes the apiserver itself answer 429 to an eviction of a VM that must
migrate instead of die: required for LiveMigrate and External, for
LiveMigrateIfPossible only while the VMI is migratable, never for None. During a
migration it is widened to two pods so that neither the source nor the target pod
can be evicted until the migration is over.
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import effective_eviction_strategy

NAME_PREFIX = "kubevirt-disruption-budget-"


def pdb_name(vmi_name):
    return NAME_PREFIX + vmi_name


def pdb_required(vmi, config, migratable):
    strategy = effective_eviction_strategy(vmi, config)
    if strategy in ("LiveMigrate", "External"):
        return True
    if strategy == "LiveMigrateIfPossible":
        return migratable
    return False


class DisruptionBudgets:
    def __init__(self, sim):
        self.sim = sim
        self.kube = sim.kube

    def _migration_in_flight(self, vmi):
        key = k.key_of(vmi)
        for m in self.sim.vmims.by_index("vmi", key):
            if o.status(m).get("phase") in o.ACTIVE_MIGRATION_PHASES and not o.deleting(m):
                return True
        return False

    def sync(self, vmi, migratable):
        """Create, adjust or delete the VMI's budget; returns the cached PDB or None."""
        namespace, vmi_name, uid = o.meta(vmi, "namespace"), o.meta(vmi, "name"), o.meta(vmi, "uid")
        name = pdb_name(vmi_name)
        existing = self.sim.pdbs.get_by(namespace, name)
        wanted = (
            pdb_required(vmi, self.sim.config, migratable) and not o.deleting(vmi) and not o.vmi_is_final(vmi)
        )
        if not wanted:
            if existing is not None:
                self.kube.delete(k.PDBS, name, namespace)
            return None
        min_available = 2 if self._migration_in_flight(vmi) else 1
        desired = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {o.CREATED_BY_LABEL: uid},
                "ownerReferences": [k.owner_reference(vmi)],
            },
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {o.CREATED_BY_LABEL: uid}}},
        }
        if existing is None:
            try:
                self.kube.create(k.PDBS, desired)
            except k.ApiError as e:
                if not e.already_exists:
                    raise
            return None
        same_owner = o.labels(existing).get(o.CREATED_BY_LABEL) == uid
        if not same_owner or o.spec(existing).get("minAvailable") != min_available:
            # A budget left by an earlier VMI of the same name is taken over.
            self.kube.patch(
                k.PDBS,
                name,
                {"metadata": desired["metadata"], "spec": desired["spec"]},
                namespace,
            )
        return existing

    def in_force(self, vmi):
        """True once the disruption controller has processed the VMI's budget and
        counts its pod as healthy, i.e. an eviction is refused from now on."""
        pdb = self.sim.pdbs.get_by(o.meta(vmi, "namespace"), pdb_name(o.meta(vmi, "name")))
        if pdb is None or o.labels(pdb).get(o.CREATED_BY_LABEL) != o.meta(vmi, "uid"):
            return False
        st = o.status(pdb)
        return (
            st.get("observedGeneration", 0) >= o.meta(pdb, "generation", 1)
            and st.get("currentHealthy", 0) >= 1
        )
