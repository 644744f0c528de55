# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How this collection marks what it writes: its label, annotations, taint, names and user agent.

Anything here is read back from the cluster by a later run (possibly of another release), so a
value never changes; the modules' documented defaults repeat the lock's name and namespace.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

COLLECTION = "kubevirt_ops.maintenance"

# Objects this collection creates (the cluster lock's Lease, NodeMaintenance CRs) carry this label.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = COLLECTION

# Every API request's User-Agent is this prefix and the collection's version.
USER_AGENT_PREFIX = COLLECTION + "/"

# The cluster lock: its default Lease, and what the Lease records besides the holder.
DEFAULT_LOCK_NAME = "kubevirt-ops-maintenance"
DEFAULT_LOCK_NAMESPACE = "kube-system"
LOCK_PURPOSE_ANNOTATION = "maintenance.kubevirt-ops.io/purpose"
LOCK_LAST_HOLDER_ANNOTATION = "maintenance.kubevirt-ops.io/last-holder"
# The run process a lock is bound to (machine, boot, process id and start time), as JSON.
LOCK_RUN_ANNOTATION = "maintenance.kubevirt-ops.io/run"

# What this collection added to a node when it entered maintenance with method drain.
NODE_STATE_ANNOTATION = "maintenance.kubevirt-ops.io/node-maintenance"

# A VM a drain shut down for this collection to start again (run strategy RerunOnFailure) carries this label (to
# find it) and an annotation of the same key (the node and the VMI it was shut down from, as JSON) until it is
# started: a run stopped between the two starts it on its next call for that node.
START_AGAIN_LABEL = "maintenance.kubevirt-ops.io/start-again"
START_AGAIN_ANNOTATION = START_AGAIN_LABEL

# Remediation paused for maintenance: the nodes a shared pause is held for, the node's own record,
# and how our pause requests begin.
PAUSED_FOR_ANNOTATION = "maintenance.kubevirt-ops.io/paused-for"
REMEDIATION_RECORD_ANNOTATION = "maintenance.kubevirt-ops.io/remediation-paused"
REMEDIATION_PAUSE_PREFIX = "kubevirt-ops: maintenance of node "

# The taint that marks nodes waiting for maintenance (pending_nodes).
PENDING_TAINT_KEY = "kubevirt-ops.io/maintenance-pending"

# Our NodeMaintenance CRs are named this prefix and the node's name.
NODE_MAINTENANCE_CR_PREFIX = "kubevirt-ops-"
