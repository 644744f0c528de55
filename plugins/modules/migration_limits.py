#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: migration_limits
short_description: Raise KubeVirt's live-migration limits for a maintenance run, and put the cluster's values back
version_added: 0.1.0
description:
  - KubeVirt runs at most C(parallelMigrationsPerCluster) live migrations at once (default 5) and at most
    C(parallelOutboundMigrationsPerNode) off one node (default 2; the HyperConverged Cluster Operator's main branch
    sets 1), each capped at C(bandwidthPerMigration) bytes per second when that is set. A node's VMs leave it no faster
    than that, whatever drives the drain. With O(state=raised) the module raises these limits for the duration of a
    maintenance run; O(state=restored) puts the cluster's own values back.
  - With the HyperConverged Cluster Operator (OpenShift Virtualization) the limits are written to the HyperConverged
    resource (C(spec.liveMigrationConfig), or C(spec.virtualization.liveMigrationConfig) in C(hco.kubevirt.io/v1)),
    because HCO owns the KubeVirt resource and puts back any direct edit of it; the module then waits until HCO has
    copied them into the KubeVirt resource, which virt-controller reads. Without HCO they are written to the KubeVirt
    resource (C(spec.configuration.migrations)).
  - Before anything is raised, the values the cluster had are recorded in the annotation
    C(kubevirt-ops.io/migration-limits) of that same resource, in the same write. Raising again (a resumed run)
    keeps the first record, so the cluster's own values are never lost, even when a run was killed.
    O(state=restored) puts back every value that still is what the run set (one that someone changed in the
    meantime is theirs and stays, with a warning) and removes the record; without a record it changes nothing.
  - Refused, with nothing changed, are values below the cluster's current ones (the module only raises; the
    cluster's values are those recorded when a killed run left raised ones), a bandwidth cap where migrations have
    none, and limits the migration network cannot carry (migrations at once off a node times the bandwidth of
    each above O(link_speed)). The caller must be allowed to patch the resource (a SelfSubjectAccessReview is asked
    first), so check mode is the preflight of a run.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  state:
    description:
      - V(raised) sets the limits given (at least one) and records the cluster's own values.
      - V(restored) puts the recorded values back and removes the record.
    type: str
    choices: [raised, restored]
    default: raised
  parallel_migrations_per_cluster:
    description:
      - Live migrations at once in the whole cluster (C(parallelMigrationsPerCluster)). At least the current value.
    type: int
  parallel_outbound_migrations_per_node:
    description:
      - Live migrations at once off one node (C(parallelOutboundMigrationsPerNode)). At least the current value.
      - KubeVirt runs no more off a node than the lesser of this and O(parallel_migrations_per_cluster).
    type: int
  bandwidth_per_migration:
    description:
      - The cap of each live migration in bytes per second, a Kubernetes quantity such as V(1Gi)
        (C(bandwidthPerMigration)). At least the current cap; refused where migrations have no cap.
    type: str
  link_speed:
    description:
      - The bandwidth of each node's migration network in bytes per second, a Kubernetes quantity (V(3Gi) is
        about 25 Gbit/s). When given, limits under which a node's migrations at once would need more than this are
        refused. Needs a bandwidth cap (O(bandwidth_per_migration), or one the cluster has).
    type: str
  run:
    description:
      - Who raises the limits, recorded with them (the rolling_maintenance role gives its lock holder).
    type: str
  wait_timeout:
    description:
      - Seconds to wait for HCO to copy changed limits into the KubeVirt resource.
    type: int
    default: 120
  name:
    description:
      - Name of the HyperConverged resource.
    type: str
    default: kubevirt-hyperconverged
  namespace:
    description:
      - Namespace of the HyperConverged resource. When omitted, C(openshift-cnv) (OpenShift) and
        C(kubevirt-hyperconverged) (upstream) are tried, then every namespace. Without HCO the cluster's KubeVirt
        resource is used.
    type: str
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Checks the values and the permission and returns what would change; nothing is written.
  diff_mode:
    support: full
    details: The diff holds the three limits as written in the resource before and after.
  idempotent:
    support: full
notes:
  - The rolling_maintenance role raises the limits given in C(rolling_maintenance_migration_limits) once it holds
    the cluster lock and puts them back at the end of the run, after a failure too; a run that was killed leaves
    its record, and the next run puts the values back (or keeps them raised for itself and puts them back at its
    end).
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance
  - name: KubeVirt live migration limits
    description: KubeVirt's documentation of the migration configuration.
    link: https://kubevirt.io/user-guide/compute/live_migration/#limitations
"""

EXAMPLES = r"""
- name: Let four VMs leave a node at once, 1Gi/s each, on a 25 Gbit/s migration network
  kubevirt_ops.maintenance.migration_limits:
    parallel_migrations_per_cluster: 8
    parallel_outbound_migrations_per_node: 4
    bandwidth_per_migration: 1Gi
    link_speed: 3Gi

- name: Put the cluster's own limits back
  kubevirt_ops.maintenance.migration_limits:
    state: restored

- name: Check that the limits can be raised, changing nothing (a preflight)
  kubevirt_ops.maintenance.migration_limits:
    parallel_outbound_migrations_per_node: 4
  check_mode: true
"""

RETURN = r"""
msg:
  description: What was done, in one sentence.
  returned: always
  type: str
  sample: "Raised the live-migration limits in HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged:
    parallel_outbound_migrations_per_node 2 -> 4."
limits:
  description: The limits as KubeVirt applies them after the task (defaults for unset counts; V(null) bandwidth means no cap).
  returned: success
  type: dict
  contains:
    parallel_migrations_per_cluster:
      description: Live migrations at once in the cluster.
      type: int
      sample: 8
    parallel_outbound_migrations_per_node:
      description: Live migrations at once off one node.
      type: int
      sample: 4
    bandwidth_per_migration:
      description: Cap of each migration in bytes per second, V(null) for none.
      type: str
      sample: 1Gi
limits_before:
  description: The limits as KubeVirt applied them before the task, in the form of RV(limits).
  returned: success
  type: dict
original:
  description:
    - The cluster's own values as written in the resource (V(null) where unset), the ones V(restored) puts back; from
      the record when a run left one. V(null) for V(restored) without a record.
  returned: success
  type: dict
  sample: {parallel_migrations_per_cluster: 5, parallel_outbound_migrations_per_node: 2, bandwidth_per_migration: null}
raised_by:
  description: The run that raised the limits (O(run), or for V(restored) the one the record names).
  returned: success
  type: str
  sample: "root@controller pid 4242 started 1732774000"
resource:
  description: The resource the limits are written to.
  returned: success
  type: dict
  contains:
    kind:
      description: V(HyperConverged) or V(KubeVirt).
      type: str
    name:
      description: Its name.
      type: str
    namespace:
      description: Its namespace.
      type: str
    path:
      description: Where in it the limits are.
      type: str
      sample: spec.liveMigrationConfig
applied:
  description: V(true) when HCO was seen copying changed limits into the KubeVirt resource; V(null) when there was nothing to wait for.
  returned: success
  type: bool
diff:
  description: The three limits as written in the resource before and after.
  returned: when diff mode is on
  type: dict
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.hco import DEFAULT_NAME
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.migration_limits import migration_limits


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            state=dict(type="str", default="raised", choices=["raised", "restored"]),
            parallel_migrations_per_cluster=dict(type="int"),
            parallel_outbound_migrations_per_node=dict(type="int"),
            bandwidth_per_migration=dict(type="str"),
            link_speed=dict(type="str"),
            run=dict(type="str"),
            wait_timeout=dict(type="int", default=120),
            name=dict(type="str", default=DEFAULT_NAME),
            namespace=dict(type="str"),
        ),
    )
    module.run(migration_limits)


if __name__ == "__main__":
    main()
