# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py LOCK (the defaults are module_utils/common/identity.py DEFAULT_LOCK_NAME
    # and DEFAULT_LOCK_NAMESPACE, the lock the roles take).
    DOCUMENTATION = r"""
options:
  lock:
    description:
      - The cluster lock to respect, a C(coordination.k8s.io) Lease as M(kubevirt_ops.maintenance.cluster_lock)
        takes it. While a holder other than O(lock.holder) holds it and has not let it expire, the module refuses
        with one sentence naming the Lease and its holder, and changes nothing (in check mode too).
      - Left out (or null), the lock is the one the C(rolling_maintenance) and C(node_decommission) roles take,
        C(kube-system/kubevirt-ops-maintenance), so a task run by hand does not cut into a rolling maintenance
        that is under way.
      - An expired lock (its holder stopped renewing it) does not stop the module.
      - To act regardless of any lock, set O(lock.name) to an empty string.
      - Reading the Lease needs C(get) on C(leases) in its namespace.
    type: dict
    suboptions:
      name:
        description: Name of the Lease; an empty string means no lock is looked at.
        type: str
        default: kubevirt-ops-maintenance
      namespace:
        description: Namespace of the Lease.
        type: str
        default: kube-system
      holder:
        description:
          - The caller's own holder identity (RV(kubevirt_ops.maintenance.cluster_lock#module:holder) of the
            M(kubevirt_ops.maintenance.cluster_lock) task that took the lock), which does not stop the module.
            The roles pass theirs.
        type: str
"""
