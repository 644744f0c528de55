"""The lab's address plan.

Everything the processes listen on is 127.0.0.1 with ports chosen at ``up``. The
addresses below are only data written into API objects (node addresses, pod and
service IPs); nothing ever connects to them.
"""

import ipaddress
import socket

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
# The apiserver publishes this in the `kubernetes` Endpoints; a loopback address
# is refused there, and the host's own address would differ between machines.
APISERVER_ADVERTISE_IP = "10.89.0.1"
# kwok's fallback pool for pod IPs; nodes carry their own podCIDR (node_pod_cidr).
POD_CIDR = "10.244.0.0/16"
# The scale profile's (``up --scale``): holds POD_CIDR and the /24s of nodes 256 to 3,071.
SCALE_POD_CIDR = "10.240.0.0/12"
_FIRST_NODE_BLOCK = ipaddress.IPv4Address("10.244.0.0")
_FIRST_WORKER_IP = ipaddress.IPv4Address("10.89.1.10")


def control_plane_node_ip(index):
    return f"10.89.0.{10 + index}"


def worker_node_ip(index):
    """10.89.1.11, 10.89.1.12, ... continuing into 10.89.2.0 and on past worker 245."""
    return str(_FIRST_WORKER_IP + index)


def node_pod_cidr(ordinal):
    """The ``ordinal``-th /24 from 10.244.0.0 (1-based, all nodes): 10.244.1.0/24, ...

    Nodes 1 to 255 fit in POD_CIDR; later ones continue into 10.245.0.0/24 and on,
    which only SCALE_POD_CIDR holds (see max_nodes).
    """
    return f"{_FIRST_NODE_BLOCK + 256 * ordinal}/24"


def max_nodes(pod_cidr):
    """How many nodes get a /24 of their own inside ``pod_cidr``."""
    network = ipaddress.IPv4Network(pod_cidr)
    end = int(network.broadcast_address) + 1
    return max(0, (end - int(_FIRST_NODE_BLOCK)) // 256 - 1)


def free_ports(count):
    """``count`` distinct ports on 127.0.0.1 that are free right now.

    All sockets stay bound until every port is chosen so the same port is never
    returned twice; another lab could still take one before we start on it, which
    the start-up checks report as a failed component.
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(port):
    """True when something listens on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
