# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Metal3 road to a machine: its BareMetalHost, whose operator talks to the BMC.

metal3-io/baremetal-operator ``apis/metal3.io/v1alpha1/baremetalhost_types.go``: ``spec.online`` is the
power state asked for, ``status.poweredOn`` the one the BMC last reported (the operator's Ironic
provisioner reads it back, ``pkg/provisioner/ironic/ironic.go``), ``spec.disablePowerOff`` forbids
powering the host off.

Firmware and BIOS settings go through the host's HostFirmwareComponents (``spec.updates``: ``{component, url}``;
``status.components``: ``currentVersion`` of ``bios``, ``bmc``, ``nic:*``) and HostFirmwareSettings (``spec.settings``;
``status.settings``, checked against the FirmwareSchema its ``status.schema`` names), objects of the host's name that
the operator makes (``apis/metal3.io/v1alpha1/host*_types.go``, ``firmwareschema_types.go``). They are applied while
the operator services the host, which it does when a provisioned host that should be on is off - a reboot - and its
HostUpdatePolicy of the same name says ``onReboot`` for them (``internal/controller/metal3.io/
baremetalhost_controller.go`` ``manageHostPower``, ``doServiceIfNeeded``): ``operationalStatus`` goes ``servicing``,
then ``OK``, or ``error`` with ``errorType: servicing error`` and Ironic's ``errorMessage``. A policy is opt-in: with
none, or one that says nothing for them, the reboot applies nothing, so this road creates or completes it; one that
says ``onPreparing`` is its owner's choice (changes only while the host is prepared for provisioning) and is refused.

A BareMetalHost does not name its node; the node names it in ``spec.providerID``, set by the machine
controller: Cluster API Provider Metal3 writes ``metal3://<namespace>/<bmh>/<metal3machine>``
(``baremetal/metal3machine_manager.go`` ``SetDefaultProviderID``; older releases ``metal3://<bmh uid>``),
OpenShift's machine-api ``baremetalhost:///<namespace>/<bmh>[/<uid>]`` (openshift/cluster-api-provider-baremetal
``ensureProviderID``). Any other node names its host with the ``bmh`` option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MachineError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, wait_for_object

KIND = "BareMetalHost"
ON = "On"
OFF = "Off"
# baremetal-operator's reboot annotations (controllers/metal3.io/baremetalhost_controller.go, manageHostPower
# and hasRebootAnnotation): while a ``reboot.metal3.io/<key>`` annotation exists the operator keeps a provisioned
# host powered off (``{"mode": "hard"}`` skips the soft power-off it tries first), and powers it on again as
# ``spec.online`` says once every such annotation is gone. A key of our own: another client's hold is never
# released by us, and ``spec.online`` (the owner's intent) is left alone.
REBOOT_ANNOTATION = "reboot.metal3.io/kubevirt-ops.maintenance"
# Reboot annotations without ``"force": true`` count only for hosts in these provisioning states.
PROVISIONED_STATES = ("provisioned", "externally provisioned")
GROUP = "metal3.io"
GROUP_VERSION = "metal3.io/v1alpha1"
HFC = "HostFirmwareComponents"
HFS = "HostFirmwareSettings"
HUP = "HostUpdatePolicy"
SCHEMA = "FirmwareSchema"
ON_REBOOT = "onReboot"
CHANGE_DETECTED = "ChangeDetected"
VALID = "Valid"
SERVICING = "servicing"
SERVICING_ERROR = "servicing error"
# How long the operator's HFS and HFC controllers may take to judge a new spec (they reconcile at once on a new
# generation), and to show what servicing did (they read Ironic again every 1 or 5 minutes).
JUDGE_SECONDS = 120.0
REFRESH_SECONDS = 360.0


# -- which host is a node's --------------------------------------------------------------------

def bmh_reference(node, given=None):
    """(namespace, name, how) of the node's BareMetalHost, (None, uid, how) for a legacy
    ``metal3://<uid>`` providerID, or None when nothing names one."""
    if given:
        return given["namespace"], given["name"], "the bmh option"
    provider = (node.get("spec") or {}).get("providerID") or ""
    how = "its providerID %s" % provider
    if provider.startswith("metal3://"):
        parts = [p for p in provider[len("metal3://"):].split("/") if p]
        if len(parts) == 3:
            return parts[0], parts[1], how
        if len(parts) == 1:
            return None, parts[0], how
    if provider.startswith("baremetalhost:///"):
        parts = [p for p in provider[len("baremetalhost:///"):].split("/") if p]
        if len(parts) in (2, 3):
            return parts[0], parts[1], how
    return None


def find_bmh(client, name, node, given=None):
    """The node's BareMetalHost; InvalidInputError (one sentence) when there is none to use."""
    if not client.kind_served("BareMetalHost"):
        raise InvalidInputError(
            "Option power_off=bmh needs Metal3's BareMetalHost API (metal3.io/v1alpha1), which this cluster does not "
            "serve; power node %s off another way (power_off=manual)." % name, option="power_off")
    ref = bmh_reference(node, given)
    if ref is None:
        raise InvalidInputError(
            "Node %s names no BareMetalHost (providerID %s is neither metal3:// nor baremetalhost:///); give "
            "bmh={name, namespace} with power_off=bmh." % (name, (node.get("spec") or {}).get("providerID") or "empty"),
            option="bmh")
    namespace, bmh_name, how = ref
    if namespace is None:
        found = [h for h in client.list("BareMetalHost")[0] if h["metadata"].get("uid") == bmh_name]
        if not found:
            raise InvalidInputError("Node %s names BareMetalHost uid %s by %s, and no BareMetalHost has it; give "
                                    "bmh={name, namespace}." % (name, bmh_name, how), option="bmh")
        return found[0]
    host = client.get_or_none("BareMetalHost", bmh_name, namespace)
    if host is None:
        raise InvalidInputError("BareMetalHost %s/%s, named by %s of node %s, does not exist." % (
            namespace, bmh_name, how, name), option="bmh")
    return host


def bmh_key(host):
    return "%s/%s" % (host["metadata"].get("namespace"), host["metadata"]["name"])


# -- the machine ------------------------------------------------------------------------------


class Metal3Machine:
    """One machine, through its BareMetalHost."""

    def __init__(self, client, host):
        self.client = client
        self.namespace = host["metadata"]["namespace"]
        self.name = host["metadata"]["name"]
        self.host = host
        self._hfc = None  # the HostFirmwareComponents and -Settings read (firmware_versions, bios_attributes)
        self._hfs = None
        self._components = {}
        self._flashed = {}  # component -> its status when its update was asked
        self._settings_asked = False

    @property
    def key(self):
        return "%s/%s" % (self.namespace, self.name)

    def describe(self, start=False):
        return "%s BareMetalHost %s" % ("The" if start else "the", self.key)

    def as_dict(self):
        return {"road": "metal3", "bmh": self.key}

    def permissions(self):
        """The BareMetalHost's, and with firmware or BIOS settings asked (read already), those of its
        HostFirmwareComponents or -Settings, FirmwareSchema and HostUpdatePolicy."""
        wanted = [("patch", "baremetalhosts"), ("watch", "baremetalhosts")]
        for read, resource in ((self._hfc, "hostfirmwarecomponents"), (self._hfs, "hostfirmwaresettings")):
            if read is not None:
                wanted += [(verb, resource) for verb in ("get", "list", "watch", "patch")]
        if self._hfs is not None:
            wanted.append(("get", "firmwareschemas"))
        if self._hfc is not None or self._hfs is not None:
            wanted += [(verb, "hostupdatepolicies") for verb in ("get", "create", "patch")]
        return [Permission(verb, resource, group=GROUP, namespaces=[self.namespace]) for verb, resource in wanted]

    def _read(self):
        self.host = self.client.get_or_none(KIND, self.name, self.namespace) or self.host
        return self.host

    def power_state(self):
        """``On`` or ``Off`` as the BMC last reported it through the operator (None before it did)."""
        powered = ((self._read().get("status") or {}).get("poweredOn"))
        return None if powered is None else (ON if powered else OFF)

    def refuse_power_off_if_disabled(self, **details):
        """BlockedError when the host forbids powering it off (``spec.disablePowerOff``: the operator refuses
        ``online: false`` then, baremetalhost_types.go)."""
        if (self.host.get("spec") or {}).get("disablePowerOff"):
            raise BlockedError("%s forbids powering the machine off (spec.disablePowerOff=true); nothing was changed."
                               % self.describe(True), bmh=self.key, **details)

    def power_off(self, timeout, graceful=True):
        """Ask the operator to power the host off (``spec.online=false``) and wait for ``poweredOn=false``;
        returns the changes asked for (empty when it was off and asked to be already). How (soft, then hard)
        is the operator's: ``graceful`` is the Redfish road's choice only."""
        self._read()
        self.refuse_power_off_if_disabled()
        return self._switch(False, timeout)

    def power_on(self, timeout):
        """Ask the operator to power the host on (``spec.online=true``) and wait for ``poweredOn=true``."""
        return self._switch(True, timeout)

    def _switch(self, online, timeout):
        host = self._read()
        asked = []
        if (host.get("spec") or {}).get("online") is not online:
            self.client.patch(KIND, self.name, {"spec": {"online": online}}, namespace=self.namespace)
            asked.append("spec.online=%s" % str(online).lower())
        self._wait_power(online, timeout)
        return asked

    def restart(self, timeout, graceful=True):
        """A power cycle through the host; returns what was asked, as one text.

        A provisioned host (every host behind a node) is rebooted with our reboot annotation, soft first unless
        ``graceful`` is false: on once ``poweredOn=false`` was reported and the annotation removed. The operator
        services it meanwhile when its HostFirmwareComponents or -Settings ask for changes: the new specs must be
        judged valid first, the host must come back from ``servicing`` (MachineError with its ``errorMessage`` when
        it fails), and then the statuses must show what was done. Any other host (the operator ignores the
        annotation there) with ``spec.online=false`` then ``true``."""
        deadline = Deadline(timeout)
        host = self._read()
        if ((host.get("status") or {}).get("provisioning") or {}).get("state") not in PROVISIONED_STATES:
            asked = self.power_off(timeout / 2.0, graceful=graceful) + self.power_on(timeout / 2.0)
            return ", ".join(asked) or "nothing (the host was on and asked to be)"
        self.refuse_power_off_if_disabled()
        if not (host.get("spec") or {}).get("online"):
            raise BlockedError("%s is asked to be powered off (spec.online=false): a reboot would leave it off; "
                               "nothing was changed." % self.describe(True), bmh=self.key)
        self._wait_judged(deadline)
        before = _servicing_error(self._read())
        mode = "soft" if graceful else "hard"
        self.client.patch(KIND, self.name, {"metadata": {"annotations": {
            REBOOT_ANNOTATION: json.dumps({"mode": mode})}}}, namespace=self.namespace)
        try:
            self._wait_power(False, deadline.remaining() / 2.0)
        finally:
            # Never leave the hold behind, even when the host did not go off in time.
            self.client.patch(KIND, self.name, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}},
                              namespace=self.namespace)
        sent = "%s %s, removed once off" % (REBOOT_ANNOTATION, mode)
        if not self._wait_back(deadline.remaining(), before):
            return sent
        self._wait_refreshed(deadline)
        return sent + ", serviced by baremetal-operator"

    def _wait_power(self, online, timeout):
        if (self._read().get("status") or {}).get("poweredOn") is online:
            return
        self.host = wait_for_object(
            self.client, KIND, self.name, lambda h: h is not None and (h.get("status") or {}).get(
                "poweredOn") is online, timeout,
            "%s to report poweredOn=%s" % (self.describe(), str(online).lower()), namespace=self.namespace,
            describe_pending=lambda: "it still reports poweredOn=%s" % (
                (self._read().get("status") or {}).get("poweredOn")))

    # -- firmware and BIOS: HostFirmwareComponents and HostFirmwareSettings, applied by servicing on the reboot -------

    def firmware_versions(self):
        """{component: currentVersion} of the host's HostFirmwareComponents status (``bios``, ``bmc``, ``nic:*``: what
        Ironic last read from the BMC)."""
        self._hfc = self._firmware_object(HFC, "firmware")
        components = (self._hfc.get("status") or {}).get("components") or []
        self._components = dict((c.get("component"), c) for c in components if c.get("component"))
        return dict((name, c.get("currentVersion")) for name, c in self._components.items())

    def bios_attributes(self, pending=False):
        """The BIOS settings of the host's HostFirmwareSettings status, or (``pending``) those with its spec over
        them: what the machine runs with after the next servicing."""
        self._hfs = self._firmware_object(HFS, "bios")
        current = dict((self._hfs.get("status") or {}).get("settings") or {})
        if pending:
            current.update((name, str(value)) for name, value in ((self._hfs.get("spec") or {}).get(
                "settings") or {}).items())
        return current

    def check_changes(self, updates, settings):
        """Refuse, before anything changes, what baremetal-operator would not apply on the reboot: a host that is not
        provisioned, a HostUpdatePolicy that says ``onPreparing``, changes of someone else's still pending in the
        HostFirmwareComponents or -Settings (they would go with ours), an image already applied to the component,
        and a BIOS value its FirmwareSchema does not allow (``FirmwareSchema.ValidateSetting``)."""
        if not updates and not settings:
            return
        host = self._read()
        state = ((host.get("status") or {}).get("provisioning") or {}).get("state")
        if state not in PROVISIONED_STATES:
            raise BlockedError("%s is %s, not provisioned: baremetal-operator applies firmware and BIOS settings to it "
                               "only while it prepares it, not on a reboot; nothing was changed." % (
                                   self.describe(True), state or "not registered"), bmh=self.key)
        policy = self._get_or_none(HUP, "firmware" if updates else "bios") or {}
        for field, asked, what in (("firmwareUpdates", updates, "firmware updates"),
                                   ("firmwareSettings", settings, "BIOS settings")):
            chosen = (policy.get("spec") or {}).get(field)
            if asked and chosen and chosen != ON_REBOOT:
                raise BlockedError(
                    "HostUpdatePolicy %s says %s: %s, so baremetal-operator applies %s to the machine only while it "
                    "prepares the host for provisioning, never on a reboot; nothing was changed (the policy is the "
                    "host owner's to change)." % (self.key, field, chosen, what), bmh=self.key)
        if updates:
            self._check_updates(updates)
        if settings:
            self._check_settings(settings)

    def _check_updates(self, updates):
        spec = (self._hfc.get("spec") or {}).get("updates") or []
        applied = dict((u.get("component"), u.get("url")) for u in (self._hfc.get("status") or {}).get("updates") or [])
        ours = set(entry["component"] for entry in updates)
        theirs = sorted("%s %s" % (u.get("component"), u.get("url")) for u in spec
                        if u.get("component") not in ours and applied.get(u.get("component")) != u.get("url"))
        if theirs:
            raise BlockedError("HostFirmwareComponents %s asks for updates not applied yet (%s), which the reboot would "
                               "apply with this task's; apply or remove them first; nothing was changed." % (
                                   self.key, ", ".join(theirs)), bmh=self.key)
        for entry in updates:
            if applied.get(entry["component"]) == entry["url"]:
                raise InvalidInputError(
                    "Option firmware: the image %s of component %s was applied before (HostFirmwareComponents %s "
                    "status.updates) and baremetal-operator does not apply an image twice, yet the machine reports "
                    "version %s, not %s; give the url of the image of that version; nothing was changed." % (
                        entry["url"], entry["component"], self.key,
                        (self._components.get(entry["component"]) or {}).get("currentVersion"), entry["version"]),
                    option="firmware")

    def _check_settings(self, settings):
        spec = (self._hfs.get("spec") or {}).get("settings") or {}
        status = self._hfs.get("status") or {}
        current = status.get("settings") or {}
        theirs = sorted("%s=%s" % (name, value) for name, value in spec.items()
                        if name not in settings and str(value) != current.get(name))
        if theirs:
            raise BlockedError("HostFirmwareSettings %s asks for settings not applied yet (%s), which the reboot would "
                               "apply with this task's; apply or remove them first; nothing was changed." % (
                                   self.key, ", ".join(theirs)), bmh=self.key)
        reference = status.get("schema") or {}
        schema_obj = self.client.get_or_none(SCHEMA, reference["name"], reference.get("namespace") or self.namespace) \
            if reference.get("name") else None
        entries = ((schema_obj or {}).get("spec") or {}).get("schema")
        for name, value in sorted(settings.items()):
            problem = invalid_setting(name, setting_value(value), entries)
            if problem:
                allowed = ((entries or {}).get(name) or {}).get("allowable_values")
                raise InvalidInputError("Option bios: %s=%s is refused by the FirmwareSchema %s/%s of %s: %s%s; nothing "
                                        "was changed." % (
                                            name, value, reference.get("namespace") or self.namespace,
                                            reference.get("name"), self.describe(), problem,
                                            " (it allows %s)" % ", ".join(allowed) if allowed else ""),
                                        option="bios")

    def update_firmware(self, component, image_uri, timeout):
        """Ask for ``image_uri`` on ``component`` in the host's HostFirmwareComponents (``spec.updates``), with its
        HostUpdatePolicy saying ``firmwareUpdates: onReboot``; baremetal-operator applies it while it services the
        host on the next reboot (``restart``). ``timeout`` is the other road's."""
        self._allow_on_reboot("firmwareUpdates")
        wanted = {"component": component, "url": image_uri}

        def compute(hfc):
            current = (hfc.get("spec") or {}).get("updates") or []
            updates = [wanted if u.get("component") == component else u for u in current]
            if wanted not in updates:
                updates.append(wanted)
            return ({"spec": {"updates": updates}} if updates != current else None), None

        self.client.update_guarded(HFC, self.name, compute, namespace=self.namespace)
        self._flashed[component] = _component_state(self._components.get(component))

    def set_bios(self, attributes):
        """Ask for ``attributes`` in the host's HostFirmwareSettings (``spec.settings``), with its HostUpdatePolicy
        saying ``firmwareSettings: onReboot``; applied while the host is serviced on the next reboot."""
        self._allow_on_reboot("firmwareSettings")
        values = dict((name, setting_value(value)) for name, value in attributes.items())
        self.client.patch(HFS, self.name, {"spec": {"settings": values}}, namespace=self.namespace)
        self._settings_asked = True

    def _firmware_object(self, kind, option):
        found = self._get_or_none(kind, option)
        if found is None:
            raise InvalidInputError("Option %s: %s has no %s %s (baremetal-operator makes one when it registers a host "
                                    "whose BMC supports it); nothing was changed." % (
                                        option, self.describe(True), kind, self.key), option=option)
        return found

    def _get_or_none(self, kind, option):
        if not self.client.kind_served(kind):
            raise InvalidInputError("Option %s: this cluster does not serve Metal3's %s (metal3.io/v1alpha1), through "
                                    "which %s would take it; nothing was changed." % (option, kind, self.describe()),
                                    option=option)
        return self.client.get_or_none(kind, self.name, self.namespace)

    def _allow_on_reboot(self, field):
        """The host's HostUpdatePolicy says ``field: onReboot``: created when there is none, the field set when it
        says nothing (``doServiceIfNeeded`` services a host only then). One that says ``onPreparing`` was refused by
        check_changes, as it is its owner's choice."""
        def compute(policy):
            if policy is None:
                return {"apiVersion": GROUP_VERSION, "kind": HUP,
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": {field: ON_REBOOT}}, None
            chosen = (policy.get("spec") or {}).get(field)
            if chosen == ON_REBOOT:
                return None, None
            if chosen:
                raise BlockedError("HostUpdatePolicy %s now says %s: %s; the firmware and BIOS changes were not asked."
                                   % (self.key, field, chosen), bmh=self.key)
            return {"spec": {field: ON_REBOOT}}, None

        self.client.update_guarded(HUP, self.name, compute, namespace=self.namespace, create_missing=True)

    def _wait_judged(self, deadline):
        """baremetal-operator's HostFirmwareComponents and -Settings controllers judged the new specs
        (``ChangeDetected`` and ``Valid`` of their generation); MachineError when one is not valid."""
        for kind, asked in ((HFC, bool(self._flashed)), (HFS, self._settings_asked)):
            if not asked:
                continue
            judged = wait_for_object(
                self.client, kind, self.name, lambda obj: obj is not None and _observed(obj), min(
                    JUDGE_SECONDS, max(deadline.remaining(), 1.0)),
                "baremetal-operator to judge %s %s" % (kind, self.key), namespace=self.namespace)
            valid = _condition(judged, VALID) or {}
            if valid.get("status") != "True":
                raise MachineError("baremetal-operator finds %s %s not valid (%s: %s), so servicing would leave it out; "
                                   "the machine was not restarted and the spec keeps this task's change." % (
                                       kind, self.key, valid.get("reason"), valid.get("message") or "no message"),
                                   bmh=self.key)

    def _wait_back(self, timeout, before):
        """After the reboot's hold: the host on again, any servicing over (``operationalStatus`` back from
        ``servicing``); MachineError with the host's ``errorMessage`` when servicing fails. Returns whether it was
        serviced."""
        seen = []

        def back(host):
            status = (host or {}).get("status") or {}
            operational = status.get("operationalStatus")
            if operational == SERVICING:
                seen.append(operational)
            if status.get("errorType") == SERVICING_ERROR:
                if operational == "error" and _servicing_error(host) != before:
                    raise MachineError(
                        "%s failed to service the machine (operationalStatus error, errorType servicing error): %s; "
                        "baremetal-operator retries while the host's HostFirmwareComponents and HostFirmwareSettings "
                        "ask for the change, with the machine off: correct or remove it." % (
                            self.describe(True), (status.get("errorMessage") or "no errorMessage").rstrip(". ")),
                        bmh=self.key, error_message=status.get("errorMessage"), error_count=status.get("errorCount"))
                return False
            return status.get("poweredOn") is True and operational != SERVICING

        self.host = wait_for_object(
            self.client, KIND, self.name, back, timeout, "%s to be on again, done servicing" % self.describe(),
            namespace=self.namespace, describe_pending=lambda: "it reports operationalStatus %s, poweredOn=%s" % (
                (self._read().get("status") or {}).get("operationalStatus"),
                (self.host.get("status") or {}).get("poweredOn")))
        return bool(seen)

    def _wait_refreshed(self, deadline):
        """Servicing is over: wait (at most REFRESH_SECONDS) until the HostFirmwareComponents status shows a new read
        of every component flashed and the HostFirmwareSettings status has the settings (``ChangeDetected`` false):
        upstream's controllers take Ironic's new values on their next periodic reconcile. The verification that
        follows names what is still not there."""
        waits = []
        if self._flashed:
            waits.append((HFC, lambda obj: all(_component_state(_component(obj, name)) != state
                                               for name, state in self._flashed.items())))
        if self._settings_asked:
            waits.append((HFS, lambda obj: _observed(obj) and (_condition(obj, CHANGE_DETECTED) or {}).get(
                "status") == "False"))
        for kind, done in waits:
            try:
                wait_for_object(self.client, kind, self.name, lambda obj: obj is not None and done(obj),
                                min(REFRESH_SECONDS, max(deadline.remaining(), 1.0)),
                                "%s %s to show the serviced machine" % (kind, self.key), namespace=self.namespace)
            except WaitTimeoutError:
                pass


def setting_value(value):
    """A BIOS value as HostFirmwareSettings takes it (an integer or a string: booleans as Redfish spells them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, int) else str(value)


def invalid_setting(name, value, schema):
    """Why a FirmwareSchema refuses ``name=value`` (upstream's ``SettingSchema.Validate`` words), or None. ``schema``
    None: the host has none yet, and only password settings are refused (``validateHostFirmwareSettings``)."""
    if "Password" in name:
        return "Setting %s is invalid, Password fields can't be set" % name
    if schema is None:
        return None
    if name not in schema:
        return "Setting %s is invalid, it is not in the associated schema" % name
    entry, text = schema[name] or {}, str(value)
    kind = entry.get("attribute_type") or ""
    if entry.get("read_only"):
        return "Setting %s is invalid, it is ReadOnly" % name
    if kind == "Enumeration" and text not in (entry.get("allowable_values") or []):
        return "Setting %s is invalid, unknown enumeration value - %s" % (name, text)
    if kind == "Integer":
        try:
            number = int(text)
        except ValueError:
            return "Setting %s is invalid, String %s entered while integer expected" % (name, text)
        if entry.get("lower_bound") is not None and number < entry["lower_bound"]:
            return "Setting %s is invalid, integer %d is below minimum value %d" % (name, number, entry["lower_bound"])
        if entry.get("upper_bound") is not None and number > entry["upper_bound"]:
            return "Setting %s is invalid, integer %d is above maximum value %d" % (name, number, entry["upper_bound"])
    if kind == "String":
        if entry.get("min_length") is not None and len(text) < entry["min_length"]:
            return "Setting %s is invalid, string %s length is below minimum length %d" % (name, text, entry["min_length"])
        if entry.get("max_length") is not None and len(text) > entry["max_length"]:
            return "Setting %s is invalid, string %s length is above maximum length %d" % (name, text, entry["max_length"])
    if kind == "Boolean" and text not in ("true", "false"):
        return "Setting %s is invalid, %s is not a boolean" % (name, text)
    if kind == "Password":
        return "Setting %s is invalid, passwords are immutable" % name
    if kind not in ("", "Enumeration", "Integer", "String", "Boolean"):
        return "Setting %s is invalid, unexpected attribute type %s" % (name, kind)
    return None


def _condition(obj, kind):
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _observed(obj):
    """Whether the conditions of an HFS or HFC describe its current generation (``hostObjectHasChanges``)."""
    changed = _condition(obj, CHANGE_DETECTED)
    return changed is not None and changed.get("observedGeneration") == (obj.get("metadata") or {}).get("generation")


def _component(obj, name):
    return next((c for c in ((obj or {}).get("status") or {}).get("components") or [] if c.get("component") == name),
                None)


def _component_state(component):
    """What changes in a component's status when Ironic reads it again after a flash."""
    component = component or {}
    return (component.get("currentVersion"), component.get("lastVersionFlashed"), component.get("updatedAt"))


def _servicing_error(host):
    status = (host or {}).get("status") or {}
    if status.get("errorType") != SERVICING_ERROR:
        return None
    return (status.get("errorCount"), status.get("errorMessage"))
