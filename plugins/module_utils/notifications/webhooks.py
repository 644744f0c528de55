# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Webhook notifications of a maintenance run: what is sent, where, and what became of it.

Two bodies: ``slack`` is the JSON an incoming webhook of Slack takes (``{"text": ...}``; Mattermost,
Rocket.Chat and other chat systems take it too), ``json`` is the whole message as data for anything
else. A notification never stops the work: an endpoint that fails is tried again briefly (a
connection error, 429 and 5xx answers), then reported. A webhook URL is a secret (Slack's holds its
token in the path): outside the request it is only ever shown as its scheme and host.

HTTP goes through Ansible's own ``open_url`` (proxies, CA bundles and certificate checks as every
other Ansible module does them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

SOURCE = "kubevirt_ops.maintenance"
FORMATS = ("slack", "json")
EVENTS = ("run_started", "node_done", "node_failed", "run_stopped", "run_finished", "node_decommissioned",
          "node_decommission_failed")
# Answers worth another try: the endpoint is busy or broken for a moment.
RETRIED_STATUSES = (408, 429, 500, 502, 503, 504)
TEXT_LIMIT = 3000  # Slack cuts a section's text at 3000 characters


def target(url):
    """What may be shown of a webhook URL: its scheme and host (never its path, query or user)."""
    from ansible.module_utils.six.moves.urllib.parse import urlsplit

    parts = urlsplit(url or "")
    host = parts.hostname or "?"
    if parts.port:
        host = "%s:%d" % (host, parts.port)
    return "%s://%s" % (parts.scheme or "?", host)


def check(webhooks):
    """Refuse webhooks that cannot be used, before anything is sent (one sentence, the option named)."""
    for index, hook in enumerate(webhooks or [], 1):
        url = hook.get("url") or ""
        if not url.startswith(("https://", "http://")):
            shown = target(url) if "://" in url else "a value without http:// or https://"
            raise InvalidInputError("Option webhooks[%d].url must be an http:// or https:// URL, not %s." % (index, shown),
                                    option="webhooks")
        if hook.get("format", "json") not in FORMATS:
            raise InvalidInputError("Option webhooks[%d].format must be one of %s, not %r." % (
                index, ", ".join(FORMATS), hook.get("format")), option="webhooks")


def message(event, text, run=None, node=None, details=None, now=None):
    """The message as data (the ``json`` body)."""
    return {
        "source": SOURCE,
        "event": event,
        "run": run,
        "node": node,
        "text": text,
        "details": details or {},
        "time": now,
    }


def body(hook_format, msg):
    """The bytes sent to a webhook of ``hook_format``."""
    if hook_format == "slack":
        text = msg["text"] if len(msg["text"]) <= TEXT_LIMIT else msg["text"][:TEXT_LIMIT - 3] + "..."
        return json.dumps({"text": text}).encode("utf-8")
    return json.dumps(msg, sort_keys=True).encode("utf-8")


class Delivery:
    """Sends one message to every webhook; ``send(url, data, headers, timeout)`` does one request and
    returns the HTTP status (raising for a failed connection)."""

    def __init__(self, send, retries=2, retry_delay=1.0, sleep=time.sleep):
        self.send = send
        self.retries = retries
        self.retry_delay = retry_delay
        self.sleep = sleep

    def deliver(self, webhooks, msg, timeout=10):
        delivered, failures = [], []
        for index, hook in enumerate(webhooks, 1):
            outcome = self._one(hook, body(hook.get("format") or "json", msg), timeout)
            entry = {"webhook": index, "target": target(hook["url"]), "format": hook.get("format") or "json"}
            entry.update(outcome)
            (delivered if outcome.get("error") is None else failures).append(entry)
        return delivered, failures

    def _one(self, hook, data, timeout):
        headers = {"Content-Type": "application/json"}
        headers.update(hook.get("headers") or {})
        error = None
        for attempt in range(1, self.retries + 2):
            try:
                status = self.send(hook["url"], data, headers, timeout)
            except Exception as exc:  # a connection that failed: DNS, refused, TLS, timeout
                status, error = None, _reason(exc)
            else:
                if 200 <= status < 300:
                    return {"status": status, "attempts": attempt, "error": None}
                error = "HTTP %d" % status
                if status not in RETRIED_STATUSES:
                    return {"status": status, "attempts": attempt, "error": error}
            if attempt <= self.retries:
                self.sleep(self.retry_delay * attempt)
        return {"status": status, "attempts": self.retries + 1, "error": error}


def _reason(exc):
    """Why a request failed, without the URL (urllib's errors may quote it)."""
    reason = getattr(exc, "reason", None) or exc
    text = "%s" % (reason,)
    return text.split(" for url:", 1)[0][:300] or exc.__class__.__name__
