"""A dead machine writes nothing, ever.

Handing a node's Lease away (its machine dead: ``lab node-fail``, a BMC or a BareMetalHost powering
it off, lab/standins/machines.py; or the node cut off the network: ``lab node-partition``, lab/nodes.py
``partition``) stops kwok from taking up new work for the node. But kwok decides that from its
own Lease cache and still plays the Stages it took up before (lab/kwok.py; kwok
pkg/kwok/controllers/pod_controller.go checks ``readOnly`` when an event comes in, never when a
delayed Stage plays). A real dead kubelet writes nothing at all (and a partitioned one reaches
nothing), so the API server itself refuses kwok's status writes for such a node and its pods: a
ValidatingAdmissionPolicy (GA since Kubernetes 1.30) whose parameter is the ConfigMap
``kube-node-lease/lab-dead-machines``, one key per dead (or partitioned) node.

A node is listed before its Lease goes, and struck before its Lease comes back. The API server
reads the list through its own cache, so each change is followed until the policy acts on it: a
dry-run create of the probe ConfigMap (``data.node``) is refused exactly while that node is
listed. After ``mark`` returns, every kwok write for the node is judged by the new list.

This module holds the objects and the one procedure; the lab CLI (kubernetes library) and the
stand-ins (their own client) each pass in their requests.
"""

import time

from lab.errors import LabError

NAMESPACE = "kube-node-lease"
NAME = "lab-dead-machines"
PROBE = "lab-dead-machines-probe"
KWOK_USER = "kwok-controller"
REFUSAL = "the node's machine is dead: its kubelet writes nothing (lab)"
MARK_TIMEOUT = 60

POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": NAME},
    "spec": {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
             "resources": ["pods/status", "nodes/status"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]},
        ]},
        "matchConditions": [{
            "name": "kwok-or-probe",
            "expression": "request.resource.resource == 'configmaps' ? object.metadata.name == '%s'"
                          " : request.userInfo.username == '%s'" % (PROBE, KWOK_USER),
        }],
        "validations": [{
            "expression": "!has(params.data) || !("
                          "(object.kind == 'Node' && object.metadata.name in params.data) || "
                          "(object.kind == 'Pod' && has(object.spec.nodeName) && object.spec.nodeName in params.data) || "
                          "(object.kind == 'ConfigMap' && has(object.data) && 'node' in object.data"
                          " && object.data['node'] in params.data))",
            "message": REFUSAL,
        }],
    },
}
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": NAME},
    "spec": {
        "policyName": NAME,
        "paramRef": {"name": NAME, "namespace": NAMESPACE, "parameterNotFoundAction": "Allow"},
        "validationActions": ["Deny"],
    },
}
LIST = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NAMESPACE}}


def list_patch(names, dead):
    """The merge patch that lists (or strikes) the nodes."""
    return {"data": {name: "dead" if dead else None for name in names}}


def probe(name):
    """The ConfigMap whose dry-run create the policy refuses while ``name`` is listed."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": PROBE, "namespace": NAMESPACE}, "data": {"node": name}}


def refused(status, body):
    """Whether an API error is this policy's refusal."""
    return status == 422 and REFUSAL in (body or "")


def mark(patch_list, probe_admitted, names, dead, timeout=MARK_TIMEOUT):
    """List (``dead``) or strike the nodes, and return once the API server judges by it.

    ``patch_list(patch)`` merge-patches the list; ``probe_admitted(body)`` dry-run creates the
    probe and returns False when the policy refused it."""
    names = list(names)
    if not names:
        return
    patch_list(list_patch(names, dead))
    deadline = time.monotonic() + timeout
    for name in names:
        while probe_admitted(probe(name)) == dead:
            if time.monotonic() >= deadline:
                raise LabError("timed out after %ds waiting for the API server to %s node %s"
                               % (timeout, "list the dead" if dead else "strike the dead", name))
            time.sleep(0.05)
