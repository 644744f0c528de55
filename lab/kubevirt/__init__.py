"""The real KubeVirt control plane of the lab: virt-controller and virt-api.

Both are built from the Go module kubevirt.io/kubevirt (``build.sh``) and run as local
processes with their own flags, leader election, identities (client certificates named
for their ServiceAccounts, bound by the RBAC virt-operator would install) and serving
certificates from the lab's CA. What virt-operator would install (CRDs, webhook
configurations, APIService, RBAC) comes from the same release's own generators
(``manifests/main.go``); only the webhooks' and APIService's way to reach virt-api is
changed: a URL / Service endpoint on the lab's own veth address (lab/netif.py) instead of
an in-cluster Service.
"""

DEFAULT_VERSION = "1.7.0"
# The releases the Go module proxy serves and the lab is tested with.
SUPPORTED_VERSIONS = ("1.7.0", "1.8.0", "1.9.0")
NAMESPACE = "kubevirt"
KUBEVIRT_CR = "kubevirt"
VIRT_API = "virt-api"
VIRT_CONTROLLER = "virt-controller"
# ServiceAccount names of virt-operator's components package (serviceaccountnames.go).
SERVICE_ACCOUNTS = {
    VIRT_API: "kubevirt-apiserver",
    VIRT_CONTROLLER: "kubevirt-controller",
    "virt-handler": "kubevirt-handler",
}


def normalize_version(version):
    """``v1.7.0`` or ``1.7.0`` -> ``1.7.0``."""
    return str(version).lstrip("v")
