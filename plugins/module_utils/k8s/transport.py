# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How one request reaches the API server: the urllib3 pool (TLS, client certificate,
server name, proxy), the Authorization header renewed by the credentials, and retries
with jittered backoff on transient failures.

Requests do not go through ``kubernetes.client``'s generated API and model classes: the
modules only speak JSON to a handful of resources, so they use urllib3 (a dependency of
the ``kubernetes`` package) directly, configured from the library's ``Configuration``,
with a user agent naming the collection. ``KubeClient`` (client.py) is the one service
layer built on it; nothing else sends a request.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import time

from urllib.parse import urlencode

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import _short, _token_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ConfigurationError,
    ConnectionFailedError,
    api_error,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import USER_AGENT_PREFIX
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.version import COLLECTION_VERSION

USER_AGENT = USER_AGENT_PREFIX + COLLECTION_VERSION

_TRANSIENT_STATUS = (500, 502, 503, 504)
_VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


class ApiTransport:
    """JSON over HTTPS to the Kubernetes API, with retries: ``request`` sends one API call.

    Transient failures (connection refused/reset, 500/502/503/504, 429 with Retry-After on
    ordinary requests) are retried with jittered backoff up to ``retry_budget`` seconds.
    Evictions pass ``retry_429=False``: there a 429 is an answer, not a failure.
    """

    def __init__(self, settings, retry_budget=30.0, request_timeout=30.0, pool_size=16):
        import urllib3  # lazy: keeps module start-up light

        self.settings = settings
        self.retry_budget = retry_budget
        self.request_timeout = request_timeout
        self.requests_made = 0
        self._urllib3 = urllib3
        # urllib3 2.x exports it at the top level, 1.26 only from _collections.
        self._header_dict = getattr(urllib3, "HTTPHeaderDict", None)
        if self._header_dict is None:
            from urllib3._collections import HTTPHeaderDict

            self._header_dict = HTTPHeaderDict
        self._pool_size = pool_size
        self._pool = self._make_pool()
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if settings.token:
            self.headers["Authorization"] = _authorization(settings.token)
        if settings.impersonate_user:
            self.headers["Impersonate-User"] = settings.impersonate_user
        self.impersonate_groups = list(settings.impersonate_groups)

    def _make_pool(self):
        """A urllib3 pool with the TLS settings (CA, client certificate, server name) and proxy."""
        urllib3 = self._urllib3
        settings = self.settings
        kwargs = dict(maxsize=self._pool_size, block=False, retries=False)
        if settings.host.startswith("https"):
            kwargs["cert_reqs"] = "CERT_REQUIRED" if settings.verify else "CERT_NONE"
            if settings.ca_cert and settings.verify:
                kwargs["ca_certs"] = os.path.expanduser(settings.ca_cert)
            if settings.client_cert:
                kwargs["cert_file"] = os.path.expanduser(settings.client_cert)
            if settings.client_key:
                kwargs["key_file"] = os.path.expanduser(settings.client_key)
            if settings.tls_server_name:
                # The name sent in SNI and checked against the certificate (kubeconfig tls-server-name).
                kwargs["server_hostname"] = settings.tls_server_name
            if not settings.verify:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if not settings.proxy:
            return urllib3.PoolManager(**kwargs)
        if settings.proxy.split(":", 1)[0].lower() in ("socks4", "socks4a", "socks5", "socks5h"):
            try:
                from urllib3.contrib.socks import SOCKSProxyManager
            except ImportError as exc:
                raise ConfigurationError(
                    "The SOCKS proxy %s needs the Python library PySocks on the host that runs this module."
                    % _proxy_for_message(settings.proxy)) from exc
            return SOCKSProxyManager(settings.proxy, **kwargs)
        return urllib3.ProxyManager(settings.proxy, **kwargs)

    def _authorization(self):
        """The Authorization header for the next request (renewed by the credentials when expired)."""
        credentials = self.settings.credentials
        if credentials is None:
            return self.headers.get("Authorization")
        value = credentials.header()
        if value and value != self.headers.get("Authorization"):
            self.settings.add_secret(value)
            self.settings.add_secret(_token_of(value))
            self.headers["Authorization"] = value
        return value

    def _renew_credentials(self, used):
        """After a 401 to a request sent with Authorization ``used``: load the credentials from scratch,
        unless another thread already did since; True when there is something new to try."""
        credentials = self.settings.credentials
        if credentials is None:
            return False
        if self._authorization() == used:
            credentials.renew()
        return self._authorization() != used

    # -- low level -----------------------------------------------------------------

    def request(self, method, path, body=None, params=None, content_type="application/json",
                obj="the API server", verb=None, retry_429=True, timeout=None, stream=False, accept=None):
        """One API call; returns decoded JSON (or the raw response when ``stream``).

        The layer's own building block: other files use KubeClient's methods (client.py; a unit
        test reads the sources to keep it so), which name the object in every error.
        """
        url = self._url(path, params)
        headers, data = self._headers_and_body(body, content_type, accept)
        verb = verb or _VERBS[method]
        deadline = time.monotonic() + self.retry_budget
        attempt = 0
        renewed = False
        # A create whose answer was lost (the connection broke after the request was sent, or a
        # gateway timed out) may have been applied: a 409 on the retry is then no proof that
        # someone else created the object (``create`` reads it back).
        maybe_applied = False
        while True:
            attempt += 1
            try:
                resp = self._send(method, url, data, headers, stream, timeout)
            except self._urllib3.exceptions.SSLError as exc:
                raise self._tls_failed(verb, obj, exc) from exc
            except (self._urllib3.exceptions.HTTPError, OSError) as exc:
                maybe_applied = maybe_applied or self._lost_after_sending(method, exc)
                if time.monotonic() < deadline:
                    _backoff(attempt, deadline)
                    continue
                raise self._unreachable(verb, obj, exc) from exc
            if stream and resp.status < 300:
                return resp
            status = resp.status
            raw = resp.data if not stream else resp.read()
            if status < 300:
                return json.loads(raw) if raw else {}
            if status == 401 and not renewed:
                # A token can expire before the time it announced (or be revoked): renew once. The
                # threads of a drain share the credentials: compare with what this request sent.
                renewed = True
                if self._renew_credentials(headers.get("Authorization")):
                    continue
            retry_after = _retry_after(resp)
            if _is_transient(status, retry_429) and time.monotonic() < deadline:
                maybe_applied = maybe_applied or _gateway_may_have_applied(method, status)
                _backoff(attempt, deadline, retry_after)
                continue
            error = api_error(status, verb, obj, raw, retry_after=retry_after)
            error.maybe_applied_before = maybe_applied
            raise error

    def _url(self, path, params):
        """The full URL of ``path`` with the query parameters that have a value."""
        url = self.settings.host + path
        fields = {k: v for k, v in (params or {}).items() if v is not None}
        if fields:
            url += "?" + urlencode(fields)
        return url

    def _headers_and_body(self, body, content_type, accept):
        """The request headers (without Authorization, set per attempt) and the encoded body."""
        # One header line per impersonated group, as the API server expects.
        headers = self._header_dict(self.headers)
        if accept:
            headers["Accept"] = accept
        for group in self.impersonate_groups:
            headers.add("Impersonate-Group", group)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode("utf-8")
        return headers, data

    def _send(self, method, url, data, headers, stream, timeout):
        """One attempt: counts it, sets the current Authorization and returns urllib3's response."""
        self.requests_made += 1
        authorization = self._authorization()
        if authorization:
            headers["Authorization"] = authorization
        if stream:
            read_timeout = timeout
        else:
            read_timeout = timeout or self.request_timeout
        return self._pool.request(
            method, url, body=data, headers=headers, preload_content=not stream,
            timeout=self._urllib3.Timeout(connect=10.0, read=read_timeout),
        )

    def _lost_after_sending(self, method, exc):
        """True when a create failed in a way that may have reached the server (not a connect timeout)."""
        return method == "POST" and not isinstance(exc, self._urllib3.exceptions.ConnectTimeoutError)

    def _tls_failed(self, verb, obj, exc):
        return ConnectionFailedError(
            "Cannot %s %s: TLS verification of %s failed (wrong CA certificate or server name?): %s."
            % (verb, obj, self.settings.host, _short(exc)), host=self.settings.host)

    def _unreachable(self, verb, obj, exc):
        return ConnectionFailedError(
            "Cannot %s %s: the API server %s is unreachable (%s)." % (verb, obj, self.settings.host, _short(exc)),
            host=self.settings.host)


def _is_transient(status, retry_429):
    """A status worth retrying: a server or gateway failure, or throttling when allowed."""
    return status in _TRANSIENT_STATUS or (status == 429 and retry_429)


def _gateway_may_have_applied(method, status):
    """A create answered by an internal error or a gateway timeout may still have been applied."""
    return method == "POST" and status in (500, 504)


def _retry_after(resp):
    try:
        return float(resp.headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def _backoff(attempt, deadline, retry_after=None):
    delay = retry_after if retry_after else min(5.0, 0.2 * (2 ** (attempt - 1)))
    delay = delay * (0.8 + 0.4 * random.random())
    time.sleep(max(0.0, min(delay, deadline - time.monotonic())))


def _authorization(token):
    """An Authorization header value from a token ("Basic ..." and "Bearer ..." are kept)."""
    if token.split(" ", 1)[0].lower() in ("basic", "bearer"):
        return token
    return "Bearer " + token


def _proxy_for_message(url):
    """A proxy URL without its user and password."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.rsplit("@", 1)[-1] if sep else url.rsplit("@", 1)[-1]
