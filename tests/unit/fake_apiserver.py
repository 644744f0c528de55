"""A tiny in-memory Kubernetes API server behind ``KubeClient``'s HTTP pool.

Tests build a real ``KubeClient`` and swap its urllib3 pool for ``FakeApiServer``, so the
client's own request building, error mapping and retries run unchanged. It keeps
resourceVersions (a stale PUT or a create of an existing name answers 409), simple label
and field selectors, API discovery for the kinds it serves, and watches that replay the
changes after a resourceVersion.
"""

import copy
import json
import threading
import time
from urllib.parse import parse_qs, urlsplit

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import ConnectionSettings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import RESOURCES


class FakeResponse:
    def __init__(self, status, body=None, headers=None, chunks=None, compact=False, sort_keys=False):
        self.status = status
        separators = (",", ":") if compact else None
        self.data = json.dumps(body, separators=separators, sort_keys=sort_keys).encode() if body is not None else b""
        self.headers = headers or {}
        self._chunks = chunks

    def read(self):
        return self.data

    def stream(self, _amt=None, decode_content=True):
        yield from self._chunks or []

    def release_conn(self):
        pass


def _match_labels(labels, selector):
    for term in [t.strip() for t in (selector or "").split(",") if t.strip()]:
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _match_fields(obj, selector):
    for term in [t for t in (selector or "").split(",") if t]:
        key, value = term.split("=", 1)
        current = obj
        for part in key.split("."):
            current = (current or {}).get(part) if isinstance(current, dict) else None
        if str(current if current is not None else "") != value:
            return False
    return True


class FakeApiServer:
    """Objects keyed by (kind, namespace, name); answers ``pool.request`` like an API server."""

    def __init__(self, served=None):
        self.objects = {}
        self.events = []  # (rv, kind, type, object)
        self.rv = 100
        self.requests = []
        self.lock = threading.Condition()
        self.served = set(served if served is not None else RESOURCES)
        self.fail_next = {}  # (method, kind) -> status, for one request
        self.before_write = None  # hook(method, kind, name) run before a write is applied
        self.handlers = {}  # path prefix -> handler(method, path, body) returning a FakeResponse

    # -- test helpers ------------------------------------------------------------------

    def add(self, kind, obj):
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            meta.setdefault("uid", "uid-%s" % self.rv)
            self.objects[(kind, meta.get("namespace") or "", meta["name"])] = obj
            self.events.append((self.rv, kind, "ADDED", copy.deepcopy(obj)))
            self.lock.notify_all()
            return obj

    def get(self, kind, name, namespace=""):
        return self.objects.get((kind, namespace or "", name))

    def writes(self, kind=None):
        return [r for r in self.requests if r[0] != "GET" and (kind is None or r[1] == kind)]

    # -- routing -------------------------------------------------------------------------

    def _route(self, path):
        # Namespaced kinds first: /api/v1/namespaces/NS/persistentvolumeclaims is not Namespace NS.
        for kind, (base, plural, namespaced) in sorted(RESOURCES.items(), key=lambda item: not item[1][2]):
            if not path.startswith(base + "/"):
                continue
            rest = path[len(base) + 1:].split("/")
            namespace = ""
            if namespaced and rest[0] == "namespaces" and len(rest) >= 3:
                namespace, rest = rest[1], rest[2:]
            if rest[0] != plural:
                continue
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else None
            return kind, namespace, name, sub
        return None

    def aggregated_discovery(self):
        """GET /apis as a 1.30+ server answers it: every served group version with its resources."""
        versions = {}
        for kind, (base, plural, _ns) in RESOURCES.items():
            if base.startswith("/apis/") and kind in self.served:
                group, version = base[len("/apis/"):].split("/")
                versions.setdefault(group, {}).setdefault(version, []).append({"resource": plural})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": [
            {"metadata": {"name": group}, "versions": [{"version": v, "resources": r} for v, r in by_version.items()]}
            for group, by_version in sorted(versions.items())]}

    def request(self, method, url, body=None, headers=None, preload_content=True, timeout=None):
        parts = urlsplit(url)
        params = dict((k, v[0]) for k, v in parse_qs(parts.query).items())
        path = parts.path
        if path == "/apis":
            self.requests.append((method, "discovery", path))
            return FakeResponse(200, self.aggregated_discovery())
        for kind, (base, plural, _ns) in RESOURCES.items():
            if path == base:
                self.requests.append((method, "discovery", base))
                resources = [{"name": p} for k, (b, p, _n) in RESOURCES.items() if b == base and k in self.served]
                if not resources:
                    return FakeResponse(404, {"kind": "Status", "message": "the server could not find the requested resource"})
                return FakeResponse(200, {"resources": resources})
        for prefix, handler in self.handlers.items():
            if path.startswith(prefix):
                self.requests.append((method, prefix, path))
                return handler(method, path, json.loads(body) if body else None)
        route = self._route(path)
        if route is None:
            return FakeResponse(404, {"kind": "Status", "message": "no route for %s" % path})
        kind, namespace, name, _sub = route
        self.requests.append((method, kind, name))
        status = self.fail_next.pop((method, kind), None)
        if status:
            return FakeResponse(status, {"kind": "Status", "message": "injected failure"})
        if kind not in self.served:
            return FakeResponse(404, {"kind": "Status", "message": "the server could not find the requested resource"})
        data = json.loads(body) if body else None
        if method == "GET" and params.get("watch") == "true":
            return self._watch(kind, namespace, params)
        if method == "GET" and name is None:
            return self._list(kind, namespace, params)
        if method != "GET" and self.before_write:
            self.before_write(method, kind, name)
        with self.lock:
            key = (kind, namespace, name)
            current = self.objects.get(key)
            if method == "GET":
                if current is None:
                    return FakeResponse(404, {"kind": "Status", "message": "%s %s not found" % (kind, name)})
                return FakeResponse(200, current)
            if method == "POST":
                name = data["metadata"]["name"]
                if (kind, namespace, name) in self.objects:
                    return FakeResponse(409, {"kind": "Status", "message": "%s %s already exists" % (kind, name)})
                data["metadata"].setdefault("namespace", namespace or None)
                if not namespace:
                    data["metadata"].pop("namespace", None)
                return FakeResponse(201, self._store(kind, namespace, name, data, "ADDED"))
            if current is None:
                return FakeResponse(404, {"kind": "Status", "message": "%s %s not found" % (kind, name)})
            if method == "PUT":
                if data["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return FakeResponse(409, {"kind": "Status", "message": "the object has been modified"})
                return FakeResponse(200, self._store(kind, namespace, name, data, "MODIFIED"))
            if method == "PATCH" and "json-patch" in str((headers or {}).get("Content-Type", "")):
                try:
                    patched = apply_json_patch(current, data)
                except JsonPatchError as exc:
                    return FakeResponse(422, {"kind": "Status", "message": str(exc)})
                return FakeResponse(200, self._store(kind, namespace, name, patched, "MODIFIED"))
            if method == "PATCH":
                wanted = ((data or {}).get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != current["metadata"]["resourceVersion"]:
                    return FakeResponse(409, {"kind": "Status", "message": "the object has been modified"})
                merged = _merge(copy.deepcopy(current), data)
                return FakeResponse(200, self._store(kind, namespace, name, merged, "MODIFIED"))
            if method == "DELETE":
                uid = ((data or {}).get("preconditions") or {}).get("uid")
                if uid and uid != current["metadata"].get("uid"):
                    return FakeResponse(409, {"kind": "Status", "message": "Precondition failed: UID in precondition: "
                                              "%s, UID in object meta: %s" % (uid, current["metadata"].get("uid"))})
                del self.objects[key]
                self.rv += 1
                self.events.append((self.rv, kind, "DELETED", copy.deepcopy(current)))
                self.lock.notify_all()
                return FakeResponse(200, current)
        return FakeResponse(405, {"kind": "Status", "message": "unsupported"})

    def _store(self, kind, namespace, name, obj, event):
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        obj["metadata"].setdefault("uid", "uid-%s" % self.rv)
        self.objects[(kind, namespace, name)] = obj
        self.events.append((self.rv, kind, event, copy.deepcopy(obj)))
        self.lock.notify_all()
        return obj

    def _selected(self, kind, namespace, params):
        for (k, ns, _name), obj in sorted(self.objects.items()):
            if k != kind or (namespace and ns != namespace):
                continue
            if not _match_labels((obj["metadata"].get("labels") or {}), params.get("labelSelector")):
                continue
            if not _match_fields(obj, params.get("fieldSelector")):
                continue
            yield obj

    def _list(self, kind, namespace, params):
        with self.lock:
            items = [copy.deepcopy(o) for o in self._selected(kind, namespace, params)]
            return FakeResponse(200, {"items": items, "metadata": {"resourceVersion": str(self.rv)}})

    def _watch(self, kind, namespace, params):
        since = int(params.get("resourceVersion") or self.rv)
        deadline = time.monotonic() + 0.3
        with self.lock:
            while True:
                found = [e for e in self.events if e[0] > since and e[1] == kind]
                if found or time.monotonic() >= deadline:
                    break
                self.lock.wait(0.05)
        chunks = []
        for _rv, _kind, etype, obj in found:
            meta = obj["metadata"]
            if namespace and meta.get("namespace") != namespace:
                continue
            if not _match_fields(obj, params.get("fieldSelector")):
                continue
            chunks.append(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
        if not found:
            # Nothing changed: a bookmark moves the caller's resourceVersion on.
            chunks.append(json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(since)}}})
                          .encode() + b"\n")
        return FakeResponse(200, chunks=chunks)


def _merge(target, patch):
    for key, value in (patch or {}).items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            target[key] = _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class JsonPatchError(Exception):
    pass


def _pointer(path):
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def apply_json_patch(obj, operations):
    """RFC 6902 as the API server applies it (add/remove/replace/test on objects and lists)."""
    doc = copy.deepcopy(obj)
    for op in operations:
        parts = _pointer(op["path"])
        parent = doc
        for part in parts[:-1]:
            try:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            except (KeyError, IndexError, ValueError, TypeError):
                if op["op"] == "test" and op.get("value") is None:
                    parent = None
                    break
                raise JsonPatchError("doc is missing path: %s" % op["path"])
        last = parts[-1]
        if op["op"] == "test":
            if parent is None:
                current = None
            elif isinstance(parent, list):
                current = parent[int(last)] if int(last) < len(parent) else None
            else:
                current = parent.get(last)
            if current != op.get("value"):
                raise JsonPatchError("testing value %s failed: test failed" % op["path"])
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and (not isinstance(parent, dict) or last not in parent) \
                    and not isinstance(parent, list):
                raise JsonPatchError("replace operation does not apply: doc is missing key: %s" % op["path"])
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op["op"] == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                else:
                    parent[index] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            try:
                if isinstance(parent, list):
                    del parent[int(last)]
                else:
                    del parent[last]
            except (KeyError, IndexError, ValueError):
                raise JsonPatchError("remove operation does not apply: doc is missing path: %s" % op["path"])
        else:
            raise JsonPatchError("unsupported operation %s" % op["op"])
    return doc


def fake_client(server=None):
    """(KubeClient, FakeApiServer): a real client whose HTTP pool is the fake server."""
    server = server or FakeApiServer()
    client = KubeClient(ConnectionSettings("https://fake.example:6443", token="t0ken-value"), retry_budget=0.0)
    client._pool = server
    return client, server
