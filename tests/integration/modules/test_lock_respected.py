"""node_maintenance and node_decommission respect the cluster lock on the lab.

While another holder holds the Lease (the roles' default one), both modules refuse with one
sentence naming the Lease and its holder, and neither the node nor the Lease changes (in check
mode too). Given that holder in ``lock.holder`` they act; an expired or released lock does not
stop them; ending maintenance under another run's lock is refused while there is something to
undo.
"""

import datetime
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from safety import ResourceVersions

from lab import nodes as lab_nodes
from lab.wait import wait_for

LOCK = "kubevirt-ops-maintenance"  # the default of the lock option: the roles' lock
LOCK_NAMESPACE = "kube-system"
OTHER = "bob@jumphost pid 7 #00aa (rolling maintenance of another team)"


def leases(k8s):
    return client.CoordinationV1Api(k8s)


def write_lease(k8s, holder, renewed_ago=0, ttl=600):
    """The Lease as another run's cluster_lock leaves it, renewed ``renewed_ago`` seconds ago."""
    when = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=renewed_ago)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LOCK, "namespace": LOCK_NAMESPACE},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": ttl, "acquireTime": when, "renewTime": when}}
    try:
        current = leases(k8s).read_namespaced_lease(LOCK, LOCK_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise
        leases(k8s).create_namespaced_lease(LOCK_NAMESPACE, body)
        return
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    leases(k8s).replace_namespaced_lease(LOCK, LOCK_NAMESPACE, body)


@pytest.fixture
def other_run_lock(k8s):
    write_lease(k8s, OTHER)
    yield
    try:
        leases(k8s).delete_namespaced_lease(LOCK, LOCK_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def spare_node(k8s):
    """A kwok node of this test's own, empty, that it may drain and delete."""
    core = client.CoreV1Api(k8s)
    name = "lab-lock-%s" % uuid.uuid4().hex[:5]
    version = core.list_node().items[0].status.node_info.kubelet_version
    lab_nodes.ensure(k8s, [lab_nodes.NodePlan(name, False, "10.98.1.1", "10.246.1.0/24")], version)
    wait_for(lambda: lab_nodes.is_ready(core.read_node(name)), 180, "node %s to be Ready" % name)
    yield name
    try:
        core.delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def touched(versions, node):
    return [c for c in versions.changes() if c.startswith(("Node %s " % node, "Lease %s/%s " % (LOCK_NAMESPACE, LOCK)))]


def assert_refused(result, refused):
    assert result.get("failed"), result
    assert result["msg"].startswith("%s: the cluster lock %s/%s is held by '%s'" % (
        refused, LOCK_NAMESPACE, LOCK, OTHER)), result["msg"]
    assert "\n" not in result["msg"]
    assert result["lock"]["holder"] == OTHER


def test_lock_held_by_another_run_stops_both_modules_and_its_holder_passes(k8s, run_module, spare_node,
                                                                          other_run_lock):
    node = spare_node
    versions = ResourceVersions(k8s)
    for check in (True, False):
        assert_refused(run_module("node_maintenance", {"name": node}, check=check),
                       "Node %s was not put into maintenance" % node)
        assert_refused(run_module("node_decommission", {"name": node}, check=check),
                       "Node %s was not decommissioned" % node)
    assert touched(versions, node) == []

    # The run that holds the lock passes its holder and is not stopped by its own lock.
    mine = {"holder": OTHER}
    entered = run_module("node_maintenance", {"name": node, "reason": "lock test", "lock": mine})
    assert entered.get("failed") is not True and entered["changed"] is True, entered
    assert client.CoreV1Api(k8s).read_node(node).spec.unschedulable is True

    # Someone else ending that maintenance is refused: it would hand the node back under the run.
    versions = ResourceVersions(k8s)
    for check in (True, False):
        assert_refused(run_module("node_maintenance", {"name": node, "state": "absent"}, check=check),
                       "Node %s was left in maintenance" % node)
    assert touched(versions, node) == []

    left = run_module("node_maintenance", {"name": node, "state": "absent", "lock": mine})
    assert left.get("failed") is not True and left["changed"] is True, left
    # Nothing left to undo: unchanged, lock or not.
    assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is False

    deleted = run_module("node_decommission", {"name": node, "lock": mine, "assume_powered_off": True})
    assert deleted.get("failed") is not True and deleted["deleted"] is True, deleted


@pytest.mark.parametrize("state", ["expired", "released"])
def test_expired_or_released_lock_does_not_stop_them(k8s, run_module, spare_node, other_run_lock, state):
    node = spare_node
    if state == "expired":
        write_lease(k8s, OTHER, renewed_ago=3600, ttl=600)  # its holder stopped renewing 50 minutes ago
    else:
        released = run_module("cluster_lock", {"name": LOCK, "namespace": LOCK_NAMESPACE, "state": "absent",
                                               "holder": OTHER})
        assert released["changed"] is True, released
    lease_before = leases(k8s).read_namespaced_lease(LOCK, LOCK_NAMESPACE).metadata.resource_version
    entered = run_module("node_maintenance", {"name": node})
    assert entered.get("failed") is not True and entered["changed"] is True, entered
    assert run_module("node_maintenance", {"name": node, "state": "absent"})["changed"] is True
    deleted = run_module("node_decommission", {"name": node, "assume_powered_off": True})
    assert deleted.get("failed") is not True and deleted["deleted"] is True, deleted
    # Respecting a lock never writes it.
    assert leases(k8s).read_namespaced_lease(LOCK, LOCK_NAMESPACE).metadata.resource_version == lease_before


def test_an_empty_lock_name_opts_out(k8s, run_module, spare_node, other_run_lock):
    checked = run_module("node_maintenance", {"name": spare_node, "lock": {"name": ""}}, check=True)
    assert checked.get("failed") is not True and checked["changed"] is True, checked
