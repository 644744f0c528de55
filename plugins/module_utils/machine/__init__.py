# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The machine behind a node, and the roads to it.

A node's machine is reached through its BMC, by one of two roads: Redfish, straight to the BMC
(``redfish.py``), or Metal3, through the node's BareMetalHost, whose operator talks to the BMC
(``metal3.py``; which host is a node's: ``decommission/power.py``). ``road.py`` picks the road of a
node. Both machines answer the same: ``describe``, ``as_dict``, ``power_state`` (On, Off),
``power_off`` and ``power_on`` (each waits until the BMC reports the state and returns what it sent).
Everything that powers a machine, reads its power state or services its firmware goes through this package.
"""
