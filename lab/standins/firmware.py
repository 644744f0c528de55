"""Metal3 firmware through a BareMetalHost: HostFirmwareSettings (and FirmwareSchema), HostFirmwareComponents,
HostUpdatePolicy and the ``servicing`` they start when a host reboots.

baremetal-operator v0.13 (paths of metal3-io/baremetal-operator) keeps, per host and under the host's own name and
namespace, a HostFirmwareSettings (BIOS settings: ``spec.settings`` wanted, ``status.settings`` as Ironic read them,
``status.schema`` naming a FirmwareSchema) and a HostFirmwareComponents (``spec.updates``: ``{component, url}``;
``status.components``: ``bios``, ``bmc`` with ``initialVersion``, ``currentVersion``, ``lastVersionFlashed``,
``updatedAt``; ``status.updates``: the updates already handed to Ironic). Ironic talks to the BMC; here the stand-in
does, with the Redfish calls Ironic's redfish interfaces make, and keeps what Ironic keeps about the node (its
cache of BIOS settings and firmware components, its provision state) in memory:

- Creation (``internal/controller/metal3.io/baremetalhost_controller.go`` ``registerHost``,
  ``createHostFirmwareSettings``, ``createHostFirmwareComponents``, ``acquireHostUpdatePolicy``): on every reconcile
  of a registered host, the HFS and HFC are created when missing (empty spec, the host as owner), and a
  HostUpdatePolicy of the same name, which only users create, gets the host as owner. Ironic caches the BIOS
  settings (``ironic/drivers/modules/redfish/bios.py`` ``cache_bios_settings``: the System's ``Bios`` attributes,
  each described by the entry of the BMC's BIOS attribute registry of the same name, which sushy-tools serves:
  ``AttributeRegistry`` of the Bios resource, found through ``/redfish/v1/Registries``) and the firmware components
  (``redfish/firmware.py`` ``cache_firmware_components``: ``bios`` and ``bmc``, read here from the lab BMC's
  firmware inventory).
- Status (``hostfirmwaresettings_controller.go``, ``hostfirmwarecomponents_controller.go``): HFS ``status.settings``
  are Ironic's (``*Password*`` names left out), ``status.schema`` names the FirmwareSchema ``schema-<hash>``
  (``GetSchemaName``) made from the registry fields (owned by the HFS; hosts of the same registry share one).
  Conditions: ``ChangeDetected`` (spec differs from status) and ``Valid`` (HFS: every spec setting is in the
  status and passes the schema, ``FirmwareSchema.ValidateSetting`` of ``apis/.../firmwareschema_types.go``,
  else False ``ConfigurationError`` "Invalid BIOS setting"; HFC: components are ``bmc``, ``bios`` or ``nic:*``,
  else False ``InvalidComponent``). v0.13.2 has no webhook for either: an invalid spec is accepted by the API and
  reported by ``Valid``. As upstream, an HFS status is written only when its settings, its schema or a condition's
  status change (``setCondition``), so a spec changed again while ``ChangeDetected`` is already true keeps the
  old ``observedGeneration``. The controllers reconcile on their object's creation, generation or owner change and
  on the host's creation and generation change, and again after 1 and 5 minutes (``ChangeDetected`` or not).
- Servicing (``baremetalhost_controller.go`` ``manageHostPower``, ``doServiceIfNeeded``; ``getHostFirmwareSettings``,
  ``getHostFirmwareComponents``, ``hostObjectHasChanges``): a provisioned host that is off and ``spec.online``, or
  already ``servicing`` or in ``servicing error``, is serviced when its HostUpdatePolicy says ``onReboot`` for
  ``firmwareSettings`` (HFS) or ``firmwareUpdates`` (HFC) and that object is ``ChangeDetected`` and ``Valid`` for its
  current generation (an older ``observedGeneration`` is an error retried). ``operationalStatus`` becomes
  ``servicing`` first; then Ironic (``pkg/provisioner/ironic/servicing.go`` ``Service``) gets the settings that
  differ from the status (``getNewFirmwareSettings``) and the updates not yet in ``status.updates``
  (``getUpdatesDifference``), and HFC ``status.updates`` takes ``spec.updates`` as servicing starts
  (``saveHostFirmwareComponents``). Ironic's steps, here in a thread as in its conductor: each update is a
  ``UpdateService.SimpleUpdate`` of the url whose Task is followed (``redfish/firmware.py``
  ``_submit_simple_update``, which names the node's System as the target when the BMC has several; the lab's BMC
  serves every machine and flashes what the target names, so the target here is the component's inventory member),
  the settings a ``PATCH`` of
  ``Bios/Settings`` (``redfish/bios.py`` ``apply_configuration``), then the machine is powered on (the reboot that
  activates both, staged until then); once it runs the new versions and settings, Ironic caches them again.
  Then the host is ``OK``, and the HFS and HFC controllers show the new values with ``ChangeDetected`` false.
  A Task that ends in Exception (``bmc fault --fail-update``) is Ironic's ``Firmware update failed for node <id>,
  firmware <url>. Error: <task messages>``: ``operationalStatus: error``, ``errorType: servicing error``, that
  ``errorMessage``, ``errorCount`` + 1 and HFC ``status.updates`` cleared (``recordActionFailure``); after the
  backoff the host goes ``servicing`` again and Ironic starts over while the spec asks for the change, or aborts
  when the HFS and HFC specs are empty (``abortServicing``), the machine staying off meanwhile.
  Ironic (``ironic/conductor/utils.py`` ``servicing_error_handler``) keeps the message as the node's ``last_error``.
- Lab shortcuts: when servicing ends, the HFS and HFC statuses are refreshed at once from Ironic's new cache
  (upstream's controllers take it on their next periodic reconcile, up to 1 and 5 minutes later, and a host
  reconciled in between with the old HFS status can start a second round of the same settings); a servicing under
  way when the stand-ins restart is taken as ended (Ironic's conductor would go on); upstream's Events
  (``ValidationFailed``), ``spec.firmware`` (the settings before HFS), ``hardwareDetails`` in the schema, and
  servicing that needs Ironic's ramdisk are not modelled.
"""

import copy
import hashlib
import threading

from lab.errors import LabError
from lab.wait import wait_for
from lab.standins import kube as k
from lab.standins.baremetal import SERVICING_ERROR, BmcError
from lab.standins import objects as o
from lab.standins.informer import Informer
from lab.standins.workqueue import Controller

GROUP_VERSION = "metal3.io/v1alpha1"
HFS = k.Resource("metal3.io", "v1alpha1", "hostfirmwaresettings", "HostFirmwareSettings")
HFC = k.Resource("metal3.io", "v1alpha1", "hostfirmwarecomponents", "HostFirmwareComponents")
HUP = k.Resource("metal3.io", "v1alpha1", "hostupdatepolicies", "HostUpdatePolicy")
SCHEMAS = k.Resource("metal3.io", "v1alpha1", "firmwareschemas", "FirmwareSchema")

ON_REBOOT = "onReboot"
CHANGE_DETECTED = "ChangeDetected"
VALID = "Valid"
SERVICING = "servicing"
# The firmware components baremetal-operator keeps (``GetFirmwareComponents``; NICs are ``nic:<id>``).
COMPONENTS = ("bios", "bmc")
NIC_PREFIX = "nic:"
# As upstream: 1 minute while ChangeDetected, else 5 minutes (``reconcilerRequeueDelay*``).
CHANGE_DETECTED_SECONDS = 60.0
STEADY_SECONDS = 300.0
# Upstream polls Ironic every 10 s while it services (``provisionRequeueDelay``).
SERVICING_POLL_SECONDS = 1.0
TASK_SECONDS = 300.0
BOOT_SECONDS = 120.0
# Registry fields of an Ironic BIOS setting and the FirmwareSchema's names for them (``SettingSchema``).
REGISTRY_FIELDS = (("Type", "attribute_type"), ("LowerBound", "lower_bound"), ("UpperBound", "upper_bound"),
                   ("MinLength", "min_length"), ("MaxLength", "max_length"), ("ReadOnly", "read_only"),
                   ("IsSystemUniqueProperty", "unique"))


class NotObserved(Exception):
    """An HFS or HFC whose conditions do not describe its current generation yet (``hostObjectHasChanges``)."""


class ServiceFailed(Exception):
    """A service step failed; the message is Ironic's ``last_error``."""


# -- what upstream's API types decide ----------------------------------------------------------------------------

def validate_setting(name, value, schema):
    """``FirmwareSchema.ValidateSetting`` / ``SettingSchema.Validate``: None or upstream's error text."""
    if name not in schema:
        return f"Setting {name} is invalid, it is not in the associated schema"
    entry, text = schema[name], str(value)
    if entry.get("read_only"):
        return f"Setting {name} is invalid, it is ReadOnly"
    if "Password" in name:
        return f"Setting {name} is invalid, Password fields can't be set"
    kind = entry.get("attribute_type") or ""
    if kind == "Enumeration":
        if text in (entry.get("allowable_values") or []):
            return None
        return f"Setting {name} is invalid, unknown enumeration value - {text}"
    if kind == "Integer":
        try:
            number = int(text)
        except ValueError:
            return f"Setting {name} is invalid, String {text} entered while integer expected"
        if entry.get("lower_bound") is not None and number < entry["lower_bound"]:
            return f"Setting {name} is invalid, integer {number} is below minimum value {entry['lower_bound']}"
        if entry.get("upper_bound") is not None and number > entry["upper_bound"]:
            return f"Setting {name} is invalid, integer {number} is above maximum value {entry['upper_bound']}"
        return None
    if kind == "String":
        if entry.get("min_length") is not None and len(text) < entry["min_length"]:
            return f"Setting {name} is invalid, string {text} length is below minimum length {entry['min_length']}"
        if entry.get("max_length") is not None and len(text) > entry["max_length"]:
            return f"Setting {name} is invalid, string {text} length is above maximum length {entry['max_length']}"
        return None
    if kind == "Boolean":
        return None if text in ("true", "false") else f"Setting {name} is invalid, {text} is not a boolean"
    if kind == "Password":
        return f"Setting {name} is invalid, passwords are immutable"
    if kind == "":
        return None  # no registry entry: upstream allows the setting
    return f"Setting {name} is invalid, unexpected attribute type {kind}"


def schema_name(schema):
    """``GetSchemaName``: ``schema-`` and the first 8 hex digits of the SHA-256 of the sorted keys and values, as Go's
    ``%v`` prints a string slice."""
    keys = []
    for name, entry in schema.items():
        keys += [name, entry.get("attribute_type") or ""] + list(entry.get("allowable_values") or [])
        for field in ("lower_bound", "upper_bound", "min_length", "max_length"):
            if entry.get(field) is not None:
                keys.append(str(entry[field]))
        if entry.get("read_only") is not None:
            keys.append("true" if entry["read_only"] else "false")
    text = "[" + " ".join(sorted(keys)) + "]"
    return "schema-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def updates_difference(spec_updates, status_updates):
    """``getUpdatesDifference``: the spec's updates whose component is not in the status with the same url."""
    done = {u.get("component"): u.get("url") for u in status_updates or []}
    return [u for u in spec_updates or [] if u.get("component") not in done or done[u.get("component")] != u.get("url")]


def invalid_component(updates):
    """``ValidateHostFirmwareComponents``: upstream's error for the first component that is not bmc, bios or nic:*."""
    for update in updates or []:
        name = update.get("component") or ""
        if name not in COMPONENTS and not name.startswith(NIC_PREFIX):
            return (f"component {name} is invalid, only 'bmc', 'bios', or names starting with '{NIC_PREFIX}' are "
                    "allowed as update names")
    return None


def _condition(conditions, kind):
    return next((c for c in conditions or [] if c.get("type") == kind), None)


def _set_condition(conditions, kind, status, reason, message, generation):
    """``meta.SetStatusCondition`` on ``conditions`` (a list, changed in place); True when anything changed."""
    wanted = {"type": kind, "status": status, "reason": reason, "message": message, "observedGeneration": generation}
    current = _condition(conditions, kind)
    if current is None:
        conditions.append(dict(wanted, lastTransitionTime=o.now()))
        return True
    changed = any(current.get(key) != value for key, value in wanted.items())
    if current.get("status") != status:
        current["lastTransitionTime"] = o.now()
    current.update(wanted)
    return changed


def has_changes(obj):
    """``hostObjectHasChanges``: (changed, valid) of an HFS or HFC; NotObserved while its conditions are older than
    its generation."""
    conditions = o.status(obj).get("conditions")
    changed = _condition(conditions, CHANGE_DETECTED)
    if changed is None:
        return False, False
    if changed.get("observedGeneration") != o.meta(obj, "generation"):
        raise NotObserved(f"generation {o.meta(obj, 'generation')} != observed generation "
                          f"{changed.get('observedGeneration')}")
    valid = (_condition(conditions, VALID) or {}).get("status") == "True"
    return valid and changed.get("status") == "True", valid


def _owner(kind, obj):
    return {"apiVersion": GROUP_VERSION, "kind": kind, "name": o.meta(obj, "name"), "uid": o.meta(obj, "uid")}


def _owned_by(obj, owner):
    return any(ref.get("uid") == o.meta(owner, "uid") for ref in o.meta(obj, "ownerReferences") or [])


# -- Ironic's node: its caches and its servicing ------------------------------------------------------------------

class IronicNode:
    """What Ironic keeps about a host's node: cached BIOS settings and registry, cached firmware components, and its
    provision state while servicing (``active``, ``servicing``, ``service failed``)."""

    def __init__(self, uuid):
        self.uuid = uuid
        self.settings = None  # {name: value}; None until cached
        self.schema = {}  # {name: FirmwareSchema entry}
        self.components = {}  # {component: FirmwareComponentStatus}
        self.state = "active"
        self.last_error = ""

    def cache(self, bmc):
        """``cache_bios_settings`` and ``cache_firmware_components`` from the BMC."""
        attributes = bmc.get("/BIOS", "Failed to read the BIOS settings")
        registry = _registry(bmc, attributes.get("AttributeRegistry"))
        self.settings = dict(attributes.get("Attributes") or {})
        self.schema = {name: _schema_entry(registry.get(name)) for name in self.settings}
        now = o.now()
        for name, part in sorted(bmc.firmware().items()):
            record = self.components.get(name)
            if record is None:
                self.components[name] = {"component": name, "initialVersion": part["version"],
                                         "currentVersion": part["version"]}
            elif record.get("currentVersion") != part["version"]:
                record.update(currentVersion=part["version"], lastVersionFlashed=part["version"], updatedAt=now)

    def component_list(self):
        return [copy.deepcopy(self.components[name]) for name in sorted(self.components)]


def _registry(bmc, name):
    """{AttributeName: registry entry} of the BIOS attribute registry ``name`` that the BMC serves ({} without one:
    Ironic goes on without it)."""
    if not name:
        return {}
    try:
        for member in bmc.get("/redfish/v1/Registries", "Failed to read the registries").get("Members") or []:
            registry_file = bmc.get(member["@odata.id"], "Failed to read a registry file")
            for location in registry_file.get("Location") or []:
                if not location.get("Uri"):
                    continue
                found = bmc.get(location["Uri"], "Failed to read a registry")
                if name in (found.get("Id"), registry_file.get("Id")):
                    return {a.get("AttributeName"): a for a in (found.get("RegistryEntries") or {}).get(
                        "Attributes") or []}
    except Exception:  # noqa: BLE001 - Ironic logs "Cannot get BIOS Registry attributes" and goes on
        return {}
    return {}


def _schema_entry(registry_entry):
    """The FirmwareSchema entry of a setting: the registry fields Ironic stores (none without a registry entry)."""
    entry = {}
    for source, field in REGISTRY_FIELDS:
        if registry_entry and registry_entry.get(source) is not None:
            entry[field] = registry_entry[source]
    if registry_entry and isinstance(registry_entry.get("Value"), list):
        entry["allowable_values"] = [v.get("ValueName") or v.get("ValueDisplayName")
                                     for v in registry_entry["Value"] if v.get("ValueName") or v.get("ValueDisplayName")]
    if entry.get("attribute_type") == "Password":
        return None
    return entry


def _run_service_steps(node, bmc, settings, updates):
    """Ironic's service steps, in order: each firmware update, then the BIOS settings, then the power-on that
    activates them; ServiceFailed with Ironic's last_error when one fails."""
    for update in updates:
        inventory = bmc.firmware()
        part = inventory.get(update["component"])
        if part is None:
            raise ServiceFailed(f"Firmware update failed for node {node.uuid}, firmware {update['url']}. Error: the "
                                f"BMC has no firmware component {update['component']}")
        location = bmc.simple_update(update["url"], part["path"])
        task = bmc.follow_task(location, TASK_SECONDS)
        if task.get("TaskState") != "Completed" or task.get("TaskStatus") not in (None, "OK"):
            messages = [m.get("Message") or m.get("MessageId") or "" for m in task.get("Messages") or []]
            raise ServiceFailed(f"Firmware update failed for node {node.uuid}, firmware {update['url']}. "
                                f"Error: {',  '.join(messages)}")
    if settings:
        bmc.request("PATCH", "/BIOS/Settings", {"Attributes": settings},
                    f"Redfish BIOS apply configuration failed for node {node.uuid}")
    if bmc.power_state() != "Off":
        bmc.reset("ForceOff")
        _wait(lambda: bmc.power_state() == "Off", "the machine to power off")
    bmc.reset("On")

    def activated():
        if bmc.power_state() != "On":
            return False
        if any(part.get("staged") for part in bmc.firmware().values()):
            return False
        current = bmc.get("/BIOS", "Failed to read the BIOS settings").get("Attributes") or {}
        return all(str(current.get(name)) == str(value) for name, value in settings.items())

    try:
        _wait(activated, "the machine to run the new firmware and BIOS settings")
    except ServiceFailed:
        raise ServiceFailed(f"Redfish BIOS apply configuration failed for node {node.uuid}: the machine did not "
                            f"come back with the new firmware and settings within {BOOT_SECONDS:.0f} s") from None


def _wait(check, what):
    """lab.wait's wait for the machine's boot, a servicing failure when it does not come."""
    try:
        wait_for(check, BOOT_SECONDS, what)
    except LabError as e:
        raise ServiceFailed(str(e)) from None


# -- the controller ---------------------------------------------------------------------------------------------------

class HostFirmwareController(Controller):
    """The HostFirmwareSettings and HostFirmwareComponents controllers (one key per host), and the servicing part of
    the host controller (``service``, called by baremetal.py)."""

    name = "hostfirmware"
    workers = 2
    resync_seconds = 0

    def __init__(self, sim):
        super().__init__(sim)
        self._nodes = {}
        self._lock = threading.Lock()
        sim.hfss = Informer(sim.kube, HFS)
        sim.hfcs = Informer(sim.kube, HFC)
        sim.hups = Informer(sim.kube, HUP)
        sim.firmware_schemas = Informer(sim.kube, SCHEMAS, name="firmwareschemas")
        for informer in (sim.hfss, sim.hfcs, sim.bmhs):
            informer.add_handler(self._on_event)

    def _on_event(self, event, obj, old):
        """``updateEventHandler`` (the filter of both controllers, on their own objects and on hosts alike): a
        creation or deletion, a new generation or new owners."""
        if old is not None and obj is not None and event != "DELETED" and o.meta(obj, "generation") == o.meta(
                old, "generation") and o.meta(obj, "ownerReferences") == o.meta(old, "ownerReferences"):
            return
        self.enqueue(k.key_of(obj if obj is not None else old))

    def node(self, host):
        key = k.key_of(host)
        with self._lock:
            node = self._nodes.get(key)
            if node is None:
                node = self._nodes[key] = IronicNode((o.status(host).get("provisioning") or {}).get("ID") or "")
            return node

    def forget(self, key):
        with self._lock:
            self._nodes.pop(key, None)

    # -- registration (registerHost) ----------------------------------------------------------------------------

    def registered(self, host, bmc):
        """The host's HFS and HFC exist and its HostUpdatePolicy is owned by it; Ironic has cached its node."""
        node = self.node(host)
        if node.settings is None:
            try:
                node.cache(bmc)
                self.enqueue(k.key_of(host))
            except (BmcError, LabError) as e:
                self.log.info("BareMetalHost %s: Ironic cannot cache the BIOS settings and firmware yet: %s",
                              k.key_of(host), e)
        namespace, name = o.meta(host, "namespace"), o.meta(host, "name")
        owner = [_owner("BareMetalHost", host)]
        for res, informer, spec in ((HFS, self.sim.hfss, {"settings": {}}), (HFC, self.sim.hfcs, {"updates": []})):
            found = informer.get_by(namespace, name)
            if found is None:
                body = {"apiVersion": GROUP_VERSION, "kind": res.kind, "spec": spec,
                        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner}}
                try:
                    self.kube.create(res, body)
                except k.ApiError as e:
                    if not e.already_exists:
                        raise
            elif not _owned_by(found, host):
                self._add_owner(res, found, owner[0])
        self.policy(host)

    def _add_owner(self, res, obj, owner):
        self.kube.patch(res, o.meta(obj, "name"), {"metadata": {
            "ownerReferences": (o.meta(obj, "ownerReferences") or []) + [owner],
            "resourceVersion": o.meta(obj, "resourceVersion")}}, namespace=o.meta(obj, "namespace"))

    def policy(self, host):
        """``acquireHostUpdatePolicy``: the host's HostUpdatePolicy (None when there is none), owned by the host."""
        hup = self.sim.hups.get(k.key_of(host))
        if hup is not None and not _owned_by(hup, host):
            self._add_owner(HUP, hup, _owner("BareMetalHost", host))
        return hup

    # -- HostFirmwareSettings and HostFirmwareComponents status -----------------------------------------------------

    def reconcile(self, key):
        host = self.sim.bmhs.get(key)
        if host is None:
            self.forget(key)
            return None
        state = (o.status(host).get("provisioning") or {}).get("state") or ""
        annotations = o.annotations(host)
        if state in ("", "unmanaged") or o.status(host).get("operationalStatus") == "detached" or \
                "baremetalhost.metal3.io/detached" in annotations or "baremetalhost.metal3.io/paused" in annotations:
            return None  # skipReconcileSubresource: the host's own events bring it back
        node = self.node(host)
        if node.settings is None:
            return None  # not cached yet: registration enqueues the host once it is
        detected = [self._settings_status(host, node)[0], self._components_status(host, node)[0]]
        return CHANGE_DETECTED_SECONDS if any(detected) else STEADY_SECONDS

    def _settings_status(self, host, node):
        """(spec differs from status, the HFS as written or None)."""
        hfs = self.sim.hfss.get(k.key_of(host))
        if hfs is None:
            return False, None
        schema = self._schema(hfs, node.schema)
        settings = {name: str(value) for name, value in node.settings.items() if "Password" not in name}
        status = o.status(hfs)
        reference = {"namespace": o.meta(schema, "namespace"), "name": o.meta(schema, "name")}
        dirty = status.get("schema") != reference or status.get("settings") != settings
        wanted = o.spec(hfs).get("settings") or {}
        mismatch = any(settings.get(name) != str(value) for name, value in wanted.items())
        generation = o.meta(hfs, "generation")
        conditions = []

        def condition(kind, value, reason, message=""):
            # setCondition: written only when the condition's status changes.
            _set_condition(conditions, kind, value, reason, message, generation)
            return (_condition(status.get("conditions"), kind) or {}).get("status") != value

        if mismatch:
            dirty |= condition(CHANGE_DETECTED, "True", "Success")
            errors = [problem for problem in (self._invalid_setting(name, value, settings, o.spec(schema).get(
                "schema") or {}) for name, value in wanted.items()) if problem]
            if errors:
                self.log.info("HostFirmwareSettings %s: Invalid BIOS setting: %s", k.key_of(hfs), "; ".join(errors))
                dirty |= condition(VALID, "False", "ConfigurationError", "Invalid BIOS setting")
            else:
                dirty |= condition(VALID, "True", "Success")
        else:
            dirty |= condition(VALID, "True", "Success")
            dirty |= condition(CHANGE_DETECTED, "False", "Success")
        if not dirty:
            return mismatch, None
        body = dict(hfs, status={"schema": reference, "settings": settings, "conditions": conditions,
                                 "lastUpdated": o.now()})
        return mismatch, self.kube.replace(HFS, body, subresource="status")

    @staticmethod
    def _invalid_setting(name, value, settings, schema):
        """``validateHostFirmwareSettings``."""
        if "Password" in name:
            return "cannot set Password field"
        if name not in settings:
            return f"setting {name} is not in the Status field"
        return validate_setting(name, value, schema)

    def _schema(self, hfs, schema):
        """``getOrCreateFirmwareSchema``: the FirmwareSchema of these settings, owned (also) by ``hfs``."""
        entries = {name: entry for name, entry in schema.items() if entry is not None and "Password" not in name}
        name, namespace = schema_name(entries), o.meta(hfs, "namespace")
        found = self.sim.firmware_schemas.get_by(namespace, name) or self.kube.get_or_none(SCHEMAS, name, namespace)
        if found is not None:
            if not _owned_by(found, hfs):
                self._add_owner(SCHEMAS, found, _owner("HostFirmwareSettings", hfs))
            return found
        body = {"apiVersion": GROUP_VERSION, "kind": "FirmwareSchema", "spec": {"schema": entries},
                "metadata": {"name": name, "namespace": namespace,
                             "ownerReferences": [_owner("HostFirmwareSettings", hfs)]}}
        return self.kube.create(SCHEMAS, body)

    def _components_status(self, host, node):
        """(spec differs from status, the HFC as written or None)."""
        hfc = self.sim.hfcs.get(k.key_of(host))
        if hfc is None:
            return False, None
        status = copy.deepcopy(o.status(hfc))
        spec_updates = o.spec(hfc).get("updates") or []
        mismatch = (status.get("updates") != o.spec(hfc).get("updates")) and bool(spec_updates or status.get(
            "updates"))
        components = node.component_list()
        dirty = status.get("components") != components
        status["components"] = components
        conditions = status.setdefault("conditions", [])
        generation = o.meta(hfc, "generation")
        if mismatch:
            dirty |= _set_condition(conditions, CHANGE_DETECTED, "True", "OK", "", generation)
            problem = invalid_component(spec_updates)
            if problem:
                self.log.info("HostFirmwareComponents %s: Invalid Firmware Components: %s", k.key_of(hfc), problem)
                dirty |= _set_condition(conditions, VALID, "False", "InvalidComponent",
                                        f"Invalid Firmware Components: {problem}", generation)
            else:
                dirty |= _set_condition(conditions, VALID, "True", "OK", "", generation)
        else:
            dirty |= _set_condition(conditions, VALID, "True", "OK", "", generation)
            dirty |= _set_condition(conditions, CHANGE_DETECTED, "False", "OK", "", generation)
        if not dirty:
            return mismatch, None
        status["lastUpdated"] = o.now()
        return mismatch, self.kube.replace(HFC, dict(hfc, status=status), subresource="status")

    # -- servicing (doServiceIfNeeded, with Ironic's Service) ------------------------------------------------------

    def service(self, hosts, host, bmc):
        """``doServiceIfNeeded`` for ``host`` (off and wanted on, ``servicing`` or in ``servicing error``): None when
        there is nothing to do (power management goes on), else seconds until the host is looked at again."""
        status = o.status(host)
        hup = self.policy(host)
        settings_allowed = o.spec(hup or {}).get("firmwareSettings") == ON_REBOOT
        updates_allowed = o.spec(hup or {}).get("firmwareUpdates") == ON_REBOOT
        hfs = self.sim.hfss.get(k.key_of(host)) if settings_allowed else None
        hfc = self.sim.hfcs.get(k.key_of(host)) if updates_allowed else None
        try:
            hfs_dirty = has_changes(hfs)[0] if hfs is not None else False
            hfc_dirty = has_changes(hfc)[0] if hfc is not None else False
        except NotObserved as e:
            self.log.info("BareMetalHost %s: firmware objects not ready yet: %s", k.key_of(host), e)
            return SERVICING_POLL_SECONDS
        settings, updates = {}, []
        if hfs_dirty:
            actual = o.status(hfs).get("settings") or {}
            settings = {name: value for name, value in (o.spec(hfs).get("settings") or {}).items()
                        if actual.get(name) != str(value)}
        if hfc_dirty:
            updates = updates_difference(o.spec(hfc).get("updates"), o.status(hfc).get("updates"))
        has_spec = bool(hfs is not None and o.spec(hfs).get("settings")) or bool(
            hfc is not None and o.spec(hfc).get("updates"))
        changes = hfs_dirty or hfc_dirty
        if not changes and status.get("operationalStatus") != SERVICING and status.get("errorType") != SERVICING_ERROR:
            return None
        if status.get("operationalStatus") != SERVICING:
            hosts._write_status(host, {"operationalStatus": SERVICING})
            hosts.forget_power_action(k.key_of(host))  # Ironic has the machine's power from here
            return SERVICING_POLL_SECONDS
        error, started, busy = self._ironic_service(host, bmc, settings, updates, has_spec, changes,
                                                    status.get("errorType") == SERVICING_ERROR)
        if error:
            if hfc_dirty and o.status(hfc).get("updates") is not None:
                self.kube.replace(HFC, dict(hfc, status=dict(o.status(hfc), updates=None)), subresource="status")
                self.enqueue(k.key_of(host))  # its controller sees the updates pending again
            return hosts._fail(host, SERVICING_ERROR, error)
        dirty = hosts._clear_error(host, SERVICING) if status.get("errorType") else False
        if hfc_dirty and started and o.status(hfc).get("updates") != o.spec(hfc).get("updates"):
            # saveHostFirmwareComponents: the updates handed to Ironic, and its components as it knows them now.
            self.kube.replace(HFC, dict(hfc, status=dict(o.status(hfc), updates=o.spec(hfc).get("updates"),
                                                         components=self.node(host).component_list())),
                              subresource="status")
        if dirty or busy:
            return SERVICING_POLL_SECONDS
        hosts._clear_error(host, "OK")  # servicing is finished
        return SERVICING_POLL_SECONDS

    def _ironic_service(self, host, bmc, settings, updates, has_spec, unprepared, restart_on_failure):
        """Ironic's side of ``Service`` (servicing.go): (error message, started, still busy)."""
        node = self.node(host)
        with self._lock:
            state = node.state
            if state == "service failed":
                if not has_spec:
                    node.state = "active"  # abortServicing
                    return None, False, True
                if not restart_on_failure:
                    return node.last_error, False, False
                unprepared = True
                state = "active"
            if state == "servicing":
                return None, False, True
            if not unprepared:
                return None, False, False
            if not settings and not updates:
                node.state = "active"
                return None, True, False  # nothing to do: servicing finished
            node.state, node.last_error = "servicing", ""
        self.log.info("BareMetalHost %s: servicing: settings %s, updates %s", k.key_of(host), sorted(settings),
                      [u["component"] for u in updates])
        threading.Thread(target=self._steps, args=(k.key_of(host), node, bmc, settings, updates),
                         name=f"servicing-{o.meta(host, 'name')}", daemon=True).start()
        return None, True, True

    def _steps(self, key, node, bmc, settings, updates):
        try:
            _run_service_steps(node, bmc, settings, updates)
            node.cache(bmc)
            state, error = "active", ""
        except (ServiceFailed, BmcError, LabError) as e:
            state, error = "service failed", str(e)
        except Exception as e:  # noqa: BLE001 - a step that breaks fails the servicing, as in Ironic's conductor
            self.log.exception("BareMetalHost %s: a service step broke", key)
            state, error = "service failed", f"Servicing failed for node {node.uuid}: {e}"
        if error:
            self.log.info("BareMetalHost %s: servicing failed: %s", key, error)
        try:
            host = self.sim.bmhs.get(key)
            if host is not None and not error:
                # The lab's shortcut: the HFS and HFC show Ironic's new cache before the host is OK (and the cache
                # of this process has them, so that the host's next look does not see the old status).
                for informer, (_, written) in ((self.sim.hfss, self._settings_status(host, node)),
                                               (self.sim.hfcs, self._components_status(host, node))):
                    if written is not None:
                        _wait(lambda: int((informer.get(key) or {}).get("metadata", {}).get("resourceVersion") or 0)
                              >= int(o.meta(written, "resourceVersion")), "the firmware status in the cache")
        except Exception:  # noqa: BLE001 - their own reconcile comes again
            self.log.exception("BareMetalHost %s: refreshing the firmware status failed", key)
            self.enqueue(key)
        with self._lock:
            node.state, node.last_error = state, error
