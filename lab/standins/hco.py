"""A stand-in for the HyperConverged Cluster Operator (HCO >= 1.18) and its CR.

The real operator cannot run here (its Go module is not served by the module proxy), so
this plays the part of it the collection meets, following upstream's source
(kubevirt/hyperconverged-cluster-operator):

- API: ``hco.kubevirt.io/v1`` (stored) and ``v1beta1``, converted by a webhook
  (``hco_api.py``); the reconciler reads v1beta1, as upstream's does
  (``controllers/hyperconverged/hyperconverged_controller.go``, getHyperConverged).
- ``status.infrastructureHighlyAvailable``: at least 2 nodes labelled
  ``node-role.kubernetes.io/worker`` (``pkg/internal/nodeinfo/nodeinfo.go``; status set in
  the controller's updateStatus).
- Defaulting: an unset eviction strategy becomes LiveMigrate on a highly available
  infrastructure, else None (``pkg/webhooks/mutator/v1beta1_hyperConvergedMutator.go``
  mutateV1beta1EvictionStrategy, ``hyperConvergedMutator.go`` mutateEvictionStrategy). Upstream's
  mutating webhook does it on the next update of the CR once the status is known; the
  stand-in patches the spec itself in the reconcile that first writes the status, before it,
  so a reader who sees ``Available`` also sees the defaulted strategy.
- The KubeVirt CR ``kubevirt/kubevirt`` is written from the HyperConverged spec and put back
  when someone edits it (``controllers/handlers/kubevirt.go`` at v1.18.1, getKVConfig; UpdateCR
  replaces the whole spec): the eviction strategy as is (unset: none in the KubeVirt CR),
  ``liveMigrationConfig`` -> ``configuration.migrations``, and the obsolete CPU models:
  HCO's built-in list (hardcodedObsoleteCPUModels) merged with the CR's, every value true
  (getObsoleteCPUConfig); models no longer listed are removed. ``minCPUModel`` is ignored,
  and v1 has no place for it. Upstream names its KubeVirt CR ``kubevirt-kubevirt-hyperconverged``
  in HCO's namespace; the lab's is the one ``lab up`` creates.
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE
from lab.standins.workqueue import Controller

HCO_NAMESPACE = "kubevirt-hyperconverged"
HCO_NAME = "kubevirt-hyperconverged"
HCO_VERSION = "1.18.1"
WORKER_ROLE = "node-role.kubernetes.io/worker"

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
    k.ensure_namespace(kube, HCO_NAMESPACE)
    if kube.get_or_none(k.HYPERCONVERGEDS, HCO_NAME, HCO_NAMESPACE) is not None:
        return
    kube.create(
        k.HYPERCONVERGEDS,
        {
            "apiVersion": k.HYPERCONVERGEDS.api_version,
            "kind": k.HYPERCONVERGEDS.kind,
            "metadata": {"name": HCO_NAME, "namespace": HCO_NAMESPACE},
            # Upstream's deploy/hco.cr.yaml sets no eviction strategy: defaulting decides.
            "spec": {
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
        # The default eviction strategy depends on how many workers there are.
        sim.nodes.add_handler(self._on_node)

    def _on_node(self, event, node, old):
        if event != "MODIFIED" or (WORKER_ROLE in o.labels(node)) != (WORKER_ROLE in o.labels(old or {})):
            self._enqueue_all()

    def _enqueue_all(self):
        for key in self.sim.hcos.keys():
            self.enqueue(key)

    def all_keys(self):
        return self.sim.hcos.keys()

    def _infrastructure_highly_available(self):
        return sum(1 for n in self.sim.nodes.list() if WORKER_ROLE in o.labels(n)) >= 2

    def reconcile(self, key):
        hco = self.sim.hcos.get(key)
        if hco is None or o.deleting(hco):
            return None
        spec = o.spec(hco)
        kubevirt = self.sim.kubevirts.get_by(KUBEVIRT_NAMESPACE, KUBEVIRT_NAME)
        if kubevirt is None:
            return 1.0
        configuration = o.spec(kubevirt).get("configuration") or {}

        highly_available = self._infrastructure_highly_available()
        if not spec.get("evictionStrategy"):
            default = "LiveMigrate" if highly_available else "None"
            self.kube.patch(
                k.HYPERCONVERGEDS,
                o.meta(hco, "name"),
                {"spec": {"evictionStrategy": default}},
                o.meta(hco, "namespace"),
            )
            self.log.info("HyperConverged evictionStrategy defaulted to %s", default)
            spec = dict(spec, evictionStrategy=default)

        desired = {"evictionStrategy": spec.get("evictionStrategy")}
        migrations = dict(configuration.get("migrations") or {})
        for field in _MIGRATION_KEYS:
            if field in (spec.get("liveMigrationConfig") or {}):
                migrations[field] = spec["liveMigrationConfig"][field]
        desired["migrations"] = migrations
        models = list(BUILTIN_OBSOLETE_CPU_MODELS) + list(
            (spec.get("obsoleteCPUs") or {}).get("cpuModels") or []
        )
        desired["obsoleteCPUModels"] = {m: True for m in models}

        # An unset strategy leaves the KubeVirt CR without one (a merge patch's null removes it).
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
        self._update_status(hco, highly_available)
        return None

    def _update_status(self, hco, highly_available):
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
        if current.get("infrastructureHighlyAvailable") != highly_available:
            patch["infrastructureHighlyAvailable"] = highly_available
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
