"""Several nodes at once: batches by failure domain, capacity for a whole batch, migration limits."""

import pytest

from drain_cluster import cluster, launcher, node, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import batches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import preflight as rolling
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

ZONE = "topology.kubernetes.io/zone"


def zoned(**zones):
    return dict((name.replace("_", "-"), node(name.replace("_", "-"), labels={ZONE: zone} if zone else None))
                for name, zone in zones.items())


def test_batches_keep_the_order_and_one_failure_domain():
    nodes = zoned(w_1="a", w_2="b", w_3="a", w_4="b", w_5="a")
    order = ["w-1", "w-2", "w-3", "w-4", "w-5"]
    domains, problems = batches.failure_domains(order, nodes, ZONE)
    assert (domains, problems) == ({"w-1": "a", "w-2": "b", "w-3": "a", "w-4": "b", "w-5": "a"}, [])
    assert batches.plan_batches(order, domains, 2) == [["w-1", "w-3"], ["w-2", "w-4"], ["w-5"]]
    assert batches.plan_batches(order, domains, 3) == [["w-1", "w-3", "w-5"], ["w-2", "w-4"]]
    # Without a failure domain any nodes share a batch; max_parallel 1 is one node at a time.
    anywhere, none = batches.failure_domains(order, nodes)
    assert none == [] and set(anywhere.values()) == {""}
    assert batches.plan_batches(order, anywhere, 2) == [["w-1", "w-2"], ["w-3", "w-4"], ["w-5"]]
    assert batches.plan_batches(order, domains, 1) == [[n] for n in order]


def test_a_node_without_the_domain_label_is_a_problem_and_alone():
    nodes = zoned(w_1="a", w_2=None, w_3="a")
    domains, problems = batches.failure_domains(["w-1", "w-2", "w-3"], nodes, ZONE)
    assert domains["w-2"] is None
    assert batches.plan_batches(["w-1", "w-2", "w-3"], domains, 2) == [["w-1", "w-3"], ["w-2"]]
    assert problems == ["Node w-2 has no label topology.kubernetes.io/zone, so its failure domain is unknown; "
                        "label it or leave it out."]


def test_migration_limits_from_the_kubevirt_cr_or_kubevirts_defaults():
    assert kubevirt_settings.migration_limits(None) == {"parallel_migrations_per_cluster": 5,
                                                        "parallel_outbound_migrations_per_node": 2}
    cr = {"spec": {"configuration": {"migrations": {"parallelMigrationsPerCluster": 2,
                                                    "parallelOutboundMigrationsPerNode": 1}}}}
    assert kubevirt_settings.migration_limits(cr) == {"parallel_migrations_per_cluster": 2,
                                                      "parallel_outbound_migrations_per_node": 1}
    assert kubevirt_settings.migration_lanes(cr) == 1 and kubevirt_settings.migration_lanes(None) == 2
    limits = kubevirt_settings.migration_limits(cr)
    assert batches.limits_notice([["a", "b"]], limits, {"a": 4, "b": 1}) is None
    assert "a, b, c (3 at once)" in batches.limits_notice([["a", "b", "c"]], limits, {"a": 4, "b": 1, "c": 2})


def add_vm(server, name, node_name, memory="256Mi"):
    server.add("VirtualMachine", vm(name))
    obj = server.add("VirtualMachineInstance", vmi(name, node_name=node_name, eviction="LiveMigrate"))
    server.add("Pod", launcher(obj, cpu="100m", memory=memory))


def test_preflight_plans_a_batch_with_all_its_nodes_out():
    client, server = cluster(workers=4)
    add_vm(server, "a", "worker-1")
    add_vm(server, "b", "worker-1")
    params = {"nodes": ["worker-1", "worker-2", "worker-3", "worker-4"], "non_migratable": "fail"}
    one = rolling.preflight(client, dict(params))
    assert one["batches"] == [["worker-1"], ["worker-2"], ["worker-3"], ["worker-4"]] and one["max_parallel"] == 1
    # One at a time, worker-1's VMs go to worker-2 (most room, first by name).
    assert set(v["target"] for v in one["details"][0]["plan"]["vms"]) == {"worker-2"}
    two = rolling.preflight(client, dict(params, max_parallel=2))
    assert two["batches"] == [["worker-1", "worker-2"], ["worker-3", "worker-4"]]
    # With worker-2 out at the same time, they go to the other batch's nodes.
    assert set(v["target"] for v in two["details"][0]["plan"]["vms"]) <= {"worker-3", "worker-4"}
    assert two["migration_limits"] == {"parallel_migrations_per_cluster": 5,
                                       "parallel_outbound_migrations_per_node": 2}


def test_preflight_refuses_a_batch_the_other_nodes_cannot_take():
    client, server = cluster(workers=3, memory="8Gi")
    add_vm(server, "vm-0", "worker-1", memory="5Gi")
    add_vm(server, "vm-1", "worker-2", memory="5Gi")
    params = {"nodes": ["worker-1", "worker-2", "worker-3"], "non_migratable": "fail", "fail_on_problems": False}
    assert rolling.preflight(client, dict(params))["problems"] == []
    problems = rolling.preflight(client, dict(params, max_parallel=2))["problems"]
    assert problems and all("with worker-1, worker-2 in maintenance at the same time" in p for p in problems)
    assert any("vm-1" in p and "worker-3" in p for p in problems)
    with pytest.raises(InvalidInputError, match="max_parallel must be at least 1, got 0"):
        rolling.preflight(client, dict(params, max_parallel=0))
