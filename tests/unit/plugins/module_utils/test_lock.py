"""The cluster lock against an in-memory API server: acquire, renew, release, races, expiry."""

import datetime
import json
import subprocess
import sys
import threading

import pytest

from fake_apiserver import fake_client

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import identity
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import lock
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import timeutil
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import BlockedError, InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import RunOwner

T0 = datetime.datetime(2024, 5, 4, 22, 0, 0, tzinfo=datetime.timezone.utc)


class Clock:
    def __init__(self, moment=T0):
        self.moment = moment

    def __call__(self):
        return self.moment

    def advance(self, seconds):
        self.moment += datetime.timedelta(seconds=seconds)


@pytest.fixture
def setup():
    client, server = fake_client()
    clock = Clock()
    return lock.ClusterLock(client, clock=clock), server, clock


def lease(server):
    return server.get("Lease", identity.DEFAULT_LOCK_NAME, identity.DEFAULT_LOCK_NAMESPACE)


def test_acquire_creates_the_lease_with_holder_times_and_ttl(setup):
    cluster_lock, server, _clock = setup
    result = cluster_lock.acquire("alice", 600, purpose="rolling maintenance of 4 nodes")
    assert result["action"] == "acquired" and result["changed"] and result["acquired"]
    spec = lease(server)["spec"]
    assert spec["holderIdentity"] == "alice"
    assert spec["leaseDurationSeconds"] == 600
    assert spec["acquireTime"] == spec["renewTime"] == "2024-05-04T22:00:00.000000Z"
    assert result["lock"]["expires_at"] == "2024-05-04T22:10:00.000000Z"
    assert lease(server)["metadata"]["annotations"][identity.LOCK_PURPOSE_ANNOTATION] == "rolling maintenance of 4 nodes"


def test_a_lock_got_at_the_first_attempt_was_not_waited_for():
    """However long the first attempt took (a slow API server): waited_seconds is for another holder only,
    and the rolling role preflights again only after a wait."""
    client, _server = fake_client()

    class Slow(Clock):
        def __call__(self):
            self.advance(1.5)
            return self.moment

    for outcome in ("acquired", "renewed"):
        result = lock.ClusterLock(client, clock=Slow()).acquire("alice", 600, wait=True)
        assert result["action"] == outcome and result["waited_seconds"] == 0.0


def test_second_holder_fails_naming_the_holder_and_since_when(setup):
    cluster_lock, _server, clock = setup
    cluster_lock.acquire("alice@laptop pid 1", 3600, purpose="patching workers")
    clock.advance(125)
    with pytest.raises(BlockedError) as err:
        cluster_lock.acquire("bob", 3600)
    msg = err.value.msg
    assert "held by 'alice@laptop pid 1' since 2024-05-04T22:00:00Z (2m05s ago" in msg
    assert "patching workers" in msg
    assert err.value.details["lock"]["holder"] == "alice@laptop pid 1"


def test_renew_by_the_holder_moves_renew_time_only(setup):
    cluster_lock, server, clock = setup
    cluster_lock.acquire("alice", 600, purpose="p")
    clock.advance(300)
    result = cluster_lock.acquire("alice", 600)
    assert result["action"] == "renewed" and not result["changed"]
    spec = lease(server)["spec"]
    assert spec["acquireTime"] == "2024-05-04T22:00:00.000000Z"
    assert spec["renewTime"] == "2024-05-04T22:05:00.000000Z"
    assert lease(server)["metadata"]["annotations"][identity.LOCK_PURPOSE_ANNOTATION] == "p"


def test_expired_lease_is_taken_over_and_says_whose(setup):
    cluster_lock, server, clock = setup
    cluster_lock.acquire("alice", 60)
    clock.advance(61)
    result = cluster_lock.acquire("bob", 60)
    assert result["action"] == "taken_over"
    assert result["previous_holder"] == "alice" and result["previous_expired"]
    assert "Took over" in result["msg"] and "'alice'" in result["msg"] and "stopped renewing" in result["msg"]
    assert lease(server)["spec"]["leaseTransitions"] == 1


def test_renewal_after_someone_took_over_fails(setup):
    cluster_lock, _server, clock = setup
    cluster_lock.acquire("alice", 60)
    clock.advance(61)
    cluster_lock.acquire("bob", 60)
    with pytest.raises(BlockedError, match="held by 'bob'"):
        cluster_lock.acquire("alice", 60)


def test_release_frees_it_for_the_next_holder(setup):
    cluster_lock, server, _clock = setup
    cluster_lock.acquire("alice", 600)
    result = cluster_lock.release("alice")
    assert result["action"] == "released" and result["changed"]
    assert "holderIdentity" not in lease(server)["spec"]
    assert lease(server)["metadata"]["annotations"][identity.LOCK_LAST_HOLDER_ANNOTATION] == "alice"
    again = cluster_lock.release("alice")
    assert again["action"] == "none" and not again["changed"]
    assert cluster_lock.acquire("bob", 600)["action"] == "acquired"


def test_release_of_someone_elses_lock_leaves_it(setup):
    cluster_lock, server, _clock = setup
    cluster_lock.acquire("alice", 600)
    result = cluster_lock.release("bob")
    assert result["action"] == "none" and not result["changed"]
    assert lease(server)["spec"]["holderIdentity"] == "alice"
    forced = cluster_lock.release(force=True)
    assert forced["action"] == "released"


def test_release_needs_a_holder_or_force(setup):
    cluster_lock, _server, _clock = setup
    with pytest.raises(InvalidInputError):
        cluster_lock.release(None)


def test_check_mode_writes_nothing(setup):
    cluster_lock, server, _clock = setup
    result = cluster_lock.acquire("alice", 600, check_mode=True)
    assert result["action"] == "acquired" and result["changed"]
    assert lease(server) is None and not server.writes()


def test_lost_race_rereads_and_sees_the_winner(setup):
    """Between our read and our write another run takes the lock: our write is refused (409)."""
    cluster_lock, server, _clock = setup
    cluster_lock.acquire("alice", 600)
    cluster_lock.release("alice")

    def sneak_in(method, kind, _name):
        if method == "PUT" and kind == "Lease" and server.before_write:
            server.before_write = None
            current = lease(server)
            current["spec"].update(holderIdentity="carol", renewTime=timeutil.format_micro(T0),
                                   acquireTime=timeutil.format_micro(T0), leaseDurationSeconds=600)
            server.add("Lease", current)

    server.before_write = sneak_in
    with pytest.raises(BlockedError, match="held by 'carol'"):
        cluster_lock.acquire("bob", 600)
    assert lease(server)["spec"]["holderIdentity"] == "carol"


def test_two_concurrent_acquirers_exactly_one_wins():
    client_a, server = fake_client()
    client_b, _same = fake_client(server)
    barrier = threading.Barrier(2)
    outcomes = {}

    def run(name, client):
        barrier.wait()
        try:
            outcomes[name] = lock.ClusterLock(client).acquire(name, 600)["action"]
        except BlockedError:
            outcomes[name] = "blocked"

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in (("a", client_a), ("b", client_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes.values()) == ["acquired", "blocked"]


def test_waiting_acquirer_gets_it_when_released():
    client_a, server = fake_client()
    client_b, _same = fake_client(server)
    lock.ClusterLock(client_a).acquire("alice", 600)
    timer = threading.Timer(0.3, lambda: lock.ClusterLock(client_a).release("alice"))
    timer.start()
    result = lock.ClusterLock(client_b).acquire("bob", 600, wait=True, wait_timeout=20)
    timer.join()
    assert result["action"] == "acquired" and result["holder"] == "bob"
    assert result["waited_seconds"] > 0


def test_waiting_gives_up_at_the_timeout_naming_the_holder():
    client, _server = fake_client()
    lock.ClusterLock(client).acquire("alice", 600)
    with pytest.raises(BlockedError, match="still held by 'alice'"):
        lock.ClusterLock(client).acquire("bob", 600, wait=True, wait_timeout=1)


@pytest.mark.parametrize("text, expected", [
    ("2024-05-04T22:00:00.123456Z", "2024-05-04T22:00:00.123456+00:00"),
    ("2024-05-04T22:00:00Z", "2024-05-04T22:00:00+00:00"),
    ("2024-05-04T22:00:00.1Z", "2024-05-04T22:00:00.100000+00:00"),
    ("2024-05-04T22:00:00.123456789Z", "2024-05-04T22:00:00.123456+00:00"),
    ("", None),
    ("nonsense", None),
])
def test_parse_time(text, expected):
    parsed = timeutil.parse_time(text)
    assert (parsed.isoformat() if parsed else None) == expected


def test_default_holder_is_unique_and_names_the_machine():
    first, second = lock.default_holder(), lock.default_holder()
    assert "@" in first and " pid " in first
    assert first != second or first.split("#")[0] == second.split("#")[0]


def test_parse_time_keeps_the_offset_after_nanoseconds():
    assert timeutil.parse_time("2024-05-04T22:00:00.123456789+02:00").isoformat() == "2024-05-04T22:00:00.123456+02:00"


# -- the check node_maintenance, node_decommission and maintenance_preflight share -------------

OPTION = {"name": identity.DEFAULT_LOCK_NAME, "namespace": identity.DEFAULT_LOCK_NAMESPACE}


@pytest.mark.parametrize("option, holder, age, held", [
    (OPTION, "alice", 0, True),                            # another run holds it
    (dict(OPTION, holder="alice"), "alice", 0, False),     # the caller's own run
    (OPTION, "alice", 7200, False),                        # expired: renewed 2h ago with a TTL of 10 minutes
    (dict(OPTION, name=""), "alice", 0, False),            # opted out
    (None, "alice", 0, False),                             # no option at all
], ids=["other holder", "own holder", "expired", "empty name", "no option"])
def test_held_by_another(option, holder, age, held):
    client, _server = fake_client()
    then = timeutil.utc_now() - datetime.timedelta(seconds=age)
    lock.ClusterLock(client, clock=lambda: then).acquire(holder, 600)
    found = lock.held_by_another(client, option)
    assert (found is not None) is held
    if held:
        assert found.holder == holder


def test_released_lock_is_not_held():
    client, _server = fake_client()
    lock.ClusterLock(client).acquire("alice", 600)
    lock.ClusterLock(client).release("alice")
    assert lock.held_by_another(client, OPTION) is None


def test_absent_lease_is_not_held():
    client, _server = fake_client()
    assert lock.held_by_another(client, OPTION) is None


def test_refusal_names_the_lease_and_its_holder_and_writes_nothing():
    client, server = fake_client()
    lock.ClusterLock(client, "maint", "ops").acquire("alice@bastion pid 1 #0001", 600, purpose="firmware")
    writes = len(server.writes())
    with pytest.raises(BlockedError) as err:
        lock.refuse_while_held(client, {"name": "maint", "namespace": "ops"}, "Node worker-1 was not put into "
                               "maintenance", node="worker-1")
    msg = err.value.msg
    assert msg.startswith("Node worker-1 was not put into maintenance: the cluster lock ops/maint is held by "
                          "'alice@bastion pid 1 #0001' since ")
    assert "for: firmware" in msg and "lock.holder" in msg and "\n" not in msg
    assert err.value.details["lock"]["holder"] == "alice@bastion pid 1 #0001"
    assert err.value.details["node"] == "worker-1"
    assert len(server.writes()) == writes
    # The holder's own tasks pass; so does anyone once the lock is given back.
    lock.refuse_while_held(client, {"name": "maint", "namespace": "ops", "holder": "alice@bastion pid 1 #0001"}, "x")
    lock.ClusterLock(client, "maint", "ops").release("alice@bastion pid 1 #0001")
    lock.refuse_while_held(client, {"name": "maint", "namespace": "ops"}, "x")


# -- a lock bound to its run -------------------------------------------------------------------

@pytest.fixture
def ended_run():
    """The record of a run process of this machine that has ended (exited and reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    record = RunOwner(process.pid).record()
    process.communicate(b"")
    return record


@pytest.fixture
def live_run():
    """The record of a run process of this machine that is still running."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield RunOwner(process.pid).record()
    process.communicate(b"")


def test_a_lock_whose_run_has_ended_is_taken_over_at_once_and_says_why(setup, ended_run):
    cluster_lock, server, clock = setup
    cluster_lock.acquire("alice@bastion pid 7", 3600, run=ended_run)
    assert json.loads(lease(server)["metadata"]["annotations"][identity.LOCK_RUN_ANNOTATION]) == ended_run
    clock.advance(8)  # long before the TTL
    state = cluster_lock.read()
    assert not state.free and state.run_ended and state.takeable
    result = cluster_lock.acquire("alice@bastion pid 9", 3600)
    assert result["action"] == "taken_over" and result["previous_run_ended"] and not result["previous_expired"]
    assert result["msg"] == ("Took over the cluster lock kube-system/kubevirt-ops-maintenance from 'alice@bastion pid 7' "
                             "since 2024-05-04T22:00:00Z (8s ago, expires in 59m52s): the run that held it (process "
                             "%d on this machine) has ended." % ended_run["pid"])
    assert identity.LOCK_RUN_ANNOTATION not in lease(server)["metadata"]["annotations"]  # the new holder's run is unknown


def test_a_lock_whose_run_still_runs_is_refused_saying_how_to_get_past(setup, live_run):
    cluster_lock, server, _clock = setup
    cluster_lock.acquire("alice", 3600, run=live_run)
    before = lease(server)["metadata"]["resourceVersion"]
    with pytest.raises(BlockedError) as err:
        cluster_lock.acquire("bob", 3600)
    assert "held by 'alice'" in err.value.msg
    assert err.value.msg.endswith("run it again from the same machine (a run bound to the lock with owner_pid, as the "
                                  "roles' runs are, is taken over once its process has ended), wait for the lock to "
                                  "expire, or release it with kubevirt_ops.maintenance.cluster_lock "
                                  "name=kubevirt-ops-maintenance namespace=kube-system state=absent force=true.")
    assert lease(server)["metadata"]["resourceVersion"] == before


@pytest.mark.parametrize("change", [
    {"boot_id": "another-boot"},          # this machine before its last boot: its processes are unknown
    {"host": "another-machine"},          # another machine: its processes cannot be seen
    {"start_time": None},                 # nothing tells a process id taken again apart
])
def test_a_run_that_cannot_be_judged_here_never_counts_as_ended(setup, ended_run, change):
    cluster_lock, _server, _clock = setup
    cluster_lock.acquire("alice", 3600, run=dict(ended_run, **change))
    assert not cluster_lock.read().run_ended
    with pytest.raises(BlockedError):
        cluster_lock.acquire("bob", 3600)


def test_a_process_id_taken_again_by_another_process_counts_as_ended(setup, live_run):
    cluster_lock, _server, _clock = setup
    cluster_lock.acquire("alice", 3600, run=dict(live_run, start_time="1"))  # started at boot: another process
    assert cluster_lock.read().run_ended


def test_the_run_record_is_kept_on_renewal_and_dropped_on_release(setup, live_run):
    cluster_lock, server, _clock = setup
    cluster_lock.acquire("alice", 3600, run=live_run)
    cluster_lock.acquire("alice", 3600)  # a renewal names no run
    assert identity.LOCK_RUN_ANNOTATION in lease(server)["metadata"]["annotations"]
    cluster_lock.release("alice")
    assert identity.LOCK_RUN_ANNOTATION not in lease(server)["metadata"]["annotations"]


def test_a_task_of_another_run_is_refused_only_while_the_run_holding_the_lock_lives(live_run, ended_run):
    client, _server = fake_client()
    option = {"name": identity.DEFAULT_LOCK_NAME, "holder": "bob"}
    lock.ClusterLock(client).acquire("alice", 3600, run=live_run)  # the real clock: the lock has not expired
    assert lock.held_by_another(client, option).holder == "alice"
    lock.ClusterLock(client).acquire("alice", 3600, run=ended_run, force=True)
    assert lock.held_by_another(client, option) is None
