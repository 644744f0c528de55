"""virt-handler's DaemonSet, as virt-operator installs it.

KWOK runs its pods (drains must skip them) and virt-controller's node controller expects
exactly one per node (pkg/virt-controller/watch/node/node.go); the stand-in's heartbeat
(handler_nodes.py) does what the real pods would.
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import KUBEVIRT_NAMESPACE

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
