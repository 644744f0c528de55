"""The control-plane components: how each is started and how we know it is up.

Flags follow what envtest and kubeadm use, narrowed to one machine: everything
listens on 127.0.0.1 only, with ports chosen at ``up`` so several labs can run side
by side.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from lab import health, network

# Timeouts are generous: the lab often shares two cores with builds and other labs.
START_TIMEOUT = 180

# Grace period, lease duration and the other settings that differ between the normal lab
# and the scale lab (``up --scale``): lab/settings.py, PROFILES.
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"

AUDIT_POLICY = """\
# Metadata for every request: who (user, user agent), what (verb, resource) and the
# response code, without bodies. One event per request once the response is sent.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - RequestReceived
rules:
  - level: Metadata
"""
# The scale lab leaves out node Lease renewals (kwok's heartbeats): ~33 a second there.
AUDIT_POLICY_NO_LEASES = AUDIT_POLICY.replace(
    "rules:\n",
    """rules:
  - level: None
    resources:
      - group: coordination.k8s.io
        resources: [leases]
""",
)


def audit_policy(settings):
    return AUDIT_POLICY if settings.tuning.audit_leases else AUDIT_POLICY_NO_LEASES


@dataclass(frozen=True)
class Context:
    """Everything a component's command line is made of."""

    paths: object
    settings: object
    pki: object

    def binary(self, name):
        return str(Path(self.settings.bin_dir) / name)

    def port(self, name):
        return self.settings.ports[name]


@dataclass(frozen=True)
class Component:
    name: str
    argv: object  # Context -> list[str]
    probe: object  # Context -> bool
    # Seconds between SIGTERM and SIGKILL. kube-apiserver drains open watches for up
    # to a minute on SIGTERM; the lab's clients simply reconnect, so it is cut short.
    stop_grace: float = 10

    def command(self, ctx):
        return self.argv(ctx)

    def healthy(self, ctx):
        return self.probe(ctx)


def environment(settings=None):
    """Environment for the components: never send lab traffic through a proxy."""
    env = dict(os.environ)
    no_proxy = ",".join(
        filter(
            None,
            [
                env.get("NO_PROXY") or env.get("no_proxy"),
                "127.0.0.1,localhost",
                network.SERVICE_CLUSTER_IP_RANGE,
                settings.tuning.pod_cidr if settings else network.POD_CIDR,
            ],
        )
    )
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


def _etcd_argv(ctx):
    client = f"http://127.0.0.1:{ctx.port('etcd')}"
    peer = f"http://127.0.0.1:{ctx.port('etcd-peer')}"
    return [
        ctx.binary("etcd"),
        "--name=lab",
        f"--data-dir={ctx.paths.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=lab={peer}",
        "--initial-cluster-state=new",
        # The lab is disposable; skipping fsync makes every API write much cheaper.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def _etcd_probe(ctx):
    return health.http_ok("127.0.0.1", ctx.port("etcd"), "/health")


def _apiserver_argv(ctx):
    pki = ctx.pki
    return [
        ctx.binary("kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ctx.port('etcd')}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ctx.port('kube-apiserver')}",
        f"--advertise-address={network.APISERVER_ADVERTISE_IP}",
        f"--tls-cert-file={pki.cert('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--client-ca-file={pki.ca_cert}",
        "--authorization-mode=Node,RBAC",
        # Default admission plugins stay on: webhooks, ServiceAccount, PodSecurity, ...
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={network.SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        f"--audit-policy-file={ctx.paths.audit_policy}",
        f"--audit-log-path={ctx.paths.audit_log}",
        "--audit-log-format=json",
        # Aggregated APIs: route to endpoint IPs, and authenticate proxied requests
        # with the front-proxy client certificate.
        "--enable-aggregator-routing=true",
        f"--requestheader-client-ca-file={pki.cert('front-proxy-ca')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.cert('front-proxy-client')}",
        f"--proxy-client-key-file={pki.key('front-proxy-client')}",
    ]


def _apiserver_probe(ctx):
    tls = health.client_tls(ctx.pki.ca_cert, ctx.pki.cert("admin"), ctx.pki.key("admin"))
    return health.http_ok("127.0.0.1", ctx.port("kube-apiserver"), "/readyz", tls=tls)


def _controller_manager_argv(ctx):
    kubeconfig = ctx.paths.component_kubeconfig("kube-controller-manager")
    pki = ctx.pki
    tuning = ctx.settings.tuning
    return [
        ctx.binary("kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--bind-address=127.0.0.1",
        f"--secure-port={ctx.port('kube-controller-manager')}",
        "--leader-elect=false",
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.service_account_key}",
        # Each controller acts under its own service account, as in real clusters
        # (and as the audit log should show).
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.key('ca')}",
        f"--service-cluster-ip-range={network.SERVICE_CLUSTER_IP_RANGE}",
        f"--cluster-cidr={tuning.pod_cidr}",
        # Short in the normal lab, so fault tests see a silent node go NotReady within
        # half a minute.
        f"--node-monitor-grace-period={tuning.node_monitor_grace_period}",
        "--node-monitor-period=2s",
        f"--kube-api-qps={tuning.controller_manager_qps}",
        f"--kube-api-burst={tuning.controller_manager_burst}",
    ]


def _scheduler_argv(ctx):
    kubeconfig = ctx.paths.component_kubeconfig("kube-scheduler")
    # A scheduler profile other than the default is a KubeSchedulerConfiguration file
    # (lab/scheduler.py), written by ``up``; it carries the kubeconfig and leader election.
    profile = [f"--config={ctx.paths.scheduler_config}"] if ctx.settings.scheduler_profile != "default" else [
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
    ]
    return [
        ctx.binary("kube-scheduler"),
        *profile,
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--bind-address=127.0.0.1",
        f"--secure-port={ctx.port('kube-scheduler')}",
    ]


def _secure_healthz(port_name):
    def probe(ctx):
        return health.http_ok(
            "127.0.0.1", ctx.port(port_name), "/healthz", tls=health.unverified_tls()
        )

    return probe


def _kwok_argv(ctx):
    return [
        ctx.binary("kwok"),
        f"--kubeconfig={ctx.paths.component_kubeconfig('kwok')}",
        f"--config={ctx.paths.kwok_config}",
        # Only nodes carrying the annotation are simulated, so other tools may add
        # nodes of their own that stay untouched.
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
        # Heartbeats through node Leases, like kubelets; see lab/nodes.py for how
        # a node is failed through its Lease.
        f"--node-lease-duration-seconds={ctx.settings.tuning.kwok_node_lease_seconds}",
        f"--server-address=127.0.0.1:{ctx.port('kwok')}",
        f"--cidr={ctx.settings.tuning.pod_cidr}",
    ]


def _kwok_probe(ctx):
    return health.http_ok("127.0.0.1", ctx.port("kwok"), "/healthz")


# In start order; stopped in reverse.
CORE = (
    Component("etcd", _etcd_argv, _etcd_probe),
    Component("kube-apiserver", _apiserver_argv, _apiserver_probe, stop_grace=3),
    Component(
        "kube-controller-manager",
        _controller_manager_argv,
        _secure_healthz("kube-controller-manager"),
    ),
    Component("kube-scheduler", _scheduler_argv, _secure_healthz("kube-scheduler")),
    Component("kwok", _kwok_argv, _kwok_probe),
)
BY_NAME = {c.name: c for c in CORE}
