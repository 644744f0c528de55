"""Metal3 BareMetalHost stand-in: baremetal-operator's host controller, acting through each host's Redfish BMC.

metal3-io/baremetal-operator (v0.13) reconciles ``baremetalhosts.metal3.io`` and drives each machine through
Ironic, which speaks Redfish to the BMC. Its Go module cannot be built here, so this plays the part of both,
following upstream's code (cited below, paths of the baremetal-operator repository) and talking to the machine's
BMC (lab/machines: the sushy-tools emulator) with the Redfish calls Ironic's redfish driver makes:

- BMC access (``pkg/hardwareutils/bmc/redfish.go``, ``access.go``): ``spec.bmc.address`` ``redfish://``,
  ``redfish+https://``, ``redfish+http://`` (also the ``ilo5-redfish`` and ``idrac-redfish`` types); the path is the
  System (Ironic's ``redfish_system_id``), or, when there is none, the BMC's only System;
  ``spec.bmc.disableCertificateVerification``; the credentials Secret ``spec.bmc.credentialsName`` (``username``,
  ``password``, whitespace trimmed: ``credentialsFromSecret``). Missing or wrong details are a ``registration
  error`` with upstream's messages (``internal/controller/metal3.io/errors.go``, ``credentialsErrorResult``); the
  BMC must answer (Ironic's node validation) before the host leaves ``registering``.
- Provisioning is not modelled: a registered host becomes ``externally provisioned`` with
  ``spec.externallyProvisioned``, else ``provisioned`` (a host that carries a running node is).
- Power (``internal/controller/metal3.io/baremetalhost_controller.go`` ``manageHostPower``): ``status.poweredOn``
  is the BMC's ``PowerState``, read every ``STEADY_SECONDS`` (upstream requeues a steady host after 60 s), every
  second while a power change is under way. The wanted state is ``spec.online``, off while a reboot annotation
  ``reboot.metal3.io`` or ``reboot.metal3.io/<key>`` exists (``hasRebootAnnotation``; value
  ``{"mode": "soft"|"hard", "force": bool}``, soft when empty or not JSON, hard wins across annotations). The
  suffixless one is removed once the host is off. Power on is ``ComputerSystem.Reset On``; power off is soft
  (``GracefulShutdown``) unless a hard one was asked or the host has errors (``ErrorCount > 0``), then
  ``ForceOff`` (``pkg/provisioner/ironic/ironic.go`` ``PowerOff``): a soft power-off that does not end within
  Ironic's 180 s is a ``power management error``, after which the next attempt is hard.
  ``spec.disablePowerOff``: a power-off becomes a reboot (``ForceRestart``, ``GracefulRestart`` when soft), the
  suffixless annotation is removed after it; asking ``online: false`` is refused by the API (lab/metal3.py).
- Errors (``recordActionFailure``, ``setErrorMessage``, ``clearError``): a BMC that does not answer, refuses the
  credentials or refuses a power action makes ``operationalStatus: error`` with ``errorType``, ``errorMessage``
  and ``errorCount`` (+1 per failure); the action is retried with backoff (upstream's is 2^n minutes, here
  2^n seconds up to 30 s), and the first success clears them (``OK``).
- ``baremetalhost.metal3.io/paused``: nothing at all is done (``Reconcile`` returns at once).
  ``baremetalhost.metal3.io/detached``: ``operationalStatus: detached``, no power management, the machine left
  as it is (``host_state_machine.go`` ``checkDetachedHost``); removing it brings the host back (``OK``).
- Deletion (finalizer ``baremetalhost.metal3.io``): a detached host goes at once; any other is powered off hard
  first unless ``spec.disablePowerOff`` (``checkInitiateDelete``, ``actionPowerOffBeforeDeleting``), giving up
  after 3 failures.
- Servicing (``doServiceIfNeeded``), HostFirmwareSettings, HostFirmwareComponents and HostUpdatePolicy:
  lab/standins/firmware.py (``servicing``), called for every registered host (``registered``) and from the power
  management as upstream (``service``).

The BMC's power reaches the node through lab/standins/machines.py (the BMCs' power log), as for any other client
of the BMC: nothing here touches a node.
"""

import json
import random
import threading
import time
import uuid

import requests

from lab.errors import LabError
from lab.machines.bmc import Bmc
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.workqueue import Controller

FINALIZER = "baremetalhost.metal3.io"
PAUSED_ANNOTATION = "baremetalhost.metal3.io/paused"
DETACHED_ANNOTATION = "baremetalhost.metal3.io/detached"
REBOOT_ANNOTATION = "reboot.metal3.io"
SECRETS = k.Resource("", "v1", "secrets", "Secret")

REGISTRATION_ERROR = "registration error"
POWER_MANAGEMENT_ERROR = "power management error"
SERVICING_ERROR = "servicing error"
PROVISIONED_STATES = ("provisioned", "externally provisioned")
# Upstream requeues a host in steady state after 60 s (manageHostPower ``steadyStateResult``).
STEADY_SECONDS = 60.0
WATCH_SECONDS = 1.0
# A second look right after the stand-in's own write (upstream's ``actionUpdate`` requeues at once), once the
# cache has it.
FOLLOW_UP = 0.2
# Ironic's soft power-off timeout (pkg/provisioner/ironic/ironic.go ``softPowerOffTimeout``).
SOFT_POWER_OFF_SECONDS = 180.0
BMC_TIMEOUT = 10.0
# Upstream gives up powering a host off before deleting it after this many failures (host_state_machine.go).
DELETE_RETRIES = 3
# BMC types and their URL schemes (pkg/hardwareutils/bmc/redfish.go ``init``).
REDFISH_TYPES = ("redfish", "ilo5-redfish", "idrac-redfish")
CLARIFY_SOFT_POWEROFF_FAILURE = "Continuing with hard power off after soft power off failed: "


class BmcError(Exception):
    """The BMC did not do what was asked; the message is the host's ``errorMessage``."""


class RegistrationError(Exception):
    """The host's BMC details or credentials cannot be used (upstream's registration errors)."""


def parse_address(address):
    """(URL of the BMC's service root host, System path or None) of a Redfish BMC address, as
    baremetal-operator reads it (``NewAccessDetails``, ``getRedfishAddress``, ``DriverInfo``)."""
    if not address:
        raise RegistrationError("Empty BMC address Missing BMC connection detail 'Address'")
    scheme, sep, rest = address.partition("://")
    if not sep:
        # upstream's GetParsedURL takes a bare host as an IPMI address
        raise RegistrationError(f"Unknown BMC type 'ipmi' for address {address}")
    bmc_type, _, transport = scheme.partition("+")
    if bmc_type not in REDFISH_TYPES or transport not in ("", "http", "https"):
        raise RegistrationError(f"Unknown BMC type '{scheme}' for address {address}")
    host, _, path = rest.partition("/")
    path = "/" + path if path else ""
    system = path if path.strip("/") not in ("", "redfish/v1") else None
    return f"{transport or 'https'}://{host}", system


def reboot_request(annotations, provisioned=True):
    """(reboot wanted, mode) from the reboot annotations (``hasRebootAnnotation``): an annotation without
    ``"force": true`` counts only for a provisioned host; hard wins over soft."""
    wanted, mode = False, "soft"
    for name, value in (annotations or {}).items():
        if name != REBOOT_ANNOTATION and not name.startswith(REBOOT_ANNOTATION + "/"):
            continue
        try:
            arguments = json.loads(value) if value else {}
        except ValueError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        if not provisioned and not arguments.get("force"):
            continue
        wanted = True
        if arguments.get("mode") == "hard":
            mode = "hard"
    return wanted, mode


def backoff_seconds(error_count):
    """Upstream's ``calculateBackoff`` (2^n minutes with jitter), in seconds and at most 30."""
    base = 2.0 ** min(error_count, 5)
    return min(30.0, base - random.random() * base * 0.1)


class HostBmc:
    """One host's BMC through the lab's Redfish client (lab/machines/bmc.py ``Bmc``)."""

    def __init__(self, address, username, password, verify):
        self.address = address
        self.root, self.system = parse_address(address)
        self.entry = {"address": (self.root + self.system) if self.system else self.root + "/redfish/v1/Systems",
                      "username": username, "password": password, "ca_file": verify}

    def _client(self):
        return Bmc(self.entry, timeout=BMC_TIMEOUT)

    def _call(self, what, fn):
        try:
            if self.system is None:
                self._find_system()
            return fn(self._client())
        except requests.RequestException as e:
            raise BmcError(f"{what}: the BMC at {self.address} did not answer ({type(e).__name__})") from None
        except LabError as e:
            raise BmcError(f"{what}: {_redfish_reason(str(e))}") from None

    def _find_system(self):
        members = Bmc(dict(self.entry, address=self.root + "/redfish/v1/Systems"), timeout=BMC_TIMEOUT).get(
            "").get("Members") or []
        if len(members) != 1:
            raise BmcError(f"the BMC at {self.address} has {len(members)} Systems: name one in the address")
        self.system = members[0]["@odata.id"]
        self.entry["address"] = self.root + self.system

    def system_resource(self):
        return self._call("Failed to get the System", lambda b: b.get(""))

    def power_state(self):
        return self.system_resource().get("PowerState")

    def reset(self, reset_type):
        target = "power on" if reset_type == "On" else "reboot" if "Restart" in reset_type else "power off"
        self._call(f"Failed to change power state to '{target}' by ComputerSystem.Reset {reset_type}",
                   lambda b: b.reset(reset_type))

    def get(self, path, what):
        return self._call(what, lambda b: b.get(path))

    def request(self, method, path, body, what):
        return self._call(what, lambda b: b._request(method, path, body))

    def firmware(self):
        """The machine's firmware inventory (``Bmc.firmware``: bios and bmc, each with its path and version)."""
        return self._call("Failed to read the firmware inventory", lambda b: b.firmware())

    def simple_update(self, image_uri, target):
        """``UpdateService.SimpleUpdate``; the path of its Task."""
        return self._call(f"Failed to start the firmware update from {image_uri}",
                          lambda b: b.simple_update(image_uri, target))

    def follow_task(self, path, timeout):
        return self._call(f"Failed to follow the task {path}", lambda b: b.follow_task(path, timeout))


def _redfish_reason(text):
    """The BMC's answer of a refused request, without the URL's host (``... answered 409: {...}``)."""
    _, _, answer = text.partition(" answered ")
    status, _, body = answer.partition(": ")
    message = body
    try:
        extended = json.loads(body)["error"]
        message = "; ".join(m.get("Message", "") for m in extended.get("@Message.ExtendedInfo") or []) or \
            extended.get("message", body)
    except (ValueError, KeyError, TypeError):
        pass
    return f"Redfish exception occurred. HTTP {status or '?'}: {message.strip()[:300]}"


class BareMetalHostController(Controller):
    name = "baremetalhost"
    workers = 4
    resync_seconds = 0  # each host asks to be looked at again (steady state, actions under way)

    def __init__(self, sim, ca_file=True, servicing=None):
        super().__init__(sim)
        self.ca_file = ca_file
        self.servicing = servicing
        self._actions = {}  # host key -> the power action under way: {"on": bool, "mode", "since"}
        self._delete_failures = {}
        self._due = {}  # host key -> when a look again is due
        self._lock = threading.Lock()
        sim.bmhs.add_handler(self._on_host)

    def all_keys(self):
        return self.sim.bmhs.keys()

    def _on_host(self, event, host, old):
        """upstream's ``updateEventHandler``: an update that changed neither the generation, the finalizers nor
        the annotations (its own status writes) starts no reconcile."""
        if old is not None and host is not None and event != "DELETED" and all(
                o.meta(host, field) == o.meta(old, field) for field in ("generation", "finalizers", "annotations")) \
                and o.deleting(host) == o.deleting(old):
            return
        self.enqueue(k.key_of(host if host is not None else old))

    # -- helpers --------------------------------------------------------------------------------

    def bmc_of(self, host):
        """The host's HostBmc; RegistrationError (upstream's message) when its details cannot be used."""
        bmc = o.spec(host).get("bmc") or {}
        namespace = o.meta(host, "namespace")
        secret_name = bmc.get("credentialsName") or ""
        if not secret_name:
            raise RegistrationError("No BMC CredentialsName defined Missing BMC connection detail 'CredentialsName'")
        secret = self.kube.get_or_none(SECRETS, secret_name, namespace=namespace)
        if secret is None:
            raise RegistrationError(f"BMC CredentialsName secret doesn't exist Referenced Secret {namespace}/"
                                    f"{secret_name} does not exist")
        if not bmc.get("address"):
            raise RegistrationError("Empty BMC address Missing BMC connection detail 'Address'")
        data = secret.get("data") or {}
        username, password = (_decode(data.get(key)).strip() for key in ("username", "password"))
        if not username:
            raise RegistrationError("Validation error with BMC credentials: Missing BMC connection detail 'username' "
                                    "in credentials")
        if not password:
            raise RegistrationError("Validation error with BMC credentials: Missing BMC connection details 'password' "
                                    "in credentials")
        verify = False if bmc.get("disableCertificateVerification") else self.ca_file
        return HostBmc(bmc["address"], username, password, verify), secret

    def _write_status(self, host, status):
        """Patch the status when it changed (upstream saves only a dirty host: no churn in steady state)."""
        current = o.status(host)
        changed = {key: value for key, value in status.items() if current.get(key) != value}
        if not changed:
            return False
        full = {"errorCount": current.get("errorCount", 0), "errorMessage": current.get("errorMessage", ""),
                "operationalStatus": current.get("operationalStatus", ""),
                "poweredOn": current.get("poweredOn", False),
                "provisioning": current.get("provisioning") or {"state": "", "ID": ""}}
        full.update(changed)
        full["lastUpdated"] = o.now()
        self.kube.patch(k.BAREMETALHOSTS, o.meta(host, "name"), {"status": full},
                        namespace=o.meta(host, "namespace"), subresource="status")
        return True

    def _fail(self, host, error_type, message):
        """``recordActionFailure``: error status, one more error; returns the backoff."""
        count = int(o.status(host).get("errorCount") or 0) + 1
        self._write_status(host, {"operationalStatus": "error", "errorType": error_type, "errorMessage": message,
                                  "errorCount": count})
        self.log.info("BareMetalHost %s: %s: %s", k.key_of(host), error_type, message)
        return backoff_seconds(count)

    def _clear_error(self, host, operational="OK"):
        """``clearErrorWithStatus``: the error type and message go, the count stays."""
        return self._write_status(host, {"operationalStatus": operational, "errorType": None, "errorMessage": ""})

    def _patch_meta(self, host, body):
        self.kube.patch(k.BAREMETALHOSTS, o.meta(host, "name"), {"metadata": body},
                        namespace=o.meta(host, "namespace"))

    # -- reconcile --------------------------------------------------------------------------------

    def reconcile(self, key):
        """``_reconcile``, with at most one timer per host: a reconcile that an event started asks for no second
        look when one is due sooner anyway (the work queue keeps every delayed key it is given)."""
        now = time.monotonic()
        with self._lock:
            if self._due.get(key, now + 1) <= now:
                del self._due[key]
        again = self._reconcile(key)
        if again is None:
            return None
        with self._lock:
            due = self._due.get(key)
            if due is not None and due <= now + again + 0.05:
                return None
            self._due[key] = now + again
        return again

    def _reconcile(self, key):
        host = self.sim.bmhs.get(key)
        if host is None:
            with self._lock:
                self._actions.pop(key, None)
                self._delete_failures.pop(key, None)
            if self.servicing is not None:
                self.servicing.forget(key)
            return None
        annotations = o.annotations(host)
        if PAUSED_ANNOTATION in annotations:
            return None  # Reconcile: "host is paused, no work to do"
        finalizers = o.meta(host, "finalizers") or []
        if o.deleting(host):
            return self._delete(key, host, finalizers)
        if FINALIZER not in finalizers:
            self._patch_meta(host, {"finalizers": finalizers + [FINALIZER]})
            return None
        bmc_spec = o.spec(host).get("bmc") or {}
        state = (o.status(host).get("provisioning") or {}).get("state") or ""
        if not bmc_spec.get("address") and not bmc_spec.get("credentialsName"):
            # handleNone: a host without BMC details is unmanaged ("discovered").
            self._write_status(host, {"operationalStatus": "discovered",
                                      "provisioning": {"state": "unmanaged", "ID": ""}})
            return None
        try:
            bmc, secret = self.bmc_of(host)
        except RegistrationError as e:
            self._fail(host, REGISTRATION_ERROR, str(e))
            return None  # fixing the host or its Secret brings it back (credentialsErrorResult)
        if DETACHED_ANNOTATION in annotations:
            if state in PROVISIONED_STATES + ("ready", "available"):
                self._write_status(host, {"operationalStatus": "detached"})
                with self._lock:
                    self._actions.pop(key, None)
            return STEADY_SECONDS
        if o.status(host).get("operationalStatus") == "detached":
            # checkDetachedHost: the annotation is gone, the host is managed again.
            self._write_status(host, {"operationalStatus": "error" if o.status(host).get("errorType") else "OK"})
            return FOLLOW_UP
        if state in ("", "registering", "unmanaged") or o.status(host).get("errorType") == REGISTRATION_ERROR or \
                (o.status(host).get("goodCredentials") or {}).get("credentialsVersion") != o.meta(
                    secret, "resourceVersion"):
            return self._register(host, bmc, secret, state)
        if self.servicing is not None:
            self.servicing.registered(host, bmc)  # registerHost: its HostFirmwareSettings and -Components
        return self._manage_power(key, host, bmc)

    def _register(self, host, bmc, secret, state):
        """``registerHost``: the BMC must answer with these credentials; then the host is (externally) provisioned."""
        try:
            bmc.system_resource()
        except BmcError as e:
            if state in ("", "unmanaged"):
                self._write_status(host, {"provisioning": {"state": "registering", "ID": ""}})
            return self._fail(host, REGISTRATION_ERROR, str(e))
        if state in PROVISIONED_STATES:
            provisioning = o.status(host)["provisioning"]
        else:
            provisioning = {"state": "externally provisioned" if o.spec(host).get("externallyProvisioned")
                            else "provisioned", "ID": str(uuid.uuid5(uuid.NAMESPACE_URL, o.meta(host, "uid")))}
        self._write_status(host, {
            "provisioning": provisioning, "operationalStatus": "OK", "errorType": None, "errorMessage": "",
            "errorCount": 0,
            "goodCredentials": {"credentials": {"name": o.meta(secret, "name"), "namespace": o.meta(secret, "namespace")},
                                "credentialsVersion": o.meta(secret, "resourceVersion")}})
        return FOLLOW_UP

    def _manage_power(self, key, host, bmc):
        status = o.status(host)
        with self._lock:
            action = self._actions.get(key)
        try:
            power = bmc.power_state()
        except BmcError as e:
            if action is None and status.get("poweredOn") == self._desired(host)[0]:
                self.log.info("BareMetalHost %s: %s", key, e)
                return STEADY_SECONDS  # nothing to do: Ironic only marks the node's power failure
            return self._power_failed(key, host, str(e))
        if power in ("On", "Off") and (power == "On") != status.get("poweredOn"):
            # "updating power status": what the BMC reports, and a power error is over.
            change = {"poweredOn": power == "On"}
            if status.get("errorType") == POWER_MANAGEMENT_ERROR:
                change.update(operationalStatus="OK", errorType=None, errorMessage="")
            self._write_status(host, change)
            return FOLLOW_UP
        powered = status.get("poweredOn")
        if not powered and REBOOT_ANNOTATION in o.annotations(host):
            self._patch_meta(host, {"annotations": {REBOOT_ANNOTATION: None}})
            return FOLLOW_UP
        if self.servicing is not None:
            provisioned = (status.get("provisioning") or {}).get("state") in PROVISIONED_STATES
            if (provisioned and not powered and o.spec(host).get("online")) or \
                    status.get("operationalStatus") == "servicing" or status.get("errorType") == SERVICING_ERROR:
                delay = self.servicing.service(self, host, bmc)
                if delay is not None:
                    return delay
        desired, mode = self._desired(host)
        if powered == desired:
            with self._lock:
                self._actions.pop(key, None)
            if status.get("errorCount"):
                self._write_status(host, {"errorCount": 0})
            return STEADY_SECONDS
        return self._change_power(key, host, bmc, desired, mode, action)

    def _desired(self, host):
        provisioned = (o.status(host).get("provisioning") or {}).get("state") in PROVISIONED_STATES
        reboot, mode = reboot_request(o.annotations(host), provisioned)
        return bool(o.spec(host).get("online")) and not reboot, mode

    def _change_power(self, key, host, bmc, desired, mode, action):
        status = o.status(host)
        now = time.monotonic()
        disable_power_off = bool(o.spec(host).get("disablePowerOff"))
        if action is not None and action["on"] == desired:
            if desired or action["mode"] == "hard" or now - action["since"] < SOFT_POWER_OFF_SECONDS:
                return WATCH_SECONDS  # "waiting for power status to change"
            with self._lock:
                self._actions.pop(key, None)
            return self._power_failed(key, host, CLARIFY_SOFT_POWEROFF_FAILURE + (
                f"Timed out after {SOFT_POWER_OFF_SECONDS:.0f} s waiting for the soft power off of the machine"))
        if not desired and (status.get("errorCount") or 0) > 0:
            mode = "hard"
        if desired:
            reset = "On"
        elif disable_power_off:
            reset = "GracefulRestart" if mode == "soft" else "ForceRestart"
        else:
            reset = "GracefulShutdown" if mode == "soft" else "ForceOff"
        if disable_power_off and not desired and action is not None and action.get("reboot") == self._reboot_keys(host):
            return STEADY_SECONDS  # this reboot was done; the host stays on
        try:
            bmc.reset(reset)
        except BmcError as e:
            return self._power_failed(key, host, str(e))
        self.log.info("BareMetalHost %s: ComputerSystem.Reset %s", key, reset)
        with self._lock:
            self._actions[key] = {"on": desired, "mode": mode, "since": now,
                                  "reboot": self._reboot_keys(host) if disable_power_off and not desired else None}
        if status.get("errorType") == POWER_MANAGEMENT_ERROR:
            self._clear_error(host)
        if disable_power_off and not desired and REBOOT_ANNOTATION in o.annotations(host):
            # A reboot instead of a power-off: done, the suffixless annotation goes (manageHostPower).
            self._patch_meta(host, {"annotations": {REBOOT_ANNOTATION: None}})
        return WATCH_SECONDS

    def forget_power_action(self, key):
        """Servicing took the machine's power over: no power action of ours is under way any more."""
        with self._lock:
            self._actions.pop(key, None)

    @staticmethod
    def _reboot_keys(host):
        return sorted(a for a in o.annotations(host) if a == REBOOT_ANNOTATION or a.startswith(REBOOT_ANNOTATION + "/"))

    def _power_failed(self, key, host, message):
        with self._lock:
            self._actions.pop(key, None)
        return self._fail(host, POWER_MANAGEMENT_ERROR, message)

    def _delete(self, key, host, finalizers):
        if FINALIZER not in finalizers:
            return None
        detached = DETACHED_ANNOTATION in o.annotations(host) or o.status(host).get("operationalStatus") == "detached"
        done = detached or bool(o.spec(host).get("disablePowerOff"))
        if not done:
            try:
                bmc, _ = self.bmc_of(host)
                power = bmc.power_state()
                if power != "Off":
                    with self._lock:
                        underway = self._actions.get(key)
                    if underway is None or underway["on"]:
                        bmc.reset("ForceOff")
                        with self._lock:
                            self._actions[key] = {"on": False, "mode": "hard", "since": time.monotonic()}
                    return WATCH_SECONDS
                done = True
            except RegistrationError:
                done = True  # no credentials: nothing can power it off (skipToDelete)
            except BmcError as e:
                with self._lock:
                    failures = self._delete_failures[key] = self._delete_failures.get(key, 0) + 1
                if failures <= DELETE_RETRIES:
                    return self._fail(host, POWER_MANAGEMENT_ERROR, str(e))
                done = True
        self._patch_meta(host, {"finalizers": [f for f in finalizers if f != FINALIZER] or None})
        return None


def _decode(value):
    import base64

    if not value:
        return ""
    try:
        return base64.b64decode(value).decode()
    except (ValueError, UnicodeDecodeError):
        return ""
