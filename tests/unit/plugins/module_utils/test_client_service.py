"""The client as the one service layer: guarded updates, KubeVirt's subresource API, and
(read from the sources) that no other plugin file builds a URL or sends a request, and that
only connection.py reads a kubeconfig."""

import ast
import os

import pytest

from fake_apiserver import FakeResponse, fake_client
from kubevirt_objects import cluster, vm

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, ConflictError

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))), "plugins")
CLIENT = os.path.join("module_utils", "k8s", "client.py")
# The service layer: the client, its transport (sends requests) and its kind table (API paths).
SERVICE = (CLIENT, os.path.join("module_utils", "k8s", "transport.py"), os.path.join("module_utils", "k8s", "kinds.py"))
CONNECTION = os.path.join("module_utils", "k8s", "connection.py")
KUBECONFIG_READING = ("parses YAML", "imports yaml", "imports kubernetes.", "imports kube_config",
                      "imports incluster_config", "imports load_kube_config", "imports KubeConfigLoader")


def node(name="n1", taints=None):
    return {"metadata": {"name": name, "labels": {}}, "spec": {"taints": list(taints or [])}}


def add_taint(key):
    def compute(current):
        taints = current["spec"].get("taints") or []
        if any(t["key"] == key for t in taints):
            return None, "present"
        return {"spec": {"taints": taints + [{"key": key, "effect": "NoSchedule"}]}}, "added"
    return compute


# -- guarded updates ------------------------------------------------------------------------

def test_merge_update_carries_the_version_read_and_recomputes_after_a_conflict():
    client, server = fake_client()
    server.add("Node", node())
    stale = client.get("Node", "n1")
    # The node controller adds its own taint after we read the node.
    server.add("Node", node(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]))
    outcome, after = client.update_guarded("Node", "n1", add_taint("medik8s.io/drain"), current=stale)
    assert outcome == "added"
    assert [t["key"] for t in after["spec"]["taints"]] == ["node.kubernetes.io/unreachable", "medik8s.io/drain"]
    patches_sent = [r for r in server.requests if r[0] == "PATCH"]
    assert len(patches_sent) == 2, "the stale write was refused (409) and the change recomputed"


def test_nothing_to_change_writes_nothing_and_check_mode_sends_nothing():
    client, server = fake_client()
    server.add("Node", node(taints=[{"key": "medik8s.io/drain", "effect": "NoSchedule"}]))
    assert client.update_guarded("Node", "n1", add_taint("medik8s.io/drain"))[0] == "present"
    outcome, obj = client.update_guarded("Node", "n1", add_taint("other"), write=False)
    assert outcome == "added" and [t["key"] for t in obj["spec"]["taints"]] == ["medik8s.io/drain"]
    assert server.writes() == []


def test_an_object_that_keeps_changing_ends_in_one_conflict_sentence():
    client, server = fake_client()
    server.add("Node", node())

    def someone_else_writes_first(method, kind, name):
        server.add("Node", node())  # a new resourceVersion before each of our writes

    server.before_write = someone_else_writes_first
    with pytest.raises(ConflictError) as info:
        client.update_guarded("Node", "n1", add_taint("medik8s.io/drain"), attempts=3, details={"node": "n1"})
    assert info.value.msg == "Cannot update Node n1: it kept changing under 3 attempts; try again."
    assert info.value.status == 409 and info.value.details["node"] == "n1"
    assert len(server.writes("Node")) == 3


def test_other_errors_are_not_retried():
    client, server = fake_client()
    server.add("Node", node())
    server.fail_next[("PATCH", "Node")] = 403
    with pytest.raises(ApiError) as info:
        client.update_guarded("Node", "n1", add_taint("medik8s.io/drain"))
    assert info.value.status == 403 and len(server.writes()) == 1


def test_json_patch_conflicts_are_retried_and_a_409_counts_too():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", eviction="LiveMigrate"))
    path = ("spec", "template", "spec", "evictionStrategy")
    server.fail_next[("PATCH", "VirtualMachine")] = 409
    before, after = client.update_guarded(
        "VirtualMachine", "a", lambda o: (patches.set_field(o, path, "None"), patches.value_at(o, path)),
        namespace="ns1", patch_type="json")
    assert before == "LiveMigrate" and patches.value_at(after, path) == "None"
    assert len(server.writes("VirtualMachine")) == 2


def test_replace_creates_when_missing_and_a_lost_create_race_is_decided_again():
    client, server = fake_client()
    body = {"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"holderIdentity": "me"}}
    seen = []

    def claim(lease):
        seen.append(None if lease is None else lease["spec"]["holderIdentity"])
        if lease is not None and lease["spec"]["holderIdentity"] != "me":
            return None, "held"
        return dict(body), "acquired"

    def other_run_creates_first(method, kind, name):
        server.before_write = None
        server.add("Lease", {"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"holderIdentity": "you"}})

    server.before_write = other_run_creates_first
    outcome, current = client.update_guarded("Lease", "l", claim, namespace="kube-system", patch_type="replace",
                                             create_missing=True)
    assert (outcome, seen) == ("held", [None, "you"])
    assert current["spec"]["holderIdentity"] == "you"

    def release(lease):
        return dict(lease, spec={}), "released"

    outcome, written = client.update_guarded("Lease", "l", release, namespace="kube-system", patch_type="replace")
    assert outcome == "released" and written["spec"] == {}
    assert [r[0] for r in server.writes("Lease")] == ["POST", "PUT"]


# -- KubeVirt's subresource API -------------------------------------------------------------

def test_subresource_actions_are_put_to_kubevirts_api():
    client, server = fake_client()
    calls = []

    def subresources(method, path, body):
        calls.append((method, path, body))
        return FakeResponse(202)

    server.handlers["/apis/subresources.kubevirt.io/v1/"] = subresources
    client.subresource_action("VirtualMachine", "vm1", "ns1", "migrate", body={"dryRun": []})
    client.subresource_action("VirtualMachineInstance", "vm1", "ns1", "pause")
    assert calls == [
        ("PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachines/vm1/migrate", {"dryRun": []}),
        ("PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/vm1/pause", {}),
    ]


def test_a_subresource_error_names_the_object_and_the_action():
    client, server = fake_client()
    server.handlers["/apis/subresources.kubevirt.io/v1/"] = lambda method, path, body: FakeResponse(
        409, {"kind": "Status", "message": "VM is already running"})
    with pytest.raises(ConflictError) as info:
        client.subresource_action("VirtualMachine", "vm1", "ns1", "start")
    assert info.value.msg.startswith("Cannot start VirtualMachine ns1/vm1:")


@pytest.mark.parametrize("service, discovery, expected", [
    ({"status": {"conditions": [{"type": "Available", "status": "True"}]}}, None, True),
    ({"status": {"conditions": [{"type": "Available", "status": "False"}]}}, None, False),
    (None, None, False),
    (403, [{"name": "virtualmachines/restart"}], True),
    (403, [{"name": "virtualmachineinstances/pause"}], False),
    (403, 404, False),
])
def test_whether_an_aggregated_api_is_available(service, discovery, expected):
    client, server = fake_client()
    if isinstance(service, dict):
        server.add("APIService", dict(service, metadata={"name": "v1.subresources.kubevirt.io"}))
    elif service == 403:
        server.fail_next[("GET", "APIService")] = 403
    if discovery is not None:
        server.handlers["/apis/subresources.kubevirt.io/v1"] = lambda method, path, body: (
            FakeResponse(404) if discovery == 404 else FakeResponse(200, {"resources": discovery}))
    assert client.api_available("subresources.kubevirt.io/v1", resource="virtualmachines") is expected


# -- one layer, read from the sources ------------------------------------------------------

def plugin_sources():
    for root, _dirs, files in os.walk(PLUGINS):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as handle:
                    yield os.path.relpath(path, PLUGINS), ast.parse(handle.read(), path)


def offences(relpath, tree):
    """Requests, API paths and kubeconfig reading in one file's code (not its documentation)."""
    found = []
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                for t in node.targets):
            docs.add(id(node.value))
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node, clean=False):
            docs.add(id(node.body[0].value))
    for node in ast.walk(tree):
        where = "%s:%s" % (relpath, getattr(node, "lineno", "?"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("request", "urlopen"):
                found.append("%s calls .%s(" % (where, node.func.attr))
            if node.func.attr in ("safe_load", "load") and getattr(node.func.value, "id", "") == "yaml":
                found.append("%s parses YAML" % where)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(part in node.value for part in ("/api/", "/apis/", "/namespaces/")) \
                    or node.value.startswith(("/api", "/apis")):
                found.append("%s holds an API path %r" % (where, node.value))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            for name in names:
                if name == "yaml" or name.startswith(("kubernetes.config", "kubernetes.client", "urllib3",
                                                      "requests", "http.client")):
                    found.append("%s imports %s" % (where, name))
                if name in ("kube_config", "incluster_config", "load_kube_config", "KubeConfigLoader"):
                    found.append("%s imports %s" % (where, name))
    return found


def test_no_request_url_or_kubeconfig_outside_the_client():
    """Requests and API paths only in the service layer (client.py, transport.py, kinds.py); kubeconfig
    reading only in connection.py."""
    found = []
    for relpath, tree in plugin_sources():
        for offence in offences(relpath, tree):
            if relpath not in ((CONNECTION,) if any(what in offence for what in KUBECONFIG_READING) else SERVICE):
                found.append(offence)
    assert found == []


def test_the_source_check_finds_what_it_looks_for():
    """The check above is not vacuous: the client and the connection themselves do all of it."""
    sources = dict(plugin_sources())
    found = " ".join(offences(CLIENT, sources[CLIENT]))
    assert "calls .request(" in found and "holds an API path" in found
    found = " ".join(offences(CONNECTION, sources[CONNECTION]))
    assert "parses YAML" in found and "imports yaml" in found and "imports kubernetes.config" in found
    assert len(sources) > 40
