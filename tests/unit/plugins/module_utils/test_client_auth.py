"""Every way of pointing the collection at a cluster resolves to the right settings."""

import base64
import os

import pytest
import yaml

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import connection as client_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import resolve_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ConfigurationError

CERT = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEsecretkeymaterial\n-----END PRIVATE KEY-----\n"


def b64(text):
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def kubeconfig(tmp_path):
    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "admin",
        "clusters": [
            {"name": "lab", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(CERT)}},
            {"name": "other", "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True,
                                          "proxy-url": "http://proxy.example:3128"}},
        ],
        "users": [
            {"name": "admin", "user": {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}},
            {"name": "robot", "user": {"token": "robot-token-123456", "as": "jane", "as-groups": ["ops", "audit"]}},
        ],
        "contexts": [
            {"name": "admin", "context": {"cluster": "lab", "user": "admin"}},
            {"name": "robot", "context": {"cluster": "other", "user": "robot"}},
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_kubeconfig_current_context_with_client_certificate(kubeconfig):
    s = resolve_settings({"kubeconfig": kubeconfig})
    assert s.host == "https://127.0.0.1:6443"
    assert open(s.client_cert).read() == CERT
    assert open(s.client_key).read() == KEY
    assert open(s.ca_cert).read() == CERT
    assert s.verify is True and s.token is None
    assert KEY.strip() in s.secrets


def test_kubeconfig_named_context_with_token_proxy_insecure_and_impersonation(kubeconfig):
    s = resolve_settings({"kubeconfig": kubeconfig, "context": "robot"})
    assert s.host == "https://10.0.0.1:6443"
    assert s.token == "robot-token-123456"
    assert s.verify is False
    assert s.proxy == "http://proxy.example:3128"
    assert s.impersonate_user == "jane" and s.impersonate_groups == ["ops", "audit"]
    assert "robot-token-123456" in s.secrets


def test_kubeconfig_as_dictionary(kubeconfig):
    data = yaml.safe_load(open(kubeconfig))
    s = resolve_settings({"kubeconfig": data, "context": "robot"})
    assert s.token == "robot-token-123456"


def test_unknown_context_is_one_clear_sentence(kubeconfig):
    with pytest.raises(ConfigurationError, match="has no Context named 'nope'"):
        resolve_settings({"kubeconfig": kubeconfig, "context": "nope"})


def test_missing_and_malformed_kubeconfig(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_settings({"kubeconfig": str(tmp_path / "missing")})
    bad = tmp_path / "bad"
    bad.write_text("clusters: [\n")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        resolve_settings({"kubeconfig": str(bad)})
    notconf = tmp_path / "list"
    notconf.write_text("- a\n- b\n")
    with pytest.raises(ConfigurationError, match="is not a kubeconfig"):
        resolve_settings({"kubeconfig": str(notconf)})


def test_host_and_token_without_kubeconfig(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    s = resolve_settings({"host": "https://api.example:6443/", "api_key": "sha256~token-abcdef", "validate_certs": False})
    assert s.host == "https://api.example:6443"
    assert s.token == "sha256~token-abcdef" and s.verify is False
    assert "sha256~token-abcdef" in s.secrets


def test_explicit_options_override_kubeconfig(kubeconfig, tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text(CERT)
    s = resolve_settings({"kubeconfig": kubeconfig, "host": "https://override:6443", "ca_cert": str(ca),
                          "impersonate_user": "bob", "impersonate_groups": ["g1"]})
    assert s.host == "https://override:6443"
    assert s.ca_cert == str(ca)
    assert s.impersonate_user == "bob" and s.impersonate_groups == ["g1"]


def test_client_cert_files_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="client cert file .* does not exist"):
        resolve_settings({"host": "https://h:6443", "client_cert": str(tmp_path / "nope.crt")})


def test_client_key_content_is_a_secret(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_text(CERT)
    key.write_text(KEY)
    s = resolve_settings({"host": "https://h:6443", "client_cert": str(cert), "client_key": str(key)})
    assert s.client_key == str(key)
    assert KEY.strip() in s.secrets


def test_in_cluster_service_account(monkeypatch, tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("in-cluster-token-xyz\n")
    (sa / "ca.crt").write_text(CERT)
    monkeypatch.setattr(client_mod, "IN_CLUSTER_DIR", str(sa))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    s = resolve_settings({})
    assert s.host == "https://10.96.0.1:443"
    assert s.token == "in-cluster-token-xyz"
    assert s.ca_cert == str(sa / "ca.crt")
    assert s.source == "in-cluster service account"


def test_kubeconfig_environment_variable(monkeypatch, kubeconfig, tmp_path):
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    s = resolve_settings({})
    assert s.host == "https://127.0.0.1:6443"


def test_nothing_to_connect_to(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="No cluster to connect to"):
        resolve_settings({})


def test_exec_credential_plugin(tmp_path):
    plugin = tmp_path / "plugin.sh"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
                      '"status":{"token":"exec-token-777"}}\'\n')
    os.chmod(str(plugin), 0o755)
    cfg = {"current-context": "c", "clusters": [{"name": "k", "cluster": {"server": "https://h:1"}}],
           "users": [{"name": "u", "user": {"exec": {"command": str(plugin),
                                                     "apiVersion": "client.authentication.k8s.io/v1"}}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(cfg))
    s = resolve_settings({"kubeconfig": str(path)})
    assert s.token == "exec-token-777"


def test_client_headers_and_tls_options(kubeconfig):
    s = resolve_settings({"kubeconfig": kubeconfig, "context": "robot"})
    c = KubeClient(s)
    assert c.headers["Authorization"] == "Bearer robot-token-123456"
    assert c.headers["User-Agent"].startswith("kubevirt_ops.maintenance/")
    assert c.headers["Impersonate-User"] == "jane"
    assert c.impersonate_groups == ["ops", "audit"]
    assert c._pool.connection_pool_kw["cert_reqs"] == "CERT_NONE"
    assert c._pool.proxy.host == "proxy.example"


def test_client_verifies_with_ca_and_client_certificate(kubeconfig):
    c = KubeClient(resolve_settings({"kubeconfig": kubeconfig}))
    kw = c._pool.connection_pool_kw
    assert kw["cert_reqs"] == "CERT_REQUIRED"
    assert open(kw["ca_certs"]).read() == CERT
    assert open(kw["key_file"]).read() == KEY
    assert "Authorization" not in c.headers
