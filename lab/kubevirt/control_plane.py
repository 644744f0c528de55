"""Start, check and stop the lab's virt-api and virt-controller.

Each runs as its ServiceAccount (a client certificate of the lab's CA with the
ServiceAccount's user name and groups, so the RBAC virt-operator installs is what
authorizes it), listens where the lab allows (virt-api on the lab's veth address, which
the apiserver reaches for webhooks and the aggregated API; virt-controller on
127.0.0.1) and serves with certificates of the lab's CA.
"""

import json
import ssl
import http.client

from lab import certs, netif, processes
from lab.components import environment
from lab.errors import LabError
from lab.kubeconfig import write_kubeconfig
from lab.kubevirt import (
    NAMESPACE,
    SERVICE_ACCOUNTS,
    VIRT_API,
    VIRT_CONTROLLER,
    binaries,
    install,
    normalize_version,
)
from lab.wait import wait_for

START_TIMEOUT = 180
# virt-api waits 5 s after SIGTERM before it stops serving (pkg/virt-api/api.go), then
# up to 5 s for open requests.
STOP_GRACE = 15
PROCESSES = (VIRT_CONTROLLER, VIRT_API)
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher"


def identity(pki, component):
    """Client certificate stem for ``component``'s ServiceAccount identity."""
    account = SERVICE_ACCOUNTS[component]
    stem = f"sa-{account}"
    certs.ensure_client_cert(
        pki,
        stem,
        f"system:serviceaccount:{NAMESPACE}:{account}",
        ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
    )
    return stem


def kubeconfig_for(ctx, component):
    stem = identity(ctx.pki, component)
    path = ctx.paths.component_kubeconfig(component)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(
        path,
        ctx.settings.apiserver_url,
        ctx.pki.ca_cert,
        ctx.pki.cert(stem),
        ctx.pki.key(stem),
        f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNTS[component]}",
    )
    return path


def _serving(ctx, address):
    certs.ensure_serving_cert(
        ctx.pki,
        "virt-api-serving",
        "virt-api.kubevirt.svc",
        dns_names=["virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local"],
        ip_addresses=[address],
    )
    certs.ensure_serving_cert(ctx.pki, "virt-controller-serving", "virt-controller", ip_addresses=["127.0.0.1"])


def argv(ctx, component, bin_dir, address):
    kubeconfig = kubeconfig_for(ctx, component)
    pki = ctx.pki
    version = normalize_version(ctx.settings.kubevirt_version)
    if component == VIRT_API:
        api_identity = identity(pki, VIRT_API)
        return [
            str(bin_dir / "virt-api"),
            f"--kubeconfig={kubeconfig}",
            f"--listen={address}",
            f"--port={ctx.port(VIRT_API)}",
            f"--tls-cert-file={pki.cert('virt-api-serving')}",
            f"--tls-key-file={pki.key('virt-api-serving')}",
            # The client certificate virt-api shows virt-handler (console, VNC): none runs.
            f"--handler-cert-file={pki.cert(api_identity)}",
            f"--handler-key-file={pki.key(api_identity)}",
        ]
    return [
        str(bin_dir / "virt-controller"),
        f"--kubeconfig={kubeconfig}",
        "--listen=127.0.0.1",
        f"--port={ctx.port(VIRT_CONTROLLER)}",
        f"--launcher-image={LAUNCHER_IMAGE}:v{version}",
        f"--prom-cert-file={pki.cert('virt-controller-serving')}",
        f"--prom-key-file={pki.key('virt-controller-serving')}",
    ]


def _get(host, port, path):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        conn = http.client.HTTPSConnection(host, port, timeout=3, context=context)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return None, b""


def healthy(ctx, component, address):
    if component == VIRT_API:
        status, _ = _get(address, ctx.port(VIRT_API), "/healthz")
        return status == 200
    status, body = _get("127.0.0.1", ctx.port(VIRT_CONTROLLER), "/leader")
    if status != 200:
        return False
    try:
        return json.loads(body)["apiserver"]["leader"] == "true"
    except (ValueError, KeyError, TypeError):
        return False


def configuration(ctx):
    """The KubeVirt CR's spec.configuration the lab starts with."""
    return {
        "developerConfiguration": {"featureGates": []},
        "evictionStrategy": "LiveMigrate",
        # Plain KubeVirt's default pod-network binding is bridge, which is not live-migratable;
        # HCO-installed clusters (OpenShift Virtualization) use masquerade.
        "network": {"defaultNetworkInterface": "masquerade"},
    }


def kubevirt_status(version):
    version = f"v{normalize_version(version)}"
    return {
        "phase": "Deployed",
        "observedKubeVirtVersion": version,
        "targetKubeVirtVersion": version,
        "operatorVersion": version,
        # virt-operator records the architecture VMs default to; virt-config reads it
        # (pkg/virt-config/configuration.go), and VMs without one are refused.
        "defaultArchitecture": "amd64",
        "observedKubeVirtRegistry": "quay.io/kubevirt",
        "conditions": [
            {"type": "Available", "status": "True", "reason": "AllComponentsReady", "message": "All components are ready."},
            {"type": "Progressing", "status": "False", "reason": "AllComponentsReady", "message": "All components are ready."},
            {"type": "Degraded", "status": "False", "reason": "AllComponentsReady", "message": "All components are ready."},
        ],
    }


def ensure(ctx, api_client, say):
    """Build if needed, install the manifests, start both components, wait until the
    aggregated API answers. Raises LabError naming the component and its log."""
    version = ctx.settings.kubevirt_version
    bin_dir = binaries.ensure(version, ctx.paths.log("kubevirt-build"))
    address = netif.ensure(ctx.paths.state_dir, ctx.settings.service_address)
    if ctx.settings.service_address != address:
        ctx.settings.service_address = address
        from lab import settings as lab_settings

        lab_settings.save(ctx.paths, ctx.settings)
    _serving(ctx, address)
    ca_pem = ctx.pki.ca_cert.read_bytes()
    objects = install.reach_virt_api(install.generated(bin_dir), address, ctx.port(VIRT_API), ca_pem)
    webhooks, applier = install.install(
        api_client,
        objects,
        install.base_objects(ca_pem, configuration(ctx)),
        install.service_objects(address, ctx.port(VIRT_API)),
        kubevirt_status(version),
    )
    for component in PROCESSES:
        _start(ctx, component, bin_dir, address, say)
    for obj in webhooks:
        applier.apply(obj)
    wait_for(
        lambda: _api_service_available(api_client),
        START_TIMEOUT,
        "the APIService v1.subresources.kubevirt.io (served by virt-api) to be Available",
    )
    return address


def _api_service_available(api_client):
    from kubernetes import client

    try:
        service = client.ApiregistrationV1Api(api_client).read_api_service("v1.subresources.kubevirt.io")
    except Exception:
        return False
    return any(c.type == "Available" and c.status == "True" for c in service.status.conditions or [])


def _start(ctx, component, bin_dir, address, say, restarted=False):
    record = processes.tracked(ctx.paths, component)
    if record is None:
        where = f"{address}:{ctx.port(component)}" if component == VIRT_API else f"127.0.0.1:{ctx.port(component)}"
        say(f"starting {component} v{normalize_version(ctx.settings.kubevirt_version)} on {where}")
        # Restarted when it exits after it once served, as its Deployment's pod would be:
        # virt-controller exits when it loses its leader lease (API server away too long).
        env = environment(ctx.settings)
        # virt-api makes a directory for its certificates in the temporary directory at every start
        # (kubevirt pkg/virt-api/api.go, os.MkdirTemp) and never removes it; in the lab's own.
        env["TMPDIR"] = str(ctx.paths.tmp / component)
        (ctx.paths.tmp / component).mkdir(parents=True, exist_ok=True)
        record = processes.start_restarting(ctx.paths, component, argv(ctx, component, bin_dir, address), env=env,
                                            served_before=restarted)

    def serving():
        if not processes.is_running(record):
            raise _failure(ctx, component, "exited while starting")
        return healthy(ctx, component, address)

    try:
        wait_for(serving, START_TIMEOUT, f"{component} to serve")
    except LabError as e:
        if e.detail is None:
            raise _failure(ctx, component, str(e)) from e
        raise
    processes.mark_started(ctx.paths, component)


def _failure(ctx, component, reason):
    log = ctx.paths.log(component)
    return LabError(
        f"{component} failed to start ({reason}) [log: {log}]",
        detail=f"last lines of {log}:\n{processes.log_tail(log)}",
    )


def start_one(ctx, component):
    """Start one stopped component again (``python -m lab start virt-api``): it served before, so it is
    restarted from its first exit on."""
    bin_dir = binaries.ensure(ctx.settings.kubevirt_version, ctx.paths.log("kubevirt-build"))
    _start(ctx, component, bin_dir, ctx.settings.service_address, lambda m: None, restarted=True)


def stop(paths, say):
    for component in reversed(PROCESSES):
        if processes.stop(paths, component, STOP_GRACE):
            say(f"stopped {component}")
    if netif.remove(paths.state_dir):
        say(f"removed network interface {netif.interface_name(paths.state_dir)}")
