"""What one lab was brought up with (``<state>/lab.json``): ports, node counts, binaries."""

import json
from dataclasses import asdict, dataclass, field

from lab import network

# Every port the lab listens on, all on 127.0.0.1.
PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "virt-api",
    "virt-controller",
    "redfish",
)


@dataclass(frozen=True)
class Profile:
    """Settings that differ between the normal lab and the large one (``up --scale``)."""

    name: str
    # The controller-manager's --cluster-cidr and kwok's fallback pool for pod IPs;
    # every node's own /24 podCIDR lies inside it (network.node_pod_cidr).
    pod_cidr: str
    # The node-lifecycle controller marks a node NotReady after this long without a heartbeat.
    node_monitor_grace_period: str
    # kwok renews each node Lease every quarter of this. A restarted kwok (new identity)
    # can only take over the Leases once they expire, so this must stay well below the
    # grace period above or every node would go NotReady whenever kwok restarts.
    kwok_node_lease_seconds: int
    # Client rate limit of the controller-manager (the ReplicaSet controller creates pods with it).
    controller_manager_qps: int
    controller_manager_burst: int
    # How long ``up`` waits for all nodes to be Ready.
    ready_timeout: int
    # Audit node Lease renewals too (the scale lab's leases alone would be most of the log).
    audit_leases: bool = True


PROFILES = {
    # The lab of the tests and the demo: short grace period, so fault tests see a silent
    # node go NotReady within half a minute.
    "default": Profile(
        name="default",
        pod_cidr=network.POD_CIDR,
        node_monitor_grace_period="20s",
        kwok_node_lease_seconds=12,
        controller_manager_qps=100,
        controller_manager_burst=200,
        ready_timeout=180,
    ),
    # Up to ~3,000 nodes on 2 cores (the benchmark's scenario 5 uses 1,000): a cluster CIDR
    # with room for a /24 per node, and heartbeats every 30 s instead of every 3 s so that
    # 1,000 Leases cost ~33 writes/s instead of ~330. Nodes need 5 minutes of silence to
    # turn NotReady, so node failures are not for this profile.
    "scale": Profile(
        name="scale",
        pod_cidr=network.SCALE_POD_CIDR,
        node_monitor_grace_period="300s",
        kwok_node_lease_seconds=120,
        controller_manager_qps=400,
        controller_manager_burst=800,
        ready_timeout=900,
        audit_leases=False,
    ),
}


@dataclass
class Settings:
    bin_dir: str
    workers: int
    control_plane_nodes: int
    hco: bool = True
    kubevirt: bool = True
    ports: dict = field(default_factory=dict)
    profile: str = "default"
    # virt-controller and virt-api of kubevirt_version with the virt-handler stand-in.
    kubevirt_mode: str = "real"
    kubevirt_version: str = "1.7.0"
    # The /32 on the lab's veth pair where virt-api serves (lab/netif.py).
    service_address: str = None
    # How the kube-scheduler scores nodes: a name of lab/scheduler.py (``up --scheduler-profile``).
    scheduler_profile: str = "default"
    # How many workers (the first ones) are Metal3 hosts, registered with the providerID a Metal3 cluster gives
    # them (``up --metal3-workers``); None: every worker keeps its kwok:// providerID.
    metal3_workers: int = None

    def choose_ports(self):
        self.ports = dict(zip(PORT_NAMES, network.free_ports(len(PORT_NAMES))))

    @property
    def tuning(self):
        """The Profile this lab runs with."""
        return PROFILES[self.profile]

    @property
    def apiserver_url(self):
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"


def load(paths):
    try:
        data = json.loads(paths.settings.read_text())
        known = Settings.__dataclass_fields__
        return Settings(**{k: v for k, v in data.items() if k in known})
    except FileNotFoundError:
        return None


def save(paths, settings):
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = paths.settings.with_name(paths.settings.name + ".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2) + "\n")
    tmp.replace(paths.settings)
