# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What was done to a machine (node_machine's result ``machine``), in words: for Events, progress lines and
the report."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def text(machine):
    """'bios 1.0.0 -> 1.1.0, BIOS ProcTurboMode=Disabled, restarted (new boot)'."""
    before = machine.get("firmware_before") or {}
    parts = ["%s %s -> %s" % (name, before.get(name), version)
             for name, version in sorted((machine.get("firmware_after") or {}).items()) if before.get(name) != version]
    if machine.get("bios_changed"):
        parts.append("BIOS %s" % ", ".join("%s=%s" % (key, (value or {}).get("after"))
                                           for key, value in sorted(machine["bios_changed"].items())))
    if machine.get("boot_id_after") and machine.get("boot_id_after") != machine.get("boot_id_before"):
        parts.append("restarted (new boot)")
    return ", ".join(parts) or "nothing to do"
