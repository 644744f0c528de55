"""The modules' connection against the lab's API server, as a user configures it.

- ``tls-server-name``: the API server is reached through an address that is not in its
  certificate (a TCP forwarder on 127.0.0.2, standing in for a load balancer); the
  certificate's name ``kubernetes.default.svc`` set as ``tls-server-name`` makes TLS verify.
- A KUBECONFIG split over two files (cluster and context in one, the user in the other),
  whose user is an exec credential plugin.
- A token that expires in the middle of a drain: the exec plugin announces a short expiry and
  the identity behind the first token is deleted mid-drain; the drain carries on with the
  plugin's next token.
"""

import os
import socket
import threading

import pytest
import yaml
from kubernetes import client

from lab.wait import wait_for

from credentials import credential_plugin, lab_context, requests_by, rotate, write
import identities
import runs

SERVER_NAME = "kubernetes.default.svc"  # in the lab's apiserver certificate; 127.0.0.2 is not
NODE = "lab-worker-1"


class Forwarder:
    """Accepts on 127.0.0.2 and relays every connection to ``target`` (host, port), byte for byte."""

    def __init__(self, target, bind="127.0.0.2"):
        self.target = target
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((bind, 0))
        self.sock.listen(32)
        self.address = "%s:%d" % self.sock.getsockname()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def lab_kubeconfig(lab):
    with open(lab.kubeconfig) as handle:
        return yaml.safe_load(handle)


@pytest.fixture
def forwarder(lab):
    server, _ca = identities.lab_cluster(lab.kubeconfig)
    host, port = server.split("://", 1)[1].rsplit(":", 1)
    forward = Forwarder((host, int(port)))
    yield forward
    forward.close()


def info(kubeconfig):
    return runs.module(kubeconfig, "node_maintenance_info", {"name": NODE}, timeout=300).result()


def through_forwarder(lab, forwarder, path, **cluster_fields):
    config = lab_kubeconfig(lab)
    for entry in config["clusters"]:
        entry["cluster"]["server"] = "https://%s" % forwarder.address
        entry["cluster"].update(cluster_fields)
    return write(path, config)


def test_tls_server_name_verifies_an_address_not_in_the_certificate(lab, forwarder, tmp_path):
    without = info(through_forwarder(lab, forwarder, tmp_path / "without"))
    assert without.get("failed"), without
    assert "TLS verification of https://%s failed" % forwarder.address in without["msg"]

    result = info(through_forwarder(lab, forwarder, tmp_path / "with", **{"tls-server-name": SERVER_NAME}))
    assert not result.get("failed"), result.get("msg")
    assert forwarder.connections >= 2, "the module went through the forwarder"


@pytest.fixture
def admin_identity(lab, k8s, tmp_path):
    identity = identities.create_identity(k8s, lab.kubeconfig, tmp_path, cluster_roles=("cluster-admin",),
                                          prefix="kvops-conn")
    yield identity
    identities.delete_identity(k8s, identity)


def test_split_kubeconfig_with_an_exec_credential_plugin(lab, admin_identity, tmp_path):
    users_dir = tmp_path / "users"
    users_dir.mkdir()
    counter = tmp_path / "invocations"
    _token_file, user = credential_plugin(users_dir, admin_identity.token, counter, relative=True)
    clusters = write(tmp_path / "clusters.yaml", lab_context(lab))
    users = write(users_dir / "users.yaml", {"apiVersion": "v1", "kind": "Config", "users": [user]})
    result = runs.module(None, "node_maintenance_info", {"name": NODE}, timeout=300,
                         env={"KUBECONFIG": os.pathsep.join([clusters, users])}).result()
    assert not result.get("failed"), result.get("msg")
    assert counter.read_text() == "x", "the plugin ran once for the run"
    assert requests_by(lab, admin_identity.username), "the module authenticated with the plugin's token"
    assert admin_identity.token not in str(result)


def test_a_token_that_expires_mid_drain_is_renewed_by_the_exec_plugin(lab, k8s, namespace, tmp_path):
    """The drain waits on a PodDisruptionBudget while its first token expires (plugin TTL 5 s) and
    the ServiceAccount behind it is deleted (its token is refused from then on); the plugin then
    hands out another identity's token, and the drain finishes with it."""
    first = identities.create_identity(k8s, lab.kubeconfig, tmp_path, cluster_roles=("cluster-admin",),
                                       prefix="kvops-exp-a")
    second = identities.create_identity(k8s, lab.kubeconfig, tmp_path, cluster_roles=("cluster-admin",),
                                        prefix="kvops-exp-b")
    core, policy = client.CoreV1Api(k8s), client.PolicyV1Api(k8s)
    node = sorted(n.metadata.name for n in core.list_node(label_selector="node-role.kubernetes.io/worker").items)[-1]
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "held", "labels": {"app": "held"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "held"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}})
    wait_for(lambda: (core.read_namespaced_pod("held", namespace).status.phase == "Running"), 120, "pod held to run")

    counter = tmp_path / "invocations"
    token_file, user = credential_plugin(tmp_path, first.token, counter, ttl=5)
    kubeconfig = write(tmp_path / "kubeconfig", dict(lab_context(lab), users=[user]))
    outcome = []
    # non_migratable=wait: a budget that allows no disruption is a plan blocker otherwise.
    drain = threading.Thread(target=lambda: outcome.append(runs.module(
        None, "node_maintenance", {"name": node, "method": "drain", "non_migratable": "wait", "wait_timeout": 300},
        timeout=400,
        env={"KUBECONFIG": kubeconfig})))
    try:
        drain.start()
        wait_for(lambda: core.read_node(node).spec.unschedulable or not drain.is_alive(), 120,
                 "the drain to cordon %s" % node)
        assert drain.is_alive(), outcome[0].output[-3000:]
        rotate(token_file, second.token)
        identities.delete_identity(k8s, first, until_refused=True)  # the first token is refused from now on
        # Past the first token's announced expiry the plugin is asked again, and the drain's
        # requests (it retries the held-back eviction) go on as the second identity.
        wait_for(lambda: len(counter.read_text()) >= 2, 120, "the plugin to be asked for a new token")
        wait_for(lambda: requests_by(lab, second.username), 120, "requests with the new token")
        assert drain.is_alive(), "the drain should still wait on the disruption budget; it ended:\n%s" % (
            outcome[0].output[-4000:] if outcome else "(no outcome)")
        policy.patch_namespaced_pod_disruption_budget("held", namespace, {"spec": {"minAvailable": 0}})
        drain.join(400)
        result = outcome[0].result()
        assert not result.get("failed") and result["phase"] == "Succeeded", result.get("msg") or result
        assert first.token not in str(result) and second.token not in outcome[0].output
    finally:
        drain.join(400)
        runs.module(lab.kubeconfig, "node_maintenance", {"name": node, "state": "absent"})
        identities.delete_identity(k8s, first)
        identities.delete_identity(k8s, second)
