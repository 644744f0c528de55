"""The ``subresources.kubevirt.io/v1`` aggregated API: virtctl's start/stop/restart/migrate.

Upstream virt-api serves it behind an APIService, so clients call it through the
kube-apiserver (``PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/start``)
with their normal credentials. The apiserver proxies to the Service's endpoint,
which must not be a loopback address, so this server listens on a non-loopback
address of this host. Proxied requests carry the front-proxy client certificate
and X-Remote-User/Group headers; the caller is authorized with a
SubjectAccessReview, as an aggregated API server must.

If no usable address exists or the APIService does not become Available, the
APIService is withdrawn (an unavailable one would break API discovery) and only
the VM's own API remains for these actions (``spec.runStrategy`` and
``status.stateChangeRequests``).
"""

import base64
import ipaddress
import json
import logging
import re
import socket
import subprocess
import time

from lab.kubevirt_sim import https_server
from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim.cluster_config import KUBEVIRT_NAMESPACE
from lab.kubevirt_sim.kubevirt_cr import KUBEVIRT_VERSION
from lab.kubevirt_sim.vm_actions import ActionError, VMActions

log = logging.getLogger(__name__)

GROUP = "subresources.kubevirt.io"
VERSION = "v1"
SERVICE = "virt-api"
APISERVICE = f"{VERSION}.{GROUP}"
ACTIONS = ("start", "stop", "restart", "migrate")
_ACTION_PATH = re.compile(
    rf"^/apis/{re.escape(GROUP)}/{VERSION}/namespaces/([^/]+)/virtualmachines/([^/]+)/({'|'.join(ACTIONS)})$"
)


def host_address():
    """A non-loopback, non-link-local IPv4 address of this host, or None."""
    candidates = []
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=5
        ).stdout
        candidates = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    except (OSError, subprocess.SubprocessError):
        pass
    if not candidates:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("192.0.2.1", 9))  # no packet is sent; this only picks a source address
                candidates = [s.getsockname()[0]]
        except OSError:
            pass
    for ip in candidates:
        addr = ipaddress.ip_address(ip)
        if not (addr.is_loopback or addr.is_link_local or addr.is_unspecified):
            return ip
    return None


def _status(code, reason, message):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class SubresourceAPI:
    def __init__(self, sim):
        self.sim = sim
        self.kube = sim.kube
        self.actions = VMActions(sim.kube)
        self.client_ca = None
        self.allowed_names = []
        self.user_headers = ["X-Remote-User"]
        self.group_headers = ["X-Remote-Group"]

    # -- requests -------------------------------------------------------------------------

    def routes(self):
        return [self._discovery_route, self._action_route]

    def _discovery_route(self, request):
        if request.method != "GET":
            return None
        documents = {
            f"/apis/{GROUP}/{VERSION}": self._resource_list,
            f"/apis/{GROUP}": self._group,
            "/apis": lambda: {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group()]},
            f"/apis/{GROUP}/{VERSION}/version": lambda: {
                "gitVersion": KUBEVIRT_VERSION,
                "platform": "linux/amd64",
            },
            f"/apis/{GROUP}/{VERSION}/healthz": lambda: {"apiserver": "ok"},
            # The aggregator merges every API server's OpenAPI documents.
            "/openapi/v2": lambda: {
                "swagger": "2.0",
                "info": {"title": "KubeVirt API", "version": VERSION},
                "paths": {},
            },
            "/openapi/v3": lambda: {"paths": {}},
        }
        document = documents.get(request.path.rstrip("/"))
        if document is None:
            return None
        return lambda: (200, document())

    def _group(self):
        gv = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": GROUP,
            "versions": [gv],
            "preferredVersion": gv,
        }

    def _resource_list(self):
        resources = [
            {
                "name": f"virtualmachines/{a}",
                "singularName": "",
                "namespaced": True,
                "kind": "VirtualMachine",
                "verbs": ["update"],
            }
            for a in ACTIONS
        ]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{VERSION}",
            "resources": resources,
        }

    def _action_route(self, request):
        match = _ACTION_PATH.match(request.path)
        if not match:
            return None
        namespace, name, action = match.groups()
        return lambda: self._act(request, namespace, name, action)

    def _act(self, request, namespace, name, action):
        if request.method != "PUT":
            return 405, _status(405, "MethodNotAllowed", f"{request.method} is not supported; use PUT")
        user = self._authenticate(request)
        if user is None:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        denial = self._authorize(user, namespace, name, action)
        if denial:
            return 403, _status(403, "Forbidden", denial)
        try:
            options = request.json() if request.body else {}
        except ValueError:
            return 400, _status(400, "BadRequest", "the request body is not valid JSON")
        try:
            self.actions.run(action, namespace, name, options or {})
        except ActionError as e:
            return e.code, e.status()
        log.info("%s/%s: %s (by %s)", namespace, name, action, user[0])
        return 202, None

    def _authenticate(self, request):
        """The user the apiserver vouches for, or None."""
        if self.client_ca is not None:
            if not request.peer_cert:
                return None
            subject = dict(item[0] for item in request.peer_cert.get("subject", ()))
            if self.allowed_names and subject.get("commonName") not in self.allowed_names:
                return None
        username = next((request.headers.get(h) for h in self.user_headers if request.headers.get(h)), None)
        if not username:
            return None
        groups = []
        for h in self.group_headers:
            groups.extend(request.headers.get_all(h) or [])
        return username, groups

    def _authorize(self, user, namespace, name, action):
        username, groups = user
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": username,
                "groups": groups,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "update",
                    "group": GROUP,
                    "version": VERSION,
                    "resource": "virtualmachines",
                    "subresource": action,
                    "name": name,
                },
            },
        }
        result = self.kube.create(k.SUBJECT_ACCESS_REVIEWS, review)
        if (result.get("status") or {}).get("allowed"):
            return None
        return (
            f'virtualmachines.{GROUP} "{name}" is forbidden: User "{username}" cannot update resource '
            f'"virtualmachines/{action}" in API group "{GROUP}" in the namespace "{namespace}"'
        )

    # -- serving and registration -----------------------------------------------------------

    def _load_front_proxy_settings(self):
        cm = self.kube.get_or_none(k.CONFIGMAPS, "extension-apiserver-authentication", "kube-system")
        data = (cm or {}).get("data") or {}
        if data.get("requestheader-client-ca-file"):
            self.client_ca = data["requestheader-client-ca-file"].encode()

        def names(field, default):
            try:
                value = json.loads(data.get(field) or "null")
            except ValueError:
                value = None
            return value or default

        self.allowed_names = names("requestheader-allowed-names", [])
        self.user_headers = names("requestheader-username-headers", ["X-Remote-User"])
        self.group_headers = names("requestheader-group-headers", ["X-Remote-Group"])

    def start(self, address, serving, timeout=25.0):
        """Serve on ``address`` and register the APIService; returns True once Available."""
        self._load_front_proxy_settings()
        _, port = https_server.serve(
            address, serving.cert_file, serving.key_file, self.routes(), self.client_ca
        )
        self._register(address, port, serving.ca_pem)
        deadline = time.monotonic() + timeout
        reason = "no status yet"
        while time.monotonic() < deadline:
            apiservice = self.kube.get_or_none(k.APISERVICES, APISERVICE) or {}
            for c in (apiservice.get("status") or {}).get("conditions") or []:
                if c.get("type") == "Available" and c.get("status") == "True":
                    log.info("%s served on https://%s:%d and Available", APISERVICE, address, port)
                    return True
                if c.get("type") == "Available":
                    reason = c.get("message") or c.get("reason")
            time.sleep(0.5)
        log.warning("APIService %s did not become Available (%s); withdrawing it", APISERVICE, reason)
        self.withdraw()
        return False

    def _register(self, address, port, ca_pem):
        self.kube.apply(
            k.SERVICES,
            {
                "metadata": {
                    "name": SERVICE,
                    "namespace": KUBEVIRT_NAMESPACE,
                    "labels": {"kubevirt.io": "virt-api"},
                },
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]},
            },
        )
        # A Service without a selector gets its endpoints from us. Both APIs are
        # written so whichever one this apiserver's aggregator reads is right.
        self.kube.apply(
            k.ENDPOINTS,
            {
                "metadata": {
                    "name": SERVICE,
                    "namespace": KUBEVIRT_NAMESPACE,
                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
                },
                "subsets": [
                    {
                        "addresses": [{"ip": address}],
                        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                    }
                ],
            },
        )
        self.kube.apply(
            k.ENDPOINTSLICES,
            {
                "metadata": {
                    "name": f"{SERVICE}-sim",
                    "namespace": KUBEVIRT_NAMESPACE,
                    "labels": {
                        "kubernetes.io/service-name": SERVICE,
                        "endpointslice.kubernetes.io/managed-by": "kubevirt-sim",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": True, "serving": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        )
        self.kube.apply(
            k.APISERVICES,
            {
                "metadata": {"name": APISERVICE},
                "spec": {
                    "group": GROUP,
                    "version": VERSION,
                    "groupPriorityMinimum": 1000,
                    "versionPriority": 15,
                    "service": {"namespace": KUBEVIRT_NAMESPACE, "name": SERVICE, "port": 443},
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
            },
        )

    def withdraw(self):
        self.kube.delete(k.APISERVICES, APISERVICE)
