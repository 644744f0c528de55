# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection settings -> a small, fast Kubernetes REST client.

Why not ``kubernetes.client``: importing it loads thousands of generated model classes
(about half a second per module run). The modules only speak JSON to a handful of
resources, so they use urllib3 (a dependency of the ``kubernetes`` package) directly,
with retries on transient failures, a user agent naming the collection, and watches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import atexit
import base64
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

from urllib.parse import urlencode

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    ApiError,
    ConfigurationError,
    ConnectionFailedError,
    NotFoundError,
    api_error,
    describe_object,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.version import COLLECTION_VERSION

USER_AGENT = "kubevirt_ops.maintenance/%s" % COLLECTION_VERSION
IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_KUBECONFIG = "~/.kube/config"
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
}

_TRANSIENT_STATUS = (500, 502, 503, 504)


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


class ConnectionSettings:
    """Resolved connection settings: where the API is and how to authenticate."""

    def __init__(self, host, token=None, ca_cert=None, client_cert=None, client_key=None,
                 verify=True, proxy=None, impersonate_user=None, impersonate_groups=None,
                 source=None, secrets=None):
        self.host = host.rstrip("/")
        self.token = token
        self.ca_cert = ca_cert
        self.client_cert = client_cert
        self.client_key = client_key
        self.verify = verify
        self.proxy = proxy
        self.impersonate_user = impersonate_user
        self.impersonate_groups = impersonate_groups or []
        self.source = source
        # Values that must never appear in results or messages.
        self.secrets = [s for s in (secrets or []) if s]


_temp_dir = []


def _private_file(data, suffix):
    """Write inline kubeconfig data (certificates, keys) to a private temporary file."""
    if not _temp_dir:
        path = tempfile.mkdtemp(prefix="kubevirt-ops-")
        _temp_dir.append(path)
        atexit.register(shutil.rmtree, path, True)
    fd, path = tempfile.mkstemp(suffix=suffix, dir=_temp_dir[0])
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _load_yaml(path):
    import yaml  # lazy: only needed when a kubeconfig is read

    try:
        with open(path, "rb") as handle:
            data = yaml.safe_load(handle)
    except (IOError, OSError) as exc:
        raise ConfigurationError("Cannot read kubeconfig %s: %s." % (path, exc.strerror or exc)) from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError("Kubeconfig %s is not valid YAML (%s)." % (path, str(exc).splitlines()[0])) from exc
    if not isinstance(data, dict):
        raise ConfigurationError("Kubeconfig %s is not a kubeconfig: it holds no clusters, users or contexts." % path)
    return data


def _named(items, name, what, path):
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item.get(what.lower()) or {}
    raise ConfigurationError("Kubeconfig %s has no %s named '%s'." % (path, what, name))


def _file_or_data(section, file_key, data_key, base_dir, suffix, secrets=None):
    if section.get(data_key):
        try:
            raw = base64.b64decode(section[data_key])
        except (TypeError, ValueError) as exc:
            raise ConfigurationError("Kubeconfig field %s is not valid base64." % data_key) from exc
        if secrets is not None:
            secrets.append(raw.decode("utf-8", "replace").strip())
        return _private_file(raw, suffix)
    if section.get(file_key):
        path = os.path.join(base_dir, os.path.expanduser(section[file_key]))
        if secrets is not None and os.path.isfile(path):
            with open(path, "rb") as handle:
                secrets.append(handle.read().decode("utf-8", "replace").strip())
        return path
    return None


def _run_exec_plugin(spec, path):
    """Run a kubeconfig ``exec`` credential plugin and return its status."""
    cmd = [spec.get("command")] + list(spec.get("args") or [])
    env = dict(os.environ)
    for item in spec.get("env") or []:
        env[item["name"]] = item["value"]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, check=True, timeout=60).stdout
        return (json.loads(out) or {}).get("status") or {}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigurationError(
            "The credential plugin '%s' of kubeconfig %s failed: %s." % (cmd[0], path, exc)
        ) from exc


def _from_kubeconfig(path, context_name):
    config = _load_yaml(path)
    context_name = context_name or config.get("current-context")
    if not context_name:
        raise ConfigurationError("Kubeconfig %s sets no current-context; give the 'context' option." % path)
    context = _named(config.get("contexts"), context_name, "Context", path)
    cluster = _named(config.get("clusters"), context.get("cluster"), "Cluster", path)
    user = _named(config.get("users"), context.get("user"), "User", path) if context.get("user") else {}
    if not cluster.get("server"):
        raise ConfigurationError("Cluster '%s' in kubeconfig %s has no server address." % (context.get("cluster"), path))
    base_dir = os.path.dirname(os.path.abspath(path))
    secrets = []
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(os.path.join(base_dir, user["tokenFile"])) as handle:
            token = handle.read().strip()
    client_cert = _file_or_data(user, "client-certificate", "client-certificate-data", base_dir, ".crt")
    client_key = _file_or_data(user, "client-key", "client-key-data", base_dir, ".key", secrets)
    if user.get("exec"):
        status = _run_exec_plugin(user["exec"], path)
        token = status.get("token") or token
        if status.get("clientCertificateData"):
            client_cert = _private_file(status["clientCertificateData"].encode(), ".crt")
            client_key = _private_file(status["clientKeyData"].encode(), ".key")
            secrets.append(status["clientKeyData"].strip())
    if user.get("auth-provider"):
        raise ConfigurationError(
            "User '%s' in kubeconfig %s uses the removed auth-provider mechanism; use an exec credential plugin or a token."
            % (context.get("user"), path))
    if user.get("username") and not token:
        token_b = base64.b64encode(("%s:%s" % (user["username"], user.get("password", ""))).encode()).decode()
        token = "Basic " + token_b
        secrets.append(user.get("password"))
    secrets.append(token)
    return dict(
        host=cluster["server"],
        token=token,
        ca_cert=_file_or_data(cluster, "certificate-authority", "certificate-authority-data", base_dir, ".crt"),
        client_cert=client_cert,
        client_key=client_key,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        proxy=cluster.get("proxy-url"),
        impersonate_user=user.get("as"),
        impersonate_groups=user.get("as-groups"),
        source="kubeconfig %s (context %s)" % (path, context_name),
        secrets=secrets,
    )


def _in_cluster():
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_file = os.path.join(IN_CLUSTER_DIR, "token")
    if not host or not os.path.isfile(token_file):
        return None
    with open(token_file) as handle:
        token = handle.read().strip()
    if ":" in host:
        host = "[%s]" % host
    ca = os.path.join(IN_CLUSTER_DIR, "ca.crt")
    return dict(host="https://%s:%s" % (host, port), token=token, ca_cert=ca if os.path.isfile(ca) else None,
                source="in-cluster service account", secrets=[token])


def resolve_settings(params):
    """Auth options (kubernetes.core names, env fallbacks already applied) -> settings.

    Order: an explicit ``kubeconfig`` (or KUBECONFIG / ~/.kube/config when ``host`` is not
    given) is the base; explicit options override its fields; with no kubeconfig and no
    host, the in-cluster service account is used.
    """
    params = params or {}
    kubeconfig = params.get("kubeconfig")
    base = None
    if isinstance(kubeconfig, dict):
        base = _from_kubeconfig(_private_file(json.dumps(kubeconfig).encode(), ".yaml"), params.get("context"))
    elif kubeconfig:
        path = os.path.expanduser(kubeconfig)
        if not os.path.exists(path):
            raise ConfigurationError("Kubeconfig %s does not exist." % kubeconfig)
        base = _from_kubeconfig(path, params.get("context"))
    elif not params.get("host"):
        env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        candidates = env_paths or [os.path.expanduser(DEFAULT_KUBECONFIG)]
        found = [p for p in candidates if os.path.exists(p)]
        base = _in_cluster() if not env_paths else None
        if base is None and found:
            base = _from_kubeconfig(found[0], params.get("context"))
        if base is None:
            base = _in_cluster()
        if base is None:
            raise ConfigurationError(
                "No cluster to connect to: give 'kubeconfig' or 'host' (or K8S_AUTH_KUBECONFIG / KUBECONFIG), "
                "or run inside a pod with a service account.")
    settings = dict(base or {})
    secrets = list(settings.pop("secrets", []))
    overrides = {
        "host": params.get("host"),
        "token": params.get("api_key"),
        "ca_cert": params.get("ca_cert"),
        "client_cert": params.get("client_cert"),
        "client_key": params.get("client_key"),
        "proxy": params.get("proxy"),
        "impersonate_user": params.get("impersonate_user"),
        "impersonate_groups": params.get("impersonate_groups"),
    }
    for key, value in overrides.items():
        if value:
            settings[key] = value
    if params.get("validate_certs") is not None:
        settings["verify"] = bool(params["validate_certs"])
    if not settings.get("host"):
        raise ConfigurationError("No API server address: give 'host' or a kubeconfig whose cluster has a server.")
    if params.get("api_key"):
        secrets.append(params["api_key"])
        settings.setdefault("source", "host %s" % settings["host"])
    if params.get("client_key") and os.path.isfile(params["client_key"]):
        with open(params["client_key"], "rb") as handle:
            secrets.append(handle.read().decode("utf-8", "replace").strip())
    for key in ("ca_cert", "client_cert", "client_key"):
        if settings.get(key) and not os.path.isfile(os.path.expanduser(settings[key])):
            raise ConfigurationError("The %s file %s does not exist." % (key.replace("_", " "), settings[key]))
    settings["secrets"] = secrets
    return ConnectionSettings(**settings)


class KubeClient:
    """JSON over HTTPS to the Kubernetes API, with retries and watches.

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
        kwargs = dict(maxsize=pool_size, block=False, retries=False)
        if settings.host.startswith("https"):
            kwargs["cert_reqs"] = "CERT_REQUIRED" if settings.verify else "CERT_NONE"
            if settings.ca_cert and settings.verify:
                kwargs["ca_certs"] = os.path.expanduser(settings.ca_cert)
            if settings.client_cert:
                kwargs["cert_file"] = os.path.expanduser(settings.client_cert)
            if settings.client_key:
                kwargs["key_file"] = os.path.expanduser(settings.client_key)
            if not settings.verify:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if settings.proxy:
            self._pool = urllib3.ProxyManager(settings.proxy, **kwargs)
        else:
            self._pool = urllib3.PoolManager(**kwargs)
        self._urllib3 = urllib3
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if settings.token:
            scheme = "" if settings.token.startswith("Basic ") else "Bearer "
            self.headers["Authorization"] = scheme + settings.token
        if settings.impersonate_user:
            self.headers["Impersonate-User"] = settings.impersonate_user
        self.impersonate_groups = list(settings.impersonate_groups)

    # -- low level -----------------------------------------------------------------

    def request(self, method, path, body=None, params=None, content_type="application/json",
                obj="the API server", verb=None, retry_429=True, timeout=None, stream=False, accept=None):
        """One API call; returns decoded JSON (or the raw response when ``stream``)."""
        url = self.settings.host + path
        fields = {k: v for k, v in (params or {}).items() if v is not None}
        if fields:
            url += "?" + urlencode(fields)
        # One header line per impersonated group, as the API server expects.
        headers = self._urllib3.HTTPHeaderDict(self.headers)
        if accept:
            headers["Accept"] = accept
        for group in self.impersonate_groups:
            headers.add("Impersonate-Group", group)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode("utf-8")
        verb = verb or {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
        deadline = time.monotonic() + self.retry_budget
        attempt = 0
        while True:
            attempt += 1
            self.requests_made += 1
            try:
                if stream:
                    read_timeout = timeout
                else:
                    read_timeout = timeout or self.request_timeout
                resp = self._pool.request(
                    method, url, body=data, headers=headers, preload_content=not stream,
                    timeout=self._urllib3.Timeout(connect=10.0, read=read_timeout),
                )
            except self._urllib3.exceptions.SSLError as exc:
                raise ConnectionFailedError(
                    "Cannot %s %s: TLS verification of %s failed (wrong CA certificate or server name?): %s."
                    % (verb, obj, self.settings.host, _short(exc)), host=self.settings.host) from exc
            except (self._urllib3.exceptions.HTTPError, OSError) as exc:
                if time.monotonic() < deadline:
                    _backoff(attempt, deadline)
                    continue
                raise ConnectionFailedError(
                    "Cannot %s %s: the API server %s is unreachable (%s)." % (verb, obj, self.settings.host, _short(exc)),
                    host=self.settings.host) from exc
            if stream and resp.status < 300:
                return resp
            status = resp.status
            raw = resp.data if not stream else resp.read()
            if status < 300:
                return json.loads(raw) if raw else {}
            retry_after = _retry_after(resp)
            transient = status in _TRANSIENT_STATUS or (status == 429 and retry_429)
            if transient and time.monotonic() < deadline:
                _backoff(attempt, deadline, retry_after)
                continue
            raise api_error(status, verb, obj, raw, retry_after=retry_after)

    # -- resources -------------------------------------------------------------------

    def get(self, kind, name, namespace=None, subresource=None):
        return self.request("GET", resource_path(kind, name, namespace, subresource),
                            obj=describe_object(kind, name, namespace))

    def get_or_none(self, kind, name, namespace=None):
        try:
            return self.get(kind, name, namespace)
        except NotFoundError:
            return None

    def list(self, kind, namespace=None, label_selector=None, field_selector=None, page_size=500):
        """All items (paginated); returns (items, resourceVersion of the list)."""
        items = []
        cont = None
        while True:
            data = self.request("GET", resource_path(kind, namespace=namespace), params={
                "labelSelector": label_selector or None,
                "fieldSelector": field_selector or None,
                "limit": page_size,
                "continue": cont,
            }, obj=describe_object(kind + "s", namespace=namespace), verb="list")
            items.extend(data.get("items") or [])
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return items, (data.get("metadata") or {}).get("resourceVersion")

    def create(self, kind, body, namespace=None, subresource=None, name=None, retry_429=True, verb="create"):
        meta = body.get("metadata") or {}
        name_for_msg = name or meta.get("name")
        path = resource_path(kind, name if subresource else None, namespace, subresource)
        return self.request("POST", path, body=body, obj=describe_object(kind, name_for_msg, namespace),
                            verb=verb, retry_429=retry_429)

    def patch(self, kind, name, patch, namespace=None, patch_type="merge", subresource=None):
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        return self.request("PATCH", resource_path(kind, name, namespace, subresource), body=patch,
                            content_type=content_type, obj=describe_object(kind, name, namespace))

    def delete(self, kind, name, namespace=None, body=None, missing_ok=True):
        try:
            return self.request("DELETE", resource_path(kind, name, namespace), body=body,
                                obj=describe_object(kind, name, namespace))
        except NotFoundError:
            if missing_ok:
                return None
            raise

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


def _short(exc):
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "..."


def _retry_after(resp):
    try:
        return float(resp.headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def _backoff(attempt, deadline, retry_after=None):
    delay = retry_after if retry_after else min(5.0, 0.2 * (2 ** (attempt - 1)))
    delay = delay * (0.8 + 0.4 * random.random())
    time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
