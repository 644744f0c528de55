# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Redfish road to a machine: its BMC, through ``sushy``, the Redfish client of OpenStack Ironic.

A machine is a Redfish ComputerSystem, named by its URL: ``https://<bmc>[:<port>]/redfish/v1/Systems/<id>``
(the form ``bmc.json`` of the lab, Metal3's ``redfish+https://`` addresses without the scheme prefix, and
the ``Systems`` links of a BMC's service root all give). Its power is ``PowerState`` (On, Off, PoweringOn,
PoweringOff) and ``ComputerSystem.Reset`` (DMTF Redfish schema ``ComputerSystem.v1``); a BMC lists the
reset types it accepts in ``ResetType@Redfish.AllowableValues``.

Servicing (DMTF ``UpdateService.v1``, ``Bios.v1``): a firmware image is handed to the BMC with
``UpdateService.SimpleUpdate`` (``ImageURI``, ``Targets``: the System for its BIOS, the inventory entry for any
other component of ``UpdateService/FirmwareInventory``), whose task is followed until it ends; BIOS attributes
are written to the System's ``Bios/Settings`` resource, pending until the machine restarts. Either takes
effect when the machine next boots, as servers apply BIOS flashes and settings; the versions and attributes
read after the restart say whether it did.

Every error of the BMC or of the way to it becomes a ``MachineError`` of one sentence naming the BMC
by its address; the password never appears in one. ``sushy`` is imported when a BMC is first
reached, so the rest of the collection runs without it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    InvalidInputError,
    MachineError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import wait_until

REQUIREMENT = "sushy>=5.0"
ROOT_PREFIX = "/redfish/v1/"
_SYSTEM_URL = re.compile(r"^(https?://[^/?#\s]+)(/redfish/v1/Systems/[^/?#\s]+)/?$")

ON = "On"
OFF = "Off"
FORCE_OFF = "ForceOff"
GRACEFUL_SHUTDOWN = "GracefulShutdown"
POWER_ON = "On"
GRACEFUL_RESTART = "GracefulRestart"
FORCE_RESTART = "ForceRestart"
POWER_CYCLE = "PowerCycle"
# The component whose version the System itself reports (``BiosVersion``); others come from the inventory.
BIOS = "bios"
# How often a BMC is asked again while a power change takes effect (a BMC sends no events here).
POLL_SECONDS = 1.0
# A BMC answering 5xx is asked again this many times, this far apart, before it counts as failed.
SERVER_SIDE_RETRIES = 2
SERVER_SIDE_RETRY_SECONDS = 2
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 60


def parse_address(address, option="bmc.address"):
    """(base URL, system path) of a Redfish System URL; InvalidInputError naming the option otherwise."""
    text = (address or "").strip()
    if text.startswith("redfish+"):
        text = text[len("redfish+"):]
    found = _SYSTEM_URL.match(text)
    if not found:
        raise InvalidInputError(
            "Option %s must be the URL of a Redfish System, https://<bmc>[:<port>]/redfish/v1/Systems/<id>; got %r."
            % (option, address), option=option)
    return found.group(1), found.group(2)


class RedfishMachine:
    """One machine, through its BMC's Redfish service. ``connect(machine)`` returns the sushy System
    (tests give their own)."""

    def __init__(self, bmc, option="bmc", connect=None):
        self.option = option
        self.address = bmc["address"]
        self.base_url, self.system_path = parse_address(bmc["address"], option + ".address")
        self.username = bmc["username"]
        self.password = bmc["password"]
        self.verify = (bmc.get("ca_path") or True) if bmc.get("validate_certs", True) else False
        self._connect = connect or _sushy_root
        self._root = None
        self._system = None
        self._inventory_paths = {}

    def describe(self, start=False):
        return "%s BMC at %s" % ("The" if start else "the", self.address)

    def as_dict(self):
        """What a result may show of the BMC: never its credentials."""
        return {"road": "redfish", "address": self.address}

    def permissions(self):
        """What the Kubernetes user needs for this road: nothing (the BMC has its own credentials)."""
        return []

    def refuse_power_off_if_disabled(self, **details):
        """A BMC has no such switch (a BareMetalHost's ``spec.disablePowerOff``)."""

    def check_changes(self, updates, settings):
        """Nothing to check ahead: the BMC judges images and BIOS values when it takes them."""

    # -- reading -----------------------------------------------------------------------------

    def system(self, fresh=True):
        """The sushy System: read afresh, or (``fresh=False``) as last read, for what a BMC does not change."""
        with self._errors("read"):
            if self._system is None:
                self._root = self._connect(self)
                self._system = self._root.get_system(self.system_path)
            elif fresh:
                self._system.refresh(force=True)
            return self._system

    def power_state(self):
        """``On``, ``Off``, ``PoweringOn``, ``PoweringOff`` or ``Paused`` as the BMC reports it (None if it does not)."""
        state = self.system().power_state
        return getattr(state, "value", state)

    def allowed_resets(self):
        system = self.system(fresh=False)
        with self._errors("read the reset types of"):
            return sorted(getattr(v, "value", v) for v in system.get_allowed_reset_system_values())

    # -- acting ------------------------------------------------------------------------------

    def reset(self, reset_type):
        """``ComputerSystem.Reset`` with ``reset_type``; MachineError when the BMC does not accept it."""
        allowed = self.allowed_resets()
        if allowed and reset_type not in allowed:
            raise MachineError("%s does not accept the reset type %s (it accepts %s)." % (
                self.describe(start=True), reset_type, ", ".join(allowed)), bmc=self.as_dict())
        from sushy.resources import constants

        with self._errors("reset (%s)" % reset_type):
            self.system(fresh=False).reset_system(constants.ResetType(reset_type))

    def wait_power(self, wanted, timeout, what=None):
        """Return once the BMC reports ``wanted`` (On or Off); WaitTimeoutError naming the last reading."""
        seen = []

        def check():
            seen.append(self.power_state())
            return seen[-1] == wanted

        wait_until(check, [], timeout, what or "%s to report the machine %s" % (self.describe(), wanted),
                   describe_pending=lambda: "it still reports PowerState %s" % (seen[-1] if seen else "nothing"),
                   recheck_every=POLL_SECONDS)

    def power_off(self, timeout, graceful=True):
        """Power the machine off; returns the reset types sent. GracefulShutdown first when ``graceful`` and
        the BMC accepts it, ForceOff once half of ``timeout`` passed without the machine off (at once
        otherwise). Nothing is sent to a machine that is off already."""
        if self.power_state() == OFF:
            return []
        used = []
        left = timeout
        if graceful and GRACEFUL_SHUTDOWN in (self.allowed_resets() or [GRACEFUL_SHUTDOWN]):
            self.reset(GRACEFUL_SHUTDOWN)
            used.append(GRACEFUL_SHUTDOWN)
            try:
                self.wait_power(OFF, timeout / 2.0)
                return used
            except WaitTimeoutError:
                left = timeout / 2.0
        self.reset(FORCE_OFF)
        used.append(FORCE_OFF)
        self.wait_power(OFF, left)
        return used

    def power_on(self, timeout):
        """Power the machine on (nothing sent when it is on already); returns the reset types sent."""
        if self.power_state() == ON:
            return []
        self.reset(POWER_ON)
        self.wait_power(ON, timeout)
        return [POWER_ON]

    def restart(self, timeout=None, graceful=True):
        """``GracefulRestart`` when ``graceful`` and the BMC accepts it, else ``ForceRestart`` (``PowerCycle`` on a
        BMC without it); returns the reset type sent, at once (``timeout`` is the other road's). Whether the
        machine did restart is the node's to say (a new boot ID): a BMC may report On throughout."""
        allowed = self.allowed_resets() or [GRACEFUL_RESTART, FORCE_RESTART]
        for reset_type in ((GRACEFUL_RESTART,) if graceful else ()) + (FORCE_RESTART, POWER_CYCLE):
            if reset_type in allowed:
                self.reset(reset_type)
                return reset_type
        raise MachineError("%s accepts no restart (it accepts %s)." % (self.describe(start=True), ", ".join(allowed)),
                           bmc=self.as_dict())

    # -- firmware and BIOS ---------------------------------------------------------------------

    def _inventory(self):
        """{component: sushy SoftwareInventory} of the machine's entries of the BMC's FirmwareInventory ({} when it
        keeps none)."""
        from sushy import exceptions as sushy_errors

        self.system(fresh=False)
        with self._errors("read the firmware inventory of"):
            try:
                collection = self._root.get_update_service().firmware_inventory
                inventory = dict((item.identity, item) for item in collection.get_members() if self._ours(item))
            except (sushy_errors.MissingAttributeError, sushy_errors.ResourceNotFoundError):
                inventory = {}
        self._inventory_paths = dict((name, item.path) for name, item in inventory.items())
        return inventory

    def _ours(self, item):
        """Whether an inventory entry is this machine's. A service that manages several Systems lists the firmware of
        all of them, each entry's ``RelatedItem`` naming the resources it belongs to (DMTF ``SoftwareInventory.v1``):
        an entry related to Systems, none of them this one, is another machine's. Entries that name no System (the
        BMC's own, a NIC's) are the machine's, as on a BMC of one server."""
        systems = set()
        for link in getattr(item, "related_item", None) or []:
            path = (link.get("@odata.id") if isinstance(link, dict) else None) or ""
            if path.startswith(ROOT_PREFIX + "Systems/"):
                systems.add("/".join(path.rstrip("/").split("/")[:5]))
        return not systems or self.system_path.rstrip("/") in systems

    def firmware_versions(self):
        """{component: version} of what the machine runs now: ``bios`` (the System's ``BiosVersion``) and every
        entry of the BMC's FirmwareInventory."""
        versions = dict((name, item.version) for name, item in self._inventory().items())
        versions[BIOS] = self.system().bios_version
        return versions

    def update_firmware(self, component, image_uri, timeout):
        """Hand ``image_uri`` to the BMC for ``component`` (``SimpleUpdate``) and follow its task until it ends;
        MachineError when the task fails. The machine runs the new version after its next restart."""
        if component == BIOS:
            target = self.system_path
        else:
            # Where the inventory entry lives, as firmware_versions last read it (read now when it was not).
            if component not in self._inventory_paths:
                self._inventory()
            target = self._inventory_paths[component]
        self.system(fresh=False)
        with self._errors("update the firmware (%s) of" % component):
            service = self._root.get_update_service()
            monitor = service.simple_update(image_uri, targets=[target])
        self._follow(monitor, timeout, "the firmware update (%s)" % component)

    def _follow(self, monitor, timeout, what):
        def done():
            with self._errors("follow %s of" % what):
                return not monitor.check_is_processing
        wait_until(done, [], timeout, "%s to finish %s" % (self.describe(), what), recheck_every=POLL_SECONDS)
        # The monitor's last answer holds no Task once it stops answering 202: read the Task itself. A BMC that
        # keeps none any more leaves the verdict to the versions the machine reports after its restart.
        from sushy import exceptions as sushy_errors

        try:
            task = monitor.get_task()
            state = getattr(task.task_state, "value", task.task_state)
            status = getattr(task.task_status, "value", task.task_status)
            messages = "; ".join(m.message for m in (task.messages or []) if getattr(m, "message", None))
        except sushy_errors.SushyError:
            return
        if state not in (None, "Completed") or status not in (None, "OK"):
            raise MachineError("%s did not finish %s: its task ended %s (%s)%s." % (
                self.describe(start=True), what, state, status, ": " + messages if messages else ""),
                bmc=self.as_dict(), task_state=state, task_status=status)

    def bios_attributes(self, pending=False):
        """The BIOS attributes the machine runs with, or (``pending``) those it will run with after its next restart."""
        system = self.system()
        with self._errors("read the BIOS settings of"):
            bios = system.bios
            bios.refresh(force=True)
            if pending:
                return dict(bios.pending_attributes or {})
            return dict(bios.attributes or {})

    def set_bios(self, attributes):
        """Write ``attributes`` to the pending BIOS settings (applied at the next restart)."""
        system = self.system(fresh=False)
        with self._errors("write the BIOS settings of"):
            system.bios.set_attributes(dict(attributes))

    # -- errors ------------------------------------------------------------------------------

    def _errors(self, action):
        return _BmcErrors(self, action)


class _BmcErrors:
    """Turns what sushy raises into one MachineError sentence naming the BMC and what was tried."""

    def __init__(self, machine, action):
        self.machine = machine
        self.action = action

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, MachineError):
            return False
        try:
            from sushy import exceptions as sushy_errors
        except ImportError:
            return False
        if not isinstance(exc, sushy_errors.SushyError):
            return False
        machine = self.machine
        where = "%s could not %s the machine %s" % (machine.describe(start=True), self.action,
                                                    machine.system_path.rsplit("/", 1)[-1])
        status = getattr(exc, "status_code", None)
        if isinstance(exc, sushy_errors.AccessError):
            cause = "it refused the credentials of user %s (HTTP %s)" % (machine.username, status)
        elif isinstance(exc, sushy_errors.ResourceNotFoundError):
            cause = "it has no System at %s (HTTP 404)" % machine.system_path
        elif isinstance(exc, sushy_errors.ConnectionError):
            cause = "it cannot be reached (%s)" % _first_line(exc)
        elif isinstance(exc, sushy_errors.HTTPError):
            cause = "it answered HTTP %s: %s" % (status, getattr(exc, "detail", None) or _first_line(exc))
        else:
            cause = _first_line(exc)
        raise MachineError("%s: %s." % (where, cause.rstrip(".")), bmc=machine.as_dict(), status=status) from exc


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__


def _sushy_root(machine):
    """A sushy connection to the machine's BMC (its service root)."""
    try:
        import sushy
        from sushy import auth as sushy_auth
    except ImportError:
        raise MachineError(
            "Reaching %s needs the Python library %s on the host that runs this module; install it with: pip install "
            "'%s'." % (machine.describe(), REQUIREMENT.partition(">")[0], REQUIREMENT), bmc=machine.as_dict())
    connection = sushy.Sushy(machine.base_url, root_prefix=ROOT_PREFIX, verify=machine.verify,
                             auth=sushy_auth.BasicAuth(machine.username, machine.password),
                             server_side_retries=SERVER_SIDE_RETRIES,
                             server_side_retries_delay=SERVER_SIDE_RETRY_SECONDS,
                             read_timeout=READ_TIMEOUT, connect_timeout=CONNECT_TIMEOUT)
    return connection
