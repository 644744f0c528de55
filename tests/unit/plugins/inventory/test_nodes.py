"""The nodes inventory plugin against an in-memory API server: hosts, groups, vars, constructed, cache."""

import json

import pytest

from fake_apiserver import FakeApiServer, fake_client

from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader

from ansible_collections.kubevirt_ops.maintenance.plugins.inventory import nodes as nodes_plugin


def node(name, ip, control_plane=False, ready=True, cordoned=False, taints=None, annotations=None, labels=None):
    role = "node-role.kubernetes.io/control-plane" if control_plane else "node-role.kubernetes.io/worker"
    return {
        "metadata": {"name": name, "labels": dict({role: "", "kubernetes.io/hostname": name,
                                                   "topology.kubernetes.io/zone": "rack-%s" % name[-1]},
                                                  **(labels or {})),
                     "annotations": annotations or {}},
        "spec": dict({"unschedulable": True} if cordoned else {}, taints=taints or []),
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {"kubeletVersion": "v1.31.0", "osImage": "RHCOS"},
        },
    }


def vmi(name, node_name, phase="Running", ns="prod"):
    return {"metadata": {"name": name, "namespace": ns, "labels": {"kubevirt.io/nodeName": node_name}},
            "status": {"phase": phase, "nodeName": node_name}}


@pytest.fixture
def server():
    api = FakeApiServer()
    api.add("Node", node("cp-1", "10.0.0.1", control_plane=True,
                         taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))
    api.add("Node", node("worker-1", "10.0.1.1"))
    api.add("Node", node("worker-2", "10.0.1.2", cordoned=True,
                         taints=[{"key": "medik8s.io/drain", "effect": "NoSchedule"}],
                         annotations={"maintenance.kubevirt-ops.io/node-maintenance": json.dumps({"phase": "Succeeded"})}))
    api.add("Node", node("worker-3", "10.0.1.3", ready=False, annotations={"kwok.x-k8s.io/node": "fake"}))
    api.add("Node", node("worker-4", "10.0.1.4", cordoned=True))
    api.add("NodeMaintenance", {"metadata": {"name": "nm-worker-4"}, "spec": {"nodeName": "worker-4"},
                                "status": {"phase": "Running"}})
    api.add("VirtualMachineInstance", vmi("db-1", "worker-1"))
    api.add("VirtualMachineInstance", vmi("web-1", "worker-1"))
    api.add("VirtualMachineInstance", vmi("old", "worker-1", phase="Succeeded"))
    api.add("VirtualMachineInstance", vmi("web-2", "worker-3"))
    return api


@pytest.fixture
def plugin(server, monkeypatch):
    # What the plugin loader does: register the documented options, then name the instance.
    name = nodes_plugin.__name__
    inventory_loader._load_config_defs(name, nodes_plugin, nodes_plugin.__file__)
    instance = nodes_plugin.InventoryModule()
    instance._load_name = name
    instance._redirected_names = []  # set by the loader; ansible-core < 2.19 has no class default
    monkeypatch.setattr(instance, "_client", lambda: fake_client(server)[0])
    return instance


def parse(plugin, tmp_path, config, cache=True):
    path = tmp_path / "cluster.nodes.yml"
    path.write_text(json.dumps(dict({"plugin": "kubevirt_ops.maintenance.nodes"}, **config)))
    inventory = InventoryData()
    plugin.parse(inventory, DataLoader(), str(path), cache=cache)
    return inventory


def members(inventory, group):
    return sorted(h.name for h in inventory.groups[group].get_hosts())


def test_hosts_groups_and_addresses(plugin, tmp_path):
    inventory = parse(plugin, tmp_path, {})
    assert sorted(inventory.hosts) == ["cp-1", "worker-1", "worker-2", "worker-3", "worker-4"]
    assert members(inventory, "control_plane") == ["cp-1"]
    assert members(inventory, "workers") == ["worker-1", "worker-2", "worker-3", "worker-4"]
    assert members(inventory, "schedulable") == ["cp-1", "worker-1"]
    assert members(inventory, "in_maintenance") == ["worker-2", "worker-4"]
    assert inventory.get_host("worker-1").vars["ansible_host"] == "10.0.1.1"


def test_host_vars(plugin, tmp_path):
    inventory = parse(plugin, tmp_path, {})
    w1 = inventory.get_host("worker-1").vars
    assert w1["node_ready"] and w1["node_schedulable"] and not w1["node_in_maintenance"]
    assert w1["node_vmi_count"] == 2 and w1["node_vmis"] == ["prod/db-1", "prod/web-1"]
    assert w1["node_roles"] == ["worker"] and w1["node_labels"]["kubernetes.io/hostname"] == "worker-1"
    assert w1["node_kubelet_version"] == "v1.31.0" and not w1["node_simulated"]
    w2 = inventory.get_host("worker-2").vars
    assert w2["node_in_maintenance"] and w2["node_maintenance_phase"] == "Succeeded" and not w2["node_schedulable"]
    assert inventory.get_host("worker-4").vars["node_maintenance_phase"] == "Running"
    w3 = inventory.get_host("worker-3").vars
    assert not w3["node_ready"] and w3["node_simulated"] and w3["node_vmi_count"] == 1


def test_no_vmi_vars_without_kubevirt(plugin, tmp_path, server):
    server.served.discard("VirtualMachineInstance")
    inventory = parse(plugin, tmp_path, {})
    assert "node_vmi_count" not in inventory.get_host("worker-1").vars


def test_label_selector_and_hostname_by_ip(plugin, tmp_path):
    inventory = parse(plugin, tmp_path, {"label_selector": "node-role.kubernetes.io/worker", "hostname": "internal_ip"})
    assert sorted(inventory.hosts) == ["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"]
    assert inventory.get_host("10.0.1.1").vars["node_name"] == "worker-1"


def test_constructed_compose_groups_keyed_groups(plugin, tmp_path):
    inventory = parse(plugin, tmp_path, {
        "compose": {"bmc": "'bmc-' ~ node_name"},
        "groups": {"busy": "node_vmi_count | default(0) > 1"},
        "keyed_groups": [{"key": "node_labels['topology.kubernetes.io/zone']", "prefix": "zone"}],
    })
    assert inventory.get_host("worker-2").vars["bmc"] == "bmc-worker-2"
    assert members(inventory, "busy") == ["worker-1"]
    assert members(inventory, "zone_rack_1") == ["cp-1", "worker-1"]


def test_cache_serves_the_second_parse_without_the_api(plugin, tmp_path, server, monkeypatch):
    import ansible.plugins.inventory

    store = {}
    monkeypatch.setattr(ansible.plugins.inventory, "get_cache_plugin", lambda *_a, **_k: store)
    config = {"cache": True, "cache_plugin": "ansible.builtin.memory", "cache_timeout": 600}
    parse(plugin, tmp_path, config, cache=False)  # like --flush-cache: fetch and store
    calls = len(server.requests)
    inventory = parse(plugin, tmp_path, config, cache=True)
    assert len(server.requests) == calls
    assert members(inventory, "in_maintenance") == ["worker-2", "worker-4"]
    assert json.loads(json.dumps(list(store.values())[0]))  # what is cached is plain data


def test_api_failure_is_one_clear_parser_error(plugin, tmp_path, server):
    from ansible.errors import AnsibleParserError

    server.fail_next[("GET", "Node")] = 403
    with pytest.raises(AnsibleParserError, match="kubevirt_ops.maintenance.nodes: Cannot list Nodes: permission denied"):
        parse(plugin, tmp_path, {})


def test_only_nodes_files_are_accepted(plugin, tmp_path):
    other = tmp_path / "hosts.yml"
    other.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    good = tmp_path / "lab.nodes.yml"
    good.write_text("plugin: kubevirt_ops.maintenance.nodes\n")
    assert not plugin.verify_file(str(other))
    assert plugin.verify_file(str(good))
