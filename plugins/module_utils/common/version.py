# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's version, sent in the User-Agent of every API request."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

COLLECTION_VERSION = "0.1.0"
