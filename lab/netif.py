"""The lab's own network interface: a veth pair holding one service address.

The apiserver refuses loopback addresses as Service endpoints, and aggregated APIs
(KubeVirt's ``subresources.kubevirt.io``) are reached through a Service. So each lab
creates a veth pair of its own, puts one /32 address on it and serves virt-api there;
``down`` deletes the pair (and with it the address). Nothing is ever bound to the
machine's own interface addresses.

Needs CAP_NET_ADMIN (root) and the ``ip`` command.
"""

import hashlib
import ipaddress
import shutil
import subprocess

from lab.errors import LabError

# 10.87.0.0/16: outside every range of lab/network.py's address plan.
SERVICE_NET = ipaddress.IPv4Network("10.87.0.0/16")
_PREFIX = "kvlab"


def interface_name(state_dir):
    """A name of at most 15 characters, stable for one state directory."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()
    return f"{_PREFIX}{digest[:8]}"


def _ip(*args, check=True):
    if shutil.which("ip") is None:
        raise LabError("the lab needs the `ip` command (iproute2) for its service address")
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise LabError(
            f"`ip {' '.join(args)}` failed: {result.stderr.strip() or result.stdout.strip()}"
            " (the lab needs root or CAP_NET_ADMIN to create its veth pair)"
        )
    return result


def _addresses_in_use():
    out = _ip("-4", "-o", "addr", "show").stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3}


def _address_of(name):
    result = _ip("-4", "-o", "addr", "show", "dev", name, check=False)
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) > 3 and words[2] == "inet":
            return words[3].split("/")[0]
    return None


def ensure(state_dir, preferred=None):
    """Create the lab's veth pair (if missing) and return its service address."""
    name = interface_name(state_dir)
    existing = _address_of(name)
    if existing:
        return existing
    used = _addresses_in_use()
    candidates = []
    if preferred:
        candidates.append(preferred)
    digest = int(hashlib.sha256(str(state_dir).encode()).hexdigest(), 16)
    hosts = SERVICE_NET.num_addresses - 2
    candidates += [str(SERVICE_NET[1 + (digest + i) % hosts]) for i in range(64)]
    address = next(a for a in candidates if a not in used)
    _ip("link", "del", name, check=False)
    _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    _ip("addr", "add", f"{address}/32", "dev", name)
    _ip("link", "set", name, "up")
    _ip("link", "set", f"{name}p", "up")
    return address


def remove(state_dir):
    """Delete the lab's veth pair (both ends and the address); True if there was one."""
    if shutil.which("ip") is None:
        return False
    return _ip("link", "del", interface_name(state_dir), check=False).returncode == 0
