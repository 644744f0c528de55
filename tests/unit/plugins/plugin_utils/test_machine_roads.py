"""The machine_roads filter: the roads an inventory names for the nodes' machines (the preflight's machines.roads)."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubevirt_ops.maintenance.plugins.filter.machine_roads import machine_roads

BMC = {"address": "https://10.0.0.1/redfish/v1/Systems/1", "username": "admin", "password": "x"}
BMH = {"name": "worker-2", "namespace": "openshift-machine-api"}


def test_each_node_gets_the_road_its_host_names_and_nodes_without_one_are_left_out():
    hostvars = {"w1": {"bmc": BMC}, "worker-2": {"bmh": BMH}, "worker-3": {}, "localhost": {"bmc": {}},
                "w4": {"bmc": BMC, "bmh": BMH}}
    host_of = {"worker-1": "w1", "w1": "w1", "worker-2": "worker-2", "worker-3": "worker-3", "localhost": "localhost",
               "worker-4": "w4", "worker-9": "gone"}
    assert machine_roads(host_of, hostvars) == [
        {"name": "w1", "bmc": BMC},
        {"name": "worker-1", "bmc": BMC},
        {"name": "worker-2", "bmh": BMH},
        # Both: the preflight refuses it, as node_machine does.
        {"name": "worker-4", "bmc": BMC, "bmh": BMH},
    ]


def test_the_input_must_map_nodes_to_hosts():
    with pytest.raises(AnsibleFilterError):
        machine_roads(["worker-1"], {})
