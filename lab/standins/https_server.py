"""A threaded HTTPS JSON server for the webhooks and the aggregated API.

TLS is negotiated in each connection's own thread, so one slow client never holds
up the others (the apiserver calls webhooks with short timeouts).
"""

import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)


class Request:
    def __init__(self, method, path, query, headers, body, peer_cert):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.peer_cert = peer_cert

    def json(self):
        if not self.body:
            return {}
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, ssl_context, routes):
        self.ssl_context = ssl_context
        self.routes = routes
        super().__init__(address, handler)

    def finish_request(self, request, client_address):
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the apiserver's audit log has the requests
        log.debug(fmt, *args)

    def _dispatch(self):
        path, _, query = self.path.partition("?")
        body = self._read_body()
        peer = None
        try:
            peer = self.connection.getpeercert()
        except (AttributeError, ValueError):
            pass
        request = Request(self.command, path, query, self.headers, body, peer)
        status, payload = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
        for route in self.server.routes:
            match = route(request)
            if match is not None:
                try:
                    status, payload = match()
                except Exception:
                    log.exception("%s %s failed", self.command, path)
                    status, payload = 500, {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": "internal error in the lab's stand-ins",
                        "code": 500,
                    }
                break
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _read_body(self):
        # The aggregator proxies request bodies chunked; an unread body left in the
        # socket would reset the connection under the proxy.
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


def serve(host, cert_file, key_file, routes, client_ca_pem=None, port=0):
    """Start serving on ``host`` (a free port unless given); returns (server, port).

    ``routes`` is a list of callables ``route(request) -> None | (() -> (status, json))``.
    With ``client_ca_pem``, clients may present a certificate signed by that CA
    (``request.peer_cert`` is then set); connections without one are still accepted.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if client_ca_pem:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(
            cadata=client_ca_pem.decode() if isinstance(client_ca_pem, bytes) else client_ca_pem
        )
    server = _Server((host, port), _Handler, ctx, routes)
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    threading.Thread(target=server.serve_forever, name=f"https-{host}", daemon=True).start()
    return server, server.server_address[1]
