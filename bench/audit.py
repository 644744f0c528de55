"""API requests by client, from the lab's kube-apiserver audit log.

The lab logs every request at Metadata level as JSON lines (``<state>/audit.log``).
A run is accounted by remembering the log's size before it starts and reading only
what was appended after it; of that, the events with stage ``ResponseComplete``
whose ``requestReceivedTimestamp`` falls in the run's window are counted, grouped by
the client's user agent. A watch opened before the window (a controller's informer)
is not counted; a watch opened by the measured client is counted once.
"""

import json
import os
import time
from collections import Counter
from datetime import datetime, timezone

# Events can reach the file a moment after the response: wait this long for stragglers.
FLUSH_SECONDS = 1.0


def _timestamp(text):
    # e.g. 2026-11-22T02:46:01.123456Z
    text = text.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]:0<6}"
        fmt = "%Y-%m-%dT%H:%M:%S.%f"
    else:
        fmt = "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()


def client_of(user_agent):
    """The product token of a user agent: ``kubectl/v1.32 (linux)...`` -> ``kubectl``."""
    return (user_agent or "-").split("/", 1)[0].split(" ", 1)[0] or "-"


class AuditLog:
    def __init__(self, path):
        self.path = str(path)

    def mark(self):
        """Where the log ends now (byte offset)."""
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    def events(self, offset, start, end, flush=True):
        """ResponseComplete events appended after ``offset`` and received in [start, end]."""
        if flush:
            time.sleep(FLUSH_SECONDS)
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return
        with handle:
            if offset > os.path.getsize(self.path):
                offset = 0  # the log was rotated or recreated
            handle.seek(offset)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # a line still being written
                if b'"ResponseComplete"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("stage") != "ResponseComplete":
                    continue
                received = _timestamp(event.get("requestReceivedTimestamp") or event.get("stageTimestamp"))
                if start <= received <= end:
                    yield event

    def count(self, offset, start, end):
        """Requests in the window: {client: n}, plus details per client (verbs, codes)."""
        by_client = Counter()
        verbs = {}
        codes = {}
        for event in self.events(offset, start, end):
            client = client_of(event.get("userAgent"))
            by_client[client] += 1
            verb = event.get("verb", "?")
            resource = (event.get("objectRef") or {}).get("resource", "")
            sub = (event.get("objectRef") or {}).get("subresource")
            if sub:
                resource += "/" + sub
            verbs.setdefault(client, Counter())[f"{verb} {resource}".strip()] += 1
            code = (event.get("responseStatus") or {}).get("code")
            codes.setdefault(client, Counter())[str(code)] += 1
        return {
            "by_client": dict(by_client.most_common()),
            "verbs": {c: dict(v.most_common()) for c, v in verbs.items()},
            "codes": {c: dict(v.most_common()) for c, v in codes.items()},
        }


def requests_of(counts, prefixes):
    """Sum of the requests of the clients whose product token starts with one of ``prefixes``."""
    return sum(n for client, n in counts["by_client"].items() if any(client.startswith(p) for p in prefixes))
