"""A small JSON client for the Kubernetes API: every object is a plain dict.

The stand-ins handle core and custom resources the same way (caches, patches,
watches), so they talk to the apiserver in raw JSON over one urllib3 pool instead
of through the generated model classes. Credentials come from the kubeconfig via
the ``kubernetes`` package's loader.
"""

import json
import logging
import ssl
import threading
import urllib.parse
from dataclasses import dataclass

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "kubevirt-sim"


class ApiError(Exception):
    """A non-2xx answer from the apiserver, with its Status object when there is one."""

    def __init__(self, status, body, method="", path=""):
        self.status = status
        self.body = body
        try:
            self.payload = json.loads(body) if body else {}
        except ValueError:
            self.payload = {}
        if not isinstance(self.payload, dict):
            self.payload = {}
        self.reason = self.payload.get("reason", "")
        self.message = self.payload.get("message") or (body or "")[:300]
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self):
        return self.status == 404

    @property
    def conflict(self):
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self):
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self):
        return self.status == 410

    @property
    def too_many_requests(self):
        return self.status == 429


@dataclass(frozen=True)
class Resource:
    """Where an API resource lives: enough to build every URL for it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace=None, name=None, subresource=None):
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [base]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(urllib.parse.quote(name, safe=""))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


# Core and built-in resources the stand-ins touch.
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
APISERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

# KubeVirt, HCO and node-maintenance resources (CRDs from crds.py).
VMS = Resource("kubevirt.io", "v1", "virtualmachines", "VirtualMachine")
VMIS = Resource("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance")
VMIMS = Resource("kubevirt.io", "v1", "virtualmachineinstancemigrations", "VirtualMachineInstanceMigration")
KUBEVIRTS = Resource("kubevirt.io", "v1", "kubevirts", "KubeVirt")
HYPERCONVERGEDS = Resource("hco.kubevirt.io", "v1beta1", "hyperconvergeds", "HyperConverged")
NODEMAINTENANCES = Resource(
    "nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances", "NodeMaintenance", namespaced=False
)
LEGACY_NODEMAINTENANCES = Resource(
    "nodemaintenance.kubevirt.io", "v1beta1", "nodemaintenances", "NodeMaintenance", namespaced=False
)
# Metal3's BareMetalHost (a stand-in, baremetal.py).
BAREMETALHOSTS = Resource("metal3.io", "v1alpha1", "baremetalhosts", "BareMetalHost")


class Kube:
    """Thread-safe JSON access to one apiserver, authenticated from a kubeconfig."""

    def __init__(self, kubeconfig, user_agent="kubevirt-sim", impersonate=None):
        """``impersonate``: a user name every request acts as (the kubeconfig's user must be
        allowed to impersonate; a ServiceAccount's user also gets its groups)."""
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.host = cfg.host.rstrip("/")
        self._headers = {"User-Agent": user_agent}
        if impersonate:
            self._headers["Impersonate-User"] = impersonate
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if token:
            self._headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        pool_args = {"maxsize": 64, "block": False, "retries": False}
        if self.host.startswith("https"):
            pool_args["cert_reqs"] = ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE
            if cfg.ssl_ca_cert:
                pool_args["ca_certs"] = cfg.ssl_ca_cert
            if cfg.cert_file:
                pool_args["cert_file"] = cfg.cert_file
                pool_args["key_file"] = cfg.key_file
            if not cfg.verify_ssl:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._pool = urllib3.PoolManager(num_pools=4, **pool_args)
        self._lock = threading.Lock()

    # -- raw requests -------------------------------------------------------------

    def request(self, method, path, query=None, body=None, content_type="application/json", timeout=30.0):
        """One request; returns the decoded JSON body (or None) and raises ApiError."""
        url = self.host + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = dict(self._headers, Accept="application/json")
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        resp = self._pool.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=10.0, read=timeout),
            preload_content=True,
        )
        text = resp.data.decode("utf-8", "replace") if resp.data else ""
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, text, method, path)
        return json.loads(text) if text else None

    def stream(self, path, query, read_timeout):
        """A streaming GET (watches); the caller iterates lines and must release it."""
        url = self.host + path + "?" + urllib.parse.urlencode(query)
        headers = dict(self._headers, Accept="application/json")
        resp = self._pool.request(
            "GET",
            url,
            headers=headers,
            timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
            preload_content=False,
        )
        if resp.status != 200:
            body = resp.read().decode("utf-8", "replace")
            resp.release_conn()
            raise ApiError(resp.status, body, "WATCH", path)
        return resp

    # -- verbs ----------------------------------------------------------------------

    def get(self, res, name, namespace=None, subresource=None):
        return self.request("GET", res.path(namespace, name, subresource))

    def get_or_none(self, res, name, namespace=None):
        try:
            return self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    def list(self, res, namespace=None, label_selector=None, field_selector=None, **query):
        q = dict(query)
        if label_selector:
            q["labelSelector"] = label_selector
        if field_selector:
            q["fieldSelector"] = field_selector
        return self.request("GET", res.path(namespace), q)

    def create(self, res, obj, namespace=None, subresource=None, name=None, dry_run=False):
        q = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            q["dryRun"] = "All"
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self.request("POST", res.path(ns, name, subresource), q, body=obj)

    def replace(self, res, obj, subresource=None):
        meta = obj["metadata"]
        return self.request(
            "PUT",
            res.path(meta.get("namespace"), meta["name"], subresource),
            {"fieldManager": FIELD_MANAGER},
            body=obj,
        )

    def patch(
        self, res, name, patch, namespace=None, subresource=None, patch_type=MERGE_PATCH, dry_run=False
    ):
        q = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            q["dryRun"] = "All"
        return self.request(
            "PATCH", res.path(namespace, name, subresource), q, body=patch, content_type=patch_type
        )

    def apply(self, res, obj):
        """Server-side apply under the stand-ins' field manager (idempotent create/update)."""
        meta = obj["metadata"]
        body = dict(obj, apiVersion=res.api_version, kind=res.kind)
        return self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"]),
            {"fieldManager": FIELD_MANAGER, "force": "true"},
            body=body,
            content_type=APPLY_PATCH,
        )

    def delete(self, res, name, namespace=None, grace_period=None, preconditions=None, ignore_missing=True):
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if preconditions:
            body["preconditions"] = preconditions
        try:
            return self.request("DELETE", res.path(namespace, name), body=body)
        except ApiError as e:
            if ignore_missing and e.not_found:
                return None
            raise

    def evict(self, namespace, pod_name, dry_run=False):
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
        }
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        return self.request("POST", PODS.path(namespace, pod_name, "eviction"), body=body)


def owner_reference(obj, controller=True):
    """An ownerReference to ``obj`` (a dict with apiVersion, kind and metadata)."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def key_of(obj):
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


def split_key(key):
    if "/" in key:
        ns, name = key.split("/", 1)
        return ns, name
    return None, key


def ensure_namespace(kube, name):
    """Create namespace ``name`` unless it exists."""
    if kube.get_or_none(NAMESPACES, name) is None:
        try:
            kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except ApiError as e:
            if not e.already_exists:
                raise
