"""vm_eviction_strategy, vm_run_strategy and hco_obsolete_cpus run end to end (argument spec, wrapper,
logic) against the in-memory API server, and return exactly what their RETURN documentation says."""

import json

import pytest
import yaml

from kubevirt_objects import cluster, hyperconverged, kubevirt, vm

from ansible.module_utils import basic
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import (
    hco_obsolete_cpus,
    vm_eviction_strategy,
    vm_run_strategy,
)

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    import contextlib

    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args):
        old = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = old

STANDARD_KEYS = {"changed", "failed", "msg", "warnings", "invocation", "diff", "deprecations"}


@pytest.fixture
def api(monkeypatch):
    client, server = cluster(namespaces=("ns1", "ns2"))
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    # Warnings reach the result only outside the controller process; record them here too.
    server.module_warnings = []
    original = module_mod.MaintenanceModule.warn

    def warn(self, text):
        server.module_warnings.append(text)
        original(self, text)

    monkeypatch.setattr(module_mod.MaintenanceModule, "warn", warn)
    return server


def run(module, args, capsys, check=False, diff=False):
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def assert_documented(result, module):
    """Every returned key (and nested key) is in RETURN, and everything 'always' returned is there."""
    doc = yaml.safe_load(module.RETURN)

    def check(value, spec, where):
        if spec.get("type") == "list" and spec.get("contains"):
            for item in value:
                check(item, {"type": "dict", "contains": spec["contains"]}, where + "[]")
        elif spec.get("type") == "dict" and spec.get("contains"):
            for key in value:
                assert key in spec["contains"], "%s.%s is returned but not documented" % (where, key)
                check(value[key], spec["contains"][key], where + "." + key)

    for key, value in result.items():
        if key in STANDARD_KEYS:
            continue
        assert key in doc, "%s is returned but not documented" % key
        check(value, doc[key], key)
    for key, spec in doc.items():
        if spec.get("returned") == "always":
            assert key in result, "%s is documented as always returned" % key


def test_vm_eviction_strategy(api, capsys):
    api.add("KubeVirt", kubevirt("LiveMigrate"))
    api.add("VirtualMachine", vm("a", "ns1", labels={"x": "1"}))
    api.add("VirtualMachine", vm("b", "ns2", labels={"x": "1"}))
    args = {"all_namespaces": True, "label_selector": "x=1", "strategy": "LiveMigrateIfPossible"}
    checked = run(vm_eviction_strategy, args, capsys, check=True, diff=True)
    assert checked["changed"] is True and api.writes() == []
    assert_documented(checked, vm_eviction_strategy)
    result = run(vm_eviction_strategy, args, capsys)
    assert result["changed"] is True and len(api.writes()) == 2
    assert_documented(result, vm_eviction_strategy)
    again = run(vm_eviction_strategy, args, capsys)
    assert again["changed"] is False


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
