"""The lab's Redfish BMCs: the ``sushy-tools`` emulator with a systems driver for the lab's machines.

Run as ``python -m lab.machines.redfish --config <file>`` (lab/machines/bmc.py writes the file and
starts it). Everything on the wire is the emulator's own (``sushy_tools/emulator/main.py``: the
ServiceRoot, Systems, Managers, ``ComputerSystem.Reset``, BIOS, ``UpdateService``, errors,
basic auth from ``SUSHY_EMULATOR_AUTH_FILE``, TLS from ``SUSHY_EMULATOR_SSL_CERT``/``_KEY``), with the
firmware inventory and update tasks a BMC has (lab/machines/firmware.py).

The emulator's fake driver (``resources/systems/fakedriver.py``) has power and boot only, and
applies a power action when the system is next read. :class:`LabMachines` extends it with what a
server's BMC does besides:

- a power action takes effect on its own after a delay (``LAB_POWER_DELAY``: the fewest and most
  seconds), read or not: a ticker applies what is due;
- firmware versions (``get_versions``/``set_versions``, ``get_staged_versions``): the BIOS and the BMC
  firmware; an update (``SimpleUpdate``, lab/machines/firmware.py) is staged and takes effect when the
  machine next powers on, as a BIOS flash does; until then the running version is the old one;
- BIOS attributes (``get_bios``/``set_bios``/``reset_bios``): changes are pending until the machine
  next powers on; ``GET .../BIOS/Settings`` shows them (the emulator shows the current ones there);
- ``LAB_POWER_LOG``: every power state a machine reaches, one JSON line each, for the lab;
- ``LAB_FAULTS``: a JSON file keyed by node name, read at every request, that makes a BMC misbehave
  as real ones do (lab/machines/bmc.py ``set_faults``): ``unreachable`` (no answer until the
  fault is cleared), ``slow`` (seconds before every answer), ``refuse_power`` (a power action is
  refused, 409), ``fail_update`` (a firmware update's task ends in Exception, nothing staged).
"""

import argparse
import json
import random
import sys
import threading
import time

from sushy_tools import error
from sushy_tools.emulator.resources.systems import fakedriver

from lab.machines import firmware

DEFAULT_BIOS = {
    "BootMode": "Uefi",
    "EmbeddedSata": "Raid",
    "NicBoot1": "NetworkBoot",
    "ProcTurboMode": "Enabled",
    "SriovGlobalEnable": "Disabled",
}
DEFAULT_VERSIONS = {"BiosVersion": "1.0.0", "BmcVersion": "5.10.0"}
TICK_SECONDS = 0.25
# How long an unreachable BMC holds a request before it drops the connection.
UNREACHABLE_SECONDS = 600


def faults(config, name):
    """The faults set for the machine ``name`` (``LAB_FAULTS``), {} when none."""
    path = config.get("LAB_FAULTS")
    if not path:
        return {}
    try:
        with open(path) as handle:
            return json.load(handle).get(name) or {}
    except (OSError, ValueError):
        return {}


class LabMachines(fakedriver.FakeDriver):
    """The fake systems driver with firmware, BIOS and power that changes on its own."""

    _lock = threading.RLock()

    @classmethod
    def initialize(cls, config, logger, *args, **kwargs):
        driver = super().initialize(config, logger)
        low, high = config.get("LAB_POWER_DELAY", (1, 3))
        cls._delay = (float(low), float(high))
        cls._power_log = config.get("LAB_POWER_LOG")
        return driver

    def __init__(self):
        super().__init__()
        # The machines with a power action to apply: only those are read by the ticker.
        self._due = set()
        ticker = threading.Thread(target=self._tick, name="power", daemon=True)
        ticker.start()

    # -- power ---------------------------------------------------------------------------------

    def _tick(self):
        while True:
            time.sleep(TICK_SECONDS)
            with self._lock:
                due = list(self._due)
            for uuid in due:
                try:
                    with self._lock:
                        if not self._get(uuid).get("pending_power"):
                            self._due.discard(uuid)
                except Exception as exc:  # noqa: BLE001 - a ticker must not die
                    self._logger.warning("power ticker: %s", exc)

    def _get(self, identity):
        with self._lock:
            return super()._get(identity)

    def _update(self, system, **changes):
        with self._lock:
            if isinstance(system, str):
                system = self._get(system)
            before = system.get("power_state")
            after = changes.get("power_state", before)
            if before != after and after == "On":
                # A machine that powers on runs what was staged for it.
                changes.update(self._boot_changes(system))
            super()._update(system, **changes)
            if before != after:
                self._log_power(system, after)

    def _boot_changes(self, system):
        changes = {"boots": int(system.get("boots", 0)) + 1}
        if system.get("staged_versions"):
            changes["versions"] = dict(self._versions(system), **system["staged_versions"])
            changes["staged_versions"] = None
        if system.get("pending_bios"):
            changes["bios"] = dict(self._bios(system), **system["pending_bios"])
            changes["pending_bios"] = None
        return changes

    def _log_power(self, system, state):
        if not self._power_log:
            return
        line = json.dumps({"name": system["name"], "uuid": system["uuid"], "power_state": state,
                           "boots": system.get("boots", 0), "time": time.time()})
        with open(self._power_log, "a") as log:
            log.write(line + "\n")

    def set_power_state(self, identity, state):
        with self._lock:
            system = self._get(identity)
            if faults(self._config, system["name"]).get("refuse_power"):
                # As a BMC busy with another job answers: the emulator's Conflict (409).
                raise error.Conflict(f"The BMC of {system['name']} refuses the power action {state} (a lab fault).")
            if "On" in state:
                target = "On"
            elif state in ("ForceOff", "GracefulShutdown"):
                target = "Off"
            elif "Restart" in state or state == "PowerCycle":
                target = "Restart"
            else:
                raise error.NotSupportedError(f"Power state {state} is not supported")
            due = time.time() + random.uniform(*self._delay)
            if target == "Restart":
                # Off at once, On after the delay: the fake driver's own reading of a restart.
                self._update(system, power_state="Off")
                self._update(system, pending_power={"power_state": "On", "apply_time": due})
                self._due.add(system["uuid"])
            elif system["power_state"] != target:
                self._update(system, pending_power={"power_state": target, "apply_time": due})
                self._due.add(system["uuid"])

    # -- firmware and BIOS ---------------------------------------------------------------------

    @staticmethod
    def _versions(system):
        return dict(DEFAULT_VERSIONS, **(system.get("versions") or {}))

    @staticmethod
    def _bios(system):
        return dict(DEFAULT_BIOS, **(system.get("bios") or {}))

    def get_versions(self, identity):
        return self._versions(self._get(identity))

    def set_versions(self, identity, firmware_versions):
        """Stage ``firmware_versions`` ({BiosVersion, BmcVersion: version}) for the next power on."""
        with self._lock:
            system = self._get(identity)
            staged = dict(system.get("staged_versions") or {}, **firmware_versions)
            self._update(system, staged_versions=staged)

    def get_staged_versions(self, identity):
        """The versions the machine runs from its next power on, of what was flashed since its last one."""
        return dict(self._get(identity).get("staged_versions") or {})

    def update_fails(self, identity):
        """Whether the machine's BMC fails firmware updates (the ``fail_update`` fault)."""
        return bool(faults(self._config, self._get(identity)["name"]).get("fail_update"))

    def reset_versions(self, identity):
        self._update(identity, versions=None, staged_versions=None)

    def get_bios(self, identity):
        return self._bios(self._get(identity))

    def set_bios(self, identity, attributes):
        with self._lock:
            system = self._get(identity)
            unknown = sorted(set(attributes or {}) - set(self._bios(system)))
            if unknown:
                raise error.BadRequest(f"Unknown BIOS attributes: {', '.join(unknown)}")
            pending = dict(system.get("pending_bios") or {}, **attributes)
            self._update(system, pending_bios=pending)

    def get_pending_bios(self, identity):
        """The attributes the machine will run after its next power on."""
        system = self._get(identity)
        return dict(self._bios(system), **(system.get("pending_bios") or {}))

    def reset_bios(self, identity):
        with self._lock:
            self._update(identity, pending_bios=dict(DEFAULT_BIOS))


def _serve_pending_bios_settings(emulator):
    """``GET /BIOS/Settings`` shows the pending attributes (the Redfish Settings resource); the
    emulator shows the current ones there, as its drivers apply a change at once. Its template."""
    import flask
    from sushy_tools.emulator import api_utils

    original = emulator.app.view_functions["bios_settings"]

    @api_utils.ensure_instance_access
    @api_utils.returns_json
    def bios_settings(identity):
        if flask.request.method != "GET" or emulator.app.feature_set != "full":
            return original(identity=identity)
        pending = emulator.app.systems.get_pending_bios(identity)
        return emulator.app.render_template(
            "bios_settings.json", identity=identity,
            bios_pending_attributes=json.dumps(pending, sort_keys=True, indent=6))

    emulator.app.view_functions["bios_settings"] = bios_settings


class Faults:
    """WSGI middleware: an unreachable or slow BMC, per machine (``LAB_FAULTS``)."""

    def __init__(self, app, config):
        self.app = app
        self.config = config  # read when a request comes: the emulator loads it after this is installed

    def _name(self, identity):
        for system in self.config.get("SUSHY_EMULATOR_FAKE_SYSTEMS") or []:
            if identity in (system["uuid"], system["name"]):
                return system["name"]
        return None

    def _machine(self, path):
        """The machine a request is about: a System's or Manager's (the emulator names it by its System), or an
        inventory member's (lab/machines/firmware.py, named by the node)."""
        parts = path.strip("/").split("/")
        if len(parts) > 3 and parts[2] in ("Systems", "Managers"):
            return self._name(parts[3])
        if len(parts) > 4 and parts[2:4] == ["UpdateService", "FirmwareInventory"]:
            return self._name(parts[4].rpartition(".")[0])
        return None

    def __call__(self, environ, start_response):
        name = self._machine(environ.get("PATH_INFO", ""))
        if name:
            deadline = time.monotonic() + UNREACHABLE_SECONDS
            while faults(self.config, name).get("unreachable") and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(float(faults(self.config, name).get("slow") or 0))
        return self.app(environ, start_response)


def _install_faults(emulator):
    # Inside the emulator's basic auth (its configure() wraps the app it finds).
    emulator.app.wsgi_app = Faults(emulator.app.wsgi_app, emulator.app.config)


def main(argv=None):
    parser = argparse.ArgumentParser("lab.machines.redfish")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    # The emulator builds its systems driver from this name (main.Application.systems).
    fakedriver.FakeDriver = LabMachines
    from sushy_tools.emulator import main as emulator

    _serve_pending_bios_settings(emulator)
    firmware.install(emulator)
    _install_faults(emulator)
    sys.argv = ["sushy-emulator", "--config", args.config, "--fake"]
    return emulator.main()


if __name__ == "__main__":
    sys.exit(main())
