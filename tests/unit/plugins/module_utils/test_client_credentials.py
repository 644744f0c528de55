"""Connection settings loaded by the kubernetes library: merged KUBECONFIG files, tls-server-name,
exec credential plugins renewed when their token expires, auth providers, the in-cluster service
account and the K8S_AUTH_* environment, against local HTTP(S) servers."""

import base64
import datetime
import ipaddress
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import connection as client_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import errors
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import resolve_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule

from module_runner import patch_module_args

EXEC_API = "client.authentication.k8s.io/v1"
NODE = {"kind": "Node", "metadata": {"name": "n1"}}


def b64(data):
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def write_yaml(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return str(path)


# -- a local API server that records the Authorization header of every request ------------------

class Api:
    def __init__(self):
        self.seen = []  # (path, Authorization, [Impersonate-Group lines])
        self.rejected = set()  # Authorization values answered with 401
        self.on_reject = None  # called before a 401 is answered
        self.sni = []

    def handler(self):
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                auth = self.headers.get("Authorization")
                state.seen.append((self.path, auth, self.headers.get_all("Impersonate-Group") or []))
                if auth in state.rejected and state.on_reject is not None:
                    state.on_reject()
                status, body = (401, {"kind": "Status", "message": "Unauthorized"}) if auth in state.rejected \
                    else (200, NODE)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        return Handler


def serve(api, tls_context=None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), api.handler())
    if tls_context is not None:
        server.socket = tls_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def api():
    state = Api()
    server = serve(state)
    state.url = "http://127.0.0.1:%d" % server.server_address[1]
    yield state
    server.shutdown()


# -- KUBECONFIG with several files ---------------------------------------------------------------

CERT = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEsplitkeymaterial\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def split_kubeconfig(tmp_path):
    """Cluster and context in one file, the user (certificate files next to it) in another directory."""
    users_dir = tmp_path / "users"
    users_dir.mkdir()
    (users_dir / "admin.crt").write_text(CERT)
    (users_dir / "admin.key").write_text(KEY)
    (tmp_path / "cluster-ca.crt").write_text(CERT)
    clusters = write_yaml(tmp_path / "clusters.yaml", {
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443",
                                                 "certificate-authority": "cluster-ca.crt"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}},
                     {"name": "robot", "context": {"cluster": "lab", "user": "robot"}}],
    })
    users = write_yaml(users_dir / "users.yaml", {
        "apiVersion": "v1", "kind": "Config", "current-context": "robot",  # the first file's wins
        "clusters": [{"name": "lab", "cluster": {"server": "https://10.9.9.9:6443"}}],  # the first file's wins
        "users": [{"name": "admin", "user": {"client-certificate": "admin.crt", "client-key": "admin.key"}},
                  {"name": "robot", "user": {"token": "robot-split-token-1234"}}],
    })
    return clusters, users, tmp_path


def test_split_kubeconfig_environment_is_merged(monkeypatch, split_kubeconfig):
    clusters, users, base = split_kubeconfig
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([clusters, str(base / "missing.yaml"), users]))
    s = resolve_settings({})
    assert s.host == "https://127.0.0.1:6443"
    # Relative paths are resolved against the file that holds them, as kubectl does.
    assert s.ca_cert == str(base / "cluster-ca.crt")
    assert s.client_cert == str(base / "users" / "admin.crt")
    assert s.client_key == str(base / "users" / "admin.key")
    assert KEY.strip() in s.secrets
    assert clusters in s.source and users in s.source and "context lab" in s.source


def test_split_kubeconfig_named_context_and_option_list(split_kubeconfig):
    clusters, users, _base = split_kubeconfig
    s = resolve_settings({"kubeconfig": os.pathsep.join([clusters, users]), "context": "robot"})
    assert s.host == "https://127.0.0.1:6443"
    assert s.token == "robot-split-token-1234"
    assert "robot-split-token-1234" in s.secrets


def test_missing_file_in_an_explicit_list_is_one_sentence(split_kubeconfig):
    clusters, _users, base = split_kubeconfig
    missing = str(base / "nope.yaml")
    with pytest.raises(errors.ConfigurationError, match="Kubeconfig %s does not exist" % missing):
        resolve_settings({"kubeconfig": os.pathsep.join([clusters, missing])})


def test_user_only_in_a_file_left_out_is_named(monkeypatch, split_kubeconfig):
    clusters, _users, _base = split_kubeconfig
    monkeypatch.setenv("KUBECONFIG", clusters)
    with pytest.raises(errors.ConfigurationError, match="has no User named 'admin'"):
        resolve_settings({})


# -- tls-server-name ---------------------------------------------------------------------------

def make_server_certificate(tmp_path, dns_name):
    """A CA and a server certificate for ``dns_name`` only (no IP address)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(pem))
    (tmp_path / "server.crt").write_bytes(cert.public_bytes(pem))
    (tmp_path / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()))
    assert ipaddress.ip_address("127.0.0.1")  # the server is reached by an address not in its certificate
    return tmp_path / "ca.crt"


@pytest.fixture
def tls_api(tmp_path):
    state = Api()
    ca = make_server_certificate(tmp_path, "kubernetes.default.svc")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tmp_path / "server.crt"), str(tmp_path / "server.key"))
    ctx.sni_callback = lambda sock, name, _ctx: state.sni.append(name)
    server = serve(state, ctx)
    state.url = "https://127.0.0.1:%d" % server.server_address[1]
    state.ca = str(ca)
    yield state
    server.shutdown()


def tls_kubeconfig(tmp_path, api, **cluster):
    return write_yaml(tmp_path / "tls" / "kubeconfig", {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": dict({"server": api.url, "certificate-authority-data":
                                                    b64(open(api.ca, "rb").read())}, **cluster)}],
        "users": [{"name": "u", "user": {"token": "tls-user-token-5678"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    })


def test_tls_server_name_is_the_name_verified_and_sent(tls_api, tmp_path):
    cluster = {"tls-server-name": "kubernetes.default.svc"}
    s = resolve_settings({"kubeconfig": tls_kubeconfig(tmp_path, tls_api, **cluster)})
    assert s.tls_server_name == "kubernetes.default.svc"
    c = KubeClient(s, retry_budget=0.5)
    assert c._pool.connection_pool_kw["server_hostname"] == "kubernetes.default.svc"
    assert c.get("Node", "n1")["metadata"]["name"] == "n1"
    assert tls_api.sni == ["kubernetes.default.svc"]


def test_without_tls_server_name_the_address_fails_verification(tls_api, tmp_path):
    c = KubeClient(resolve_settings({"kubeconfig": tls_kubeconfig(tmp_path, tls_api)}), retry_budget=0.5)
    with pytest.raises(errors.ConnectionFailedError, match="TLS verification of https://127.0.0.1:"):
        c.get("Node", "n1")


# -- exec credential plugins ---------------------------------------------------------------------

PLUGIN = r'''#!%(python)s
import datetime, json, os, sys
counter = os.environ["PLUGIN_COUNTER"]
n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
open(counter, "w").write(str(n))
if os.path.exists(counter + ".fail"):
    sys.stderr.write("the identity provider is unreachable\n")
    sys.exit(1)
token = "exec-token-%%d" %% n
if os.path.exists(counter + ".empty-once"):
    os.remove(counter + ".empty-once")
    token = ""
if os.path.exists(counter + ".empty"):
    token = ""
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential", info
lifetime = float(os.environ["PLUGIN_LIFETIME"])
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime)
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": {
    "token": token, "expirationTimestamp": expiry.strftime("%%Y-%%m-%%dT%%H:%%M:%%SZ")}}))
'''

# The library renews a token this long before its expirationTimestamp.
SKEW = 300


def exec_kubeconfig(tmp_path, server, lifetime):
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir(exist_ok=True)
    plugin = plugin_dir / "credential-plugin"
    plugin.write_text(PLUGIN % {"python": sys.executable})
    os.chmod(str(plugin), 0o755)
    counter = tmp_path / "invocations"
    path = write_yaml(tmp_path / "kubeconfig", {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        # A relative command is found next to the kubeconfig, as kubectl finds it.
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": EXEC_API, "command": "./plugins/credential-plugin",
            "env": [{"name": "PLUGIN_COUNTER", "value": str(counter)},
                    {"name": "PLUGIN_LIFETIME", "value": str(lifetime)}]}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    })
    return path, counter


def invocations(counter):
    return int(counter.read_text())


def test_exec_token_is_renewed_when_it_expires_during_a_run(api, tmp_path):
    path, counter = exec_kubeconfig(tmp_path, api.url, lifetime=SKEW + 2)
    s = resolve_settings({"kubeconfig": path})
    assert s.token == "exec-token-1" and "exec-token-1" in s.secrets
    c = KubeClient(s, retry_budget=0.5)
    c.get("Node", "n1")
    c.get("Node", "n1")
    assert invocations(counter) == 1, "a valid token is reused"
    time.sleep(2.5)  # the token is now within the library's renewal margin
    c.get("Node", "n1")
    c.get("Node", "n1")
    assert invocations(counter) == 2
    assert [auth for _p, auth, _g in api.seen] == ["Bearer exec-token-1"] * 2 + ["Bearer exec-token-2"] * 2
    assert "exec-token-2" in s.secrets, "a renewed token is redacted too"


def test_exec_token_rejected_early_is_renewed_once(api, tmp_path):
    path, counter = exec_kubeconfig(tmp_path, api.url, lifetime=3600)
    c = KubeClient(resolve_settings({"kubeconfig": path}), retry_budget=0.5)
    api.rejected.add("Bearer exec-token-1")
    assert c.get("Node", "n1")["metadata"]["name"] == "n1"
    assert [auth for _p, auth, _g in api.seen] == ["Bearer exec-token-1", "Bearer exec-token-2"]
    api.rejected.add("Bearer exec-token-2")
    api.rejected.add("Bearer exec-token-3")
    with pytest.raises(errors.ApiError, match="credentials were rejected"):
        c.get("Node", "n1")
    assert invocations(counter) == 3, "renewed once per request, not in a loop"


def test_a_401_answered_after_another_thread_renewed_is_retried_with_that_token(api, tmp_path):
    """The threads of a drain share the credentials: a request sent with the old token and answered 401
    after another thread renewed them goes again with the token that thread got (a plugin that hands out
    the same token again would otherwise leave nothing new to try, and the request would fail)."""
    path, counter = exec_kubeconfig(tmp_path, api.url, lifetime=3600)
    c = KubeClient(resolve_settings({"kubeconfig": path}), retry_budget=0.5)
    api.rejected.add("Bearer exec-token-1")

    def another_thread_renews():
        api.on_reject = None
        c.settings.credentials.renew()
        c._authorization()  # pylint: disable=protected-access

    api.on_reject = another_thread_renews
    assert c.get("Node", "n1")["metadata"]["name"] == "n1"
    assert [auth for _p, auth, _g in api.seen] == ["Bearer exec-token-1", "Bearer exec-token-2"]
    assert invocations(counter) == 2, "the plugin is not asked again for what another thread just got"


def test_exec_plugin_failing_at_renewal_is_one_sentence(api, tmp_path):
    path, counter = exec_kubeconfig(tmp_path, api.url, lifetime=SKEW - 60)  # always due for renewal
    c = KubeClient(resolve_settings({"kubeconfig": path}), retry_budget=0.5)
    open(str(counter) + ".fail", "w").close()
    with pytest.raises(errors.ConfigurationError) as info:
        c.get("Node", "n1")
    assert "Cannot renew the credentials of user 'u'" in info.value.msg
    assert "the identity provider is unreachable" in info.value.msg


def test_exec_plugin_failing_at_start_is_one_sentence(tmp_path, capsys):
    path, counter = exec_kubeconfig(tmp_path, "https://127.0.0.1:1", lifetime=3600)
    open(str(counter) + ".fail", "w").close()
    with pytest.raises(errors.ConfigurationError,
                       match="Cannot load the credentials of user 'u' .*the identity provider is unreachable"):
        resolve_settings({"kubeconfig": path})
    assert capsys.readouterr().err == "", "the library's log does not reach the module's stderr"


def test_an_empty_token_from_the_plugin_is_asked_for_again_never_sent(api, tmp_path):
    """A plugin that read its token source half-written hands out an empty token once: it is asked again
    at once, and no request goes out without a token (the API server would take it as anonymous)."""
    path, counter = exec_kubeconfig(tmp_path, api.url, lifetime=SKEW - 60)  # always due for renewal
    c = KubeClient(resolve_settings({"kubeconfig": path}), retry_budget=0.5)
    open(str(counter) + ".empty-once", "w").close()
    assert c.get("Node", "n1")["metadata"]["name"] == "n1"
    sent = [auth for _p, auth, _g in api.seen]
    assert len(sent) == 1 and sent[0].startswith("Bearer exec-token-"), sent
    # A plugin that only ever returns an empty token: one sentence, nothing sent.
    open(str(counter) + ".empty", "w").close()
    with pytest.raises(errors.ConfigurationError) as info:
        c.get("Node", "n1")
    assert info.value.msg == ("The credentials of user 'u' of kubeconfig %s hold an empty token: its exec credential "
                              "plugin (or auth provider) returned none." % path)
    assert len(api.seen) == 1


# -- auth providers ------------------------------------------------------------------------------

def jwt(claims):
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return "eyJhbGciOiJSUzI1NiJ9.%s.c2lnbmF0dXJl" % part


def test_oidc_auth_provider_is_used(api, tmp_path):
    id_token = jwt({"sub": "jane", "exp": int(time.time()) + 3600})
    path = write_yaml(tmp_path / "kubeconfig", {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": api.url}}],
        "users": [{"name": "jane", "user": {"auth-provider": {"name": "oidc", "config": {
            "client-id": "kubernetes", "client-secret": "oidc-client-secret-99", "id-token": id_token,
            "idp-issuer-url": "https://idp.example", "refresh-token": "oidc-refresh-token-42"}}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "jane"}}],
    })
    s = resolve_settings({"kubeconfig": path})
    assert s.credentials is not None, "auth providers renew their tokens"
    KubeClient(s, retry_budget=0.5).get("Node", "n1")
    assert api.seen[0][1] == "Bearer " + id_token
    for secret in (id_token, "oidc-client-secret-99", "oidc-refresh-token-42"):
        assert secret in s.secrets


def test_auth_provider_that_cannot_get_a_token_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    path = write_yaml(tmp_path / "kubeconfig", {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "g", "user": {"auth-provider": {"name": "gcp", "config": {}}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "g"}}],
    })
    with pytest.raises(errors.ConfigurationError, match="Cannot load the credentials of user 'g' of kubeconfig"):
        resolve_settings({"kubeconfig": path})


# -- in-cluster service account ------------------------------------------------------------------

@pytest.fixture
def service_account(monkeypatch, tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("in-cluster-token-one")
    (sa / "ca.crt").write_text(CERT)
    monkeypatch.setattr(client_mod, "IN_CLUSTER_DIR", str(sa))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return sa


def test_in_cluster_service_account(service_account):
    s = resolve_settings({})
    assert s.host == "https://10.96.0.1:443"
    assert s.token == "in-cluster-token-one" and "in-cluster-token-one" in s.secrets
    assert s.ca_cert == str(service_account / "ca.crt")
    assert s.source == "in-cluster service account"


def test_in_cluster_token_rotated_by_the_kubelet_is_reread(service_account, api):
    s = resolve_settings({})
    s.host = api.url  # the service's address stands in for the API server here
    c = KubeClient(s, retry_budget=0.5)
    c.get("Node", "n1")
    (service_account / "token").write_text("in-cluster-token-two")
    api.rejected.add("bearer in-cluster-token-one")
    c.get("Node", "n1")
    assert [auth for _p, auth, _g in api.seen] == ["bearer in-cluster-token-one"] * 2 + ["bearer in-cluster-token-two"]
    assert "in-cluster-token-two" in s.secrets


# -- K8S_AUTH_* environment, through the module wrapper ------------------------------------------

def test_k8s_auth_environment_reaches_the_connection(monkeypatch, split_kubeconfig, api):
    clusters, users, _base = split_kubeconfig
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", os.pathsep.join([clusters, users]))
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "robot")
    monkeypatch.setenv("K8S_AUTH_HOST", api.url)
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "false")
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_USER", "jane")
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_GROUPS", "ops,audit")
    with patch_module_args({}):
        module = MaintenanceModule(argument_spec={})
        client = module.client
    s = client.settings
    assert s.host == api.url and s.verify is False
    assert s.token == "robot-split-token-1234"
    assert s.impersonate_user == "jane" and s.impersonate_groups == ["ops", "audit"]
    client.get("Node", "n1")
    _path, auth, groups = api.seen[0]
    assert auth == "Bearer robot-split-token-1234"
    assert groups == ["ops", "audit"], "one header line per group (urllib3 1.26 and 2.x)"


def test_k8s_auth_api_key_replaces_kubeconfig_credentials(monkeypatch, api, tmp_path):
    path, _counter = exec_kubeconfig(tmp_path, api.url, lifetime=3600)
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", path)
    monkeypatch.setenv("K8S_AUTH_API_KEY", "explicit-api-key-0001")
    with patch_module_args({}):
        client = MaintenanceModule(argument_spec={}).client
    assert client.settings.credentials is None
    client.get("Node", "n1")
    assert api.seen[0][1] == "Bearer explicit-api-key-0001"
