"""List-then-watch caches of API objects (what client-go calls informers).

Each informer keeps every object of one resource in memory, follows changes with a
watch that resumes from the last resource version, lists again when the apiserver
says that version is gone (410), and reconnects with backoff when the apiserver
restarts. Controllers read from these caches and are told about changes through
handlers, so steady state costs the apiserver one idle watch per resource.
"""

import json
import logging
import random
import threading
import time

from kubernetes.watch.watch import iter_resp_lines

from lab.standins.kube import ApiError, key_of

log = logging.getLogger(__name__)

# Server-side watch timeout; a slightly longer client read timeout notices a
# connection that died without closing (apiserver killed, network namespace gone).
WATCH_SECONDS = 240
READ_TIMEOUT = WATCH_SECONDS + 30


class Informer:
    def __init__(self, kube, resource, label_selector=None, field_selector=None, name=None):
        self.kube = kube
        self.resource = resource
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or resource.plural
        self._objects = {}
        self._indexers = {}
        self._indexes = {}
        self._handlers = []
        self._lock = threading.RLock()
        self._synced = threading.Event()
        self._resource_version = None

    # -- reading ----------------------------------------------------------------------

    def get(self, key):
        with self._lock:
            return self._objects.get(key)

    def get_by(self, namespace, name):
        return self.get(f"{namespace}/{name}" if namespace else name)

    def list(self):
        with self._lock:
            return list(self._objects.values())

    def keys(self):
        with self._lock:
            return list(self._objects)

    def add_index(self, index_name, func):
        """Index objects by ``func(obj) -> iterable of values`` for by_index()."""
        with self._lock:
            self._indexers[index_name] = func
            index = self._indexes[index_name] = {}
            for key, obj in self._objects.items():
                for value in func(obj) or ():
                    index.setdefault(value, set()).add(key)

    def by_index(self, index_name, value):
        with self._lock:
            keys = self._indexes[index_name].get(value, ())
            return [self._objects[k] for k in keys if k in self._objects]

    def add_handler(self, handler):
        """``handler(event, obj, old)`` with event ADDED/MODIFIED/DELETED; runs on the
        informer's thread, so it must only enqueue work."""
        self._handlers.append(handler)

    @property
    def synced(self):
        return self._synced.is_set()

    def wait_synced(self, timeout=None):
        return self._synced.wait(timeout)

    # -- running ----------------------------------------------------------------------

    def start(self):
        t = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        t.start()
        return t

    def _query(self):
        q = {}
        if self.label_selector:
            q["labelSelector"] = self.label_selector
        if self.field_selector:
            q["fieldSelector"] = self.field_selector
        return q

    def _run(self):
        backoff = 0.5
        while True:
            try:
                if self._resource_version is None:
                    self._relist()
                self._watch()
                backoff = 0.5
            except ApiError as e:
                if e.gone:
                    log.debug("%s: resource version too old, listing again", self.name)
                    self._resource_version = None
                    continue
                # 429/503 are the apiserver (re)starting or a CRD just being served.
                level = logging.INFO if e.status in (429, 503) else logging.WARNING
                log.log(level, "%s: %s; retrying in %.1fs", self.name, e, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10)
            except Exception as e:  # connection refused/reset while the apiserver restarts
                log.warning(
                    "%s: watch interrupted (%s); retrying in %.1fs", self.name, type(e).__name__, backoff
                )
                time.sleep(backoff + random.random() * 0.2)
                backoff = min(backoff * 2, 10)

    def _relist(self):
        listing = self.kube.list(
            self.resource, label_selector=self.label_selector, field_selector=self.field_selector
        )
        fresh = {key_of(o): self._complete(o) for o in listing.get("items") or []}
        events = []
        with self._lock:
            for key, old in list(self._objects.items()):
                if key not in fresh:
                    self._remove(key)
                    events.append(("DELETED", old, old))
            for key, obj in fresh.items():
                old = self._objects.get(key)
                if old is None:
                    events.append(("ADDED", obj, None))
                elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                    events.append(("MODIFIED", obj, old))
                self._store(key, obj)
            self._resource_version = listing["metadata"].get("resourceVersion")
        self._synced.set()
        for event in events:
            self._dispatch(*event)

    def _complete(self, obj):
        # List items lack apiVersion/kind; owner references and logs want them.
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        return obj

    def _watch(self):
        query = dict(
            self._query(),
            watch="1",
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_SECONDS),
            resourceVersion=self._resource_version,
        )
        resp = self.kube.stream(self.resource.path(), query, READ_TIMEOUT)
        try:
            for line in iter_resp_lines(resp):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        self._resource_version = None
                    raise ApiError(code or 500, json.dumps(obj), "WATCH", self.resource.path())
                rv = obj.get("metadata", {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    self._resource_version = rv
                    continue
                self._apply(kind, self._complete(obj))
                self._resource_version = rv
        finally:
            resp.release_conn()

    def _apply(self, kind, obj):
        key = key_of(obj)
        with self._lock:
            old = self._objects.get(key)
            if kind == "DELETED":
                self._remove(key)
            else:
                self._store(key, obj)
        if kind == "DELETED":
            self._dispatch("DELETED", obj, old)
        else:
            self._dispatch("ADDED" if old is None else "MODIFIED", obj, old)

    def _store(self, key, obj):
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        for name, func in self._indexers.items():
            for value in func(obj) or ():
                self._indexes[name].setdefault(value, set()).add(key)

    def _remove(self, key):
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)

    def _unindex(self, key, obj):
        for name, func in self._indexers.items():
            for value in func(obj) or ():
                keys = self._indexes[name].get(value)
                if keys:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]

    def _dispatch(self, kind, obj, old):
        for handler in self._handlers:
            try:
                handler(kind, obj, old)
            except Exception:
                log.exception("%s: handler failed", self.name)
