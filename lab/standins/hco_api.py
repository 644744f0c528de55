"""HyperConverged's two API versions and the conversion webhook between them.

Upstream HCO (kubevirt/hyperconverged-cluster-operator) serves ``hco.kubevirt.io/v1``
beside ``v1beta1`` since 1.18 (``api/v1``, PR #4046) and stores v1 only from PR #4254
("Make the v1 API version the stored one", after 1.18). Like the 1.18.1 tag, the lab stores
v1beta1 (``crds.py``), so a ``minCPUModel`` written through v1beta1 is kept and one written
through v1 has nowhere to be. The apiserver converts between them through HCO's conversion webhook, whose
mapping is ``api/v1beta1/conversion.go``. This stand-in converts the fields that mapping
moves and that anything here reads or writes:

=====================================  ==========================================
v1beta1 ``spec``                       v1 ``spec``
=====================================  ==========================================
``evictionStrategy``                   ``virtualization.evictionStrategy``
``obsoleteCPUs.cpuModels``             ``virtualization.obsoleteCPUModels``
``obsoleteCPUs.minCPUModel``           (none: dropped, as upstream)
``liveMigrationConfig``                ``virtualization.liveMigrationConfig``
``infra.nodePlacement``                ``deployment.nodePlacements.infra``
``workloads.nodePlacement``            ``deployment.nodePlacements.workload``
``uninstallStrategy``                  ``deployment.uninstallStrategy``
=====================================  ==========================================

Other spec fields pass unchanged (upstream moves many more); status is the same in both.
"""

import copy
import logging

log = logging.getLogger(__name__)

GROUP = "hco.kubevirt.io"
V1 = f"{GROUP}/v1"
V1BETA1 = f"{GROUP}/v1beta1"
CONVERSION_PATH = "/hco-convert"

# (v1beta1 path, v1 path) under spec; None: the field has no place in v1.
MAPPING = (
    (("evictionStrategy",), ("virtualization", "evictionStrategy")),
    (("obsoleteCPUs", "cpuModels"), ("virtualization", "obsoleteCPUModels")),
    (("obsoleteCPUs", "minCPUModel"), None),
    (("liveMigrationConfig",), ("virtualization", "liveMigrationConfig")),
    (("infra", "nodePlacement"), ("deployment", "nodePlacements", "infra")),
    (("workloads", "nodePlacement"), ("deployment", "nodePlacements", "workload")),
    (("uninstallStrategy",), ("deployment", "uninstallStrategy")),
)
# v1beta1 keeps these as (possibly empty) objects: ``infra`` and ``workloads`` are
# structs, not pointers, in api/v1beta1/hyperconverged_types.go.
V1BETA1_STRUCTS = ("infra", "workloads")


def _pop(tree, path):
    """Remove and return the value at ``path`` (None if absent), pruning emptied parents."""
    parents = []
    node = tree
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return None
        parents.append((node, key))
        node = node[key]
    if not isinstance(node, dict) or path[-1] not in node:
        return None
    value = node.pop(path[-1])
    for parent, key in reversed(parents):
        if parent[key] == {}:
            del parent[key]
        else:
            break
    return value


def _put(tree, path, value):
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def convert(obj, desired_api_version):
    """``obj`` (a HyperConverged of either version) as ``desired_api_version``."""
    source = obj.get("apiVersion")
    out = copy.deepcopy(obj)
    out["apiVersion"] = desired_api_version
    if source == desired_api_version:
        return out
    spec = out.setdefault("spec", {})
    if desired_api_version == V1:
        for beta, v1 in MAPPING:
            value = _pop(spec, beta)
            if value is None or v1 is None:
                continue
            if beta == ("obsoleteCPUs", "cpuModels") and not value:
                continue  # upstream copies the list only when it is not empty
            _put(spec, v1, value)
        for name in V1BETA1_STRUCTS:
            if spec.get(name) == {}:
                del spec[name]
    else:
        for beta, v1 in MAPPING:
            if v1 is None:
                continue
            value = _pop(spec, v1)
            if value is None:
                continue
            if v1 == ("virtualization", "obsoleteCPUModels") and not value:
                continue
            _put(spec, beta, value)
        for name in V1BETA1_STRUCTS:
            spec.setdefault(name, {})
    return out


def review(body):
    """Answer a ``apiextensions.k8s.io/v1`` ConversionReview."""
    request = body.get("request") or {}
    desired = request.get("desiredAPIVersion")
    response = {"uid": request.get("uid")}
    try:
        if desired not in (V1, V1BETA1):
            raise ValueError(f"cannot convert HyperConverged to {desired}")
        response["convertedObjects"] = [convert(o, desired) for o in request.get("objects") or []]
        response["result"] = {"status": "Success"}
    except Exception as e:  # the apiserver shows the message to the client
        log.warning("HyperConverged conversion failed: %s", e)
        response["result"] = {"status": "Failure", "message": str(e)}
    return {
        "apiVersion": body.get("apiVersion", "apiextensions.k8s.io/v1"),
        "kind": "ConversionReview",
        "response": response,
    }


def route(request):
    """An https_server route for CONVERSION_PATH."""
    if request.method != "POST" or request.path != CONVERSION_PATH:
        return None
    return lambda: (200, review(request.json()))
