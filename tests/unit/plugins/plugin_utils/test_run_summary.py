"""run_summary: the status, closing message, remaining nodes and resume command of a rolling run (the run_summary
filter), every status and every part of the message."""

import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.run_summary import run_summary
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_summary import (lock_sentence,
                                                                                           resume_command, status,
                                                                                           summary)

COMMAND = "ansible-playbook site.yml"
RELEASED = {"changed": True}
WINDOW = {"open": False, "message": "Outside the maintenance window sat 22:00-06:00 UTC; it opens at 22:00."}
GATE = {"node": "w2", "message": "The health gate (command) still failed after 3 tries in 20 s, so node w2 was not "
                                 "started: exited 1."}


def done(node):
    return {"node": node, "status": "done"}


def failed(node):
    return {"node": node, "status": "failed"}


def state(records=(), order=("w1", "w2", "w3"), stop_reason="", holder="me@host", **extra):
    base = {"id": "20240504T220000Z", "order": list(order), "records": list(records), "stop": bool(stop_reason),
            "stop_reason": stop_reason, "holder": holder, "window": {"open": True, "message": "Inside."}}
    base.update(extra)
    return base


def resume(*nodes):
    nodes = {"rolling_maintenance_nodes": list(nodes), "rolling_maintenance_node_selector": ""}
    return "%s -e '%s'" % (COMMAND, json.dumps(nodes))


def end(run, release=None, ttl=900):
    return summary(run, COMMAND, ttl, release=RELEASED if release is None else release)


@pytest.mark.parametrize("order, failed_nodes, untouched, stop_reason, expected", [
    (["w1"], ["w1"], [], "failure", "failed"),
    (["w1", "w2"], ["w1"], ["w2"], "window", "failed"),         # a failure outweighs the window ...
    (["w1", "w2"], ["w1"], ["w2"], "health_gate", "failed"),    # ... and the gate
    (["w1", "w2"], [], ["w2"], "window", "window_closed"),
    ([], [], [], "window", "window_closed"),                    # outside the window from the start
    (["w1", "w2"], [], ["w2"], "health_gate", "health_gate_failed"),
    (["w1", "w2"], [], [], "", "succeeded"),
    (["w1", "w2"], [], ["w2"], "", "not_started"),              # stopped by an error outside any node
    ([], [], [], "", "not_started"),                            # stopped before the plan (the preflight)
])
def test_each_status(order, failed_nodes, untouched, stop_reason, expected):
    assert status(order, failed_nodes, untouched, stop_reason) == expected


def test_the_lock_sentence():
    assert lock_sentence("", {"changed": False, "msg": "ignored"}, 900) == ""
    assert lock_sentence("me@host", {"changed": True}, 900) == "The cluster lock was released."
    assert lock_sentence("me@host", {"changed": False, "msg": "Lease is held by someone else"}, 900) == (
        "The cluster lock could not be released (Lease is held by someone else); it expires 900s after its last "
        "renewal.")
    assert lock_sentence("me@host", None, "600") == (
        "The cluster lock could not be released (); it expires 600s after its last renewal.")


def test_the_resume_command_names_the_nodes_and_no_selector():
    assert resume_command(COMMAND, ["w2", "w3"]) == (
        'ansible-playbook site.yml -e \'{"rolling_maintenance_nodes": ["w2", "w3"], '
        '"rolling_maintenance_node_selector": ""}\'')


def test_a_run_that_did_every_node():
    result = end(state([done("w1"), done("w2"), done("w3")]))
    assert result == {"status": "succeeded", "remaining": [], "resume": "",
                      "message": "Rolling maintenance 20240504T220000Z succeeded: 3 node(s) done (w1, w2, w3). "
                                 "The cluster lock was released."}


def test_a_run_without_a_lock_says_nothing_of_it():
    result = end(state([done("w1")], order=["w1"], holder=""))
    assert result["message"] == "Rolling maintenance 20240504T220000Z succeeded: 1 node(s) done (w1)."


def test_outside_the_window_from_the_start_nothing_was_changed():
    result = end(state(order=[], stop_reason="window", holder="", window=WINDOW), release={"skipped": True})
    assert result == {"status": "window_closed", "remaining": [], "resume": "",
                      "message": WINDOW["message"] + " Nothing was changed."}


def test_a_window_that_closed_before_the_first_node_is_the_window_s_message_too():
    result = end(state(stop_reason="window", window=WINDOW))
    assert result["status"] == "window_closed" and result["message"] == WINDOW["message"] + " Nothing was changed."
    assert result["remaining"] == ["w1", "w2", "w3"] and result["resume"] == resume("w1", "w2", "w3")


def test_a_run_stopped_before_its_nodes():
    result = end(state(order=[], holder=""), release={"skipped": True})
    assert result == {"status": "not_started", "remaining": [], "resume": "",
                      "message": "Nothing was changed: the run stopped before its first node (see the error above)."}
    held = end(state(), release={"changed": False, "msg": "timed out"}, ttl=600)
    assert held["status"] == "not_started" and held["remaining"] == ["w1", "w2", "w3"]
    assert held["message"] == (
        "Nothing was changed: the run stopped before its first node (see the error above). The cluster lock could "
        "not be released (timed out); it expires 600s after its last renewal.")


def test_a_failed_node_stops_the_run():
    result = end(state([done("w1"), failed("w2")], stop_reason="failure"))
    assert result["status"] == "failed" and result["remaining"] == ["w2", "w3"]
    assert result["resume"] == resume("w2", "w3")
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped. Done: w1. Failed and left cordoned (in maintenance): w2. "
        "Not started: w3. The cluster lock was released. After fixing w2, finish the job with: " + resume("w2", "w3"))


def test_the_last_node_failed_and_none_was_done():
    result = end(state([failed("w1")], order=["w1"], stop_reason="failure"))
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped. Done: none. Failed and left cordoned (in maintenance): w1. "
        "Not started: none. The cluster lock was released. After fixing w1, finish the job with: " + resume("w1"))


def test_the_window_closed_after_a_node():
    result = end(state([done("w1")], stop_reason="window", window=WINDOW))
    assert result["status"] == "window_closed" and result["remaining"] == ["w2", "w3"]
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped by the maintenance window. Done: w1. Not started: w2, w3. "
        "The cluster lock was released. " + WINDOW["message"] + " Finish the job with: " + resume("w2", "w3"))


def test_the_window_closed_after_a_failure_within_max_failures():
    result = end(state([failed("w1"), done("w2")], stop_reason="window", window=WINDOW))
    assert result["status"] == "failed"
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped. Done: w2. Failed and left cordoned (in maintenance): w1. "
        "Not started: w3. The cluster lock was released. " + WINDOW["message"]
        + " After fixing w1, finish the job with: " + resume("w1", "w3"))


def test_the_health_gate_failed_before_the_first_node():
    result = end(state(stop_reason="health_gate", health_gate=GATE))
    assert result["status"] == "health_gate_failed" and result["remaining"] == ["w1", "w2", "w3"]
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped: the health gate failed. Done: none. Not started: w1, w2, w3. "
        "The cluster lock was released. " + GATE["message"] + " Finish the job with: " + resume("w1", "w2", "w3"))


def test_the_health_gate_failed_after_a_failure_within_max_failures():
    result = end(state([failed("w1")], stop_reason="health_gate", health_gate=GATE))
    assert result["status"] == "failed"
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped. Done: none. Failed and left cordoned (in maintenance): w1. "
        "Not started: w2, w3. The cluster lock was released. " + GATE["message"]
        + " After fixing w1, finish the job with: " + resume("w1", "w2", "w3"))


def test_a_stop_with_nothing_left_gives_no_command():
    # The gate and the window stop before a node, which stays not started; a state without one says no command.
    result = end(state([done("w1")], order=["w1"], stop_reason="health_gate", health_gate=GATE))
    assert result["status"] == "health_gate_failed" and result["resume"] == ""
    assert result["message"] == (
        "Rolling maintenance 20240504T220000Z stopped: the health gate failed. Done: w1. Not started: none. "
        "The cluster lock was released. " + GATE["message"])


def test_the_message_is_one_line_whatever_the_parts_hold():
    command = "ansible-playbook  -i inventory\n  site.yml"
    result = summary(state([failed("w1")], order=["w1"], stop_reason="failure"), command, 900,
                     release={"changed": False, "msg": "the API\nserver  is gone"})
    assert "\n" not in result["message"] and "  " not in result["message"]
    assert "could not be released (the API server is gone)" in result["message"]
    # The command as given, in the resume command; the message shows it on one line.
    assert result["resume"].startswith(command + " -e '")
    assert "finish the job with: ansible-playbook -i inventory site.yml -e '" in result["message"]


def test_missing_parts_of_the_state():
    assert summary({}, COMMAND, 900) == {
        "status": "not_started", "remaining": [], "resume": "",
        "message": "Nothing was changed: the run stopped before its first node (see the error above)."}
    result = summary({"order": [], "stop_reason": "window"}, COMMAND, 900)
    assert result["message"] == "Nothing was changed."


def test_the_filter_takes_the_state_and_the_lock_s_release():
    result = run_summary(state([done("w1")], order=["w1"]), COMMAND, 900, release=RELEASED)
    assert result["status"] == "succeeded"
    with pytest.raises(AnsibleFilterError, match="the run's state"):
        run_summary([], COMMAND, 900)
    with pytest.raises(AnsibleFilterError, match="release must be"):
        run_summary(state(), COMMAND, 900, release="released")
