# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster_lock module: acquiring, renewing and releasing the cluster lock (lock.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import ClusterLock, default_holder
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import run_owner


def run(module):
    """The cluster_lock module: state present acquires or renews, absent releases."""
    params = module.params
    lock = ClusterLock(module.client, params["name"], params["namespace"])
    if params["state"] == "absent":
        result = lock.release(params.get("holder"), force=params["force"], check_mode=module.check_mode)
        tell(module, lock, result)
        return result
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
    tell(module, lock, result)
    return result


# The Events on the lock's Lease, by the action the result reports. A renewal's note names only the
# holder, so a run's renewals are one Event counted in its series.
LEASE_EVENTS = {
    "acquired": ("Normal", "LockAcquired", "Acquire"),
    "renewed": ("Normal", "LockRenewed", "Renew"),
    "taken_over": ("Warning", "LockTakenOver", "Acquire"),
    "released": ("Normal", "LockReleased", "Release"),
}


def tell(module, lock, result):
    """Record what the call did to the Lease (nothing when it did nothing, or in check mode)."""
    known = LEASE_EVENTS.get(result["action"])
    if known is None or not isinstance(lock.lease, dict):
        return
    event_type, reason, action = known
    if result["action"] == "released" and result["previous_holder"] != result["holder"]:
        # force=true by someone else than the holder: the lock was broken.
        event_type, reason, action = "Warning", "LockBroken", "Release"
    events = module.events
    events.run = result["holder"] or result["previous_holder"]
    events.record(reference(lock.lease, "Lease"), reason, action, result["msg"], event_type)
