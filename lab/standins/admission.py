"""What the legacy NodeMaintenance stand-in's admission webhook decides.

NodeMaintenance create/update: the node must exist, only one CR per node, and
``spec.nodeName`` is immutable (as the real node-maintenance-operator's webhook decides
for nodemaintenance.medik8s.io).
"""

import logging

from lab.standins import kube as k
from lab.standins import objects as o

log = logging.getLogger(__name__)


def allowed(request, warnings=None):
    response = {"uid": request.get("uid"), "allowed": True}
    if warnings:
        response["warnings"] = warnings
    return response


def denied(request, message, code=403, reason=None):
    status = {"status": "Failure", "message": message, "code": code}
    if reason:
        status["reason"] = reason
    return {"uid": request.get("uid"), "allowed": False, "status": status}


class Admission:
    def __init__(self, sim):
        self.sim = sim
        self.kube = sim.kube

    # -- pods/eviction -------------------------------------------------------------------

    def node_maintenance(self, request):
        nm = request.get("object") or {}
        node_name = o.spec(nm).get("nodeName")
        if request.get("operation") == "UPDATE":
            old = request.get("oldObject") or {}
            if o.spec(old).get("nodeName") != node_name:
                return denied(request, "updating spec.NodeName isn't allowed", 403, "Forbidden")
            return allowed(request)
        if not node_name or self.kube.get_or_none(k.NODES, node_name) is None:
            return denied(request, f"invalid nodeName, no node with name {node_name} found", 403, "Forbidden")
        for resource in (k.NODEMAINTENANCES, k.LEGACY_NODEMAINTENANCES):
            try:
                existing = self.kube.list(resource).get("items") or []
            except k.ApiError:
                continue
            for other in existing:
                if o.spec(other).get("nodeName") == node_name and o.meta(other, "name") != o.meta(nm, "name"):
                    return denied(
                        request,
                        f"invalid nodeName, a NodeMaintenance for node {node_name} already exists",
                        403,
                        "Forbidden",
                    )
        return allowed(request)
