"""The CPU-model labels virt-handler's node-labeller puts on KubeVirt nodes.

Every simulated node offers the same host CPU; each model it supports is labelled
``cpu-model.node.kubevirt.io/<model>=true`` unless the KubeVirt CR lists it as
obsolete (HCO fills that list from its built-ins plus ``spec.obsoleteCPUs``). A node
annotated ``node-labeller.kubevirt.io/skip-node=true`` is left as it is; removing
the annotation (or setting it to false) brings it up to date on the next cycle.
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS
from lab.standins.workqueue import Controller

SKIP_ANNOTATION = "node-labeller.kubevirt.io/skip-node"
MODEL_PREFIX = "cpu-model.node.kubevirt.io/"
HOST_MODEL_PREFIX = "host-model-cpu.node.kubevirt.io/"
VENDOR_PREFIX = "cpu-vendor.node.kubevirt.io/"

HOST_MODEL = "Cascadelake-Server"
VENDOR = "Intel"
SUPPORTED_MODELS = [
    "Conroe",
    "Penryn",
    "Nehalem",
    "Westmere",
    "SandyBridge",
    "IvyBridge",
    "Haswell-noTSX",
    "Broadwell-noTSX",
    "Skylake-Client-IBRS",
    "Skylake-Server-IBRS",
    "Cascadelake-Server",
]


class NodeLabeller(Controller):
    name = "node-labeller"
    # Upstream re-labels periodically; this is "the next cycle" after a change.
    resync_seconds = 30.0

    def __init__(self, sim):
        super().__init__(sim)
        sim.nodes.add_handler(lambda event, node, old: self.enqueue(o.meta(node, "name")))
        sim.kubevirts.add_handler(lambda event, obj, old: [self.enqueue(n) for n in sim.nodes.keys()])

    def all_keys(self):
        return self.sim.nodes.keys()

    def desired_labels(self):
        obsolete = self.sim.config.obsolete_cpu_models() or set(BUILTIN_OBSOLETE_CPU_MODELS)
        labels = {MODEL_PREFIX + m: "true" for m in SUPPORTED_MODELS if m not in obsolete}
        labels[HOST_MODEL_PREFIX + HOST_MODEL] = "true"
        labels[VENDOR_PREFIX + VENDOR] = "true"
        return labels

    def reconcile(self, node_name):
        node = self.sim.nodes.get(node_name)
        if node is None or o.SCHEDULABLE_LABEL not in o.labels(node):
            return None
        if o.annotations(node).get(SKIP_ANNOTATION) == "true":
            return None
        current = {
            key: value
            for key, value in o.labels(node).items()
            if key.startswith((MODEL_PREFIX, HOST_MODEL_PREFIX, VENDOR_PREFIX))
        }
        desired = self.desired_labels()
        if current == desired:
            return None
        patch = {key: None for key in current if key not in desired}
        patch.update({key: value for key, value in desired.items() if current.get(key) != value})
        self.kube.patch(k.NODES, node_name, {"metadata": {"labels": patch}})
        return None
