"""vm_run_strategy against the lab: every row of the transition table with the VMI checked after
each step (through the subresources API, as ansible runs the module, and through the VM object,
as when that API is absent), spec.running conversion, check and diff mode, errors."""

import pytest

from vm_fixtures import (
    LocalModule,
    create_vm,
    get_vm,
    get_vmi,
    phase,
    run_strategy_of,
    settled,
    uid,
    versions,
    wait_vmi,
)

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import run_strategy

DEFAULTS = dict(name=None, namespace=None, label_selector=None, all_namespaces=False, wait=True, wait_timeout=120,
                run_strategy=None, action=None)
ROWS = {"always": "Always", "rerun": "RerunOnFailure", "manual": "Manual", "halted": "Halted"}


@pytest.fixture(params=["subresources", "vm-object"])
def act(request, run_module, lab, monkeypatch):
    """act(namespace, action) applies an action to every VM of the namespace."""
    if request.param == "subresources":
        def through_ansible(namespace, action):
            result = run_module("vm_run_strategy", {"namespace": namespace, "action": action})
            assert not result.get("failed"), result.get("msg")
            return result
        return through_ansible

    monkeypatch.setattr(run_strategy, "subresources_served", lambda client: False)

    def in_process(namespace, action):
        module = LocalModule(lab.kubeconfig, {"namespace": namespace, "action": action}, DEFAULTS)
        return run_strategy.run(module)
    return in_process


def by_name(result):
    return dict((v["name"], v) for v in result["vms"])


def test_transition_table(k8s, namespace, act):
    for name, strategy in ROWS.items():
        create_vm(k8s, namespace, name, run_strategy=strategy)
    uids = dict((n, uid(wait_vmi(k8s, namespace, n))) for n in ("always", "rerun"))

    # start: Always -, RerunOnFailure -, Manual (VMI started), Halted -> Always
    result = by_name(act(namespace, "start"))
    assert [(result[n]["after"], result[n]["action"]) for n in ROWS] == [
        ("Always", None), ("RerunOnFailure", None), ("Manual", "start"), ("Always", "start")]
    for name in ("always", "rerun"):
        assert uid(get_vmi(k8s, namespace, name)) == uids[name], "start left %s's VMI alone" % name
    for name in ROWS:
        vmi = get_vmi(k8s, namespace, name)
        assert phase(vmi) == "Running", name
        assert result[name]["vmi_phase"] == "Running"
        uids[name] = uid(vmi)
    assert run_strategy_of(get_vm(k8s, namespace, "halted")) == "Always"
    assert run_strategy_of(get_vm(k8s, namespace, "manual")) == "Manual"

    # restart: a new VMI for each; the run strategy stays
    result = by_name(act(namespace, "restart"))
    for name, strategy in (("always", "Always"), ("rerun", "RerunOnFailure"), ("manual", "Manual"),
                           ("halted", "Always")):
        vmi = get_vmi(k8s, namespace, name)
        assert phase(vmi) == "Running" and uid(vmi) != uids[name], name
        assert result[name]["action"] == "restart" and result[name]["after"] == strategy
        assert run_strategy_of(get_vm(k8s, namespace, name)) == strategy

    # stop: Always -> Halted, RerunOnFailure stays RerunOnFailure (KubeVirt >= 1.2; the seeds' table
    # says Halted), Manual stays Manual; every VMI gone
    result = by_name(act(namespace, "stop"))
    for name, strategy in (("always", "Halted"), ("rerun", "RerunOnFailure"), ("manual", "Manual"),
                           ("halted", "Halted")):
        assert get_vmi(k8s, namespace, name) is None, name
        assert result[name]["after"] == strategy and result[name]["vmi_phase"] is None
        assert run_strategy_of(get_vm(k8s, namespace, name)) == strategy

    # Halted (and a stopped Manual VM): stop and restart are no-ops
    before = settled(k8s, namespace)
    for action in ("stop", "restart"):
        result = act(namespace, action)
        assert result["changed"] is False and all(v["action"] is None for v in result["vms"])
    assert versions(k8s, namespace) == before
    assert all(get_vmi(k8s, namespace, n) is None for n in ROWS)


def test_run_strategy_changes_and_running_conversion(k8s, namespace, run_module):
    create_vm(k8s, namespace, "legacy-on", running=True)
    create_vm(k8s, namespace, "legacy-off", running=False)
    create_vm(k8s, namespace, "once", run_strategy="Halted")
    old = uid(wait_vmi(k8s, namespace, "legacy-on"))
    before = settled(k8s, namespace)

    checked = run_module("vm_run_strategy", {"namespace": namespace, "run_strategy": "Always"}, check=True, diff=True)
    assert checked["changed"] is True and versions(k8s, namespace) == before
    assert checked["diff"]["before"]["%s/legacy-on" % namespace] == {"running": True}
    assert checked["diff"]["after"]["%s/legacy-on" % namespace] == {"runStrategy": "Always"}

    result = run_module("vm_run_strategy", {"name": "legacy-on", "namespace": namespace, "run_strategy": "Always"})
    assert result["changed"] is True and result["vms"][0]["before"] == "Always"
    spec = get_vm(k8s, namespace, "legacy-on")["spec"]
    assert spec["runStrategy"] == "Always" and "running" not in spec
    assert uid(get_vmi(k8s, namespace, "legacy-on")) == old, "the conversion does not restart the VM"

    result = run_module("vm_run_strategy", {"name": "legacy-off", "namespace": namespace, "action": "start"})
    spec = get_vm(k8s, namespace, "legacy-off")["spec"]
    assert spec["runStrategy"] == "Always" and "running" not in spec
    assert result["vms"][0]["vmi_phase"] == "Running" and phase(get_vmi(k8s, namespace, "legacy-off")) == "Running"

    result = run_module("vm_run_strategy", {"name": "once", "namespace": namespace, "run_strategy": "Once"})
    assert result["vms"][0]["vmi_phase"] in ("Running", "Succeeded")
    refused = run_module("vm_run_strategy", {"name": "once", "namespace": namespace, "action": "restart"})
    assert refused["failed"] and "run strategy Once, which does not support restart" in refused["msg"]

    result = run_module("vm_run_strategy", {"namespace": namespace, "run_strategy": "Halted"})
    assert all(v["vmi_phase"] is None for v in result["vms"])
    assert all(get_vmi(k8s, namespace, n) is None for n in ("legacy-on", "legacy-off", "once"))
    again = run_module("vm_run_strategy", {"namespace": namespace, "run_strategy": "Halted"})
    assert again["changed"] is False


def test_selection_errors_and_empty_selector(k8s, namespace, run_module):
    failed = run_module("vm_run_strategy", {"name": "x", "action": "start"})
    assert failed["failed"] and "needs namespace" in failed["msg"]
    failed = run_module("vm_run_strategy", {"name": "x", "namespace": namespace, "action": "start"})
    assert failed["msg"] == "VirtualMachine %s/x does not exist." % namespace
    failed = run_module("vm_run_strategy", {"namespace": namespace + "-missing", "action": "stop"})
    assert failed["msg"] == "Namespace %s-missing does not exist." % namespace
    empty = run_module("vm_run_strategy", {"all_namespaces": True, "label_selector": "no-such=label",
                                           "action": "stop"})
    assert empty["changed"] is False and empty["vms"] == []
    assert "No VirtualMachine matched" in str(empty.get("warnings"))
