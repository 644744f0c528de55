# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs the cluster_lock module, giving it the run's process when the task binds the lock to its
run (bind_to_run) and the module runs on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_process import run_pid


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        args = dict(self._task.args)
        if args.get("owner_pid") is None and boolean(args.get("bind_to_run", False), strict=False):
            pid = run_pid(self)
            if pid is not None:
                args["owner_pid"] = pid
        result.update(self._execute_module(module_args=args, task_vars=task_vars))
        return result
