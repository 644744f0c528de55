"""A kubeconfig with static credentials is read without the kubernetes library (module_utils/k8s/connection.py
``_static_kubeconfig``): for every kind of static user, the settings are the ones the library's loader gives, and
whatever the static reading finds unusual, or credentials the library renews, are left to the library."""

import base64
import os

import pytest
import yaml

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import connection

CA = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n"


def b64(text):
    return base64.b64encode(text.encode()).decode()


def kubeconfig(cluster, user, context_extra=None, name="lab"):
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": dict({"cluster": name, "user": name}, **(context_extra or {}))}]}


def by_library(paths, context=None):
    _configuration, kube_config, _incluster, _exc = connection._kubernetes_config()
    merged = connection._merge_files(paths, kube_config)
    return connection._from_kubeconfig(merged, context, "kubeconfig %s" % os.pathsep.join(paths))


def comparable(settings):
    """Settings with each file's content in place of its (temporary) path, the secrets as a set."""
    out = dict(settings)
    for key in ("ca_cert", "client_cert", "client_key"):
        if out.get(key):
            with open(out[key]) as handle:
                out[key] = handle.read()
    out["secrets"] = set(s for s in out.get("secrets") or [] if s)
    out["impersonate_groups"] = out.get("impersonate_groups") or None
    return out


CASES = {
    "inline certificates": ({"server": "https://127.0.0.1:6443/", "certificate-authority-data": b64(CA)},
                            {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}),
    "token, no verification, tls-server-name, proxy": (
        {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True, "tls-server-name": "api.lab",
         "proxy-url": "http://proxy.lab:3128"}, {"token": "sha256~abc"}),
    "token file and files relative to the kubeconfig": (
        {"server": "https://api.lab:6443", "certificate-authority": "ca.crt"},
        {"tokenFile": "token", "client-certificate": "certs/user.crt", "client-key": "certs/user.key"}),
    "user name and password, impersonation": (
        {"server": "https://api.lab:6443", "certificate-authority-data": b64(CA)},
        {"username": "admin", "password": "pa55", "as": "ops", "as-groups": ["system:masters"]}),
    "plain http, no user credentials": ({"server": "http://127.0.0.1:8080"}, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_static_credentials_read_as_the_library_reads_them(tmp_path, case):
    cluster, user = CASES[case]
    (tmp_path / "ca.crt").write_text(CA)
    (tmp_path / "token").write_text("sha256~from-file\n")
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "user.crt").write_text(CERT)
    (tmp_path / "certs" / "user.key").write_text(KEY)
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig(cluster, user)))
    static = connection._static_kubeconfig([str(path)], None)
    assert static is not None
    assert comparable(static) == comparable(by_library([str(path)]))


def test_split_files_merge_as_kubectl_merges_them(tmp_path):
    """The first file to name an entry wins, the first current-context too; a user's files resolve against its own
    file's directory."""
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "user.crt").write_text(CERT)
    (tmp_path / "users" / "user.key").write_text(KEY)
    first = kubeconfig({"server": "https://one:6443", "certificate-authority-data": b64(CA)}, {"token": "one"},
                       name="one")
    first["users"] = []
    second = kubeconfig({"server": "https://two:6443"}, {"client-certificate": "user.crt", "client-key": "user.key"},
                        name="one")
    second["current-context"] = "elsewhere"
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(first))
    (tmp_path / "users" / "b.yaml").write_text(yaml.safe_dump(second))
    paths = [str(tmp_path / "a.yaml"), str(tmp_path / "users" / "b.yaml")]
    static = connection._static_kubeconfig(paths, None)
    assert static["host"] == "https://one:6443" and static["token"] is None
    assert comparable(static) == comparable(by_library(paths))


@pytest.mark.parametrize("user", [
    {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}},
    {"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}},
    {"client-certificate": "missing.crt", "client-key": "missing.key"},
    {"client-certificate-data": "not base64!", "client-key-data": b64(KEY)},
    {"tokenFile": "missing-token"},
])
def test_what_the_library_must_load_or_word_is_left_to_it(tmp_path, user):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig({"server": "https://api.lab:6443"}, user)))
    assert connection._static_kubeconfig([str(path)], None) is None


@pytest.mark.parametrize("text", ["", "[1, 2]", "clusters: {a: 1}", "{not yaml", "current-context: gone\n"])
def test_unusual_files_are_left_to_the_library(tmp_path, text):
    path = tmp_path / "config"
    path.write_text(text)
    assert connection._static_kubeconfig([str(path)], None) is None
