"""virt-handler's node-labeller (``pkg/virt-handler/node-labeller/node_labeller.go``, v1.7).

Each handler relabels its own node every 3 minutes (with jitter) and when the KubeVirt
CR changes: every label under the labeller's prefixes (``nodeLabellerLabels``) is
removed and the current set written, in one JSON patch. A node carrying the annotation
``node-labeller.kubevirt.io/skip-node`` is left alone whatever its value
(``skipNodeLabelling`` only checks that the key exists). ``cpu-vendor.node.kubevirt.io/``
is added but not among the prefixes it removes.

The host CPU is the same simulated one on every node (node_labeller.py's models).
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS
from lab.standins.handler_nodes import handler_alive
from lab.standins.node_labeller import (
    HOST_MODEL,
    HOST_MODEL_PREFIX,
    MODEL_PREFIX,
    SKIP_ANNOTATION,
    SUPPORTED_MODELS,
    VENDOR,
    VENDOR_PREFIX,
    NodeLabeller,
)

MIGRATION_MODEL_PREFIX = "cpu-model-migration.node.kubevirt.io/"
FEATURE_PREFIX = "cpu-feature.node.kubevirt.io/"
TIMER_PREFIX = "cpu-timer.node.kubevirt.io/"
HYPERV_PREFIX = "hyperv.node.kubevirt.io/"
MACHINE_TYPE_PREFIX = "machine-type.node.kubevirt.io/"
REQUIRED_FEATURES_PREFIX = "host-model-required-features.node.kubevirt.io/"
OBSOLETE_HOST_MODEL_LABEL = "node-labeller.kubevirt.io/obsolete-host-model"
# node_labeller.go nodeLabellerLabels (cpu-vendor is not among them)
LABELLER_PREFIXES = (
    FEATURE_PREFIX,
    MODEL_PREFIX,
    MIGRATION_MODEL_PREFIX,
    TIMER_PREFIX,
    HYPERV_PREFIX,
    "scheduling.node.kubevirt.io/realtime",
    "kubevirt.io/sev",
    "kubevirt.io/sev-es",
    "kubevirt.io/sev-snp",
    "kubevirt.io/tdx",
    HOST_MODEL_PREFIX,
    REQUIRED_FEATURES_PREFIX,
    OBSOLETE_HOST_MODEL_LABEL,
    MACHINE_TYPE_PREFIX,
)
FEATURES = ["aes", "avx", "avx2", "avx512f", "invtsc", "pdpe1gb", "vmx", "x2apic"]
HYPERV_FEATURES = ["base", "frequencies", "ipi", "reenlightenment", "reset", "runtime", "synic",
                   "synictimer", "time", "tlbflush", "vpindex"]
MACHINE_TYPES = ["pc-q35-rhel9.6.0", "q35"]
TSC_FREQUENCY = "2400000000"
RELABEL_SECONDS = 180.0


class HandlerNodeLabeller(NodeLabeller):
    name = "handler-node-labeller"
    resync_seconds = RELABEL_SECONDS

    def desired_labels(self):
        # virt-config's GetObsoleteCPUModels: the CR's list, else the built-in defaults
        obsolete = self.sim.config.obsolete_cpu_models() or set(BUILTIN_OBSOLETE_CPU_MODELS)
        models = [m for m in SUPPORTED_MODELS if m not in obsolete]
        labels = {MODEL_PREFIX + m: "true" for m in models}
        labels.update({MIGRATION_MODEL_PREFIX + m: "true" for m in models})
        labels.update({FEATURE_PREFIX + f: "true" for f in FEATURES})
        labels.update({HYPERV_PREFIX + f: "true" for f in HYPERV_FEATURES})
        labels.update({MACHINE_TYPE_PREFIX + m: "true" for m in MACHINE_TYPES})
        labels[TIMER_PREFIX + "tsc-frequency"] = TSC_FREQUENCY
        labels[TIMER_PREFIX + "tsc-scalable"] = "true"
        if HOST_MODEL in obsolete:
            labels[OBSOLETE_HOST_MODEL_LABEL] = "true"
        labels[VENDOR_PREFIX + VENDOR] = "true"
        labels[HOST_MODEL_PREFIX + HOST_MODEL] = "true"
        return labels

    def reconcile(self, node_name):
        node = self.sim.nodes.get(node_name)
        if node is None or not handler_alive(self.sim, node_name):
            return None
        if SKIP_ANNOTATION in o.annotations(node):
            return None
        current = o.labels(node)
        desired = self.desired_labels()
        stale = {key: None for key in current if key.startswith(LABELLER_PREFIXES) and key not in desired}
        changed = {key: value for key, value in desired.items() if current.get(key) != value}
        if stale or changed:
            self.kube.patch(k.NODES, node_name, {"metadata": {"labels": dict(stale, **changed)}})
            self.log.info("node %s: CPU labels updated", node_name)
        return None
