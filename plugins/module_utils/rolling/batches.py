# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several nodes at once: the batches of a rolling run and KubeVirt's migration limits.

A batch is the set of nodes in maintenance at the same time: at most ``max_parallel`` nodes,
all of one failure domain (the value of the node label ``failure_domain``, such as
``topology.kubernetes.io/zone`` or a rack label). Batches follow the run's order: a batch
starts with the first node not yet placed and takes the next nodes of the same domain, in
order, until it is full.

KubeVirt itself bounds how many live migrations run: ``parallelMigrationsPerCluster`` (5 by
default) and ``parallelOutboundMigrationsPerNode`` (2 by default), from the KubeVirt CR's
``spec.configuration.migrations`` (kubevirt pkg/virt-config/config-map.go; the migration
controller, pkg/virt-controller/watch/migration/migration.go, keeps the migrations beyond them
Pending until a slot frees; ``kubevirt.migration_limits`` reads them). Each node's drain paces
its own VMs to them (drain/engine.py); the preflight says when a batch would exceed them, and uses
them to tell how much faster a batch can be.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.nodes import labels_of


def failure_domains(ordered, nodes, failure_domain=None):
    """(domains, problems): each node's value of the ``failure_domain`` label, read once for the run.

    ``nodes``: name -> Node object. Without a failure domain every node is in one (""). A node
    without the label has no known domain (None): that is a problem (it could share a rack or
    zone with any other).
    """
    problems = []
    domains = {}
    for name in ordered:
        value = labels_of(nodes.get(name) or {}).get(failure_domain) if failure_domain else ""
        if value is None:
            problems.append("Node %s has no label %s, so its failure domain is unknown; label it or leave it "
                            "out." % (name, failure_domain))
        domains[name] = value
    return domains, problems


def plan_batches(ordered, domains, max_parallel=1):
    """The run's nodes grouped into batches of at most ``max_parallel``, in the run's order, each
    of one failure domain (``domains`` from failure_domains; a node of no known domain is alone)."""
    max_parallel = max(1, int(max_parallel or 1))
    batches = []
    left = list(ordered)
    while left:
        first = left.pop(0)
        batch = [first]
        for name in list(left):
            if len(batch) >= max_parallel:
                break
            if domains[name] is not None and domains[name] == domains[first]:
                batch.append(name)
                left.remove(name)
        batches.append(batch)
    return batches


def limits_notice(batches, limits, migrating_by_node):
    """A notice when a batch's VMs would migrate more at once than KubeVirt lets run (None otherwise).

    ``migrating_by_node``: name -> VMs that live-migrate off it. KubeVirt keeps the rest Pending,
    so the batch is still safe; it just gains less from running its nodes together.
    """
    per_node, per_cluster = limits["parallel_outbound_migrations_per_node"], limits["parallel_migrations_per_cluster"]
    crowded = []
    for batch in batches:
        if len(batch) < 2:
            continue
        wanted = sum(min(per_node, migrating_by_node.get(name, 0)) for name in batch)
        if wanted > per_cluster:
            crowded.append("%s (%d at once)" % (", ".join(batch), wanted))
    if not crowded:
        return None
    return ("KubeVirt runs at most %d live migrations in the cluster and %d from each node at once "
            "(parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode); the batches %s would start more, "
            "so KubeVirt queues the rest and these batches gain less from running their nodes together."
            % (per_cluster, per_node, "; ".join(crowded)))
