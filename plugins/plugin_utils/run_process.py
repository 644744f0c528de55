# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's process as an action plugin sees it: the ansible-playbook process (ansible-runner's
under AWX / AAP) that forked the worker running the task. A module given it (``owner_pid``) can
tell when the run has ended: a drain stops, a lock bound to the run may be taken over."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import multiprocessing
import os


def run_pid(action):
    """The run's process id for a task of ``action`` (an ActionBase) whose module runs on the
    controller (connection local), else None: a managed host cannot see the controller's processes.

    The process that forked the worker, as the worker knew it when it started (multiprocessing's
    parent process), not the worker's parent now: once the run's process is killed (an AWX job
    cancelled: SIGKILL to ansible-playbook's process group, the workers in sessions of their own
    living on), the worker's parent becomes init or a subreaper, which never ends, and a lock or a
    drain bound to it would outlive the run."""
    if getattr(action._connection, "transport", None) != "local":  # pylint: disable=protected-access
        return None
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None else os.getppid()
