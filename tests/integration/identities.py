"""Identities with only some rights, for the least-privilege and secrets tests.

A ServiceAccount bound to one of the ClusterRoles shipped in ``docs/rbac/`` (or to a
Role in one namespace), and a kubeconfig that authenticates as it with a token from the
TokenRequest API. The cluster part of the kubeconfig (server, CA) is the lab's.
"""

import base64
import json
import os
import time
import uuid

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RBAC_DIR = os.path.join(REPO, "docs", "rbac")
OPERATOR_FILE = os.path.join(RBAC_DIR, "maintenance-operator.yaml")
PLANNER_FILE = os.path.join(RBAC_DIR, "read-only-planner.yaml")
TOKEN_SECONDS = 3600


def load_documents(path):
    with open(path) as handle:
        return [d for d in yaml.safe_load_all(handle) if d]


def _ignore_status(call, *statuses):
    try:
        return call()
    except ApiException as exc:
        if exc.status not in statuses:
            raise
        return None


def apply_rbac(k8s, path):
    """Create or replace the ClusterRoles and Roles of one docs/rbac file; returns them."""
    rbac = client.RbacAuthorizationV1Api(k8s)
    applied = []
    for doc in load_documents(path):
        meta = doc["metadata"]
        if doc["kind"] == "ClusterRole":
            current = _ignore_status(lambda: rbac.read_cluster_role(meta["name"]), 404)
            if current is None:
                rbac.create_cluster_role(doc)
            else:
                doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                rbac.replace_cluster_role(meta["name"], doc)
        elif doc["kind"] == "Role":
            current = _ignore_status(lambda: rbac.read_namespaced_role(meta["name"], meta["namespace"]), 404)
            if current is None:
                rbac.create_namespaced_role(meta["namespace"], doc)
            else:
                doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                rbac.replace_namespaced_role(meta["name"], meta["namespace"], doc)
        else:
            raise AssertionError("%s holds a %s; docs/rbac files hold only ClusterRoles and Roles" % (path, doc["kind"]))
        applied.append(doc)
    return applied


def lab_cluster(kubeconfig):
    """(server, certificate-authority-data) of the current context of a kubeconfig."""
    with open(kubeconfig) as handle:
        config = yaml.safe_load(handle)
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    return cluster["server"], cluster["certificate-authority-data"]


def lab_client_key(kubeconfig):
    """The PEM private key of the lab's admin kubeconfig (a secret the tests look for)."""
    with open(kubeconfig) as handle:
        config = yaml.safe_load(handle)
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    return base64.b64decode(user["client-key-data"]).decode()


def write_kubeconfig(path, server, ca_data, user, name="kubevirt-ops-test"):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(config, handle)
    return str(path)


class Identity:
    """A ServiceAccount, its token and a kubeconfig using it."""

    def __init__(self, namespace, name, token, kubeconfig):
        self.namespace = namespace
        self.name = name
        self.token = token
        self.kubeconfig = kubeconfig
        self.bindings = []

    @property
    def username(self):
        return "system:serviceaccount:%s:%s" % (self.namespace, self.name)


def request_token(k8s, namespace, name, seconds=TOKEN_SECONDS):
    core = client.CoreV1Api(k8s)
    answer = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": seconds}})
    return answer.status.token


def create_identity(k8s, lab_kubeconfig, directory, cluster_roles=(), roles=(), namespace=None, prefix="kvops"):
    """A ServiceAccount (in its own new namespace unless ``namespace``) bound to the given roles.

    ``cluster_roles``: ClusterRole names bound cluster-wide. ``roles``: (namespace, Role
    name) pairs bound in that namespace. The kubeconfig is written into ``directory``.
    """
    core = client.CoreV1Api(k8s)
    rbac = client.RbacAuthorizationV1Api(k8s)
    suffix = uuid.uuid4().hex[:8]
    if namespace is None:
        namespace = "%s-%s" % (prefix, suffix)
        core.create_namespace({"metadata": {"name": namespace, "labels": {"kubevirt-ops.test/identity": "true"}}})
    name = "%s-%s" % (prefix, suffix)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    identity = Identity(namespace, name, None, None)
    for role in cluster_roles:
        binding = "%s-%s" % (role, suffix)
        rbac.create_cluster_role_binding({
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subject,
        })
        identity.bindings.append(("ClusterRoleBinding", None, binding))
    for role_namespace, role in roles:
        binding = "%s-%s" % (role, suffix)
        rbac.create_namespaced_role_binding(role_namespace, {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subject,
        })
        identity.bindings.append(("RoleBinding", role_namespace, binding))
    identity.token = request_token(k8s, namespace, name)
    server, ca_data = lab_cluster(lab_kubeconfig)
    identity.kubeconfig = write_kubeconfig(os.path.join(str(directory), "%s.kubeconfig" % name), server, ca_data,
                                           {"token": identity.token}, name=name)
    identity.own_namespace = namespace.startswith(prefix + "-")
    return identity


def delete_identity(k8s, identity, until_refused=False):
    """Delete the ServiceAccount, its bindings and its own namespace.

    ``until_refused``: for a test that goes on using the token, wait after deleting the
    ServiceAccount until the API server refuses the token (401) before deleting the bindings.
    The API server keeps a successful token authentication for 10 s (kubernetes
    pkg/kubeapiserver/options/authentication.go, ``TokenSuccessCacheTTL``), so a token whose
    ServiceAccount is gone still authenticates for a while; with its bindings gone too it would
    be forbidden (403) in that while, which is a different failure from an expired token.
    """
    core = client.CoreV1Api(k8s)
    rbac = client.RbacAuthorizationV1Api(k8s)
    _ignore_status(lambda: core.delete_namespaced_service_account(identity.name, identity.namespace), 404)
    if until_refused:
        wait_until_refused(identity)
    for kind, namespace, name in identity.bindings:
        if kind == "ClusterRoleBinding":
            _ignore_status(lambda: rbac.delete_cluster_role_binding(name), 404)
        else:
            _ignore_status(lambda: rbac.delete_namespaced_role_binding(name, namespace), 404)
    if getattr(identity, "own_namespace", False):
        _ignore_status(lambda: core.delete_namespace(identity.namespace), 404)


def wait_until_refused(identity, timeout=60):
    """Wait until a request with the identity's token is answered 401 Unauthorized."""
    api = config.new_client_from_config(config_file=identity.kubeconfig)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.VersionApi(api).get_code()
            except ApiException as exc:
                if exc.status == 401:
                    return
                raise
            if time.monotonic() > deadline:
                raise AssertionError("the token of %s still authenticates %d s after its ServiceAccount was deleted"
                                     % (identity.username, timeout))
            time.sleep(0.5)
    finally:
        api.close()


def can_i(k8s, identity, verb, resource, group="", namespace=None, subresource=None, name=None):
    """SubjectAccessReview: may ``identity`` do this? (asked as the admin)."""
    authz = client.AuthorizationV1Api(k8s)
    attributes = {"verb": verb, "resource": resource, "group": group}
    for key, value in (("namespace", namespace), ("subresource", subresource), ("name", name)):
        if value:
            attributes[key] = value
    review = authz.create_subject_access_review({
        "spec": {
            "user": identity.username,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:%s" % identity.namespace,
                       "system:authenticated"],
            "resourceAttributes": attributes,
        },
    })
    return bool(review.status.allowed)


# -- what the collection asked the API server for (the lab's audit log) ---------------------

USER_AGENT_PREFIX = "kubevirt_ops.maintenance/"
# Granted to every authenticated user by the default ClusterRoles (system:basic-user).
ALWAYS_ALLOWED = {
    ("create", "authorization.k8s.io", "selfsubjectaccessreviews", ""),
    ("create", "authorization.k8s.io", "selfsubjectrulesreviews", ""),
}


def audited_requests(audit_log, user_agent_prefix=USER_AGENT_PREFIX):
    """{(verb, apiGroup, resource, subresource, namespace or '')} of the resource requests the
    collection made successfully, from the API server's audit log (discovery requests carry
    no object)."""
    seen = set()
    if not os.path.exists(audit_log):
        return seen
    with open(audit_log, errors="replace") as handle:
        for line in handle:
            if user_agent_prefix not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not (event.get("userAgent") or "").startswith(user_agent_prefix):
                continue
            if ((event.get("responseStatus") or {}).get("code") or 0) >= 400:
                continue  # refused or failed (a test's bad input, a planner told no): not a right it uses
            ref = event.get("objectRef")
            if not ref or not ref.get("resource"):
                continue
            seen.add((event.get("verb"), ref.get("apiGroup") or "", ref["resource"], ref.get("subresource") or "",
                      ref.get("namespace") or ""))
    return seen


def _rule_allows(rule, verb, group, resource, subresource):
    full = resource + ("/" + subresource if subresource else "")
    return ((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (full in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])))


def rbac_file_allows(path, verb, group, resource, subresource="", namespace=""):
    """Whether the ClusterRoles (anywhere) or Roles (in their namespace) of a docs/rbac file allow it."""
    if (verb, group, resource, subresource) in ALWAYS_ALLOWED:
        return True
    for doc in load_documents(path):
        if doc["kind"] == "Role" and doc["metadata"]["namespace"] != namespace:
            continue
        if any(_rule_allows(rule, verb, group, resource, subresource) for rule in doc.get("rules") or []):
            return True
    return False
