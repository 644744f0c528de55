"""vm_eviction_strategy, vm_run_strategy and hco_obsolete_cpus run end to end (argument spec, wrapper,
logic) against the in-memory API server, and return exactly what their RETURN documentation says."""


import pytest

from kubevirt_objects import cluster, hyperconverged, kubevirt, vm, vmi
from module_runner import assert_documented, record_warnings, run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import (
    hco_obsolete_cpus,
    vm_eviction_strategy,
    vm_run_strategy,
)


@pytest.fixture
def api(monkeypatch):
    client, server = cluster(namespaces=("ns1", "ns2"))
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    # Warnings reach the result only outside the controller process; record them here too.
    server.module_warnings = record_warnings(monkeypatch)
    return server


def test_vm_eviction_strategy(api, capsys):
    api.add("KubeVirt", kubevirt("LiveMigrate"))
    api.add("VirtualMachine", vm("a", "ns1", labels={"x": "1"}))
    api.add("VirtualMachine", vm("b", "ns2", labels={"x": "1"}))
    args = {"all_namespaces": True, "label_selector": "x=1", "strategy": "LiveMigrateIfPossible"}
    checked = run(vm_eviction_strategy, args, capsys, check=True, diff=True)
    assert checked["changed"] is True and api.writes() == []
    assert_documented(checked, vm_eviction_strategy)
    result = run(vm_eviction_strategy, args, capsys)
    assert result["changed"] is True and len(api.writes("VirtualMachine")) == 2
    # Each VM tells the change in an Event of its namespace.
    told = [(obj["metadata"]["namespace"], obj["regarding"]["name"], obj["reason"], obj["note"])
            for (kind, _ns, _n), obj in api.objects.items() if kind == "Event.events.k8s.io"]
    assert sorted(told) == [
        ("ns1", "a", "EvictionStrategyChanged", "spec.template.spec.evictionStrategy unset -> LiveMigrateIfPossible"),
        ("ns2", "b", "EvictionStrategyChanged", "spec.template.spec.evictionStrategy unset -> LiveMigrateIfPossible")]
    assert_documented(result, vm_eviction_strategy)
    writes = len(api.writes())
    again = run(vm_eviction_strategy, args, capsys)
    assert again["changed"] is False and len(api.writes()) == writes


def test_restart_required_lists_vmis_whose_frozen_strategy_differs(api, capsys):
    # KubeVirt >= 1.1 froze each VMI's strategy when it was created; a new value needs a restart.
    api.add("KubeVirt", kubevirt("LiveMigrate"))
    api.add("VirtualMachine", vm("a", "ns1", run_strategy="Always"))
    api.add("VirtualMachineInstance", vmi("a", "ns1", eviction="LiveMigrate"))
    api.add("VirtualMachine", vm("b", "ns1", run_strategy="Always"))
    api.add("VirtualMachineInstance", vmi("b", "ns1", eviction="None"))
    api.add("VirtualMachine", vm("c", "ns1", run_strategy="Always"))  # stopped: nothing to restart
    result = run(vm_eviction_strategy, {"namespace": "ns1", "strategy": "None"}, capsys)
    assert result["restart_required"] == ["ns1/a"]
    assert_documented(result, vm_eviction_strategy)
    # The cluster default only reaches VMs without a value of their own, and only on restart.
    api.add("VirtualMachine", vm("d", "ns2", run_strategy="Always"))
    api.add("VirtualMachineInstance", vmi("d", "ns2", eviction="LiveMigrate"))
    cluster_wide = run(vm_eviction_strategy, {"scope": "cluster", "strategy": "LiveMigrateIfPossible", "wait": False},
                       capsys)
    assert cluster_wide["restart_required"] == ["ns2/d"]


def test_vm_eviction_strategy_cluster_and_errors(api, capsys):
    api.add("HyperConverged", hyperconverged(spec={"evictionStrategy": "LiveMigrate"}))
    result = run(vm_eviction_strategy, {"scope": "cluster", "strategy": "None", "wait": False}, capsys, diff=True)
    assert result["cluster"]["after"] == "None"
    assert_documented(result, vm_eviction_strategy)
    failed = run(vm_eviction_strategy, {"name": "a", "strategy": "None"}, capsys)
    assert failed["failed"] and failed["msg"] == ("Option name=a needs namespace: a VirtualMachine name is only "
                                                  "unique within its namespace.")
    failed = run(vm_eviction_strategy, {"namespace": "ns1"}, capsys)
    assert failed["failed"] and "strategy" in failed["msg"]


def test_vm_run_strategy(api, capsys):
    api.add("VirtualMachine", vm("a", "ns1", running=False))
    args = {"name": "a", "namespace": "ns1", "run_strategy": "Manual"}
    result = run(vm_run_strategy, args, capsys, diff=True)
    assert result["changed"] is True
    assert result["vms"] == [{"namespace": "ns1", "name": "a", "before": "Halted", "after": "Manual",
                              "action": None, "vmi_phase": None, "changed": True}]
    assert api.get("VirtualMachine", "a", "ns1")["spec"]["runStrategy"] == "Manual"
    assert "running" not in api.get("VirtualMachine", "a", "ns1")["spec"]
    assert_documented(result, vm_run_strategy)
    assert run(vm_run_strategy, args, capsys)["changed"] is False


@pytest.mark.parametrize("args", [{"namespace": "ns1"}, {"namespace": "ns1", "run_strategy": "Always", "action": "stop"}])
def test_vm_run_strategy_needs_exactly_one_of_run_strategy_and_action(api, capsys, args):
    result = run(vm_run_strategy, args, capsys)
    assert result["failed"] and "run_strategy" in result["msg"] and "action" in result["msg"]


def test_vm_run_strategy_missing_vm(api, capsys):
    result = run(vm_run_strategy, {"name": "nope", "namespace": "ns1", "action": "start"}, capsys)
    assert result["failed"] and result["msg"] == "VirtualMachine ns1/nope does not exist."


def test_hco_obsolete_cpus(api, capsys):
    api.add("HyperConverged", hyperconverged("openshift-cnv"))
    result = run(hco_obsolete_cpus, {"cpu_models": ["Penryn"], "min_cpu_model": "Nehalem"}, capsys, diff=True)
    assert result["changed"] is True and result["cpu_models"] == ["Penryn"]
    assert any("min_cpu_model sets spec.obsoleteCPUs.minCPUModel" in w for w in api.module_warnings)
    assert_documented(result, hco_obsolete_cpus)
    assert run(hco_obsolete_cpus, {"cpu_models": ["Penryn"]}, capsys)["changed"] is False


def test_hco_obsolete_cpus_without_hco(api, capsys):
    result = run(hco_obsolete_cpus, {"cpu_models": ["Penryn"]}, capsys)
    assert result["failed"] and result["msg"].startswith("No HyperConverged named kubevirt-hyperconverged exists")


def test_hco_obsolete_cpus_min_cpu_model_not_kept(api, capsys, monkeypatch):
    """HCO storing hco.kubevirt.io/v1 drops minCPUModel written through v1beta1: warned, not reported as kept."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import obsolete_cpus as hco_utils

    api.add("HyperConverged", hyperconverged("openshift-cnv"))
    original = hco_utils.patches.update_guarded

    def conversion_drops_min_cpu_model(client, kind, obj, plan, write=True, **kwargs):
        outcome, after = original(client, kind, obj, plan, write=write, **kwargs)
        for stored in (after, api.get("HyperConverged", "kubevirt-hyperconverged", "openshift-cnv")):
            (stored["spec"].get("obsoleteCPUs") or {}).pop("minCPUModel", None)
        return outcome, after

    monkeypatch.setattr(hco_utils.patches, "update_guarded", conversion_drops_min_cpu_model)
    result = run(hco_obsolete_cpus, {"min_cpu_model": "Nehalem"}, capsys)
    assert result["changed"] is False and result["min_cpu_model"] is None
    assert any("did not keep spec.obsoleteCPUs.minCPUModel" in w for w in api.module_warnings)
    assert_documented(result, hco_obsolete_cpus)
    result = run(hco_obsolete_cpus, {"min_cpu_model": "Nehalem", "cpu_models": ["Penryn"]}, capsys)
    assert result["changed"] is True and result["cpu_models"] == ["Penryn"] and result["min_cpu_model"] is None


@pytest.mark.parametrize("before, skip, after, changed", [
    (None, True, "true", True),
    ("true", True, "true", False),
    ("false", True, "true", True),
    # virt-handler skips the node while the annotation exists, whatever its value.
    ("false", False, None, True),
    ("true", False, None, True),
    (None, False, None, False),
])
def test_node_labeller_skip_is_the_annotation_existing(api, capsys, before, skip, after, changed):
    from ansible_collections.kubevirt_ops.maintenance.plugins.modules import node_labeller

    annotations = {"node-labeller.kubevirt.io/skip-node": before} if before is not None else {}
    api.add("Node", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1", "annotations": annotations}})
    result = run(node_labeller, {"name": "worker-1", "skip": skip}, capsys)
    assert result["changed"] is changed
    now = api.get("Node", "worker-1")["metadata"].get("annotations") or {}
    assert now.get("node-labeller.kubevirt.io/skip-node") == after
