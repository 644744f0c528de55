"""The one waiter: reacts to watch events, honours its monotonic deadline, surfaces errors."""

import queue
import time

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, WaitTimeoutError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import (
    Deadline,
    Informer,
    wait_for_object,
    wait_until,
)


class FakeClient:
    """list() returns the initial objects; watch() yields events pushed by the test."""

    def __init__(self, objects=(), list_error=None):
        self.objects = list(objects)
        self.events = queue.Queue()
        self.list_error = list_error
        self.lists = 0

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        self.lists += 1
        if self.list_error:
            raise self.list_error
        return list(self.objects), "1"

    def watch(self, kind, namespace=None, label_selector=None, field_selector=None, resource_version=None,
              timeout_seconds=60):
        end = time.monotonic() + timeout_seconds
        while time.monotonic() < end:
            try:
                yield self.events.get(timeout=0.05)
            except queue.Empty:
                continue


def node(name, ready, rv="2"):
    return {"metadata": {"name": name, "resourceVersion": rv},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def is_ready(obj):
    return obj is not None and obj["status"]["conditions"][0]["status"] == "True"


def test_returns_at_once_when_already_true():
    client = FakeClient([node("n1", True)])
    obj = wait_for_object(client, "Node", "n1", is_ready, timeout=5, what="node n1 Ready")
    assert obj["metadata"]["name"] == "n1"


def test_wakes_on_watch_event():
    client = FakeClient([node("n1", False)])
    started = time.monotonic()

    def later():
        time.sleep(0.3)
        client.events.put({"type": "MODIFIED", "object": node("n1", True, rv="3")})

    import threading
    threading.Thread(target=later, daemon=True).start()
    obj = wait_for_object(client, "Node", "n1", is_ready, timeout=10, what="node n1 Ready")
    assert obj["metadata"]["resourceVersion"] == "3"
    assert time.monotonic() - started < 9, "woken by the event, not by the deadline"


def test_stable_for_returns_only_once_the_predicate_held_that_long_through_one_watch():
    """Ready, NotReady for a moment, Ready again: returned is the object that stayed Ready, no
    earlier than the stable period after the flap."""
    import threading

    client = FakeClient([node("n1", True)])
    started = time.monotonic()

    def flap():
        time.sleep(0.2)
        client.events.put({"type": "MODIFIED", "object": node("n1", False, rv="3")})
        time.sleep(0.2)
        client.events.put({"type": "MODIFIED", "object": node("n1", True, rv="4")})

    threading.Thread(target=flap, daemon=True).start()
    obj = wait_for_object(client, "Node", "n1", is_ready, timeout=10, what="n1 Ready", stable_for=0.6)
    assert obj["metadata"]["resourceVersion"] == "4"
    assert time.monotonic() - started >= 1.0 - 0.05  # 0.4 s to the last change, then 0.6 s stable
    assert client.lists == 1, "one watch throughout"


def test_settles_ends_the_stable_period_once_it_saw_what_it_waited_for():
    """A version the caller knows settles the matter (here: one with rv 4 after one with rv 3) ends the wait at
    the first moment the predicate holds: without it the stable period (longer than the timeout) could never
    pass. Every version reaches settles, in order."""
    client = FakeClient([node("n1", False)])
    seen = []

    def settles(obj):
        seen.append(obj["metadata"]["resourceVersion"])
        return seen[-2:] == ["3", "4"]

    for rv, ready in (("3", False), ("4", True)):
        client.events.put({"type": "MODIFIED", "object": node("n1", ready, rv=rv)})
    obj = wait_for_object(client, "Node", "n1", is_ready, timeout=20, what="n1 Ready", stable_for=3600,
                          settles=settles)
    assert obj["metadata"]["resourceVersion"] == "4"
    assert seen == ["2", "3", "4"]


def test_settles_that_never_says_so_keeps_the_stable_period():
    client = FakeClient([node("n1", True)])
    with pytest.raises(WaitTimeoutError):
        wait_for_object(client, "Node", "n1", is_ready, timeout=0.5, what="n1 Ready", stable_for=3600,
                        settles=lambda obj: False)


def test_stable_for_that_never_comes_times_out():
    client = FakeClient([node("n1", False)])
    with pytest.raises(WaitTimeoutError):
        wait_for_object(client, "Node", "n1", is_ready, timeout=0.5, what="n1 Ready", stable_for=0.2)


def test_timeout_names_what_was_awaited_and_what_is_pending():
    client = FakeClient([node("n1", False)])
    with pytest.raises(WaitTimeoutError) as info:
        wait_for_object(client, "Node", "n1", is_ready, timeout=0.3, what="node n1 to become Ready",
                        describe_pending=lambda: "its kubelet stopped posting status")
    assert info.value.msg == ("Timed out after 0s waiting for node n1 to become Ready: "
                              "its kubelet stopped posting status.")


def test_deleted_event_removes_object():
    client = FakeClient([node("n1", True)])
    informer = Informer(client, "Node")
    client.events.put({"type": "DELETED", "object": node("n1", True, rv="4")})
    wait_until(lambda: informer.synced.is_set() and informer.get("n1") is None, [informer], 5, "n1 gone")
    informer.stop()


def test_informer_error_before_sync_ends_the_wait():
    client = FakeClient(list_error=ApiError("Cannot list Nodes: permission denied.", status=403))
    with pytest.raises(ApiError, match="permission denied"):
        wait_for_object(client, "Node", "n1", is_ready, timeout=5, what="n1")


def test_expired_watch_relists():
    client = FakeClient([node("n1", False)])
    informer = Informer(client, "Node")
    client.events.put({"type": "ERROR", "object": {"code": 410}})
    wait_until(lambda: client.lists >= 2, [informer], 5, "a re-list")
    informer.stop()


def test_deadline_is_monotonic():
    d = Deadline(0.2)
    assert not d.expired() and 0 < d.remaining() <= 0.2
    time.sleep(0.25)
    assert d.expired() and d.remaining() == 0.0
