# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection settings (connection.py) -> a small, fast Kubernetes REST client.

Requests do not go through ``kubernetes.client``'s generated API and model classes: the
modules only speak JSON to a handful of resources, so they use urllib3 (a dependency of
the ``kubernetes`` package) directly, configured from the library's ``Configuration``,
with retries on transient failures, a user agent naming the collection, and watches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import random
import re
import time

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.connection import _short, _token_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    ApiError,
    ConfigurationError,
    ConflictError,
    ConnectionFailedError,
    MaintenanceError,
    NotFoundError,
    api_error,
    describe_object,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.identity import USER_AGENT_PREFIX
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.version import COLLECTION_VERSION

USER_AGENT = USER_AGENT_PREFIX + COLLECTION_VERSION
# Every group's resources in one response (Kubernetes 1.30+); plain JSON from older servers.
AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

# Where each kind lives: (API prefix, plural, namespaced).
RESOURCES = {
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Namespace": ("/api/v1", "namespaces", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Event": ("/api/v1", "events", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "SelfSubjectAccessReview": ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews", False),
    "VirtualMachine": ("/apis/kubevirt.io/v1", "virtualmachines", True),
    "VirtualMachineInstance": ("/apis/kubevirt.io/v1", "virtualmachineinstances", True),
    "VirtualMachineInstanceMigration": ("/apis/kubevirt.io/v1", "virtualmachineinstancemigrations", True),
    "KubeVirt": ("/apis/kubevirt.io/v1", "kubevirts", True),
    "HyperConverged": ("/apis/hco.kubevirt.io/v1beta1", "hyperconvergeds", True),
    "HyperConvergedV1": ("/apis/hco.kubevirt.io/v1", "hyperconvergeds", True),
    "APIService": ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    "NodeMaintenance": ("/apis/nodemaintenance.medik8s.io/v1beta1", "nodemaintenances", False),
    "LegacyNodeMaintenance": ("/apis/nodemaintenance.kubevirt.io/v1beta1", "nodemaintenances", False),
    # Remediation that maintenance pauses (module_utils/remediation.py): medik8s NodeHealthCheck,
    # OpenShift's machine API and Cluster API MachineHealthChecks with the Machines they select.
    "NodeHealthCheck": ("/apis/remediation.medik8s.io/v1alpha1", "nodehealthchecks", False),
    "MachineHealthCheck": ("/apis/machine.openshift.io/v1beta1", "machinehealthchecks", True),
    "Machine": ("/apis/machine.openshift.io/v1beta1", "machines", True),
    "CapiMachineHealthCheck": ("/apis/cluster.x-k8s.io/v1beta1", "machinehealthchecks", True),
    "CapiMachine": ("/apis/cluster.x-k8s.io/v1beta1", "machines", True),
    # node_decommission power_off=bmh (module_utils/power.py): Metal3's BareMetalHost.
    "BareMetalHost": ("/apis/metal3.io/v1alpha1", "baremetalhosts", True),
}

# KubeVirt's aggregated API (served by virt-api) of the actions virtctl performs: start, stop,
# restart, migrate of VirtualMachines; pause, freeze, softreboot... of VirtualMachineInstances.
# Routes: kubevirt/kubevirt pkg/virt-api/api.go (subws.PUT(...SubResourcePath("restart")) etc.).
SUBRESOURCE_GROUP = "subresources.kubevirt.io"
SUBRESOURCE_APIS = {
    "VirtualMachine": "/apis/%s/v1" % SUBRESOURCE_GROUP,
    "VirtualMachineInstance": "/apis/%s/v1" % SUBRESOURCE_GROUP,
}

_TRANSIENT_STATUS = (500, 502, 503, 504)
_VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}

# Writes ``update_guarded`` makes before it gives up on an object that keeps changing.
GUARDED_ATTEMPTS = 5

# A list's continue token, read from the start of the raw page (ListMeta precedes the items).
_CONTINUE = re.compile(br'^\{[^\[]*?"metadata":\{[^{}]*?"continue":"([^"\\]*)"')
# An object's managedFields (the last key of its metadata, straight before "spec"), for lists
# whose transform drops them anyway: about a third of a pod's JSON, not worth decoding. The
# match cannot leave the object: managedFields hold no brackets, every object outside them does.
_MANAGED_FIELDS = re.compile(br',"managedFields":\[[^\[\]]*\]\}(?=,"spec":)')

_PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


def api_version_of(kind):
    """(API group, 'group/version' as in apiVersion, plural) of a kind of ``RESOURCES``."""
    base, plural, _namespaced = RESOURCES[kind]
    version = base[len("/apis/"):] if base.startswith("/apis/") else base[len("/api/"):]
    return (version.split("/")[0] if "/" in version else ""), version, plural


def resource_path(kind, name=None, namespace=None, subresource=None, prefix=None):
    """The URL path of a kind (all namespaces when ``namespace`` is None)."""
    base, plural, namespaced = RESOURCES[kind]
    if prefix:
        base = prefix
    parts = [base]
    if namespaced and namespace:
        parts.append("namespaces/%s" % namespace)
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))


class KubeClient:
    """JSON over HTTPS to the Kubernetes API, with retries and watches: the one service layer
    every request of the collection goes through (reads, the pager, watches, writes, the
    guarded update, KubeVirt's subresource API, discovery).

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
        self._served = None  # {"/apis/<group>/<version>": set of plurals}, filled by discovery
        self._aggregated_discovery = True
        self._actions = {}  # {API prefix: resource names its discovery lists}, filled by actions_served
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

    def _renew_credentials(self):
        """After a 401: load the credentials from scratch; True when there is something new to try."""
        credentials = self.settings.credentials
        if credentials is None:
            return False
        before = self.headers.get("Authorization")
        credentials.renew()
        return self._authorization() != before

    # -- low level -----------------------------------------------------------------

    def request(self, method, path, body=None, params=None, content_type="application/json",
                obj="the API server", verb=None, retry_429=True, timeout=None, stream=False, accept=None):
        """One API call; returns decoded JSON (or the raw response when ``stream``).

        The layer's own building block: other files use the methods below (a unit test reads
        the sources to keep it so), which name the object in every error.
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
                # A token can expire before the time it announced (or be revoked): renew once.
                renewed = True
                if self._renew_credentials():
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

    # -- resources -------------------------------------------------------------------

    def get(self, kind, name, namespace=None, subresource=None):
        return self.request("GET", resource_path(kind, name, namespace, subresource),
                            obj=describe_object(kind, name, namespace))

    def get_or_none(self, kind, name, namespace=None):
        try:
            return self.get(kind, name, namespace)
        except NotFoundError:
            return None

    def list(self, kind, namespace=None, label_selector=None, field_selector=None, page_size=500,
             transform=None, drop_managed_fields=False):
        """All items (paginated); returns (items, resourceVersion of the list).

        ``transform(item)`` is applied page by page, so only the transformed items of a large
        list stay in memory (the snapshot of a plan keeps slim pods). ``drop_managed_fields``
        skips decoding the objects' managedFields, for transforms that drop them anyway.
        The next page is fetched while this one is decoded (the API server serializes it
        meanwhile), which on large clusters hides most of the waiting.
        """
        path = resource_path(kind, namespace=namespace)
        params = {"labelSelector": label_selector or None, "fieldSelector": field_selector or None,
                  "limit": page_size}
        obj = describe_object(kind + "s", namespace=namespace)

        def fetch(cont):
            resp = self.request("GET", path, params=dict(params, **{"continue": cont}), obj=obj, verb="list",
                                stream=True, timeout=self.request_timeout)
            try:
                return resp.read()
            finally:
                resp.release_conn()

        items = []
        ahead_pool = None  # one thread, started only for lists of more than one page
        try:
            raw = fetch(None)
            while True:
                match = _CONTINUE.match(raw)
                ahead = None
                if match:
                    if ahead_pool is None:
                        ahead_pool = ThreadPoolExecutor(1)
                    ahead = ahead_pool.submit(fetch, match.group(1).decode("ascii"))
                if drop_managed_fields:
                    raw = _MANAGED_FIELDS.sub(b"}", raw)
                data = json.loads(raw) if raw else {}
                raw = None
                page = data.get("items") or []
                items.extend(transform(i) for i in page) if transform else items.extend(page)
                meta = data.get("metadata") or {}
                cont = meta.get("continue")
                if not cont:
                    if ahead is not None:
                        ahead.cancel()
                    return items, meta.get("resourceVersion")
                data = page = None
                # The token was not where it is expected (another server's formatting): fetch in turn.
                raw = ahead.result() if ahead is not None else fetch(cont)
        finally:
            if ahead_pool is not None:
                ahead_pool.shutdown(wait=True)

    def create(self, kind, body, namespace=None, subresource=None, name=None, retry_429=True, verb="create"):
        meta = body.get("metadata") or {}
        name_for_msg = name or meta.get("name")
        path = resource_path(kind, name if subresource else None, namespace, subresource)
        try:
            return self.request("POST", path, body=body, obj=describe_object(kind, name_for_msg, namespace),
                                verb=verb, retry_429=retry_429)
        except ConflictError as exc:
            # The answer to an earlier attempt was lost and the retry found the object: it is
            # ours when it carries everything we sent (labels, annotations, spec), else not.
            if subresource or not meta.get("name") or not getattr(exc, "maybe_applied_before", False):
                raise
            existing = self.get_or_none(kind, meta["name"], namespace or meta.get("namespace"))
            if existing is None or not created_from(existing, body):
                raise
            return existing

    def patch(self, kind, name, patch, namespace=None, patch_type="merge", subresource=None):
        return self.request("PATCH", resource_path(kind, name, namespace, subresource), body=patch,
                            content_type=_PATCH_CONTENT_TYPES[patch_type], obj=describe_object(kind, name, namespace))

    def replace(self, kind, body, namespace=None, subresource=None):
        """PUT the whole object; its ``metadata.resourceVersion`` (when set) makes a stale write a 409."""
        name = body["metadata"]["name"]
        return self.request("PUT", resource_path(kind, name, namespace, subresource), body=body,
                            obj=describe_object(kind, name, namespace), verb="update")

    def update_guarded(self, kind, name, compute, namespace=None, current=None, patch_type="merge",
                       subresource=None, write=True, attempts=GUARDED_ATTEMPTS, create_missing=False,
                       details=None):
        """Read, decide, write with optimistic concurrency; returns ``(outcome, object after)``.

        ``compute(obj) -> (change, outcome)`` decides from the object as it is now (``current``
        at first when given, else read); an empty ``change`` writes nothing. The write carries
        a precondition, so a concurrent writer makes it fail instead of being overwritten:

        * ``merge``: a merge patch with the ``resourceVersion`` read (a stale one is a 409);
        * ``json``: a JSON patch whose own ``test`` operations are the precondition (a failed
          test is a bare 422, like an invalid patch: when the recomputed operations are the
          ones refused, nothing they test changed and the 422 is raised as it is);
        * ``replace``: a PUT of the object ``compute`` returns, with the ``resourceVersion`` read.

        With ``create_missing`` a missing object reaches ``compute`` as None and the change is
        created (a concurrent create is a 409 as well). After a refused write the object is read
        again and ``compute`` called again, so the outcome describes what was really done; after
        ``attempts`` refused writes a ConflictError says the object kept changing. With
        ``write=False`` (check mode) ``compute`` runs once and nothing is sent.
        """
        obj = current
        read = current is None
        refused = None
        last = None
        for _attempt in range(attempts):
            if read:
                obj = self.get_or_none(kind, name, namespace) if create_missing else self.get(kind, name, namespace)
            read = True
            change, outcome = compute(obj)
            if not change or not write:
                return outcome, obj
            if refused is not None and change == refused[0]:
                raise refused[1]  # the object is as the patch tested it: the patch itself is wrong
            try:
                return outcome, self._write_guarded(kind, name, namespace, obj, change, patch_type, subresource)
            except ApiError as exc:
                if not (isinstance(exc, ConflictError) or (patch_type == "json" and exc.status == 422)):
                    raise
                refused = (change, exc) if exc.status == 422 else None
                last = exc
        raise ConflictError("Cannot update %s: it kept changing under %d attempts; try again."
                            % (describe_object(kind, name, namespace), attempts),
                            status=409, reason="conflict", **(details or {})) from last

    def _write_guarded(self, kind, name, namespace, obj, change, patch_type, subresource):
        if obj is None:
            return self.create(kind, change, namespace=namespace)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if patch_type == "json":
            return self.patch(kind, name, change, namespace=namespace, patch_type="json", subresource=subresource)
        body = copy.deepcopy(change)
        body.setdefault("metadata", {})["resourceVersion"] = version
        if patch_type == "replace":
            return self.replace(kind, body, namespace=namespace, subresource=subresource)
        return self.patch(kind, name, body, namespace=namespace, patch_type=patch_type, subresource=subresource)

    def subresource_action(self, kind, name, namespace, action, body=None):
        """PUT an action of KubeVirt's ``subresources.kubevirt.io`` API (``restart``, ``migrate``...)."""
        path = resource_path(kind, name, namespace, action, prefix=SUBRESOURCE_APIS[kind])
        # virt-api's action routes declare no response type: go-restful answers 406 unless the
        # request accepts any (as client-go's, and so virtctl's, requests do).
        return self.request("PUT", path, body=body if body is not None else {}, verb=action,
                            obj=describe_object(kind, name, namespace), accept="application/json, */*")

    def api_available(self, group_version, resource=None):
        """Whether an aggregated API (``subresources.kubevirt.io/v1``) answers right now.

        Reads its APIService's Available condition (one request: an unavailable aggregated API
        would otherwise answer 503 until the retry budget runs out), falling back to discovery
        of the group version when the APIService may not be read. ``resource``: that
        resource (or one of its subresources) must be among those served.
        """
        group, version = group_version.split("/")
        try:
            service = self.get("APIService", "%s.%s" % (version, group))
        except NotFoundError:
            return False
        except ApiError as exc:
            if exc.status != 403:
                return False
            try:
                data = self.request("GET", "/apis/%s" % group_version, obj="API group %s" % group, verb="discover")
            except MaintenanceError:
                return False
            names = [r.get("name") or "" for r in data.get("resources") or []]
            return bool(names) if resource is None else any(n.split("/")[0] == resource for n in names)
        for cond in (service.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Available":
                return cond.get("status") == "True"
        return False

    def delete(self, kind, name, namespace=None, body=None, missing_ok=True):
        try:
            return self.request("DELETE", resource_path(kind, name, namespace), body=body,
                                obj=describe_object(kind, name, namespace))
        except NotFoundError:
            if missing_ok:
                return None
            raise

    def actions_served(self, kind):
        """The actions of ``kind`` its ``SUBRESOURCE_APIS`` API lists in discovery (empty when that
        API is not served or not answering), e.g. ``{"evacuate/cancel", "pause", ...}``: which
        actions this release of virt-api has (pkg/virt-api/api.go lists them in its
        APIResourceList). Asked once per client."""
        prefix = SUBRESOURCE_APIS[kind]
        plural = RESOURCES[kind][1]
        if prefix not in self._actions:
            try:
                data = self.request("GET", prefix, obj="API group %s" % prefix.split("/apis/")[-1], verb="discover")
            except (ApiError, ConnectionFailedError):
                data = {}
            self._actions[prefix] = [r.get("name") or "" for r in data.get("resources") or []]
        return set(name.split("/", 1)[1] for name in self._actions[prefix] if name.startswith(plural + "/"))

    def kind_served(self, kind):
        """True when the API server serves ``kind`` (its CRD is installed).

        One aggregated discovery request (``GET /apis``, Kubernetes 1.30+) answers for every
        group at once; older servers are asked per group version. Answers are kept for the
        client's lifetime (one module run).
        """
        base, plural, _namespaced = RESOURCES[kind]
        if base == "/api/v1":
            return True
        if self._served is None:
            self._served = {}
            if self._aggregated_discovery:
                self._discover_all()
        if base not in self._served and not self._aggregated_discovery:
            try:
                data = self.request("GET", base, obj="API group %s" % base.split("/apis/")[-1], verb="discover")
            except NotFoundError:
                data = {}
            self._served[base] = set(r.get("name") for r in data.get("resources") or [])
        return plural in self._served.get(base, ())

    def _discover_all(self):
        """Fill the served resources from aggregated discovery; on a server without it, ask per group."""
        try:
            data = self.request("GET", "/apis", obj="the API groups", verb="discover", accept=AGGREGATED_DISCOVERY)
        except ApiError:
            data = {}
        if data.get("kind") != "APIGroupDiscoveryList":
            self._aggregated_discovery = False
            return
        for group in data.get("items") or []:
            name = (group.get("metadata") or {}).get("name")
            for version in group.get("versions") or []:
                base = "/apis/%s/%s" % (name, version.get("version"))
                self._served[base] = set(r.get("resource") for r in version.get("resources") or [])

    def watch(self, kind, namespace=None, label_selector=None, field_selector=None,
              resource_version=None, timeout_seconds=60):
        """Yield watch events (dicts with 'type' and 'object') until the server closes."""
        params = {
            "watch": "true",
            "labelSelector": label_selector or None,
            "fieldSelector": field_selector or None,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": int(max(1, timeout_seconds)),
        }
        resp = self.request("GET", resource_path(kind, namespace=namespace), params=params, stream=True,
                            obj=describe_object(kind + "s", namespace=namespace), verb="watch",
                            timeout=timeout_seconds + 15)
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (self._urllib3.exceptions.HTTPError, OSError):
            return  # the caller re-lists and re-watches
        finally:
            resp.release_conn()


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


def _subset(wanted, found):
    if isinstance(wanted, dict):
        return isinstance(found, dict) and all(_subset(v, found.get(k)) for k, v in wanted.items())
    return wanted == found


def created_from(existing, body):
    """True when ``existing`` carries every label, annotation and spec field of ``body``."""
    wanted_meta, found_meta = body.get("metadata") or {}, existing.get("metadata") or {}
    return all(_subset(wanted_meta.get(k) or {}, found_meta.get(k) or {}) for k in ("labels", "annotations")) \
        and _subset(body.get("spec") or {}, existing.get("spec") or {})


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
