# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs the node_maintenance module and prints its drain's progress while it runs (see
plugins/plugin_utils/drain_progress.py for how and why)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.drain_progress import DrainProgressAction


class ActionModule(DrainProgressAction):
    pass
