# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py RUN (the run of the Events, k8s/events.py).
    DOCUMENTATION = r"""
options:
  run:
    description:
      - The run this task belongs to, recorded in the annotation C(maintenance.kubevirt-ops.io/run) of the Events
        it writes, so that one query finds a run's Events. The roles pass their cluster lock's holder.
    type: str
"""
