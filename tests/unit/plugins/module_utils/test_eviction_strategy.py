"""Eviction strategies of VMs (selection, non-migratable filter, restarts) and of the cluster."""

import pytest

from kubevirt_objects import SELECTION_DEFAULTS, FakeModule, VmController, cluster, hyperconverged, kubevirt, pvc, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import eviction_strategy
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

DEFAULTS = dict(SELECTION_DEFAULTS, scope="vm", strategy=None, state="present", only_non_migratable=False,
                restart=False)


def module(client, check=False, diff=False, **params):
    return FakeModule(client, params, DEFAULTS, check_mode=check, diff_mode=diff)


def versions(server, kind="VirtualMachine"):
    return dict(((ns, name), o["metadata"]["resourceVersion"])
                for (k, ns, name), o in server.objects.items() if k == kind)


@pytest.fixture
def fleet():
    client, server = cluster(namespaces=("ns1", "ns2", "ns3"))
    server.add("KubeVirt", kubevirt("LiveMigrate"))
    for i in range(30):
        ns = "ns%d" % (1 + i % 3)
        labels = {"tier": "db" if i % 2 else "web"}
        server.add("VirtualMachine", vm("vm%02d" % i, ns, run_strategy="Halted", labels=labels,
                                        eviction="LiveMigrate" if i % 5 == 0 else None))
    return client, server


def test_selector_across_namespaces_changes_exactly_the_matching_vms(fleet):
    client, server = fleet
    result = eviction_strategy.run(module(client, all_namespaces=True, label_selector="tier=db",
                                          strategy="LiveMigrateIfPossible"))
    assert result["changed"] is True
    assert len(result["vms"]) == 15 and all(v["changed"] for v in result["vms"])
    for (ns, name), obj in ((k[1:], o) for k, o in server.objects.items() if k[0] == "VirtualMachine"):
        own = obj["spec"]["template"]["spec"].get("evictionStrategy")
        if obj["metadata"]["labels"]["tier"] == "db":
            assert own == "LiveMigrateIfPossible"
        else:
            assert own in (None, "LiveMigrate")
    assert result["cluster"] == {"before": "LiveMigrate", "after": "LiveMigrate"}
    rvs = versions(server)
    again = eviction_strategy.run(module(client, all_namespaces=True, label_selector="tier=db",
                                         strategy="LiveMigrateIfPossible"))
    assert again["changed"] is False and versions(server) == rvs


def test_check_mode_and_diff(fleet):
    client, server = fleet
    rvs = versions(server)
    result = eviction_strategy.run(module(client, check=True, diff=True, namespace="ns1", strategy="None"))
    assert versions(server) == rvs and server.writes() == []
    assert result["changed"] and len(result["vms"]) == 10
    assert result["diff"]["before"]["ns1/vm00"] == {"evictionStrategy": "LiveMigrate"}
    assert result["diff"]["after"]["ns1/vm00"] == {"evictionStrategy": "None"}
    assert result["vms"][0] == {"namespace": "ns1", "name": "vm00", "before": "LiveMigrate", "after": "None",
                                "effective": "None", "changed": True, "restarted": False}


def test_absent_removes_only_the_own_value(fleet):
    client, server = fleet
    result = eviction_strategy.run(module(client, all_namespaces=True, state="absent"))
    changed = sorted(v["name"] for v in result["vms"] if v["changed"])
    assert changed == ["vm00", "vm05", "vm10", "vm15", "vm20", "vm25"]
    assert all(v["effective"] == "LiveMigrate" for v in result["vms"])


def masquerade_by_default(cr):
    """The KubeVirt resource as HCO writes it: masquerade on the pod network by default."""
    cr["spec"]["configuration"]["network"] = {"defaultNetworkInterface": "masquerade"}
    cr["status"] = {"observedKubeVirtVersion": "v1.7.0"}
    return cr


def test_only_non_migratable_picks_rwo_disks_and_vmis_reporting_not_migratable():
    client, server = cluster()
    server.add("KubeVirt", masquerade_by_default(kubevirt("LiveMigrate")))
    server.add("PersistentVolumeClaim", pvc("rwo", modes=["ReadWriteOnce"]))
    server.add("PersistentVolumeClaim", pvc("rwx", modes=["ReadWriteMany"]))
    server.add("VirtualMachine", vm("stopped-rwo", run_strategy="Halted", claims=["rwo"]))
    server.add("VirtualMachine", vm("stopped-rwx", run_strategy="Halted", claims=["rwx"]))
    server.add("VirtualMachine", vm("stopped-dv-rwo", run_strategy="Halted", data_volumes=["rwo"]))
    server.add("VirtualMachine", vm("stopped-nodisk", run_strategy="Halted"))
    server.add("VirtualMachine", vm("stopped-missing", run_strategy="Halted", claims=["gone"]))
    server.add("VirtualMachine", vm("running-bad", claims=["rwx"]))
    server.add("VirtualMachineInstance", vmi("running-bad", migratable=False))
    server.add("VirtualMachine", vm("running-ok", claims=["rwx"]))
    server.add("VirtualMachineInstance", vmi("running-ok", migratable=True))
    mod = module(client, namespace="ns1", only_non_migratable=True, strategy="LiveMigrateIfPossible")
    result = eviction_strategy.run(mod)
    assert [v["name"] for v in result["vms"]] == ["running-bad", "stopped-dv-rwo", "stopped-rwo"]
    assert mod.warnings == ["Left out 1 VirtualMachines whose migratability cannot be told (a PVC they use does "
                            "not exist): ns1/stopped-missing."]


def test_only_non_migratable_on_plain_kubevirt_counts_the_default_bridge_on_the_pod_network():
    """Plain KubeVirt attaches a VM without interfaces to the pod network with bridge, which
    virt-handler reports InterfaceNotLiveMigratable (pkg/network/vmispec VerifyVMIMigratable)."""
    client, server = cluster()
    server.add("KubeVirt", kubevirt("LiveMigrate"))
    server.add("VirtualMachine", vm("stopped-nodisk", run_strategy="Halted"))
    mod = module(client, namespace="ns1", only_non_migratable=True, strategy="LiveMigrateIfPossible")
    assert [v["name"] for v in eviction_strategy.run(mod)["vms"]] == ["stopped-nodisk"]
    server.add("KubeVirt", masquerade_by_default(kubevirt("LiveMigrate")))
    mod = module(client, namespace="ns1", only_non_migratable=True, strategy="LiveMigrateIfPossible")
    assert eviction_strategy.run(mod)["vms"] == []


def test_restart_only_running_vmis_whose_effective_strategy_changes():
    client, server = cluster()
    server.add("KubeVirt", kubevirt("LiveMigrate"))
    server.add("VirtualMachine", vm("changes", eviction="LiveMigrate"))
    server.add("VirtualMachineInstance", vmi("changes", eviction="LiveMigrate"))
    server.add("VirtualMachine", vm("stale-vmi", eviction="None"))  # set earlier without restart
    server.add("VirtualMachineInstance", vmi("stale-vmi"))  # effective: cluster LiveMigrate
    server.add("VirtualMachine", vm("same", eviction=None))
    server.add("VirtualMachineInstance", vmi("same", eviction="None"))
    server.add("VirtualMachine", vm("stopped", run_strategy="Halted"))
    server.add("VirtualMachine", vm("once", run_strategy="Once"))
    server.add("VirtualMachineInstance", vmi("once"))
    old_uids = dict((n, server.get("VirtualMachineInstance", n, "ns1")["metadata"]["uid"])
                    for n in ("changes", "stale-vmi", "same", "once"))
    mod = module(client, namespace="ns1", strategy="None", restart=True, wait_timeout=20)
    with VmController(server):
        result = eviction_strategy.run(mod)
    restarted = dict((v["name"], v["restarted"]) for v in result["vms"])
    assert restarted == {"changes": True, "once": False, "same": False, "stale-vmi": True, "stopped": False}
    for name in ("changes", "stale-vmi"):
        assert server.get("VirtualMachineInstance", name, "ns1")["metadata"]["uid"] != old_uids[name]
    assert server.get("VirtualMachineInstance", "same", "ns1")["metadata"]["uid"] == old_uids["same"]
    assert "ns1/once (Once)" in mod.warnings[0]


def test_cluster_scope_edits_hco_spec():
    client, server = cluster()
    server.add("HyperConverged", hyperconverged(spec={"evictionStrategy": "LiveMigrate"}))
    server.add("KubeVirt", kubevirt("LiveMigrate"))
    result = eviction_strategy.run(module(client, diff=True, scope="cluster", strategy="None", wait=False))
    assert result["cluster"] == {"before": "LiveMigrate", "after": "None",
                                 "resource": "HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged"}
    hco = server.get("HyperConverged", "kubevirt-hyperconverged", "kubevirt-hyperconverged")
    assert hco["spec"]["evictionStrategy"] == "None"
    assert result["vms"] == [] and result["diff"]["after"] == {
        "HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged": {"evictionStrategy": "None"}}
    again = eviction_strategy.run(module(client, scope="cluster", strategy="None"))
    assert again["changed"] is False


def test_cluster_scope_waits_for_hco_to_reach_kubevirt():
    client, server = cluster()
    server.add("HyperConverged", hyperconverged(spec={"evictionStrategy": "LiveMigrate"}))
    server.add("KubeVirt", kubevirt("LiveMigrate"))

    def hco_operator(method, kind, name):
        if kind == "HyperConverged" and method == "PATCH":
            import threading

            threading.Timer(0.2, lambda: server.add("KubeVirt", kubevirt("External"))).start()

    server.before_write = hco_operator
    result = eviction_strategy.run(module(client, scope="cluster", strategy="External", wait_timeout=10))
    assert result["changed"] is True


def test_cluster_scope_without_hco_edits_kubevirt():
    client, server = cluster(served=set(["Namespace", "KubeVirt", "VirtualMachine"]))
    server.add("KubeVirt", kubevirt())
    result = eviction_strategy.run(module(client, scope="cluster", strategy="LiveMigrateIfPossible"))
    assert result["cluster"]["resource"] == "KubeVirt kubevirt/kubevirt"
    assert server.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["evictionStrategy"] == \
        "LiveMigrateIfPossible"


def test_cluster_scope_without_any_resource_fails():
    client, _server = cluster(served=set(["Namespace"]))
    with pytest.raises(InvalidInputError) as info:
        eviction_strategy.run(module(client, scope="cluster", strategy="None"))
    assert "neither a HyperConverged nor a KubeVirt resource exists" in info.value.msg


def test_cluster_scope_rejects_vm_selection():
    client, server = cluster()
    with pytest.raises(InvalidInputError) as info:
        eviction_strategy.run(module(client, scope="cluster", strategy="None", namespace="ns1"))
    assert "do not apply to scope=cluster" in info.value.msg
    assert server.requests == []


def test_a_vmi_without_the_condition_yet_is_judged_by_its_disks():
    client, server = cluster()
    server.add("PersistentVolumeClaim", pvc("rwo", modes=["ReadWriteOnce"]))
    server.add("VirtualMachine", vm("starting", claims=["rwo"]))
    server.add("VirtualMachineInstance", vmi("starting", phase="Scheduling"))
    mod = module(client, namespace="ns1", only_non_migratable=True, strategy="None")
    result = eviction_strategy.run(mod)
    assert [v["name"] for v in result["vms"]] == ["starting"] and mod.warnings == []
