# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Metal3 road to a machine: its BareMetalHost, whose operator talks to the BMC.

metal3-io/baremetal-operator ``apis/metal3.io/v1alpha1/baremetalhost_types.go``: ``spec.online`` is the
power state asked for, ``status.poweredOn`` the one the BMC last reported (the operator's Ironic
provisioner reads it back, ``pkg/provisioner/ironic/ironic.go``), ``spec.disablePowerOff`` forbids
powering the host off.

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
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import wait_for_object

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

    @property
    def key(self):
        return "%s/%s" % (self.namespace, self.name)

    def describe(self, start=False):
        return "%s BareMetalHost %s" % ("The" if start else "the", self.key)

    def as_dict(self):
        return {"road": "metal3", "bmh": self.key}

    def permissions(self):
        return [Permission("patch", "baremetalhosts", group="metal3.io", namespaces=[self.namespace]),
                Permission("watch", "baremetalhosts", group="metal3.io", namespaces=[self.namespace])]

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
        ``graceful`` is false: on once ``poweredOn=false`` was reported and the annotation removed. Any other host
        (the operator ignores the annotation there) with ``spec.online=false`` then ``true``."""
        host = self._read()
        if ((host.get("status") or {}).get("provisioning") or {}).get("state") not in PROVISIONED_STATES:
            asked = self.power_off(timeout / 2.0, graceful=graceful) + self.power_on(timeout / 2.0)
            return ", ".join(asked) or "nothing (the host was on and asked to be)"
        self.refuse_power_off_if_disabled()
        if not (host.get("spec") or {}).get("online"):
            raise BlockedError("%s is asked to be powered off (spec.online=false): a reboot would leave it off; "
                               "nothing was changed." % self.describe(True), bmh=self.key)
        mode = "soft" if graceful else "hard"
        self.client.patch(KIND, self.name, {"metadata": {"annotations": {
            REBOOT_ANNOTATION: json.dumps({"mode": mode})}}}, namespace=self.namespace)
        try:
            self._wait_power(False, timeout / 2.0)
        finally:
            # Never leave the hold behind, even when the host did not go off in time.
            self.client.patch(KIND, self.name, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}},
                              namespace=self.namespace)
        self._wait_power(True, timeout / 2.0)
        return "%s %s, removed once off" % (REBOOT_ANNOTATION, mode)

    def _wait_power(self, online, timeout):
        if (self._read().get("status") or {}).get("poweredOn") is online:
            return
        self.host = wait_for_object(
            self.client, KIND, self.name, lambda h: h is not None and (h.get("status") or {}).get(
                "poweredOn") is online, timeout,
            "%s to report poweredOn=%s" % (self.describe(), str(online).lower()), namespace=self.namespace,
            describe_pending=lambda: "it still reports poweredOn=%s" % (
                (self._read().get("status") or {}).get("poweredOn")))

    # -- firmware and BIOS: HostFirmwareComponents and HostFirmwareSettings, not yet taken --------

    def _unsupported(self, what, option):
        return InvalidInputError(
            "Option %s: %s through a BareMetalHost (%s) are not supported by this version of the collection, and this "
            "machine is reached through %s; nothing was changed." % (
                option, what, "HostFirmwareComponents" if option == "firmware" else "HostFirmwareSettings",
                self.describe()), option=option)

    def firmware_versions(self):
        raise self._unsupported("firmware updates", "firmware")

    def update_firmware(self, component, image_uri, timeout):
        raise self._unsupported("firmware updates", "firmware")

    def bios_attributes(self, pending=False):
        raise self._unsupported("BIOS settings", "bios")

    def set_bios(self, attributes):
        raise self._unsupported("BIOS settings", "bios")
