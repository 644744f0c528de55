"""health_gate: the verdict of one try of a rolling run's health gate (the health_gate_verdict filter), every check
and every reason."""

import pytest
from jinja2 import Environment
from jinja2.filters import do_truncate

from ansible.errors import AnsibleFilterError
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.health_gate_verdict import health_gate_verdict
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.health_gate import kind_of, truncate, verdict

URL = "http://prometheus:9090/api/v1/query"
PASSED = {"passed": True, "reason": ""}
SKIPPED = {"skipped": True, "changed": False}


def failing(reason):
    return {"passed": False, "reason": reason}


def test_the_kind_of_a_gate():
    assert kind_of({"command": "true", "timeout": 5}) == "command"
    assert kind_of({"url": URL, "status_code": [200]}) == "url"
    assert kind_of({"tasks": "gate.yml"}) == "tasks"
    assert kind_of({}) == "" and kind_of(None) == ""


@pytest.mark.parametrize("text", [
    "short", "x" * 205, "x" * 206, " ".join(["word"] * 60), "a" * 150 + " " + "b" * 100, "",
])
def test_truncate_cuts_as_jinja_does(text):
    assert truncate(text) == do_truncate(Environment(), text, 200)


@pytest.mark.parametrize("result, expected", [
    ({"rc": 0, "stdout": "ok", "stderr": ""}, PASSED),
    ({"rc": 1, "stdout": "", "stderr": "first\nalerts firing: 2\n"}, failing("exited 1: alerts firing: 2")),
    ({"rc": 2, "stdout": "  checked\n3 pods pending  ", "stderr": "  "}, failing("exited 2: 3 pods pending")),
    ({"rc": 3, "stdout": "", "stderr": ""}, failing("exited 3")),
    # A try stopped at its timeout has no exit code, only the message of the try.
    ({"failed": True, "msg": "The command action failed to execute in the expected time frame (61) and was "
                             "terminated"},
     failing("exited ?: The command action failed to execute in the expected time frame (61) and was terminated")),
])
def test_a_command(result, expected):
    assert verdict({"command": ["check"]}, command=result, http=SKIPPED) == expected


def test_a_command_s_long_output_is_cut():
    line = " ".join(["pending"] * 40)
    reason = verdict({"command": "check"}, command={"rc": 1, "stderr": line})["reason"]
    assert reason == "exited 1: " + do_truncate(Environment(), line, 200) and reason.endswith("...")


@pytest.mark.parametrize("gate, result, expected", [
    ({"url": URL}, {"status": 200}, PASSED),
    ({"url": URL, "status_code": 204}, {"status": 204}, PASSED),
    ({"url": URL, "status_code": ["202", [204]]}, {"status": "204"}, PASSED),
    ({"url": URL}, {"status": 503, "msg": "Status code was 503 and not [200]"},
     failing("HTTP 503 from %s (expected 200)" % URL)),
    ({"url": URL, "status_code": [204, 202]}, {"status": 200},
     failing("HTTP 200 from %s (expected 204 or 202)" % URL)),
    ({"url": URL, "status_code": None}, {"status": 200}, failing("HTTP 200 from %s (expected )" % URL)),
    ({"url": URL}, {"status": -1, "msg": "Request failed: <urlopen error [Errno 111] Connection refused>"},
     failing("no answer from %s (<urlopen error [Errno 111] Connection refused>)" % URL)),
    ({"url": URL}, {"msg": "Status code was -1 and not [200]: Request failed: <urlopen error timed out>"},
     failing("no answer from %s (<urlopen error timed out>)" % URL)),
    ({"url": URL}, {}, failing("no answer from %s ()" % URL)),
    ({"url": URL}, {"status": "503.0"}, failing("HTTP 503 from %s (expected 200)" % URL)),
    ({"url": URL}, {"status": "n/a"}, failing("HTTP 0 from %s (expected 200)" % URL)),
    ({"url": URL, "expect": '"result":[]'}, {"status": 200, "content": '{"data":{"result":[]}}'}, PASSED),
    ({"url": URL, "expect": '"result":[]'}, {"status": 200, "content": '{"data":{"result":[{"alert":1}]}}'},
     failing('the answer of %s does not contain "\\"result\\":[]"' % URL)),
    ({"url": URL, "expect": "up"}, {"status": 200}, failing('the answer of %s does not contain "up"' % URL)),
])
def test_a_url(gate, result, expected):
    assert verdict(gate, command=SKIPPED, http=result, url_shown=URL) == expected


def test_a_url_s_long_error_is_cut():
    error = " ".join(["refused"] * 40)
    reason = verdict({"url": URL}, http={"status": -1, "msg": error}, url_shown=URL)["reason"]
    assert reason == "no answer from %s (%s)" % (URL, do_truncate(Environment(), error, 200))


def test_a_task_file_judged_has_passed():
    assert verdict({"tasks": "gate.yml"}, command=SKIPPED, http=SKIPPED) == PASSED
    assert verdict({}) == PASSED


def test_the_filter_checks_its_input():
    assert health_gate_verdict({"command": "true"}, command={"rc": 0}) == PASSED
    assert health_gate_verdict({"url": URL}, http={"status": 500}, url_shown=None) == failing(
        "HTTP 500 from  (expected 200)")
    with pytest.raises(AnsibleFilterError, match="the health gate"):
        health_gate_verdict("true")
    with pytest.raises(AnsibleFilterError, match="http must be"):
        health_gate_verdict({"url": URL}, http="200")
    with pytest.raises(AnsibleFilterError, match="expect and the answer must be text"):
        health_gate_verdict({"url": URL, "expect": None}, http={"status": 200, "content": "up"})
