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
)


@dataclass
class Settings:
    bin_dir: str
    workers: int
    control_plane_nodes: int
    hco: bool = True
    kubevirt: bool = True
    ports: dict = field(default_factory=dict)

    def choose_ports(self):
        self.ports = dict(zip(PORT_NAMES, network.free_ports(len(PORT_NAMES))))

    @property
    def apiserver_url(self):
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"


def load(paths):
    try:
        return Settings(**json.loads(paths.settings.read_text()))
    except FileNotFoundError:
        return None


def save(paths, settings):
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = paths.settings.with_name(paths.settings.name + ".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2) + "\n")
    tmp.replace(paths.settings)
