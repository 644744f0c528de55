"""Field-level JSON patches: minimal, guarded, and recomputed when someone else got there first."""

import pytest

from fake_apiserver import apply_json_patch
from kubevirt_objects import cluster, vm

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError

PATH = ("spec", "template", "spec", "evictionStrategy")


def with_rv(obj, rv="7"):
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_pointer_escapes_slash_and_tilde():
    assert patches.pointer(("metadata", "annotations", "kubevirt.io/a~b")) == "/metadata/annotations/kubevirt.io~1a~0b"


def test_unchanged_value_needs_no_operation():
    assert patches.set_field(with_rv(vm("a", eviction="None")), PATH, "None") == []
    assert patches.set_field(with_rv(vm("a")), PATH, None) == []


def test_replace_tests_the_old_value_not_the_version():
    ops = patches.set_field(with_rv(vm("a", eviction="LiveMigrate")), PATH, "None")
    assert ops == [{"op": "test", "path": "/spec/template/spec/evictionStrategy", "value": "LiveMigrate"},
                   {"op": "replace", "path": "/spec/template/spec/evictionStrategy", "value": "None"}]


def test_remove_tests_the_old_value():
    ops = patches.set_field(with_rv(vm("a", eviction="LiveMigrate")), PATH, None)
    assert ops[1] == {"op": "remove", "path": "/spec/template/spec/evictionStrategy"}
    assert ops[0]["op"] == "test"


def test_adding_an_absent_field_tests_the_enclosing_object_not_the_version():
    machine = with_rv(vm("a"))
    ops = patches.set_field(machine, PATH, "External")
    assert ops == [{"op": "test", "path": "/spec/template/spec", "value": machine["spec"]["template"]["spec"]},
                   {"op": "add", "path": "/spec/template/spec/evictionStrategy", "value": "External"}]
    assert apply_json_patch(machine, ops)["spec"]["template"]["spec"]["evictionStrategy"] == "External"


def test_adding_at_the_top_level_tests_the_version():
    ops = patches.set_field(with_rv({"metadata": {"name": "x"}}), ("spec",), {"a": 1})
    assert ops == [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                   {"op": "add", "path": "/spec", "value": {"a": 1}}]


def test_missing_parents_are_created_in_one_add():
    obj = {"metadata": {"name": "h", "resourceVersion": "3"}, "spec": {"obsoleteCPUs": None}}
    ops = patches.set_field(obj, ("spec", "obsoleteCPUs", "cpuModels"), ["Penryn"])
    assert ops == [{"op": "test", "path": "/spec", "value": {"obsoleteCPUs": None}},
                   {"op": "add", "path": "/spec/obsoleteCPUs", "value": {"cpuModels": ["Penryn"]}}]
    assert apply_json_patch(obj, ops)["spec"] == {"obsoleteCPUs": {"cpuModels": ["Penryn"]}}


def test_merge_operations_keeps_one_version_test_first():
    obj = with_rv({"metadata": {"name": "x"}})
    merged = patches.merge_operations(patches.set_field(obj, ("a",), 1), patches.set_field(obj, ("b",), 2))
    assert [op["op"] for op in merged] == ["test", "add", "add"]


def test_a_422_is_retried_only_while_the_object_changes():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", eviction="LiveMigrate"))
    obj = client.get("VirtualMachine", "a", "ns1")
    writes = []

    def concurrent_edit_then_refuse(method, kind, name):
        writes.append(method)
        if len(writes) == 1:  # the test then fails: a bare 422, as the API server answers it
            server.add("VirtualMachine", vm("a", eviction="External"))

    server.before_write = concurrent_edit_then_refuse
    before, _obj = patches.update_guarded(client, "VirtualMachine", obj,
                                          lambda o: (patches.set_field(o, PATH, "None"), patches.value_at(o, PATH)))
    assert before == "External" and len(writes) == 2

    server.before_write = None
    server.requests.clear()
    server.fail_next[("PATCH", "VirtualMachine")] = 422
    with pytest.raises(ApiError) as info:
        patches.update_guarded(client, "VirtualMachine", client.get("VirtualMachine", "a", "ns1"),
                               lambda o: (patches.set_field(o, PATH, "External"), None))
    assert info.value.status == 422
    assert len([r for r in server.requests if r[0] == "PATCH"]) == 1, "the object had not changed: no retry"


def test_concurrent_edit_is_not_clobbered_but_recomputed():
    client, server = cluster()
    server.add("VirtualMachine", vm("a", eviction="LiveMigrate"))
    stale = client.get("VirtualMachine", "a", "ns1")
    # Someone else sets the field after we read the VM.
    server.add("VirtualMachine", vm("a", eviction="None"))
    seen = []

    def plan(obj):
        seen.append(patches.value_at(obj, PATH))
        return patches.set_field(obj, PATH, "LiveMigrateIfPossible"), seen[-1]

    before, after = patches.update_guarded(client, "VirtualMachine", stale, plan)
    assert seen == ["LiveMigrate", "None"], "the second plan saw the other writer's value"
    assert before == "None"
    assert after["spec"]["template"]["spec"]["evictionStrategy"] == "LiveMigrateIfPossible"


def test_check_mode_sends_nothing():
    client, server = cluster()
    server.add("VirtualMachine", vm("a"))
    obj = client.get("VirtualMachine", "a", "ns1")
    outcome, _obj = patches.update_guarded(client, "VirtualMachine", obj,
                                           lambda o: (patches.set_field(o, PATH, "None"), "planned"), write=False)
    assert outcome == "planned"
    assert server.writes() == []


def test_other_errors_are_raised_at_once():
    client, server = cluster()
    server.add("VirtualMachine", vm("a"))
    obj = client.get("VirtualMachine", "a", "ns1")
    server.fail_next[("PATCH", "VirtualMachine")] = 403
    with pytest.raises(ApiError) as info:
        patches.update_guarded(client, "VirtualMachine", obj, lambda o: (patches.set_field(o, PATH, "None"), None))
    assert info.value.status == 403
    assert len(server.writes("VirtualMachine")) == 1


def test_two_new_fields_under_one_missing_parent_both_survive():
    obj = {"metadata": {"name": "h", "resourceVersion": "3"}, "spec": {}}
    ops = patches.set_fields(obj, [(("spec", "obsoleteCPUs", "cpuModels"), ["A"]),
                                   (("spec", "obsoleteCPUs", "minCPUModel"), "Penryn")])
    assert [op["op"] for op in ops] == ["test", "add", "test", "add"]
    assert apply_json_patch(obj, ops)["spec"] == {"obsoleteCPUs": {"cpuModels": ["A"], "minCPUModel": "Penryn"}}
