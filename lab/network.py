"""The lab's address plan.

Everything the processes listen on is 127.0.0.1 with ports chosen at ``up``. The
addresses below are only data written into API objects (node addresses, pod and
service IPs); nothing ever connects to them.
"""

import fcntl
import ipaddress
import json
import os
import socket
import tempfile
import time

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


# Ports handed out recently, machine-wide: labs started side by side (the test tiers run two
# streams of them) never get the same port in the moment between choosing and binding it.
RESERVATIONS = os.path.join(tempfile.gettempdir(), "kubevirt-ops-lab-ports.json")
RESERVATION_SECONDS = 600  # a lab binds what it chose well within this


def free_ports(count, reservations=None):
    """``count`` distinct ports on 127.0.0.1 that are free right now and that no other lab chose
    in the last RESERVATION_SECONDS (recorded in ``reservations``, under an exclusive lock)."""
    path = reservations or RESERVATIONS
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        try:
            with open(path) as fh:
                reserved = dict((int(p), t) for p, t in json.load(fh).items() if now - t < RESERVATION_SECONDS)
        except (OSError, ValueError, AttributeError):
            reserved = {}
        sockets, chosen = [], []
        try:
            # Every socket stays bound until all are chosen, so the kernel never hands out one twice.
            while len(chosen) < count:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                sockets.append(s)
                port = s.getsockname()[1]
                if port not in reserved:
                    chosen.append(port)
        finally:
            for s in sockets:
                s.close()
        reserved.update((p, now) for p in chosen)
        with open(path + ".tmp", "w") as fh:
            json.dump(dict((str(p), t) for p, t in reserved.items()), fh)
        os.replace(path + ".tmp", path)
        return chosen


def port_in_use(port):
    """True when something listens on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
