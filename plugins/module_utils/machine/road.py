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


def resolve(client, name, node, params, machine=None):
    """The machine of node ``name``: ``machine`` (check_options) or its BareMetalHost; InvalidInputError
    (one sentence) when the task names no road and the node names no host."""
    if machine is not None:
        return machine
    if not params.get("bmh") and not client.kind_served("BareMetalHost"):
        raise InvalidInputError("Node %s has no road to its machine: give its BMC as bmc={address, username, "
                                "password} (this cluster serves no Metal3 BareMetalHost API)." % name, option="bmc")
    if not params.get("bmh") and metal3.bmh_reference(node) is None:
        raise InvalidInputError("Node %s has no road to its machine: give its BMC as bmc={address, username, "
                                "password}, or its BareMetalHost as bmh={name, namespace} (its providerID %s names "
                                "none)." % (name, (node.get("spec") or {}).get("providerID") or "is empty"),
                                option="bmc")
    return metal3.Metal3Machine(client, metal3.find_bmh(client, name, node, params.get("bmh")))
