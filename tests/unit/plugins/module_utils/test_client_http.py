"""The client against a real local HTTP server: retries, error sentences, user agent, watch."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import errors
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import ConnectionSettings


class Api:
    """Scripted answers: a list of (status, body, headers) per path, consumed in order."""

    def __init__(self):
        self.script = {}
        self.seen = []

    def answer(self, handler):
        self.seen.append((handler.command, handler.path, dict(handler.headers)))
        path = handler.path.split("?")[0]
        queue = self.script.get(path) or [(404, {"kind": "Status", "message": "not found"}, {})]
        status, body, headers = queue.pop(0) if len(queue) > 1 else queue[0]
        if status == "reset":
            handler.connection.close()
            return
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


@pytest.fixture
def api():
    state = Api()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state.answer(self)

        do_POST = do_PATCH = do_DELETE = do_PUT = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = "http://127.0.0.1:%d" % server.server_address[1]
    yield state
    server.shutdown()


def client_for(api, budget=3.0, token="secret-token-abc"):
    return KubeClient(ConnectionSettings(api.url, token=token), retry_budget=budget)


def test_get_sends_user_agent_and_token(api):
    api.script["/api/v1/nodes/n1"] = [(200, {"metadata": {"name": "n1"}}, {})]
    node = client_for(api).get("Node", "n1")
    assert node["metadata"]["name"] == "n1"
    _method, _path, headers = api.seen[0]
    assert headers["User-Agent"].startswith("kubevirt_ops.maintenance/")
    assert headers["Authorization"] == "Bearer secret-token-abc"


@pytest.mark.parametrize("status,cls,phrase", [
    (401, errors.ApiError, "credentials were rejected"),
    (403, errors.ApiError, "permission denied"),
    (404, errors.NotFoundError, "does not exist"),
    (409, errors.ConflictError, "changed by someone else"),
    (422, errors.ApiError, "rejected it as invalid"),
    (400, errors.ApiError, "malformed"),
])
def test_error_statuses_become_one_sentence(api, status, cls, phrase):
    api.script["/api/v1/nodes/n1"] = [(status, {"kind": "Status", "message": "server detail"}, {})]
    with pytest.raises(cls) as info:
        client_for(api).get("Node", "n1")
    msg = info.value.msg
    assert msg.startswith("Cannot get Node n1: ") and phrase in msg and msg.endswith(".")
    assert msg.count(". ") == 0, "one sentence"
    assert info.value.status == status
    assert len(api.seen) == 1, "client errors are not retried"


def test_transient_5xx_is_retried_then_succeeds(api):
    api.script["/api/v1/nodes/n1"] = [(503, {}, {}), (500, {}, {}), (200, {"metadata": {"name": "n1"}}, {})]
    assert client_for(api).get("Node", "n1")["metadata"]["name"] == "n1"
    assert len(api.seen) == 3


def test_429_with_retry_after_is_retried_for_ordinary_requests(api):
    api.script["/api/v1/nodes/n1"] = [(429, {}, {"Retry-After": "0"}), (200, {"metadata": {"name": "n1"}}, {})]
    assert client_for(api).get("Node", "n1")
    assert len(api.seen) == 2


def test_429_is_an_answer_for_evictions(api):
    path = "/api/v1/namespaces/ns/pods/p1/eviction"
    api.script[path] = [(429, {"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption budget."},
                         {"Retry-After": "5"})]
    with pytest.raises(errors.TooManyRequestsError) as info:
        client_for(api).create("Pod", {"metadata": {"name": "p1", "namespace": "ns"}}, namespace="ns",
                               subresource="eviction", name="p1", retry_429=False, verb="evict")
    assert "disruption budget" in info.value.msg
    assert info.value.retry_after == 5.0
    assert len(api.seen) == 1


def test_persistent_5xx_fails_after_budget(api):
    api.script["/api/v1/nodes/n1"] = [(503, {"message": "etcd unavailable"}, {})]
    with pytest.raises(errors.ApiError, match="unavailable"):
        client_for(api, budget=0.5).get("Node", "n1")
    assert len(api.seen) >= 2


def test_connection_reset_is_retried(api):
    api.script["/api/v1/nodes/n1"] = [("reset", b"", {}), (200, {"metadata": {"name": "n1"}}, {})]
    assert client_for(api).get("Node", "n1")["metadata"]["name"] == "n1"


def test_unreachable_server_is_one_sentence():
    c = KubeClient(ConnectionSettings("http://127.0.0.1:9", token="t0ken-value"), retry_budget=0.3)
    with pytest.raises(errors.ConnectionFailedError) as info:
        c.get("Node", "n1")
    assert info.value.msg.startswith("Cannot get Node n1: the API server http://127.0.0.1:9 is unreachable")


def test_list_follows_continue_tokens(api):
    api.script["/api/v1/pods"] = [
        (200, {"metadata": {"continue": "abc", "resourceVersion": "1"}, "items": [{"metadata": {"name": "a"}}]}, {}),
        (200, {"metadata": {"resourceVersion": "2"}, "items": [{"metadata": {"name": "b"}}]}, {}),
    ]
    items, rv = client_for(api).list("Pod", field_selector="spec.nodeName=n1")
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == "2"
    assert "fieldSelector=spec.nodeName%3Dn1" in api.seen[0][1] and "continue=abc" in api.seen[1][1]


def test_watch_yields_events(api):
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}},
    ])
    api.script["/api/v1/pods"] = [(200, lines, {})]
    events = list(client_for(api).watch("Pod", resource_version="4", timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]
    assert "watch=true" in api.seen[0][1] and "resourceVersion=4" in api.seen[0][1]


def test_tls_failure_names_the_cause(tmp_path):
    import ssl
    import http.server
    # A TLS server with a certificate the client does not trust.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import datetime
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "untrusted")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = KubeClient(ConnectionSettings("https://127.0.0.1:%d" % server.server_address[1]), retry_budget=0.5)
        with pytest.raises(errors.ConnectionFailedError, match="TLS verification of https://127.0.0.1:.* failed"):
            c.get("Node", "n1")
    finally:
        server.shutdown()


AGGREGATED = {
    "kind": "APIGroupDiscoveryList",
    "apiVersion": "apidiscovery.k8s.io/v2",
    "items": [
        {"metadata": {"name": "kubevirt.io"},
         "versions": [{"version": "v1", "resources": [
             {"resource": "virtualmachineinstances"}, {"resource": "virtualmachines"}]}]},
        {"metadata": {"name": "policy"},
         "versions": [{"version": "v1", "resources": [{"resource": "poddisruptionbudgets"}]}]},
    ],
}


def test_kind_served_asks_aggregated_discovery_once_for_every_group(api):
    api.script["/apis"] = [(200, AGGREGATED, {})]
    client = client_for(api)
    assert client.kind_served("VirtualMachineInstance")
    assert client.kind_served("VirtualMachine")
    assert not client.kind_served("KubeVirt")  # same group version, resource not listed
    assert not client.kind_served("HyperConverged")  # group not served
    assert client.kind_served("Node")  # core: no request
    assert [(m, p.split("?")[0]) for m, p, _h in api.seen] == [("GET", "/apis")]
    assert "as=APIGroupDiscoveryList" in api.seen[0][2]["Accept"]


def test_kind_served_falls_back_to_each_group_on_an_older_server(api):
    api.script["/apis"] = [(200, {"kind": "APIGroupList", "groups": []}, {})]
    listing = {"kind": "APIResourceList", "resources": [{"name": "virtualmachineinstances"}]}
    api.script["/apis/kubevirt.io/v1"] = [(200, listing, {})]
    client = client_for(api)
    assert client.kind_served("VirtualMachineInstance")
    assert not client.kind_served("KubeVirt")
    assert not client.kind_served("HyperConverged")  # 404 for the group: not served
    assert not client.kind_served("HyperConverged")
    paths = [p.split("?")[0] for _m, p, _h in api.seen]
    assert paths == ["/apis", "/apis/kubevirt.io/v1", "/apis/hco.kubevirt.io/v1beta1"]


NM_PATH = "/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances"
NM_BODY = {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
           "metadata": {"name": "nm-n1", "labels": {"app.kubernetes.io/managed-by": "kubevirt_ops.maintenance"}},
           "spec": {"nodeName": "n1", "reason": "firmware"}}
ALREADY_EXISTS = (409, {"kind": "Status", "reason": "AlreadyExists", "message": "already exists"}, {})


def created(body, **spec):
    obj = json.loads(json.dumps(body))
    obj["metadata"].update(uid="u1", resourceVersion="7")
    obj["spec"].update(spec)
    obj["status"] = {"phase": "Running"}
    return obj


@pytest.mark.parametrize("lost", [("reset", b"", {}), (504, {}, {})])
def test_a_create_whose_answer_was_lost_is_read_back_not_reported_as_a_conflict(api, lost):
    """The first POST was applied but its answer never arrived; the retry gets 409: the object
    that exists is the one we sent, so create returns it."""
    api.script[NM_PATH] = [lost, ALREADY_EXISTS]
    api.script[NM_PATH + "/nm-n1"] = [(200, created(NM_BODY), {})]
    result = client_for(api).create("NodeMaintenance", NM_BODY)
    assert result["metadata"]["uid"] == "u1"
    assert [(m, p.split("?")[0]) for m, p, _h in api.seen] == [
        ("POST", NM_PATH), ("POST", NM_PATH), ("GET", NM_PATH + "/nm-n1")]


def test_after_a_lost_answer_an_object_someone_else_created_is_still_a_conflict(api):
    api.script[NM_PATH] = [("reset", b"", {}), ALREADY_EXISTS]
    api.script[NM_PATH + "/nm-n1"] = [(200, created(NM_BODY, reason="someone else's"), {})]
    with pytest.raises(errors.ConflictError):
        client_for(api).create("NodeMaintenance", NM_BODY)


def test_a_conflict_without_a_lost_answer_is_not_read_back(api):
    api.script[NM_PATH] = [ALREADY_EXISTS]
    with pytest.raises(errors.ConflictError):
        client_for(api).create("NodeMaintenance", NM_BODY)
    assert len(api.seen) == 1
