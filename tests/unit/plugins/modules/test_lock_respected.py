"""node_maintenance and node_decommission respect the cluster lock: another run's lock stops them
before any write (in check mode too), their own holder and an expired or absent lock do not,
and an empty lock name opts out. Against the in-memory API server."""

import datetime

import pytest

from drain_cluster import module_cluster, pod
from module_runner import run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import identity
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import lock
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import timeutil
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import node_decommission, node_maintenance

OTHER = "bob@jumphost pid 7 #00aa"


@pytest.fixture
def api(monkeypatch):
    server = module_cluster(monkeypatch)
    server.add("Pod", pod("web-a"))
    return server


def take(server_client, holder=OTHER, age=0, name=identity.DEFAULT_LOCK_NAME, namespace=identity.DEFAULT_LOCK_NAMESPACE):
    then = timeutil.utc_now() - datetime.timedelta(seconds=age)
    lock.ClusterLock(server_client, name, namespace, clock=lambda: then).acquire(holder, 600, purpose="firmware")


def versions(server):
    return dict((key, obj["metadata"]["resourceVersion"]) for key, obj in server.objects.items())


def client_of(server):
    from fake_apiserver import fake_client

    return fake_client(server)[0]


@pytest.mark.parametrize("module, args, refused", [
    (node_maintenance, {"name": "worker-1"}, "Node worker-1 was not put into maintenance"),
    (node_decommission, {"name": "worker-1"}, "Node worker-1 was not decommissioned"),
], ids=["node_maintenance", "node_decommission"])
@pytest.mark.parametrize("check", [False, True], ids=["run", "check mode"])
def test_another_runs_lock_refuses_before_any_write(api, capsys, module, args, refused, check):
    take(client_of(api))
    before = versions(api)
    failed = run(module, args, capsys, check=check)
    assert failed.get("failed"), failed
    assert failed["msg"].startswith("%s: the cluster lock kube-system/kubevirt-ops-maintenance is held by '%s'"
                                    % (refused, OTHER)), failed["msg"]
    assert failed["lock"]["holder"] == OTHER
    assert versions(api) == before


@pytest.mark.parametrize("module", [node_maintenance, node_decommission], ids=["node_maintenance", "node_decommission"])
@pytest.mark.parametrize("case", ["own holder", "expired", "opted out", "other lease"])
def test_own_expired_or_other_lock_does_not_refuse(api, capsys, module, case):
    client = client_of(api)
    take(client, age=7200 if case == "expired" else 0)
    option = {"own holder": {"holder": OTHER}, "expired": {}, "opted out": {"name": ""},
              "other lease": {"name": "another-lock"}}[case]
    args = {"name": "worker-1", "lock": option}
    if module is node_decommission:
        args["assume_powered_off"] = True  # a Ready node is deleted only once its machine is off
    result = run(module, args, capsys, check=True)
    assert not result.get("failed"), result
    assert result["changed"] is True


def test_leaving_maintenance_under_another_runs_lock(api, capsys):
    entered = run(node_maintenance, {"name": "worker-1"}, capsys)
    assert entered["changed"] and not entered.get("failed"), entered
    take(client_of(api))
    before = versions(api)
    for check in (True, False):
        failed = run(node_maintenance, {"name": "worker-1", "state": "absent"}, capsys, check=check)
        assert failed["msg"].startswith("Node worker-1 was left in maintenance: the cluster lock "
                                        "kube-system/kubevirt-ops-maintenance is held by '%s'" % OTHER), failed
    assert versions(api) == before
    # Nothing to undo on a node that is not in maintenance: unchanged, as without a lock.
    assert run(node_maintenance, {"name": "worker-2", "state": "absent"}, capsys)["changed"] is False
    left = run(node_maintenance, {"name": "worker-1", "state": "absent", "lock": {"holder": OTHER}}, capsys)
    assert left["changed"] is True and not left.get("failed")


def test_bad_lock_name_is_one_sentence(api, capsys):
    failed = run(node_maintenance, {"name": "worker-1", "lock": {"name": "Bad_Name"}}, capsys)
    assert failed["failed"] and failed["msg"].startswith("Option lock.name='Bad_Name' is not a valid")


@pytest.mark.parametrize("module, args, refused", [
    (node_maintenance, {"name": "worker-1"}, "Node worker-1 was not put into maintenance"),
    (node_decommission, {"name": "worker-1", "assume_powered_off": True}, "Node worker-1 was not decommissioned"),
], ids=["node_maintenance", "node_decommission"])
def test_a_lock_that_may_not_be_read_is_one_sentence_naming_the_node(api, capsys, module, args, refused):
    before = versions(api)
    api.fail_next[("GET", "Lease")] = 403
    failed = run(module, args, capsys)
    assert failed.get("failed"), failed
    assert failed["msg"].startswith("%s: the cluster lock could not be checked: cannot get Lease "
                                    "kube-system/kubevirt-ops-maintenance: permission denied" % refused), failed["msg"]
    assert failed["msg"].endswith("or set lock.name to an empty string to act regardless of the lock.")
    assert "\n" not in failed["msg"]
    assert versions(api) == before


def test_the_lock_module_tells_its_work_on_the_lease_and_a_run_renewals_are_one_event(api, capsys):
    from ansible_collections.kubevirt_ops.maintenance.plugins.modules import cluster_lock

    mine = {"name": "maintenance-lock-events", "namespace": "kube-system"}
    assert run(cluster_lock, dict(mine, holder="run-a", ttl=600), capsys)["action"] == "acquired"
    for _renewal in range(3):
        assert run(cluster_lock, dict(mine, holder="run-a", ttl=600), capsys)["action"] == "renewed"
    assert run(cluster_lock, dict(mine, holder="run-a", ttl=600), capsys, check=True)["action"] == "renewed"
    assert run(cluster_lock, dict(mine, holder="run-b", state="absent", force=True), capsys)["action"] == "released"
    events = sorted((e for (kind, _ns, _n), e in api.objects.items() if kind == "Event.events.k8s.io"),
                    key=lambda e: int(e["metadata"]["resourceVersion"]))
    lease = api.get("Lease", mine["name"], "kube-system")
    assert [(e["reason"], e["type"], (e.get("series") or {}).get("count", 1)) for e in events] == [
        ("LockAcquired", "Normal", 1), ("LockRenewed", "Normal", 3), ("LockBroken", "Warning", 1)]
    assert all(e["regarding"]["uid"] == lease["metadata"]["uid"] and e["metadata"]["namespace"] == "kube-system"
               for e in events)
    assert events[0]["metadata"]["annotations"]["maintenance.kubevirt-ops.io/run"] == "run-a"
