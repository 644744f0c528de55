"""The harness's own API client: plain JSON over urllib3, with a user agent of its own.

Every request the harness makes (preparing workloads, watching for correctness,
resetting nodes) carries ``kubevirt-ops-bench/...`` so the audit-log accounting can
tell it apart from the peer being measured.
"""

import json
import ssl
import threading
import urllib.parse

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

USER_AGENT = "kubevirt-ops-bench/1"

# kind -> (API prefix, plural, namespaced)
RESOURCES = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "VirtualMachine": ("/apis/kubevirt.io/v1", "virtualmachines", True),
    "VirtualMachineInstance": ("/apis/kubevirt.io/v1", "virtualmachineinstances", True),
    "VirtualMachineInstanceMigration": ("/apis/kubevirt.io/v1", "virtualmachineinstancemigrations", True),
    "KubeVirt": ("/apis/kubevirt.io/v1", "kubevirts", True),
    "HyperConverged": ("/apis/hco.kubevirt.io/v1beta1", "hyperconvergeds", True),
    "NodeMaintenance": ("/apis/nodemaintenance.medik8s.io/v1beta1", "nodemaintenances", False),
}


class ApiError(Exception):
    def __init__(self, status, body, method, path):
        self.status = status
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        self.reason = payload.get("reason", "") if isinstance(payload, dict) else ""
        message = payload.get("message") if isinstance(payload, dict) else None
        super().__init__(f"{method} {path}: {status} {self.reason}: {message or body[:300]}")


def path_of(kind, namespace=None, name=None, subresource=None):
    prefix, plural, namespaced = RESOURCES[kind]
    parts = [prefix]
    if namespaced and namespace:
        parts += ["namespaces", namespace]
    parts.append(plural)
    if name:
        parts.append(urllib.parse.quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """Thread-safe JSON access to the lab's apiserver."""

    def __init__(self, kubeconfig, user_agent=USER_AGENT):
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.kubeconfig = str(kubeconfig)
        self.host = cfg.host.rstrip("/")
        self.headers = {"User-Agent": user_agent, "Accept": "application/json"}
        pool_args = {"maxsize": 32, "block": False, "retries": False, "cert_reqs": ssl.CERT_REQUIRED}
        if cfg.ssl_ca_cert:
            pool_args["ca_certs"] = cfg.ssl_ca_cert
        if cfg.cert_file:
            pool_args["cert_file"] = cfg.cert_file
            pool_args["key_file"] = cfg.key_file
        self._pool = urllib3.PoolManager(num_pools=2, **pool_args)
        self._lock = threading.Lock()

    def request(self, method, path, query=None, body=None, content_type="application/json", timeout=60.0):
        url = self.host + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = dict(self.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        resp = self._pool.request(method, url, body=data, headers=headers,
                                  timeout=urllib3.Timeout(connect=10.0, read=timeout))
        text = resp.data.decode("utf-8", "replace") if resp.data else ""
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, text, method, path)
        return json.loads(text) if text else None

    # -- verbs --------------------------------------------------------------------

    def get(self, kind, name, namespace=None):
        return self.request("GET", path_of(kind, namespace, name))

    def get_or_none(self, kind, name, namespace=None):
        try:
            return self.get(kind, name, namespace)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, kind, namespace=None, label_selector=None, field_selector=None, limit=500):
        """Every object (following continue tokens) and the list's resourceVersion."""
        items, token = [], None
        while True:
            query = {"labelSelector": label_selector, "fieldSelector": field_selector,
                     "limit": limit, "continue": token}
            page = self.request("GET", path_of(kind, namespace), query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, page["metadata"].get("resourceVersion")

    def read_list_raw(self, kind, limit=500):
        """(pages, bytes) of every object of ``kind``, page by page, the bodies read and dropped
        undecoded: what the API server alone needs to serve the list. Each page's continue token is read
        undecoded as the collection's pager reads it (module_utils/k8s/pages.py: before the items of a built-in
        kind's list, after them in a custom resource's); imported here, so that ``--help`` and ``--render`` need
        no collection path."""
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.pages import continue_token

        pages, size, token = 0, 0, None
        while True:
            url = self.host + path_of(kind) + "?" + urllib.parse.urlencode(
                {k: v for k, v in {"limit": limit, "continue": token}.items() if v is not None})
            resp = self._pool.request("GET", url, headers=self.headers, timeout=urllib3.Timeout(connect=10.0, read=600))
            if not 200 <= resp.status < 300:
                raise ApiError(resp.status, resp.data.decode("utf-8", "replace"), "GET", path_of(kind))
            pages, size = pages + 1, size + len(resp.data)
            token = continue_token(resp.data)
            if not token:
                return pages, size

    def count(self, kind, namespace=None, label_selector=None, field_selector=None):
        """How many objects match, without transferring them all at once."""
        return len(self.list(kind, namespace, label_selector, field_selector)[0])

    def create(self, kind, obj, namespace=None):
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return self.request("POST", path_of(kind, ns), body=obj)

    def patch(self, kind, name, patch, namespace=None, subresource=None, patch_type="application/merge-patch+json"):
        return self.request("PATCH", path_of(kind, namespace, name, subresource), body=patch, content_type=patch_type)

    def delete(self, kind, name, namespace=None, propagation="Background", grace_period=None):
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            return self.request("DELETE", path_of(kind, namespace, name), body=body)
        except ApiError as e:
            if e.status != 404:
                raise
            return None

    def served(self, kind):
        """True if the API serves this kind (its CRD is installed)."""
        try:
            self.request("GET", path_of(kind), {"limit": 1})
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def watch(self, kind, namespace=None, resource_version=None, label_selector=None,
              field_selector=None, timeout_seconds=3600):
        """A started watch: iterate ``events()`` for (type, object); ``close()`` from any thread."""
        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "labelSelector": label_selector, "fieldSelector": field_selector,
                 "timeoutSeconds": timeout_seconds}
        url = self.host + path_of(kind, namespace) + "?" + urllib.parse.urlencode(
            {k: v for k, v in query.items() if v is not None})
        resp = self._pool.request("GET", url, headers=self.headers, preload_content=False,
                                  timeout=urllib3.Timeout(connect=10.0, read=None))
        if resp.status != 200:
            body = resp.read().decode("utf-8", "replace")
            resp.release_conn()
            raise ApiError(resp.status, body, "WATCH", path_of(kind, namespace))
        return Watch(resp)


class Watch:
    def __init__(self, resp):
        self._resp = resp
        self.closed = False

    def events(self):
        buffer = b""
        try:
            while not self.closed:
                try:
                    chunk = self._resp.read1(65536)
                except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError):
                    return
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield event["type"], event["object"]
        finally:
            self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self._resp.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the socket may already be gone
            pass
        try:
            self._resp.close()
        except Exception:  # noqa: BLE001
            pass
