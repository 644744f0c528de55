# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster_lock module: acquiring, renewing and releasing the cluster lock (lock.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import ClusterLock, default_holder


def run(module):
    """The cluster_lock module: state present acquires or renews, absent releases."""
    params = module.params
    lock = ClusterLock(module.client, params["name"], params["namespace"])
    if params["state"] == "absent":
        return lock.release(params.get("holder"), force=params["force"], check_mode=module.check_mode)
    holder = params.get("holder") or default_holder()
    result = lock.acquire(holder, params["ttl"], purpose=params.get("purpose"), wait=params["wait"],
                          wait_timeout=params["wait_timeout"], force=params["force"], check_mode=module.check_mode)
    if result["action"] == "taken_over":
        module.warn(result["msg"])
    return result
