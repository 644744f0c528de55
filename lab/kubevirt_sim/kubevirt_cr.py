"""The KubeVirt CR ``kubevirt/kubevirt``: created at start when absent, status kept.

Its ``spec.configuration`` is the cluster-wide configuration the other controllers
read (eviction strategy, migration caps and bandwidth, obsolete CPU models).
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import KUBEVIRT_NAME, KUBEVIRT_NAMESPACE
from lab.kubevirt_sim.workqueue import Controller

KUBEVIRT_VERSION = "v1.6.0"


def ensure_namespace(kube, name):
    if kube.get_or_none(k.NAMESPACES, name) is None:
        try:
            kube.create(k.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except k.ApiError as e:
            if not e.already_exists:
                raise


def ensure_kubevirt(kube):
    ensure_namespace(kube, KUBEVIRT_NAMESPACE)
    if kube.get_or_none(k.KUBEVIRTS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE) is not None:
        return
    kube.create(
        k.KUBEVIRTS,
        {
            "apiVersion": k.KUBEVIRTS.api_version,
            "kind": k.KUBEVIRTS.kind,
            "metadata": {"name": KUBEVIRT_NAME, "namespace": KUBEVIRT_NAMESPACE},
            "spec": {
                "certificateRotateStrategy": {},
                "configuration": {"developerConfiguration": {"featureGates": []}},
                "customizeComponents": {},
                "imagePullPolicy": "IfNotPresent",
                "workloadUpdateStrategy": {},
            },
        },
    )


class KubeVirtStatus(Controller):
    name = "kubevirt-status"

    def __init__(self, sim):
        super().__init__(sim)
        sim.kubevirts.add_handler(lambda event, obj, old: self.enqueue(k.key_of(obj)))

    def all_keys(self):
        return self.sim.kubevirts.keys()

    def reconcile(self, key):
        cr = self.sim.kubevirts.get(key)
        if cr is None or o.deleting(cr):
            return None
        desired = {
            "phase": "Deployed",
            "observedGeneration": o.meta(cr, "generation"),
            "observedKubeVirtVersion": KUBEVIRT_VERSION,
            "targetKubeVirtVersion": KUBEVIRT_VERSION,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                },
                {"type": "Progressing", "status": "False", "reason": "AllComponentsReady"},
                {"type": "Degraded", "status": "False", "reason": "AllComponentsReady"},
            ],
        }
        current = o.status(cr)
        patch = {f: v for f, v in desired.items() if f != "conditions" and current.get(f) != v}
        if not o.conditions_equal(current.get("conditions"), desired["conditions"]):
            patch["conditions"] = o.merge_conditions(current.get("conditions"), desired["conditions"])
        if patch:
            ns, name = k.split_key(key)
            self.kube.patch(k.KUBEVIRTS, name, {"status": patch}, ns, subresource="status")
        return None
