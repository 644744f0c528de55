# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The continue token of a raw (undecoded) list page, so the next page can be asked for while this one is
decoded: the client's pager (client.py) and the benchmark's raw-list reference (bench/kube.py) read it alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# In the ListMeta before the items of a built-in kind's list, and after them in a custom resource's (the API
# server writes those with their keys sorted: apiVersion, items, kind, metadata), where only the list's own flat
# metadata closes the page.
_CONTINUE_FIRST = re.compile(br'^\{[^\[]*?"metadata":\{[^{}]*?"continue":"([^"\\]*)"')
_CONTINUE_LAST = re.compile(br'"metadata":\{[^{}]*?"continue":"([^"\\]*)"[^{}]*\}\}\s*$')
# How far from the end of a page a custom resource list's ListMeta can start.
_TAIL_BYTES = 4096


def continue_token(raw):
    """The continue token of a raw list page (bytes), None on its last page (or where it is not found undecoded:
    another server's formatting; the caller then takes it from the decoded page)."""
    match = _CONTINUE_FIRST.match(raw) or _CONTINUE_LAST.search(raw[-_TAIL_BYTES:])
    return match.group(1).decode("ascii") if match and match.group(1) else None
