"""maintenance_notify against a small HTTP receiver on 127.0.0.1: bodies, retries, failures that never
fail the task, and webhook URLs kept out of results and warnings."""

import json

import pytest

from module_runner import assert_documented, record_warnings, run, run_module

from lab.webhooks import DownEndpoint, WebhookReceiver

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.notifications import webhooks
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import maintenance_notify

SECRET_PATH = "/services/T000/B000/s3cretWebhookToken"


@pytest.fixture
def receiver():
    with WebhookReceiver() as server:
        yield server


def args(receiver, **extra):
    values = {
        "webhooks": [{"url": receiver.base + SECRET_PATH, "format": "slack"},
                     {"url": receiver.base + "/plain", "headers": {"Authorization": "Bearer t0ken-value"}}],
        "event": "node_done",
        "run": "run-1",
        "node": "worker-3",
        "text": "worker-3 is done: 12 VMs migrated",
        "details": {"migrated": 12},
        "retry_delay": 0.01,
    }
    values.update(extra)
    return values


def test_each_webhook_gets_its_format(receiver, capsys):
    result = run(maintenance_notify, args(receiver), capsys)
    assert result["changed"] is True and result["failures"] == []
    assert [(d["webhook"], d["status"], d["attempts"]) for d in result["delivered"]] == [(1, 200, 1), (2, 200, 1)]
    (slack_path, _h, slack), (plain_path, headers, plain) = receiver.received
    assert slack_path == SECRET_PATH and slack == {"text": "worker-3 is done: 12 VMs migrated"}
    assert plain_path == "/plain" and headers["Authorization"] == "Bearer t0ken-value"
    assert plain["source"] == "kubevirt_ops.maintenance" and plain["event"] == "node_done"
    assert (plain["run"], plain["node"], plain["details"]) == ("run-1", "worker-3", {"migrated": 12})
    assert plain["time"].endswith("Z")
    assert_documented(result, maintenance_notify)
    # Only the scheme and host of a webhook are shown: its path holds a token.
    assert "s3cretWebhookToken" not in json.dumps(result) and "t0ken-value" not in json.dumps(result)
    assert result["delivered"][0]["target"] == receiver.base


def test_a_busy_endpoint_is_tried_again_and_a_broken_one_is_reported_without_failing(receiver, capsys, monkeypatch):
    warnings = record_warnings(monkeypatch)
    receiver.answers[SECRET_PATH] = [503, 429]
    receiver.answers["/plain"] = [500, 500, 500, 500]
    code, result = run_module(maintenance_notify, args(receiver), capsys)
    assert code == 0 and not result.get("failed")
    assert [(d["webhook"], d["attempts"]) for d in result["delivered"]] == [(1, 3)]
    assert [(f["webhook"], f["status"], f["attempts"], f["error"]) for f in result["failures"]] == [
        (2, 500, 3, "HTTP 500")]
    assert len(receiver.received) == 6
    assert warnings == ["The node_done notification to webhook 2 (%s) failed after 3 attempts: HTTP 500. The run "
                        "goes on." % receiver.base]


def test_a_client_error_is_not_retried_and_an_unreachable_endpoint_is_reported(receiver, capsys):
    receiver.answers["/plain"] = [404]
    with DownEndpoint() as down:
        hooks = [{"url": receiver.base + "/plain"}, {"url": down.base + SECRET_PATH, "format": "slack"}]
        result = run(maintenance_notify, args(receiver, webhooks=hooks, retries=1), capsys)
    assert not result.get("failed") and result["changed"] is False
    first, second = result["failures"]
    assert (first["status"], first["attempts"], first["error"]) == (404, 1, "HTTP 404")
    assert second["status"] is None and second["attempts"] == 2 and second["error"]
    assert "s3cretWebhookToken" not in json.dumps(result)


def test_check_mode_and_no_webhooks_send_nothing(receiver, capsys):
    checked = run(maintenance_notify, args(receiver), capsys, check=True)
    assert checked["changed"] is False and checked["delivered"] == [] and checked["message"]["node"] == "worker-3"
    assert run(maintenance_notify, args(receiver, webhooks=[]), capsys)["changed"] is False
    assert receiver.received == []


@pytest.mark.parametrize("hook, message", [
    ({"url": "hooks.example.com/x"}, "Option webhooks[1].url must be an http:// or https:// URL, not a value without "
                                     "http:// or https://."),
    ({"url": "ftp://hooks.example.com/s3cret"}, "Option webhooks[1].url must be an http:// or https:// URL, not "
                                                "ftp://hooks.example.com."),
])
def test_bad_webhooks_are_one_sentence_and_nothing_is_sent(receiver, capsys, hook, message):
    result = run(maintenance_notify, args(receiver, webhooks=[{"url": receiver.base + "/plain"}, hook]), capsys)
    assert result["failed"] and result["msg"] == message.replace("[1]", "[2]")
    assert "s3cret" not in json.dumps(result) and receiver.received == []


def test_a_long_text_is_cut_for_slack():
    body = json.loads(webhooks.body("slack", webhooks.message("run_finished", "x" * 5000)))
    assert len(body["text"]) == webhooks.TEXT_LIMIT and body["text"].endswith("...")
