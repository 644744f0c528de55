# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process of the run a drain belongs to (the ``owner_pid`` option), and whether it is still there.

A drain started as an async job (``async`` with ``poll: 0``, the roles' batches) is daemonized by
Ansible's async_wrapper: it outlives the ansible-playbook that started it, so a cancelled AWX job
or a killed playbook would leave it evicting pods unattended until its timeout. A drain given its
run's process stops once that process is gone. The process is known by its id and, where
``/proc`` tells it, its start time, so a process id taken again by another process does not keep
the drain going; a process that has exited and not been reaped yet (a zombie) is gone too.

The same process, written down (``RunOwner.record``: machine, boot, process id, start time), binds
the cluster lock to a run: a run on the same machine, started after that process has ended (a
playbook interrupted with Ctrl-C or killed), may take the lock over at once. A record of another
machine, or of this one before its last boot, cannot be judged here and never counts as ended.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import socket

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError


def _stat(pid):
    """(state, start time) of the process from /proc/<pid>/stat (fields 3 and 22; the start time in
    clock ticks since boot), or None when /proc does not say (no such process, or no /proc)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            stat = handle.read()
    except (IOError, OSError):
        return None
    # Field 2, the command, is in parentheses and may hold spaces; the fields after it start at 3.
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def boot_id():
    """The kernel's id of this boot of the machine, None where /proc does not tell it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip() or None
    except (IOError, OSError):
        return None


def process_exists(pid):
    """Whether a process of this id is running (another user's included)."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno != errno.ESRCH  # EPERM: another user's live process
    return True


class RunOwner:
    """The owner process of a drain, identified when the module starts."""

    def __init__(self, pid, start_time=None):
        self.pid = pid
        if start_time is None:
            stat = _stat(pid)
            start_time = stat[1] if stat else None
        self.start_time = start_time

    def record(self):
        """The process written down, for a record kept in the cluster (the lock's run)."""
        return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": self.pid, "start_time": self.start_time}

    @classmethod
    def recorded_here(cls, record):
        """The RunOwner of a record written on this machine since its last boot, else None (a record
        of another machine, or one without the boot id or start time that tell a process apart)."""
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or not record.get("start_time"):
            return None
        here = boot_id()
        if here is None or record.get("boot_id") != here or record.get("host") != socket.gethostname():
            return None
        return cls(record["pid"], start_time=str(record["start_time"]))

    def gone(self):
        if not process_exists(self.pid):
            return True
        stat = _stat(self.pid)
        if stat is None:
            return False  # no /proc to tell more: the process id is there
        state, start_time = stat
        return state == "Z" or (self.start_time is not None and start_time != self.start_time)

    def ended(self, node, stopped):
        """The error of a module that stops because its run ended; ``stopped`` says what it stopped."""
        return MaintenanceError("The run that started the maintenance of node %s (process %d) has ended, so %s. Run "
                                "again to go on, or leave maintenance with state=absent." % (node, self.pid, stopped),
                                node=node)


def run_owner(params, node=None, consequence=None):
    """The RunOwner of ``owner_pid`` (None when not given); a process that is not there is refused
    before anything changes. ``consequence`` says what would follow from it (by default: the
    maintenance of ``node`` would stop at once)."""
    pid = params.get("owner_pid")
    if not pid:
        return None
    if pid < 0 or not process_exists(pid):
        consequence = consequence or "the maintenance of node %s would stop as soon as it started" % node
        details = {"node": node} if node else {}
        raise MaintenanceError("owner_pid %d is not a running process on the host that runs the module, so %s; leave "
                               "owner_pid out (the module's action plugin sets it when the module runs on the "
                               "controller)." % (pid, consequence), **details)
    return RunOwner(pid)
