"""Identities for the least-privilege and secrets tests.

* ``operator_identity``: a ServiceAccount bound only to ``kubevirt-ops-maintenance-operator``
  (docs/rbac/maintenance-operator.yaml), the lock Role in kube-system and the node heartbeat
  Role in kube-node-lease.
* ``planner_identity``: bound only to ``kubevirt-ops-maintenance-planner``
  (docs/rbac/read-only-planner.yaml) and the lock reader Role.
* ``namespace_user``: a ServiceAccount with a Role in one namespace only (full rights on
  KubeVirt objects there, as a VM owner would have), nothing cluster-wide.

Each has ``kubeconfig`` (a token from the TokenRequest API, the lab's server and CA) and
``token``. ``rbac_roles`` applies both docs/rbac files to the lab, replacing older copies.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import identities  # noqa: E402  (tests/integration helpers)

OPERATOR_ROLE = "kubevirt-ops-maintenance-operator"
PLANNER_ROLE = "kubevirt-ops-maintenance-planner"
LOCK_NAMESPACE = "kube-system"
NODE_LEASE_NAMESPACE = "kube-node-lease"
HEARTBEAT_ROLE = "kubevirt-ops-maintenance-node-heartbeat"


@pytest.fixture(scope="session")
def rbac_roles(k8s):
    operator = identities.apply_rbac(k8s, identities.OPERATOR_FILE)
    planner = identities.apply_rbac(k8s, identities.PLANNER_FILE)
    return {"operator": operator, "planner": planner}


def _identity(k8s, lab, directory, **kwargs):
    return identities.create_identity(k8s, lab.kubeconfig, directory, **kwargs)


@pytest.fixture(scope="session")
def operator_identity(k8s, lab, rbac_roles, tmp_path_factory):
    identity = _identity(k8s, lab, tmp_path_factory.mktemp("operator"), prefix="kvops-operator",
                         cluster_roles=[OPERATOR_ROLE], roles=[(LOCK_NAMESPACE, "kubevirt-ops-maintenance-lock"),
                                                               (NODE_LEASE_NAMESPACE, HEARTBEAT_ROLE)])
    yield identity
    identities.delete_identity(k8s, identity)


@pytest.fixture(scope="session")
def planner_identity(k8s, lab, rbac_roles, tmp_path_factory):
    identity = _identity(k8s, lab, tmp_path_factory.mktemp("planner"), prefix="kvops-planner",
                         cluster_roles=[PLANNER_ROLE], roles=[(LOCK_NAMESPACE, "kubevirt-ops-maintenance-lock-reader")])
    yield identity
    identities.delete_identity(k8s, identity)


NAMESPACE_USER_RULES = [
    {"apiGroups": ["kubevirt.io"], "resources": ["*"], "verbs": ["*"]},
    {"apiGroups": ["subresources.kubevirt.io"], "resources": ["*"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
]


@pytest.fixture
def namespace_user(k8s, lab, namespace, tmp_path):
    """A user whose rights end at the borders of the test's namespace."""
    from kubernetes import client

    role = "kvops-namespace-vm-owner"
    client.RbacAuthorizationV1Api(k8s).create_namespaced_role(
        namespace, {"metadata": {"name": role}, "rules": NAMESPACE_USER_RULES})
    identity = _identity(k8s, lab, tmp_path, namespace=namespace, prefix="kvops-nsuser", roles=[(namespace, role)])
    yield identity
    identities.delete_identity(k8s, identity)
