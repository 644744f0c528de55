# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py BMC (the Redfish road, module_utils/machine/redfish.py).
    DOCUMENTATION = r"""
options:
  bmc:
    description:
      - The BMC of the node's machine, reached over Redfish (DMTF) with the Python library C(sushy) on the host that
        runs the module.
      - The BMC is read before anything changes, so an address it does not answer on, or credentials it refuses, fail
        the task with nothing changed.
      - Refused for a node whose C(spec.providerID) names an existing Metal3 BareMetalHost, whose operator would
        power the machine back on behind the BMC; such a machine goes through its host.
    type: dict
    suboptions:
      address:
        description:
          - The URL of the machine's Redfish System, C(https://<bmc>[:<port>]/redfish/v1/Systems/<id>) (a Metal3
            C(redfish+https://) address is taken too).
        type: str
        required: true
      username:
        description: The BMC user.
        type: str
        required: true
      password:
        description: The BMC user's password. Never shown in results, messages, Events or progress lines.
        type: str
        required: true
      ca_path:
        description: A PEM file of the CA that signed the BMC's certificate; unset, the system's CAs are trusted.
        type: path
      validate_certs:
        description: Whether the BMC's certificate is verified. Turn it off only for a BMC with a self-signed
          certificate on a trusted network.
        type: bool
        default: true
requirements:
  - sushy >= 5.0 (for O(bmc))
"""
