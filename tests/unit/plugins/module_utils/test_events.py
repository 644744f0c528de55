"""Events of the collection's work (k8s/events.py) against an in-memory API server."""

import datetime

from fake_apiserver import fake_client

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import events as ev

T0 = datetime.datetime(2026, 11, 28, 6, 0, 0, tzinfo=datetime.timezone.utc)
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1", "uid": "u-1", "resourceVersion": "7"}}
VM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
      "metadata": {"name": "db", "namespace": "vms", "uid": "u-2"}}


def recorder(client, **kwargs):
    warnings = []
    kwargs.setdefault("now", lambda: T0)
    kwargs.setdefault("instance", "test")
    return ev.EventRecorder(client, warn=warnings.append, **kwargs), warnings


def stored(server):
    return [obj for (kind, _ns, _name), obj in sorted(server.objects.items()) if kind == ev.KIND]


def test_an_event_has_what_the_api_requires_and_the_run():
    client, server = fake_client()
    events, warnings = recorder(client, run="alice@laptop")
    name = events.normal(ev.reference(NODE), "BeginMaintenance", "Cordon", "Entering maintenance")
    [event] = stored(server)
    assert event["metadata"]["name"] == name and name.startswith("worker-1.")
    # A cluster-scoped object's Events live in "default" (ValidateEvent: involvedObject namespace).
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["annotations"] == {ev.RUN_ANNOTATION: "alice@laptop"}
    assert event["eventTime"] == "2026-11-28T06:00:00.000000Z"
    assert event["reportingController"] == "kubevirt-ops.io/maintenance"
    assert event["reportingInstance"] == "test"
    assert (event["action"], event["reason"], event["type"]) == ("Cordon", "BeginMaintenance", "Normal")
    assert event["note"] == "Entering maintenance (run alice@laptop)"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "u-1",
                                  "resourceVersion": "7"}
    assert "series" not in event and warnings == []


def test_the_same_happening_again_is_counted_in_the_series_of_one_event():
    client, server = fake_client()
    moments = [T0, T0 + datetime.timedelta(seconds=30), T0 + datetime.timedelta(seconds=60)]
    for moment in moments:
        # A new recorder each time: every module call is a process of its own.
        events, _warnings = recorder(client, run="run-1", now=lambda moment=moment: moment)
        events.normal(ev.reference(NODE), "LockRenewed", "Renew", "Renewed by run-1")
    [event] = stored(server)
    assert event["series"] == {"count": 3, "lastObservedTime": "2026-11-28T06:01:00.000000Z"}
    assert event["eventTime"] == "2026-11-28T06:00:00.000000Z"  # immutable: the first time


def test_another_note_run_reason_or_object_is_another_event():
    client, server = fake_client()
    events, _warnings = recorder(client, run="run-1")
    events.normal(ev.reference(NODE), "SucceedMaintenance", "Drain", "1 VM migrated")
    events.normal(ev.reference(NODE), "SucceedMaintenance", "Drain", "2 VMs migrated")
    events.normal(ev.reference(NODE), "RemovedMaintenance", "Uncordon", "1 VM migrated")
    events.normal(ev.reference(VM), "SucceedMaintenance", "Drain", "1 VM migrated")
    other_run, _warnings = recorder(client, run="run-2")
    other_run.normal(ev.reference(NODE), "SucceedMaintenance", "Drain", "1 VM migrated")
    assert len(stored(server)) == 5
    # A namespaced object's Events live in its namespace.
    assert [e["metadata"]["namespace"] for e in stored(server) if e["regarding"]["kind"] == "VirtualMachine"] == ["vms"]


def test_check_mode_records_nothing():
    client, server = fake_client()
    events, _warnings = recorder(client, enabled=False)
    assert events.normal(ev.reference(NODE), "BeginMaintenance", "Cordon", "x") is None
    assert stored(server) == [] and server.writes() == []


def test_a_refused_event_is_a_warning_and_never_fails_the_work():
    client, server = fake_client()
    events, warnings = recorder(client)
    server.fail_next[("POST", ev.KIND)] = 403
    assert events.normal(ev.reference(NODE), "BeginMaintenance", "Cordon", "x") is None
    assert len(warnings) == 1 and warnings[0].startswith("Events are not recorded (the Event BeginMaintenance on "
                                                         "Node worker-1 was refused")
    # Refused once, the recorder does not try again in this call (one warning, not one per Event).
    assert events.normal(ev.reference(NODE), "SucceedMaintenance", "Drain", "y") is None
    assert len(warnings) == 1 and stored(server) == []


def test_a_transient_failure_warns_and_the_next_event_is_tried():
    client, server = fake_client()
    events, warnings = recorder(client)
    server.fail_next[("POST", ev.KIND)] = 422
    assert events.normal(ev.reference(NODE), "BeginMaintenance", "Cordon", "x") is None
    assert warnings[0].startswith("The Event BeginMaintenance on Node worker-1 was not recorded")
    assert events.normal(ev.reference(NODE), "SucceedMaintenance", "Drain", "y") is not None
    assert len(stored(server)) == 1


def test_notes_are_redacted_and_clipped_to_what_the_api_accepts():
    client, server = fake_client()
    events, _warnings = recorder(client, run="run-1", scrub=lambda text: text.replace("s3cret-token", "********"))
    events.warning(ev.reference(NODE), "FailedMaintenance", "Drain", "failed with s3cret-token " + "x" * 2000)
    [event] = stored(server)
    assert "s3cret-token" not in event["note"] and "********" in event["note"]
    assert len(event["note"]) == ev.NOTE_LIMIT and event["note"].endswith("...")
    assert event["type"] == "Warning"


def test_a_long_object_name_still_makes_a_valid_event_name():
    client, server = fake_client()
    events, _warnings = recorder(client)
    long_node = {"kind": "Node", "metadata": {"name": "n" * 253}}
    name = events.normal(ev.reference(long_node, "Node"), "BeginMaintenance", "Cordon", "x")
    assert len(name) <= 253 and name.endswith("." + name.split(".")[-1]) and len(name.split(".")[-1]) == 16
    [event] = stored(server)
    assert event["regarding"]["apiVersion"] == "v1"
