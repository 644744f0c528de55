"""A small HTTP receiver for webhook notifications (module maintenance_notify), on 127.0.0.1.

It records every POST (path, headers, JSON body) in the order received and answers 200, or the
statuses a test queues for a path (``answers[path] = [503, 429]``: those first, then 200).
``DownEndpoint`` is an endpoint that is down: a port held bound and never listened on, so every
connection is refused and no other process can take the port meanwhile.
"""

import http.server
import json
import socket
import threading


class WebhookReceiver:
    def __init__(self, host="127.0.0.1"):
        self.received = []
        self.answers = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                with receiver._lock:
                    receiver.received.append((self.path, dict(self.headers), json.loads(data or b"null")))
                    statuses = receiver.answers.get(self.path) or []
                    status = statuses.pop(0) if statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = "http://%s:%d" % (host, self.server.server_address[1])

    def bodies(self, path):
        """The JSON bodies posted to ``path``, in order."""
        with self._lock:
            return [body for p, _headers, body in self.received if p == path]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class DownEndpoint:
    """An address where nothing answers, held for as long as the object lives (``close()`` frees it)."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.base = "http://%s:%d" % (host, self.sock.getsockname()[1])

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
