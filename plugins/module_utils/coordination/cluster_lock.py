# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster_lock module: acquiring, renewing and releasing the cluster lock (lock.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import ClusterLock, default_holder
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import run_owner


def run(module):
    """The cluster_lock module: state present acquires or renews, absent releases."""
    params = module.params
    lock = ClusterLock(module.client, params["name"], params["namespace"])
    if params["state"] == "absent":
        return lock.release(params.get("holder"), force=params["force"], check_mode=module.check_mode)
    holder = params.get("holder") or default_holder()
    owner = run_owner(params, consequence="the %s would be bound to a run that has already ended" % lock.description)
    result = lock.acquire(holder, params["ttl"], purpose=params.get("purpose"), wait=params["wait"],
                          wait_timeout=params["wait_timeout"], force=params["force"], check_mode=module.check_mode,
                          run=owner.record() if owner is not None else None)
    result["bound_to_run"] = owner is not None
    if params["bind_to_run"] and owner is None:
        module.warn("bind_to_run needs the module to run on the controller (connection local, for example "
                    "delegate_to: localhost): the %s is held without a run, so only its TTL frees it if this run "
                    "is interrupted." % lock.description)
    if result["action"] == "taken_over" and not result["previous_run_ended"]:
        module.warn(result["msg"])
    return result
