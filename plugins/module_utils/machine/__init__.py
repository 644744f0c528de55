# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The machine behind a node, and the roads to it.

A node's machine is reached through its BMC, by one of two roads: Redfish, straight to the BMC
(``redfish.py``), or Metal3, through the node's BareMetalHost, whose operator talks to the BMC
(``decommission/power.py`` for now). Everything that powers a machine, reads its power state or
services its firmware goes through this package.
"""
