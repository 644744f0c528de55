# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A drain's progress as the NodeMaintenance operator keeps it (total, eviction, pending,
percent), one line per change."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import now_seconds


class Progress:
    """NMO-style progress, reported as one line per change to the log and a file.

    Modules cannot stream output, so the lines go to the module's syslog/journal entry
    (``log``) and, when given, are appended to ``path`` for a role or AWX to tail.
    """

    def __init__(self, node, log=None, path=None):
        self.node = node
        self.log = log
        self.path = path
        self.last = None
        self.lines = 0

    def line(self, text):
        stamp = now_seconds()
        full = "%s node=%s %s" % (stamp, self.node, text)
        if self.log:
            try:
                self.log(full)
            except Exception:  # pylint: disable=broad-except
                pass  # progress is best effort; it must never fail a drain
        if self.path:
            try:
                with open(self.path, "a") as handle:
                    handle.write(full + "\n")
            except (IOError, OSError):
                pass
        self.lines += 1

    def update(self, total, eviction, pending, vms_left, phase="Running", vms=(), error=None):
        """One status line when anything changed: ``vms`` names the VMs (namespace/name) still
        to leave the node, ``error`` is the last refusal or failure the drain met (it stays
        until another replaces it); both are left out when empty, the error always last."""
        vms = tuple(sorted(set(vms)))
        error = " ".join(str(error).split()) if error else None
        state = (total, eviction, pending, vms_left, phase, vms, error)
        if state == self.last:
            return
        self.last = state
        text = "phase=%s pods_left=%d/%d vms_left=%d progress=%d%%" % (
            phase, pending, eviction, vms_left, percent(eviction, pending))
        if vms:
            text += " vms=%s" % ",".join(vms)
        if error:
            text += " last_error=%s" % error
        self.line(text)


def percent(eviction, pending):
    if not eviction:
        return 100
    return int(100 * (eviction - pending) / eviction)
