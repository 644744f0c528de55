"""virt-handler and the ``kubevirt.io/schedulable`` node label.

Upstream runs virt-handler as a DaemonSet; each handler heartbeats and labels its
node ``kubevirt.io/schedulable=true``, and virt-controller sets it to ``false`` when
the heartbeat stops. VM pods select that label, so VMs only land where a handler
runs on a healthy node. Here the DaemonSet is real (KWOK runs its pods, and
drains must skip it) and the label follows "node Ready and a virt-handler pod
running there".
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import KUBEVIRT_NAMESPACE
from lab.kubevirt_sim.workqueue import Controller

HANDLER_IMAGE = "quay.io/kubevirt/virt-handler:v1.6.0"


def ensure_virt_handler(kube):
    labels = {o.APP_LABEL: o.HANDLER}
    kube.apply(
        k.DAEMONSETS,
        {
            "metadata": {"name": o.HANDLER, "namespace": KUBEVIRT_NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": dict(labels, **{"prometheus.kubevirt.io": "true"})},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": o.HANDLER,
                                "image": HANDLER_IMAGE,
                                "resources": {"requests": {"cpu": "10m", "memory": "325Mi"}},
                            }
                        ],
                    },
                },
            },
        },
    )


class SchedulableLabeller(Controller):
    name = "node-schedulable"
    resync_seconds = 30.0

    def __init__(self, sim):
        super().__init__(sim)
        sim.nodes.add_handler(lambda event, node, old: self.enqueue(o.meta(node, "name")))
        sim.pods.add_handler(self._on_pod)

    def _on_pod(self, event, pod, old):
        if o.labels(pod).get(o.APP_LABEL) == o.HANDLER and o.pod_node(pod):
            self.enqueue(o.pod_node(pod))

    def all_keys(self):
        return self.sim.nodes.keys()

    def schedulable(self, node_name):
        node = self.sim.nodes.get(node_name)
        if node is None or not o.node_ready(node):
            return False
        return any(
            o.labels(p).get(o.APP_LABEL) == o.HANDLER and o.pod_phase(p) == "Running" and not o.deleting(p)
            for p in self.sim.pods.by_index("node", node_name)
        )

    def reconcile(self, node_name):
        node = self.sim.nodes.get(node_name)
        if node is None:
            return None
        has_handler = any(
            o.labels(p).get(o.APP_LABEL) == o.HANDLER for p in self.sim.pods.by_index("node", node_name)
        )
        current = o.labels(node).get(o.SCHEDULABLE_LABEL)
        if not has_handler and current is None:
            return None  # never a KubeVirt node (e.g. the tainted control plane)
        desired = "true" if self.schedulable(node_name) else "false"
        if current != desired:
            self.kube.patch(k.NODES, node_name, {"metadata": {"labels": {o.SCHEDULABLE_LABEL: desired}}})
            self.log.info("node %s: %s=%s", node_name, o.SCHEDULABLE_LABEL, desired)
        return None
