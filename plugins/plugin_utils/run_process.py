# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's process as an action plugin sees it: the ansible-playbook process (ansible-runner's
under AWX / AAP) that forked the worker running the task. A module given it (``owner_pid``) can
tell when the run has ended: a drain stops, a lock bound to the run may be taken over."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def run_pid(action):
    """The run's process id for a task of ``action`` (an ActionBase) whose module runs on the
    controller (connection local), else None: a managed host cannot see the controller's processes."""
    if getattr(action._connection, "transport", None) != "local":  # pylint: disable=protected-access
        return None
    return os.getppid()
