"""Credentials as users configure them, for the lab tests: an exec credential plugin that hands out
a token from a file (which a test may rewrite, as a rotation would) with an announced expiry, a
kubeconfig for the lab that runs it, and the audit log's record of who made the collection's
requests."""

import json
import os
import sys

import yaml

import identities


PLUGIN = r'''#!%(python)s
import datetime, json, os
with open(os.environ["PLUGIN_COUNTER"], "a") as handle:
    handle.write("x")
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
    seconds=int(os.environ.get("PLUGIN_TTL_SECONDS", "3600")))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {
    "token": open(os.environ["PLUGIN_TOKEN_FILE"]).read().strip(),
    "expirationTimestamp": expiry.strftime("%%Y-%%m-%%dT%%H:%%M:%%SZ")}}))
'''


def credential_plugin(directory, token, counter, relative=False, ttl=None):
    """The test's exec credential plugin in ``directory`` handing out ``token`` (from a file the
    test may rewrite); returns (token file, the kubeconfig user entry that runs it)."""
    token_file = directory / "token"
    token_file.write_text(token)
    os.chmod(str(token_file), 0o600)
    plugin = directory / "credential-plugin"
    plugin.write_text(PLUGIN % {"python": sys.executable})
    os.chmod(str(plugin), 0o755)
    env = [{"name": "PLUGIN_COUNTER", "value": str(counter)}, {"name": "PLUGIN_TOKEN_FILE", "value": str(token_file)}]
    if ttl is not None:
        env.append({"name": "PLUGIN_TTL_SECONDS", "value": str(ttl)})
    user = {"name": "exec-user", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./credential-plugin" if relative else str(plugin),
        "env": env}}}
    return token_file, user


def rotate(token_file, token):
    """Hand out ``token`` from now on, as a rotation does: the file is replaced in one step, so the
    plugin (asked again every time the old token expires) never reads a half-written one and the tests
    see the renewal they set up, not the modules' handling of an empty token (asked for again)."""
    fresh = token_file.with_name(token_file.name + ".new")
    fresh.write_text(token)
    os.chmod(str(fresh), 0o600)
    os.replace(str(fresh), str(token_file))


def lab_context(lab):
    """A kubeconfig's cluster and context for the lab, its user named exec-user."""
    server, ca_data = identities.lab_cluster(lab.kubeconfig)
    return {"apiVersion": "v1", "kind": "Config", "current-context": "lab-exec",
            "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
            "contexts": [{"name": "lab-exec", "context": {"cluster": "lab", "user": "exec-user"}}]}


def write(path, data):
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(data, handle)
    return str(path)


def requests_by(lab, username):
    """The collection's requests in the lab's audit log made as ``username``."""
    found = []
    with open(str(lab.paths.audit_log), errors="replace") as handle:
        for line in handle:
            if username not in line:
                continue
            event = json.loads(line)
            if (event.get("user") or {}).get("username") == username \
                    and (event.get("userAgent") or "").startswith("kubevirt_ops.maintenance/"):
                found.append(event)
    return found
