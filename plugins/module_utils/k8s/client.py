# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection settings (connection.py) -> a small, fast Kubernetes REST client: the one
service layer (reads, the pager, watches, writes, the guarded update, KubeVirt's
subresource API, discovery).

How a request is sent (TLS, credentials, retries) is transport.py's; where each kind lives
(``RESOURCES``, API paths) is kinds.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ApiError,
    ConflictError,
    ConnectionFailedError,
    MaintenanceError,
    NotFoundError,
    describe_object,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import (
    RESOURCES,
    SUBRESOURCE_APIS,
    resource_path,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.pages import continue_token
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.transport import ApiTransport

# Every group's resources in one response (Kubernetes 1.30+); plain JSON from older servers.
AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

# Writes ``update_guarded`` makes before it gives up on an object that keeps changing.
GUARDED_ATTEMPTS = 5

# An object's managedFields (the last key of its metadata, straight before "spec"), for lists
# whose transform drops them anyway: about a third of a pod's JSON, not worth decoding. The
# match cannot leave the object: managedFields hold no brackets, every object outside them does.
# Custom resources (VMIs, VMs) are written with their keys sorted, so there managedFields sit
# between "labels" and "name".
_MANAGED_FIELDS = re.compile(br',"managedFields":\[[^\[\]]*\]\}(?=,"spec":)')
_MANAGED_FIELDS_SORTED = re.compile(br'"managedFields":\[[^\[\]]*\],(?="name":)')

_PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class KubeClient(ApiTransport):
    """JSON over HTTPS to the Kubernetes API, with retries and watches: the one service layer
    every request of the collection goes through (reads, the pager, watches, writes, the
    guarded update, KubeVirt's subresource API, discovery). Requests are sent by
    ``ApiTransport.request`` (transport.py), with its retries.
    """

    def __init__(self, settings, retry_budget=30.0, request_timeout=30.0, pool_size=16):
        super().__init__(settings, retry_budget=retry_budget, request_timeout=request_timeout, pool_size=pool_size)
        self._served = None  # {"/apis/<group>/<version>": set of plurals}, filled by discovery
        self._aggregated_discovery = True
        self._actions = {}  # {API prefix: resource names its discovery lists}, filled by actions_served

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
                token = continue_token(raw)
                ahead = None
                if token:
                    if ahead_pool is None:
                        ahead_pool = ThreadPoolExecutor(1)
                    ahead = ahead_pool.submit(fetch, token)
                if drop_managed_fields:
                    raw = _MANAGED_FIELDS_SORTED.sub(b"", _MANAGED_FIELDS.sub(b"}", raw))
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
                # The token was not found undecoded (another server's formatting), or not the one decoded: in turn.
                raw = ahead.result() if ahead is not None and token == cont else fetch(cont)
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


def _subset(wanted, found):
    if isinstance(wanted, dict):
        return isinstance(found, dict) and all(_subset(v, found.get(k)) for k, v in wanted.items())
    return wanted == found


def created_from(existing, body):
    """True when ``existing`` carries every label, annotation and spec field of ``body``."""
    wanted_meta, found_meta = body.get("metadata") or {}, existing.get("metadata") or {}
    return all(_subset(wanted_meta.get(k) or {}, found_meta.get(k) or {}) for k in ("labels", "annotations")) \
        and _subset(body.get("spec") or {}, existing.get("spec") or {})
