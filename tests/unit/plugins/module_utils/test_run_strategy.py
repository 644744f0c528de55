"""Run strategies and start/stop/restart: the transition table, one write per VM, waits."""

import pytest

from fake_apiserver import FakeResponse, apply_json_patch
from kubevirt_objects import SELECTION_DEFAULTS, FakeModule, VmController, cluster, vm, vmi

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import run_strategy
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

DEFAULTS = dict(SELECTION_DEFAULTS, run_strategy=None, action=None)

# (run strategy before, VMI phase or None, action) -> (after, VMI request, action reported, wait target)
TABLE = [
    ("Always", "Running", "start", "Always", None, None, None),
    ("Always", "Running", "stop", "Halted", None, "stop", "gone"),
    ("Always", "Running", "restart", "Always", "restart", "restart", "running"),
    ("RerunOnFailure", "Running", "start", "RerunOnFailure", None, None, None),
    ("RerunOnFailure", "Succeeded", "start", "RerunOnFailure", "start", "start", "running"),
    # KubeVirt >= 1.2 keeps RerunOnFailure on stop (the seeds say Halted).
    ("RerunOnFailure", "Running", "stop", "RerunOnFailure", "stop", "stop", "gone"),
    ("RerunOnFailure", "Running", "restart", "RerunOnFailure", "restart", "restart", "running"),
    ("Manual", None, "start", "Manual", "start", "start", "running"),
    ("Manual", "Succeeded", "start", "Manual", "start", "start", "running"),
    ("Manual", "Running", "start", "Manual", None, None, None),
    ("Manual", "Running", "stop", "Manual", "stop", "stop", "gone"),
    ("Manual", None, "stop", "Manual", None, None, None),
    ("Manual", "Running", "restart", "Manual", "restart", "restart", "running"),
    ("Halted", None, "start", "Always", None, "start", "running"),
    ("Halted", None, "stop", "Halted", None, None, None),
    ("Halted", None, "restart", "Halted", None, None, None),
    ("Once", "Running", "stop", "Halted", None, "stop", "gone"),
    ("Once", "Running", "start", "Once", None, None, None),
]


@pytest.mark.parametrize("before, phase, action, after, request_, reported, target", TABLE)
def test_transition_table(before, phase, action, after, request_, reported, target):
    plan = run_strategy.plan_action(vm("a", run_strategy=before), vmi("a", phase=phase) if phase else None, action)
    assert plan.error is None
    assert (plan.before, plan.after, plan.vmi_request, plan.action, plan.target) == (
        before, after, request_, reported, target)
    assert plan.write_spec is (before != after)
    assert plan.changed is bool(request_ or before != after)


@pytest.mark.parametrize("phase, action", [("Running", "restart"), ("Succeeded", "start"), (None, "start")])
def test_once_refuses_what_kubevirt_refuses(phase, action):
    plan = run_strategy.plan_action(vm("a", run_strategy="Once"), vmi("a", phase=phase) if phase else None, action)
    assert "run strategy Once" in plan.error and action in plan.error


@pytest.mark.parametrize("running, action, after", [(True, "restart", "Always"), (False, "start", "Always"),
                                                    (True, "stop", "Halted"), (False, "stop", "Halted")])
def test_actions_replace_spec_running_in_the_same_write(running, action, after):
    machine = vm("a", running=running)
    machine["metadata"]["resourceVersion"] = "5"
    plan = run_strategy.plan_action(machine, vmi("a") if running else None, action)
    assert plan.write_spec and plan.after == after
    patched = apply_json_patch(machine, run_strategy._spec_operations(machine, plan.after))
    assert "running" not in patched["spec"] and patched["spec"]["runStrategy"] == after


@pytest.mark.parametrize("before, running, set_to, write, target", [
    ("Always", None, "Always", False, None),
    ("Halted", None, "Always", True, "running"),
    ("Always", None, "Halted", True, "gone"),
    ("Always", None, "Manual", True, None),
    ("Halted", None, "RerunOnFailure", True, "running"),
    ("Halted", None, "Once", True, "started"),
    (None, True, "Always", True, None),
    (None, False, "Halted", True, None),
    (None, False, "Always", True, "running"),
])
def test_set_run_strategy(before, running, set_to, write, target):
    plan = run_strategy.plan_run_strategy(vm("a", run_strategy=before, running=running), None, set_to)
    assert (plan.write_spec, plan.target, plan.after) == (write, target, set_to)


def test_running_conversion_tests_the_old_value():
    machine = vm("a", running=True)
    machine["metadata"]["resourceVersion"] = "9"
    ops = run_strategy._spec_operations(machine, "Always")
    assert ops == [{"op": "test", "path": "/spec/running", "value": True},
                   {"op": "remove", "path": "/spec/running"},
                   {"op": "add", "path": "/spec/runStrategy", "value": "Always"}]


def module(client, check=False, diff=False, **params):
    return FakeModule(client, params, DEFAULTS, check_mode=check, diff_mode=diff)


def test_check_mode_writes_nothing_and_predicts():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", run_strategy="Halted"))
    server.add("VirtualMachine", vm("b", running=True))
    result = run_strategy.run(module(client, check=True, diff=True, namespace="ns1", action="start"))
    assert server.writes() == []
    assert result["changed"] is True
    assert [(v["name"], v["before"], v["after"], v["action"], v["changed"]) for v in result["vms"]] == [
        ("a", "Halted", "Always", "start", True), ("b", "Always", "Always", None, True)]
    assert result["diff"]["before"]["ns1/b"] == {"running": True}
    assert result["diff"]["after"]["ns1/b"] == {"runStrategy": "Always"}


def test_refusal_changes_nothing():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", run_strategy="Halted"))
    server.add("VirtualMachine", vm("b", run_strategy="Once"))
    server.add("VirtualMachineInstance", vmi("b"))
    with pytest.raises(InvalidInputError) as info:
        run_strategy.run(module(client, namespace="ns1", action="restart"))
    assert info.value.msg.startswith("Nothing was changed: VirtualMachine ns1/b has run strategy Once")
    assert server.writes() == []


def test_set_strategy_waits_and_second_run_is_unchanged():
    client, server = cluster(namespaces=("ns1", "ns2"))
    for i in range(12):
        server.add("VirtualMachine", vm("vm%02d" % i, "ns%d" % (1 + i % 2), run_strategy="Halted",
                                        labels={"app": "x"}))
    with VmController(server):
        result = run_strategy.run(module(client, all_namespaces=True, label_selector="app=x",
                                         run_strategy="Always", wait_timeout=20))
        assert result["changed"] and all(v["vmi_phase"] == "Running" for v in result["vms"])
        again = run_strategy.run(module(client, all_namespaces=True, label_selector="app=x", run_strategy="Always"))
    assert again["changed"] is False
    assert all(not v["changed"] and v["vmi_phase"] == "Running" for v in again["vms"])


def test_fallback_restart_deletes_the_vmi_with_a_uid_precondition():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", run_strategy="Always"))
    old = server.add("VirtualMachineInstance", vmi("a"))
    with VmController(server):
        result = run_strategy.run(module(client, name="a", namespace="ns1", action="restart", wait_timeout=20))
    deletes = [r for r in server.requests if r[0] == "DELETE"]
    assert deletes == [("DELETE", "VirtualMachineInstance", "a")]
    assert result["vms"][0]["action"] == "restart" and result["vms"][0]["vmi_phase"] == "Running"
    assert server.get("VirtualMachineInstance", "a", "ns1")["metadata"]["uid"] != old["metadata"]["uid"]


def test_fallback_manual_uses_state_change_requests():
    client, server = cluster()
    server.add("VirtualMachine", vm("m", run_strategy="Manual", status={"printableStatus": "Stopped"}))
    with VmController(server):
        started = run_strategy.run(module(client, name="m", namespace="ns1", action="start", wait_timeout=20))
        assert started["vms"][0]["vmi_phase"] == "Running"
        assert server.get("VirtualMachine", "m", "ns1")["spec"]["runStrategy"] == "Manual"
        stopped = run_strategy.run(module(client, name="m", namespace="ns1", action="stop", wait_timeout=20))
        assert stopped["vms"][0]["vmi_phase"] is None
        again = run_strategy.run(module(client, name="m", namespace="ns1", action="stop"))
    assert again["changed"] is False
    status_patches = [r for r in server.requests if r[0] == "PATCH"]
    assert len(status_patches) == 2


def test_subresource_api_is_used_when_served():
    client, server = cluster()
    server.add("APIService", {"metadata": {"name": "v1.subresources.kubevirt.io"},
                              "status": {"conditions": [{"type": "Available", "status": "True"}]}})
    server.add("VirtualMachine", vm("m", run_strategy="Manual"))
    server.add("VirtualMachine", vm("h", run_strategy="Halted"))
    server.add("VirtualMachineInstance", vmi("m"))
    puts = []

    def subresources(method, path, body):
        puts.append((method, path))
        return FakeResponse(202)

    server.handlers["/apis/subresources.kubevirt.io/v1/"] = subresources
    result = run_strategy.run(module(client, namespace="ns1", action="restart", wait=False))
    assert puts == [("PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachines/m/restart")]
    assert [v["action"] for v in result["vms"]] == [None, "restart"]


def test_unavailable_subresource_api_falls_back():
    client, server = cluster()
    server.add("APIService", {"metadata": {"name": "v1.subresources.kubevirt.io"},
                              "status": {"conditions": [{"type": "Available", "status": "False"}]}})
    assert run_strategy.subresources_served(client) is False
    client2, _server2 = cluster()
    assert run_strategy.subresources_served(client2) is False


def test_fallback_rerun_on_failure_restart_uses_stop_and_start_requests():
    client, server = cluster()
    server.add("VirtualMachine", vm("r", run_strategy="RerunOnFailure"))
    old = server.add("VirtualMachineInstance", vmi("r"))["metadata"]["uid"]
    controller = VmController(server)
    controller.strategies[("ns1", "r")] = "RerunOnFailure"
    with controller:
        first = run_strategy.run(module(client, name="r", namespace="ns1", action="start", wait_timeout=20))
        assert first["changed"] is False and first["vms"][0]["vmi_phase"] == "Running"
        result = run_strategy.run(module(client, name="r", namespace="ns1", action="restart", wait_timeout=20))
    assert result["vms"][0]["vmi_phase"] == "Running"
    assert server.get("VirtualMachineInstance", "r", "ns1")["metadata"]["uid"] != old
    assert not [r for r in server.requests if r[0] == "DELETE"]
