"""The medik8s node-maintenance-operator (NMO), the real one, as a lab process.

Built once from its Go module into the lab's cache
(``<cache>/node-maintenance-operator-<version>/``): a wrapper module whose ``main.go`` is
``lab/medik8s/main.go`` (upstream's main with the webhook's address, certificate
directory and leader-election namespace as flags). The build also keeps the module's
own ``config/crd/bases`` CRD, ``config/rbac`` roles and ``config/webhook/manifests.yaml``
next to the binary; ``lab up`` installs exactly those, so nothing about the operator's
API is written by hand here.

At ``lab up`` the operator runs as its own user (a client certificate from the lab's CA,
bound to upstream's ClusterRole and leader-election Role), with leader election on, and
serves its validating webhook on ``https://127.0.0.1:<port>`` with a serving certificate
from the lab's CA; the webhook configuration is upstream's, pointed at that URL.
``bench/`` builds through ``ensure_built`` too: there is one build path.
"""

import copy
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lab import certs, components, kubeconfig, network, nodes, processes
from lab.errors import LabError
from lab.paths import REPO_ROOT, cache_root
from lab.wait import wait_for

MODULE = "github.com/medik8s/node-maintenance-operator"
VERSION = "v0.17.0"
NAME = "node-maintenance-operator"
MAIN_GO = REPO_ROOT / "lab" / "medik8s" / "main.go"

# Files of the module kept next to the binary (module path -> cache file name).
MODULE_FILES = {
    "config/crd/bases/nodemaintenance.medik8s.io_nodemaintenances.yaml": "crd.yaml",
    "config/webhook/manifests.yaml": "webhook.yaml",
    "config/rbac/role.yaml": "role.yaml",
    "config/rbac/leader_election_role.yaml": "leader_election_role.yaml",
}


class BuildError(LabError):
    """The operator could not be built; the message says why."""


@dataclass(frozen=True)
class Build:
    directory: Path

    @property
    def binary(self):
        return self.directory / "bin" / NAME

    def module_file(self, name):
        return self.directory / name

    @property
    def error_file(self):
        return self.directory / "build-error.txt"

    def complete(self):
        return self.binary.is_file() and all(self.module_file(n).is_file() for n in MODULE_FILES.values())


def build_dir(version=VERSION):
    return Build(cache_root() / f"{NAME}-{version}")


def _say(message):
    print(f"lab: {message}", file=sys.stderr, flush=True)


def ensure_built(build=True, say=_say):
    """The operator's Build, built on first use (a few minutes); raises BuildError.

    A failed build is recorded in ``build-error.txt`` and reported, never retried
    silently; delete that file to try again.
    """
    target = build_dir()
    if target.complete():
        return target
    if target.error_file.exists():
        raise BuildError(
            f"{NAME} {VERSION} failed to build earlier: see {target.error_file} (delete it to retry)",
            detail=target.error_file.read_text().strip(),
        )
    if not build:
        raise BuildError(f"{NAME} {VERSION} is not built in {target.directory}")
    go = shutil.which("go")
    if not go:
        raise BuildError(f"no `go` on PATH: cannot build {NAME} {VERSION}")
    target.directory.mkdir(parents=True, exist_ok=True)
    with open(target.directory / ".build.lock", "w") as lock:
        # Several labs may start at once on a fresh machine: one build, the others wait.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.complete():
            return target
        say(f"building {MODULE}@{VERSION} (a few minutes, once)")
        _build(go, target)
    return target


def _build(go, target):
    src = target.directory / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy(MAIN_GO, src / "main.go")
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    # The module's versions are served by the proxy, not always by the checksum database.
    env["GONOSUMDB"] = ",".join(filter(None, [env.get("GONOSUMDB"), "github.com/medik8s"]))
    stamp = f"-X {MODULE}/version.Version={VERSION}"
    binary_tmp = target.binary.with_name(NAME + ".tmp")
    target.binary.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [go, "mod", "init", "kubevirt-ops-lab/node-maintenance-operator"],
        [go, "get", f"{MODULE}@{VERSION}"],
        [go, "build", "-trimpath", "-ldflags", f"-s -w {stamp}", "-o", str(binary_tmp), "."],
    ]
    for step in steps:
        result = subprocess.run(step, cwd=src, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            error = f"`go {' '.join(step[1:3])}` failed:\n{(result.stderr or result.stdout).strip()[-3000:]}"
            target.error_file.write_text(error + "\n")
            raise BuildError(f"{NAME} {VERSION} failed to build: see {target.error_file}", detail=error)
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    module_dir = Path(json.loads(result.stdout)["Dir"])
    for source, name in MODULE_FILES.items():
        shutil.copy(module_dir / source, target.module_file(name))
        os.chmod(target.module_file(name), 0o644)
    binary_tmp.replace(target.binary)
    shutil.rmtree(src, ignore_errors=True)


# -- running it in a lab ------------------------------------------------------------------

# Upstream's kustomize (config/default) puts everything in this namespace and prefixes
# every name with "node-maintenance-operator-".
NAMESPACE = "node-maintenance-operator-system"
NAME_PREFIX = "node-maintenance-operator-"
USER = "node-maintenance-operator"
START_TIMEOUT = 120
# What upstream's generated role (config/rbac/role.yaml, the same rules as its CSV) lacks
# but its code calls, so the operator would hang or fail here without it:
# - namespaces list and watch: the lease manager (github.com/medik8s/common pkg/lease,
#   NewManager) gets its namespace through the manager's cached client, which lists and
#   watches namespaces; without them the caches never sync and no worker starts;
# - leases delete: ending a maintenance invalidates the node's lease (InvalidateLease
#   deletes it); without it the CR's finalizer is never removed.
LAB_CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "lab-additions"},
    "rules": [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["delete"]},
    ],
}
# The stand-ins leave nodemaintenance.medik8s.io to this operator (it keeps only the
# legacy nodemaintenance.kubevirt.io stand-in).
STANDINS_FLAGS = ("--no-node-maintenance",)


def webhook_configuration_name():
    return NAME_PREFIX + _load_yaml(build_dir().module_file("webhook.yaml"))[0]["metadata"]["name"]


def ensure_running(paths, settings, say=_say, restarted=False):
    """Build if needed, install the module's CRD and RBAC, start the operator, register
    its webhook; returns when it leads, runs its controller and serves the webhook.
    ``restarted``: it served in this lab before (processes.start_restarting ``served_before``).

    Raises LabError with one sentence naming the operator and its log file.
    """
    built = ensure_built(say=say)
    api = nodes.api_client(paths.kubeconfig)
    pki = certs.ensure_pki(paths.pki)
    _install_crd(api, built)
    _install_rbac(api, built)

    record = processes.tracked(paths, NAME)
    if record is None:
        cert, key = certs.ensure_client_cert(pki, NAME, USER)
        own_kubeconfig = paths.component_kubeconfig(NAME)
        own_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        kubeconfig.write_kubeconfig(own_kubeconfig, settings.apiserver_url, pki.ca_cert, cert, key, USER)
        cert_dir = paths.state_dir / NAME / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        serving_cert, serving_key = certs.ensure_serving_cert(pki, f"{NAME}-webhook", f"{NAME}-webhook")
        # controller-runtime's webhook server reads tls.crt and tls.key from its cert dir.
        shutil.copy(serving_cert, cert_dir / "tls.crt")
        shutil.copy(serving_key, cert_dir / "tls.key")
        webhook_port, probe_port = network.free_ports(2)
        argv = [
            str(built.binary),
            f"--kubeconfig={own_kubeconfig}",
            "--leader-elect",
            f"--leader-election-namespace={NAMESPACE}",
            "--webhook-host=127.0.0.1",
            f"--webhook-port={webhook_port}",
            f"--webhook-cert-dir={cert_dir}",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        ]
        say(f"starting {NAME} {VERSION} (webhook on 127.0.0.1:{webhook_port})")
        # Restarted when it exits after it once served (its Deployment's pod would be), e.g. when
        # it loses its leader lease while the API server restarts.
        record = processes.start_restarting(paths, NAME, argv, env=components.environment(settings),
                                            served_before=restarted)
    webhook_port = int(_flag(record.argv, "--webhook-port"))
    probe = _flag(record.argv, "--health-probe-bind-address")

    def serving():
        if not processes.is_running(record):
            raise _start_failure(paths, "exited while starting")
        return _ready(probe) and _log_says(paths, "Starting workers")

    try:
        wait_for(serving, START_TIMEOUT, f"{NAME} to lead, start its workers and serve its webhook")
    except LabError as e:
        if e.detail is None:
            raise _start_failure(paths, str(e)) from e
        raise
    processes.mark_started(paths, NAME)
    _register_webhook(api, built, webhook_port, pki.ca_cert)
    return record


def status_line(paths):
    """One line for ``lab status`` (None when the lab never ran the operator)."""
    record = processes.tracked(paths, NAME)
    if record is None:
        return f"  {NAME:<24} {'':<16} not running" if paths.pid_file(NAME).exists() else None
    probe = _flag(record.argv, "--health-probe-bind-address")
    state = "ready" if _ready(probe) else "NOT ready"
    port = _flag(record.argv, "--webhook-port")
    rss = processes.rss_bytes(record)
    memory = f", {rss / 2**20:.0f} MiB" if rss else ""
    return f"  {NAME:<24} 127.0.0.1:{port:<6} pid {record.pid}, {VERSION}, {state}{memory}"


def _install_crd(api, built):
    from kubernetes import client

    crd = _load_yaml(built.module_file("crd.yaml"))[0]
    ext = client.ApiextensionsV1Api(api)
    _apply(
        ext.create_custom_resource_definition,
        ext.read_custom_resource_definition,
        ext.replace_custom_resource_definition,
        crd,
    )
    name = crd["metadata"]["name"]

    def established():
        status = ext.read_custom_resource_definition(name).status
        return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []))

    wait_for(established, 60, f"CustomResourceDefinition {name} to be established")


def _install_rbac(api, built):
    """Upstream's ClusterRole and leader-election Role, bound to the operator's user."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    _apply(
        core.create_namespace,
        core.read_namespace,
        None,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    subjects = [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}]
    for doc in _load_yaml(built.module_file("role.yaml")) + [copy.deepcopy(LAB_CLUSTER_ROLE)]:
        doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
        _apply(rbac.create_cluster_role, rbac.read_cluster_role, rbac.replace_cluster_role, doc)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": doc["metadata"]["name"]},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": doc["metadata"]["name"],
            },
            "subjects": subjects,
        }
        _apply(
            rbac.create_cluster_role_binding,
            rbac.read_cluster_role_binding,
            rbac.replace_cluster_role_binding,
            binding,
        )
    for doc in _load_yaml(built.module_file("leader_election_role.yaml")):
        doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
        doc["metadata"]["namespace"] = NAMESPACE
        _apply(
            rbac.create_namespaced_role,
            rbac.read_namespaced_role,
            rbac.replace_namespaced_role,
            doc,
            namespace=NAMESPACE,
        )
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": doc["metadata"]["name"], "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": doc["metadata"]["name"],
            },
            "subjects": subjects,
        }
        _apply(
            rbac.create_namespaced_role_binding,
            rbac.read_namespaced_role_binding,
            rbac.replace_namespaced_role_binding,
            binding,
            namespace=NAMESPACE,
        )


def _register_webhook(api, built, port, ca_file):
    """Upstream's ValidatingWebhookConfiguration (config/webhook), pointed at our URL."""
    import base64

    from kubernetes import client

    config = _load_yaml(built.module_file("webhook.yaml"))[0]
    config["metadata"]["name"] = webhook_configuration_name()
    ca_bundle = base64.b64encode(Path(ca_file).read_bytes()).decode()
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
    admission = client.AdmissionregistrationV1Api(api)
    _apply(
        admission.create_validating_webhook_configuration,
        admission.read_validating_webhook_configuration,
        admission.replace_validating_webhook_configuration,
        config,
    )


def _apply(create, read, replace, body, namespace=None):
    from kubernetes.client.exceptions import ApiException

    args = (namespace,) if namespace else ()
    try:
        create(*args, body)
        return
    except ApiException as e:
        if e.status != 409:
            raise LabError(f"could not create {body['kind']} {body['metadata']['name']}: {e.reason}") from e
    if replace is None:
        return
    current = read(body["metadata"]["name"], *args)
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    replace(body["metadata"]["name"], *args, body)


def _load_yaml(path):
    import yaml

    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def _flag(argv, name):
    for arg in argv:
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _ready(probe_address):
    """The operator's /readyz: its webhook server has started."""
    host, _, port = (probe_address or "").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            sock.sendall(f"GET /readyz HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            return sock.recv(64).split(b" ")[1:2] == [b"200"]
    except (OSError, ValueError, IndexError):
        return False


def _log_says(paths, text):
    log = paths.log(NAME)
    try:
        data = log.read_text(errors="replace")
    except FileNotFoundError:
        return False
    return text in data[data.rfind(processes.START_MARKER) :]


def _start_failure(paths, reason):
    log = paths.log(NAME)
    error = processes.last_error(log)
    summary = f"{NAME} {VERSION} failed to start ({reason})"
    if error:
        summary += f": {error[:300]}"
    return LabError(f"{summary} [log: {log}]", detail=f"last lines of {log}:\n{processes.log_tail(log)}")
