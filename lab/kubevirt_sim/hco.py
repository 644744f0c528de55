"""HyperConverged (hco.kubevirt.io/v1beta1): the operator that owns the KubeVirt CR.

As upstream HCO does, it writes the KubeVirt CR's configuration from its own spec
and puts it back when someone edits the KubeVirt CR directly:
- ``spec.evictionStrategy`` -> ``configuration.evictionStrategy`` (when unset: LiveMigrate
  on a cluster with more than one KubeVirt node, None on a single node);
- ``spec.liveMigrationConfig`` -> ``configuration.migrations`` (the keys it sets);
- ``spec.obsoleteCPUs.cpuModels`` plus the built-in list -> ``configuration.obsoleteCPUModels``;
  ``minCPUModel`` is accepted and ignored, as recent HCO does.
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE
from lab.kubevirt_sim.kubevirt_cr import ensure_namespace
from lab.kubevirt_sim.workqueue import Controller

HCO_NAMESPACE = "kubevirt-hyperconverged"
HCO_NAME = "kubevirt-hyperconverged"
HCO_VERSION = "1.16.0"

DEFAULT_LIVE_MIGRATION_CONFIG = {
    "allowAutoConverge": False,
    "allowPostCopy": False,
    "completionTimeoutPerGiB": 150,
    "parallelMigrationsPerCluster": 5,
    "parallelOutboundMigrationsPerNode": 2,
    "progressTimeout": 150,
}
_MIGRATION_KEYS = (
    "parallelMigrationsPerCluster",
    "parallelOutboundMigrationsPerNode",
    "bandwidthPerMigration",
    "completionTimeoutPerGiB",
    "progressTimeout",
    "allowAutoConverge",
    "allowPostCopy",
)


def ensure_hyperconverged(kube):
    ensure_namespace(kube, HCO_NAMESPACE)
    if kube.get_or_none(k.HYPERCONVERGEDS, HCO_NAME, HCO_NAMESPACE) is not None:
        return
    kube.create(
        k.HYPERCONVERGEDS,
        {
            "apiVersion": k.HYPERCONVERGEDS.api_version,
            "kind": k.HYPERCONVERGEDS.kind,
            "metadata": {"name": HCO_NAME, "namespace": HCO_NAMESPACE},
            "spec": {
                "evictionStrategy": "LiveMigrate",
                "liveMigrationConfig": dict(DEFAULT_LIVE_MIGRATION_CONFIG),
                "infra": {},
                "workloads": {},
            },
        },
    )


class HyperConvergedController(Controller):
    name = "hco"

    def __init__(self, sim):
        super().__init__(sim)
        sim.hcos.add_handler(lambda event, hco, old: self.enqueue(k.key_of(hco)))
        # Edits of the KubeVirt CR are reverted, as HCO owns it.
        sim.kubevirts.add_handler(lambda event, cr, old: self._enqueue_all())
        # The default eviction strategy depends on how many KubeVirt nodes there are.
        sim.nodes.add_handler(self._on_node)

    def _on_node(self, event, node, old):
        if o.labels(node).get(o.SCHEDULABLE_LABEL) != o.labels(old or {}).get(o.SCHEDULABLE_LABEL):
            self._enqueue_all()

    def _enqueue_all(self):
        for key in self.sim.hcos.keys():
            self.enqueue(key)

    def all_keys(self):
        return self.sim.hcos.keys()

    def _default_eviction_strategy(self):
        kubevirt_nodes = [n for n in self.sim.nodes.list() if o.labels(n).get(o.SCHEDULABLE_LABEL) == "true"]
        return "LiveMigrate" if len(kubevirt_nodes) > 1 else "None"

    def reconcile(self, key):
        hco = self.sim.hcos.get(key)
        if hco is None or o.deleting(hco):
            return None
        spec = o.spec(hco)
        kubevirt = self.sim.kubevirts.get_by(KUBEVIRT_NAMESPACE, KUBEVIRT_NAME)
        if kubevirt is None:
            return 1.0
        configuration = o.spec(kubevirt).get("configuration") or {}

        desired = {"evictionStrategy": spec.get("evictionStrategy") or self._default_eviction_strategy()}
        migrations = dict(configuration.get("migrations") or {})
        for field in _MIGRATION_KEYS:
            if field in (spec.get("liveMigrationConfig") or {}):
                migrations[field] = spec["liveMigrationConfig"][field]
        desired["migrations"] = migrations
        models = list(BUILTIN_OBSOLETE_CPU_MODELS) + list(
            (spec.get("obsoleteCPUs") or {}).get("cpuModels") or []
        )
        desired["obsoleteCPUModels"] = {m: True for m in models}

        patch = {f: v for f, v in desired.items() if configuration.get(f) != v}
        if "obsoleteCPUModels" in patch:
            # A merge patch merges maps: models dropped from HCO must be removed explicitly.
            current = configuration.get("obsoleteCPUModels") or {}
            removed = {m: None for m in current if m not in desired["obsoleteCPUModels"]}
            patch["obsoleteCPUModels"] = dict(removed, **desired["obsoleteCPUModels"])
        if patch:
            self.kube.patch(
                k.KUBEVIRTS, KUBEVIRT_NAME, {"spec": {"configuration": patch}}, KUBEVIRT_NAMESPACE
            )
            self.log.info("KubeVirt CR configuration updated from HyperConverged: %s", sorted(patch))
        self._update_status(hco)
        return None

    def _update_status(self, hco):
        conditions = [
            {
                "type": "ReconcileComplete",
                "status": "True",
                "reason": "ReconcileCompleted",
                "message": "Reconcile completed successfully",
            },
            {
                "type": "Available",
                "status": "True",
                "reason": "ReconcileCompleted",
                "message": "Reconcile completed successfully",
            },
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ReconcileCompleted",
                "message": "Reconcile completed successfully",
            },
            {
                "type": "Degraded",
                "status": "False",
                "reason": "ReconcileCompleted",
                "message": "Reconcile completed successfully",
            },
            {
                "type": "Upgradeable",
                "status": "True",
                "reason": "ReconcileCompleted",
                "message": "Reconcile completed successfully",
            },
        ]
        current = o.status(hco)
        patch = {}
        if not o.conditions_equal(current.get("conditions"), conditions):
            patch["conditions"] = o.merge_conditions(current.get("conditions"), conditions)
        if current.get("observedGeneration") != o.meta(hco, "generation"):
            patch["observedGeneration"] = o.meta(hco, "generation")
        versions = [{"name": "operator", "version": HCO_VERSION}]
        if current.get("versions") != versions:
            patch["versions"] = versions
        if patch:
            self.kube.patch(
                k.HYPERCONVERGEDS,
                o.meta(hco, "name"),
                {"status": patch},
                o.meta(hco, "namespace"),
                subresource="status",
            )
