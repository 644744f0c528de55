"""Kubeconfig files for the admin and each component, with certificates embedded.

Embedding keeps ``<state>/kubeconfig`` self-contained: it can be copied or mounted
elsewhere and is all another tool needs to reach the lab.
"""

import base64
import os

import yaml

CLUSTER_NAME = "kubevirt-ops-lab"


def write_kubeconfig(path, server, ca_cert, client_cert, client_key, user):
    def b64(p):
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client_cert),
                    "client-key-data": b64(client_key),
                },
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written to a temporary name first: a reader never sees half a file.
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(tmp, path)
