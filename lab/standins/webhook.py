"""The NodeMaintenance stand-in's admission webhook: an HTTPS server on 127.0.0.1 and its
registration, for both groups, or with ``medik8s_node_maintenance=False`` (the lab runs the
real node-maintenance-operator, which registers its own) only the legacy
``nodemaintenance.kubevirt.io`` group. It fails closed, as the operator's does.
"""

import base64
import logging

from lab.standins import https_server
from lab.standins import kube as k
from lab.standins.admission import Admission

log = logging.getLogger(__name__)

NMO_CONFIGURATION = "nodemaintenance-validation.medik8s.io"
LEGACY_NMO_CONFIGURATION = "nodemaintenance-validation.kubevirt.io"


def _route(path, handler):
    def route(request):
        if request.method != "POST" or request.path != path:
            return None

        def run():
            review = request.json()
            response = handler(review.get("request") or {})
            return 200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

        return run

    return route


def start(sim, serving, medik8s_node_maintenance=True):
    """Serve the NodeMaintenance webhook on 127.0.0.1 and register it; returns the port."""
    admission = Admission(sim)
    routes = [_route("/nodemaintenance-validate", admission.node_maintenance)]
    _, port = https_server.serve("127.0.0.1", serving.cert_file, serving.key_file, routes)
    register(sim.kube, port, serving.ca_pem, medik8s_node_maintenance=medik8s_node_maintenance)
    log.info("admission webhooks served on https://127.0.0.1:%d", port)
    return port


def _hook(name, port, path, ca_pem, rules, failure_policy, side_effects="None", timeout=10):
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca_pem).decode(),
        },
        "rules": rules,
        "failurePolicy": failure_policy,
        "sideEffects": side_effects,
        "timeoutSeconds": timeout,
        "matchPolicy": "Equivalent",
    }


def _rule(group, version, resources, operations):
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": resources,
        "operations": operations,
        "scope": "*",
    }


def register(kube, port, ca_pem, medik8s_node_maintenance=True):
    nmo = {
        "metadata": {"name": NMO_CONFIGURATION},
        "webhooks": [
            _hook(
                "vnodemaintenance.kb.io",
                port,
                "/nodemaintenance-validate",
                ca_pem,
                [_rule("nodemaintenance.medik8s.io", "v1beta1", ["nodemaintenances"], ["CREATE", "UPDATE"])],
                "Fail",
            ),
            _hook(
                "vnodemaintenance.kubevirt.io",
                port,
                "/nodemaintenance-validate",
                ca_pem,
                [_rule("nodemaintenance.kubevirt.io", "v1beta1", ["nodemaintenances"], ["CREATE", "UPDATE"])],
                "Fail",
            ),
        ],
    }
    if not medik8s_node_maintenance:
        nmo["metadata"]["name"] = LEGACY_NMO_CONFIGURATION
        nmo["webhooks"] = [h for h in nmo["webhooks"] if h["name"] == "vnodemaintenance.kubevirt.io"]
    kube.apply(k.VALIDATING_WEBHOOKS, nmo)
