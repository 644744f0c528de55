"""The lab's BMCs: configuration, credentials, start and stop, ``bmc.json``, a small client.

One ``sushy-tools`` emulator (lab/machines/redfish.py) serves every worker as a Redfish System
whose ``Name`` is the node's name and whose Id is a UUID derived from it. It listens on the lab's
veth address (lab/netif.py), never on the machine's own, over HTTPS with a serving certificate
of the lab CA, and asks for HTTP basic auth (a password made for each lab, bcrypt in an htpasswd
file) on everything but the ServiceRoot, as the emulator does.

``bmc.json`` (in the lab's state directory) is for tools: an object keyed by node name,
``{"address": "https://<host>:<port>/redfish/v1/Systems/<id>", "username": ..., "password": ...,
"ca_file": ...}``. ``bmc-inventory.yml`` beside it is the same as an Ansible inventory: every worker a
host of group ``lab_machines`` whose host var ``bmc`` is the ``bmc`` option of the collection's modules
(``address``, ``username``, ``password``, ``ca_path``), to use beside the nodes inventory plugin.
Both are readable by their owner only.

``Bmc(entry).firmware()`` reads a machine's firmware from its BMC's inventory (lab/machines/firmware.py: the BIOS
and BMC versions it runs and those staged for its next power on).
"""

import json
import os
import secrets
import sys
import uuid

import bcrypt
import requests
import yaml

from lab import certs, components, netif, processes
from lab import settings as lab_settings
from lab.errors import LabError
from lab.machines import firmware
from lab.paths import REPO_ROOT
from lab.wait import wait_for

COMPONENT = "redfish"
# Every power state a machine reaches, one JSON line each (lab/standins/machines.py follows it).
POWER_LOG = "power.jsonl"
USERNAME = "admin"
START_TIMEOUT = 60
# How long a power action takes to take effect, in seconds (fewest, most).
POWER_DELAY = (1, 3)
_NAMESPACE = uuid.UUID("6f1c4a52-2f4e-4d53-9a53-6b6d2c0a1e01")


def system_id(node):
    """The Redfish System Id of a node's machine: a UUID that stays the same for the node's name."""
    return str(uuid.uuid5(_NAMESPACE, node))


def _port(ctx):
    if COMPONENT not in ctx.settings.ports:
        from lab import network

        ctx.settings.ports[COMPONENT] = network.free_ports(1)[0]
        lab_settings.save(ctx.paths, ctx.settings)
    return ctx.settings.ports[COMPONENT]


def _password(paths):
    path = paths.machines / "password"
    if not path.exists():
        paths.machines.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(18))
    return path.read_text().strip()


def _config(ctx, workers, address, port, password):
    """The emulator's configuration file (Python, read by Flask's ``from_pyfile``)."""
    machines = ctx.paths.machines
    htpasswd = machines / "htpasswd"
    htpasswd.write_text(f"{USERNAME}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    cert, key = certs.ensure_serving_cert(
        ctx.pki, "redfish", "lab-redfish", ip_addresses=(address,), dns_names=())
    systems = [{"uuid": system_id(name), "name": name, "power_state": "On",
                "nics": [{"mac": _mac(name), "ip": ip}]} for name, ip in workers]
    values = {
        "SUSHY_EMULATOR_LISTEN_IP": address,
        "SUSHY_EMULATOR_LISTEN_PORT": port,
        "SUSHY_EMULATOR_SSL_CERT": str(cert),
        "SUSHY_EMULATOR_SSL_KEY": str(key),
        "SUSHY_EMULATOR_AUTH_FILE": str(htpasswd),
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
        "SUSHY_EMULATOR_STATE_DIR": str(machines / "state"),
        "LAB_POWER_DELAY": list(POWER_DELAY),
        "LAB_POWER_LOG": str(machines / POWER_LOG),
        "LAB_FAULTS": str(machines / "faults.json"),
    }
    path = machines / "emulator.conf"
    path.write_text("".join(f"{name} = {value!r}\n" for name, value in values.items()))
    return path


def _mac(name):
    digest = uuid.uuid5(_NAMESPACE, "mac/" + name).bytes
    return "52:54:00:%02x:%02x:%02x" % (digest[0], digest[1], digest[2])


def ensure(ctx, workers, say, managed=()):
    """Start the BMCs of ``workers`` ([(node name, node IP)]) unless they run; write ``bmc.json`` and
    ``bmc-inventory.yml`` (without the machines of ``managed``, which are reached through their BareMetalHosts)."""
    if not workers:
        return
    address = netif.ensure(ctx.paths.state_dir, ctx.settings.service_address)
    if ctx.settings.service_address != address:
        ctx.settings.service_address = address
        lab_settings.save(ctx.paths, ctx.settings)
    port = _port(ctx)
    record = processes.tracked(ctx.paths, COMPONENT)
    password = _password(ctx.paths)
    if record is None:
        config = _config(ctx, workers, address, port, password)
        say(f"starting the Redfish BMCs of {len(workers)} machines on https://{address}:{port}")
        record = processes.start(ctx.paths, COMPONENT, [sys.executable, "-m", "lab.machines.redfish",
                                                        "--config", str(config)],
                                 env=components.environment(ctx.settings), cwd=str(REPO_ROOT))
    bmcs = {name: {"address": f"https://{address}:{port}/redfish/v1/Systems/{system_id(name)}",
                   "username": USERNAME, "password": password, "ca_file": str(ctx.pki.ca_cert)}
            for name, _ip in workers}

    def serving():
        if not processes.is_running(record):
            log = ctx.paths.log(COMPONENT)
            raise LabError(f"the Redfish emulator exited while starting [log: {log}]",
                           detail=f"last lines of {log}:\n{processes.log_tail(log)}")
        try:
            return Bmc(bmcs[workers[0][0]]).get("").get("PowerState") is not None
        except (requests.RequestException, LabError):
            return False

    wait_for(serving, START_TIMEOUT, "the Redfish BMCs to serve")
    _write_private(ctx.paths.bmc_file, json.dumps(bmcs, indent=2, sort_keys=True) + "\n")
    _write_private(ctx.paths.bmc_inventory, inventory({n: e for n, e in bmcs.items() if n not in managed}))


INVENTORY_GROUP = "lab_machines"
# The version a machine runs after a flash, whatever the image (tests use it under this name).
flashed_version = firmware.flashed_version


def module_option(entry, **changes):
    """A ``bmc.json`` entry as the collection's modules take it (option ``bmc``), with ``changes``."""
    return dict({"address": entry["address"], "username": entry["username"], "password": entry["password"],
                 "ca_path": entry["ca_file"]}, **changes)


def inventory(bmcs):
    """``bmc-inventory.yml``: the machines as hosts named like their nodes, each with host var ``bmc``."""
    hosts = {name: {"bmc": module_option(entry)} for name, entry in sorted(bmcs.items())}
    return ("# The lab's machines, each with its BMC as the collection's modules take it (option bmc).\n"
            "# Use beside the nodes inventory plugin: ansible-playbook -i <nodes.yml> -i bmc-inventory.yml ...\n"
            + yaml.safe_dump({"all": {"children": {INVENTORY_GROUP: {"hosts": hosts}}}}, sort_keys=True))


def _write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


FAULTS = ("unreachable", "slow", "refuse_power", "fail_update")


def set_faults(paths, node, **faults):
    """Make the BMC of ``node`` misbehave (lab/machines/redfish.py ``LAB_FAULTS``): ``unreachable``,
    ``slow`` (seconds), ``refuse_power``, ``fail_update``; none clears them. Takes effect at the
    next request."""
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        raise LabError(f"unknown BMC fault {', '.join(unknown)}; one of: {', '.join(FAULTS)}")
    path = paths.machines / "faults.json"
    try:
        current = json.loads(path.read_text())
    except FileNotFoundError:
        current = {}
    wanted = dict((k, v) for k, v in faults.items() if v)
    if wanted:
        current[node] = wanted
    else:
        current.pop(node, None)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load(paths):
    """``bmc.json`` of a running lab: {node: {address, username, password, ca_file}}."""
    try:
        return json.loads(paths.bmc_file.read_text())
    except FileNotFoundError:
        raise LabError(f"the lab has no BMCs ({paths.bmc_file} is missing; run `python -m lab up`)") from None


class Bmc:
    """One machine's BMC, over Redfish (lab tooling: ``python -m lab bmc``, tests, stand-ins)."""

    def __init__(self, entry, timeout=10):
        self.entry = entry
        self.timeout = timeout
        self.system = entry["address"]
        self.root = self.system.split("/redfish/", 1)[0]
        self.system_path = "/redfish/" + self.system.split("/redfish/", 1)[1]
        # Lab traffic never goes through a proxy of the environment.
        self.session = requests.Session()
        self.session.trust_env = False

    def send(self, method, path="", body=None):
        """The BMC's answer to ``method`` on ``path`` (under the System, or from ``/redfish/``); LabError for 4xx/5xx."""
        url = self.system + path if not path.startswith("/redfish/") else self.root + path
        response = self.session.request(method, url, json=body, timeout=self.timeout, verify=self.entry["ca_file"],
                                        auth=(self.entry["username"], self.entry["password"]))
        if response.status_code >= 400:
            raise LabError(f"{method} {url} answered {response.status_code}: {response.text.strip()[:1000]}")
        return response

    def _request(self, method, path, body=None):
        response = self.send(method, path, body)
        return response.json() if response.content else {}

    def get(self, path=""):
        return self._request("GET", path)

    def power_state(self):
        return self.get().get("PowerState")

    def reset(self, reset_type):
        return self._request("POST", "/Actions/ComputerSystem.Reset", {"ResetType": reset_type})

    def firmware(self):
        """The machine's firmware as its BMC's inventory reports it: ``{"bios": {...}, "bmc": {...}}``, each
        ``{"id", "path", "version", "staged"}`` (``version`` runs now; ``staged`` runs from the next power on, None
        when nothing is). The members are ``/redfish/v1/UpdateService/FirmwareInventory/<node>.BIOS`` and
        ``<node>.BMC`` (lab/machines/firmware.py), the node being the System's ``Name``."""
        node = self.get()["Name"]
        found = {}
        for component in sorted(firmware.COMPONENTS):
            path = "%s/%s" % (firmware.INVENTORY, firmware.member_id(node, component))
            member = self.get(path)
            found[component] = {"id": member["Id"], "path": path, "version": member.get("Version"),
                                "staged": ((member.get("Oem") or {}).get("Lab") or {}).get("StagedVersion")}
        return found

    def show(self):
        """The machine as its BMC reports it now: power state, BIOS version, BIOS attributes, firmware inventory."""
        system = self.get()
        return {"address": self.system, "power_state": system.get("PowerState"),
                "bios_version": system.get("BiosVersion"), "bios": self.get("/BIOS").get("Attributes"),
                "firmware": dict((name, {"version": part["version"], "staged": part["staged"]})
                                 for name, part in self.firmware().items())}

    def simple_update(self, image_uri, target=None):
        """``UpdateService.SimpleUpdate`` of ``image_uri`` onto ``target`` (a URI path; default the System: its BIOS);
        returns the path of its Task (the ``Location``), to follow with :meth:`follow_task`."""
        response = self.send("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                             {"ImageURI": image_uri, "Targets": [target or self.system_path]})
        return response.headers["Location"]

    def follow_task(self, path, timeout=60):
        """The Task at ``path`` once it ended (it answers 200 instead of 202); LabError after ``timeout`` seconds."""
        def ended():
            response = self.send("GET", path)
            return response.json() if response.status_code != 202 else None

        return wait_for(ended, timeout, f"the task {path} to end")
