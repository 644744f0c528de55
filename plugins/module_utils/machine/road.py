# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which road leads to a node's machine: its BMC when the task gives one (``bmc``), else its BareMetalHost
(the ``bmh`` option, or the one the node's providerID names)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import metal3, redfish


def check_options(params):
    """The road options agree (before anything is read): the RedfishMachine of ``bmc``, or None."""
    if params.get("bmc") and params.get("bmh"):
        raise InvalidInputError("Options bmc and bmh both name the machine's road; give one: bmc (its BMC, Redfish) "
                                "or bmh (its Metal3 BareMetalHost).", option="bmc")
    return redfish.RedfishMachine(params["bmc"]) if params.get("bmc") else None


def refuse_bmc_of_a_managed_host(client, name, node, machine):
    """InvalidInputError when the task would power the machine straight through its BMC although the node's
    providerID names a BareMetalHost: baremetal-operator powers a host back on while its ``spec.online`` is true
    (``manageHostPower``), so the BMC road would be undone within a minute; such a machine goes through its host."""
    reference = metal3.bmh_reference(node) if machine is not None else None
    # A legacy uid reference (namespace None) is found only by listing every host: left to the user.
    if reference is None or reference[0] is None or not client.kind_served("BareMetalHost"):
        return
    namespace, host_name, how = reference
    if client.get_or_none("BareMetalHost", host_name, namespace) is not None:
        raise InvalidInputError(
            "Node %s's machine is managed by BareMetalHost %s/%s (named by %s), whose operator would power it back on "
            "behind the BMC; leave out bmc to go through the host." % (name, namespace, host_name, how),
            option="bmc")


def resolve(client, name, node, params, machine=None):
    """The machine of node ``name``: ``machine`` (check_options) or its BareMetalHost; InvalidInputError
    (one sentence) when the task names no road and the node names no host."""
    if machine is not None:
        refuse_bmc_of_a_managed_host(client, name, node, machine)
        return machine
    if not params.get("bmh") and not client.kind_served("BareMetalHost"):
        raise InvalidInputError("Node %s has no road to its machine: give its BMC as bmc={address, username, "
                                "password} (this cluster serves no Metal3 BareMetalHost API)." % name, option="bmc")
    if not params.get("bmh") and metal3.bmh_reference(node) is None:
        provider_id = (node.get("spec") or {}).get("providerID")
        raise InvalidInputError("Node %s has no road to its machine: give its BMC as bmc={address, username, "
                                "password}, or its BareMetalHost as bmh={name, namespace} (%s)." % (
                                    name, "its providerID %s names none" % provider_id if provider_id
                                    else "it has no providerID"), option="bmc")
    return metal3.Metal3Machine(client, metal3.find_bmh(client, name, node, params.get("bmh")))
