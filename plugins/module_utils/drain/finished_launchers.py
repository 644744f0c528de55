# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The finished virt-launcher pods a node keeps once its VMs have left it.

A live migration leaves its source virt-launcher pod on the node, Succeeded, until KubeVirt deletes it with its
VMI. The drain engine leaves such pods alone (drain/pods.py, FINISHED_LAUNCHER), but the node-maintenance
operator does not: its drain (k8s.io/kubectl's drain library, RunNodeDrain in
controllers/nodemaintenance_controller.go of medik8s/node-maintenance-operator) evicts every pod of the node,
finished ones included, and polls once a second until each is deleted before it reports Succeeded. When
node_maintenance creates the NodeMaintenance after evacuating the node's VMs itself, it first evicts those pods
and follows them by a watch, at the moment the operator would, so that the operator finds nothing left to wait
for. The API server lets a finished pod go whatever the budgets say, and KubeVirt's eviction webhook only guards
the pod its VMI runs in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.engine import WORKERS
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pod_eviction import evict_pod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import is_failed, is_finished
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, Informer, wait_until

# The longest wait for the evicted pods to be deleted: the operator removes whatever is left after it.
WAIT_AT_MOST = 10.0


def remove_finished_launchers(client, node, options, deadline):
    """Evict the Succeeded virt-launcher pods of ``node`` (with the drain ``options``' grace period) and wait until
    they are gone, for at most WAIT_AT_MOST seconds of ``deadline``.

    Only a speed-up of what the operator does next: a pod the API server refuses to evict (no permission in its
    namespace, say) or that is slow to go is left to the operator, never an error."""
    informer = Informer(client, "Pod", field_selector="spec.nodeName=%s" % node, label_selector=kubevirt.LAUNCHER_LABEL)
    wait = Deadline(max(0.0, min(WAIT_AT_MOST, deadline.remaining())))
    try:
        informer.start()
        if not informer.wait_synced(wait):
            return
        finished = [p for p in informer.items()
                    if is_finished(p) and not is_failed(p) and not p["metadata"].get("deletionTimestamp")]
        if not finished:
            return

        def evict(pod):
            meta = pod["metadata"]
            return (meta.get("namespace"), meta["name"]), evict_pod(client, meta["name"], meta.get("namespace"),
                                                                    options)[0]

        with ThreadPoolExecutor(max_workers=min(WORKERS, len(finished))) as pool:
            going = [key for key, outcome in pool.map(evict, finished) if outcome in ("granted", "gone")]

        def gone():
            return all(informer.get(name, namespace) is None for namespace, name in going)

        try:
            wait_until(gone, [informer], wait.remaining(), "the finished virt-launcher pods of node %s" % node,
                       deadline=wait)
        except MaintenanceError:
            pass  # a timeout, or the watch failing: the operator removes what is left
    finally:
        informer.stop()
