# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: maintenance_window
short_description: Whether now is inside a maintenance window, and when the next one opens
version_added: 0.1.0
description:
  - Takes a maintenance window (a dictionary with C(days), C(start), C(end) and C(timezone)) and returns whether
    the current time (or O(now)) is inside it.
  - The window opens at C(start) (HH:MM, local time in C(timezone)) on each of C(days) and closes at the next
    C(end); an C(end) at or before C(start) closes on the following day, and C(start) equal to C(end) is a
    24-hour window. C(days) defaults to every day, C(timezone) to UTC.
  - An empty window is always open.
author:
  - kubevirt_ops.maintenance contributors
options:
  _input:
    description: The window.
    type: dict
    required: true
  now:
    description: The instant to judge, as an ISO 8601 timestamp with a UTC offset. Defaults to the current time.
    type: str
"""

EXAMPLES = r"""
- name: Stop unless inside Saturday 22:00 to Sunday 06:00, Paris time
  ansible.builtin.assert:
    that: window.open
    fail_msg: "{{ window.message }}"
  vars:
    window: "{{ {'days': ['sat'], 'start': '22:00', 'end': '06:00', 'timezone': 'Europe/Paris'}
                | kubevirt_ops.maintenance.maintenance_window }}"
"""

RETURN = r"""
_value:
  description: The window's status.
  type: dict
  contains:
    open:
      description: Whether the instant is inside the window.
      type: bool
    window:
      description: The window in words, for example C(sat 22:00-06:00 Europe/Paris).
      type: str
    now:
      description: The instant judged, in the window's time zone.
      type: str
    opens_at:
      description: When the next window opens (after the current one, when open).
      type: str
    closes_at:
      description: When the current window closes (V(null) when closed).
      type: str
    message:
      description: One sentence for the operator.
      type: str
"""

import datetime

from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.window import window_status


def maintenance_window(window, now=None):
    moment = None
    if now:
        try:
            moment = datetime.datetime.fromisoformat(str(now).replace("Z", "+00:00"))
        except ValueError as exc:
            raise AnsibleFilterError("maintenance_window: 'now' (%s) is not an ISO 8601 timestamp." % now) from None
        if moment.tzinfo is None:
            raise AnsibleFilterError("maintenance_window: 'now' (%s) needs a UTC offset, for example +00:00." % now)
    try:
        return window_status(window, moment)
    except InvalidInputError as exc:
        raise AnsibleFilterError(exc.msg) from None  # the sentence says it all; a chained cause would repeat it


class FilterModule:
    def filters(self):
        return {"maintenance_window": maintenance_window}
