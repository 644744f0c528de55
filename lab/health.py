"""Health probes of the lab's HTTP(S) endpoints."""

import http.client
import json
import ssl


def http_ok(host, port, path, tls=None, timeout=3):
    """True if GET ``path`` answers 200; any connection problem counts as not ok.

    ``tls`` is None for plain HTTP, else an ``ssl.SSLContext``.
    """
    try:
        if tls is None:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False
    if response.status != 200:
        return False
    if path == "/health":  # etcd answers 200 with {"health":"false"} while degraded
        try:
            return json.loads(body).get("health") == "true"
        except ValueError:
            return False
    return True


def client_tls(ca_cert, client_cert, client_key):
    """TLS context that verifies the apiserver and presents a client certificate."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    context.load_cert_chain(str(client_cert), str(client_key))
    return context


def unverified_tls():
    """For controller-manager and scheduler, which serve a self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
