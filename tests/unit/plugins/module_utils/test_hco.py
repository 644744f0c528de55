"""Obsolete CPU models in the HyperConverged resource: found automatically, edited minimally."""

import pytest

from kubevirt_objects import FakeModule, cluster, hyperconverged

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import hco
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import InvalidInputError

DEFAULTS = dict(cpu_models=[], state="present", exclusive=False, min_cpu_model=None, name="kubevirt-hyperconverged",
                namespace=None)


def module(client, check=False, diff=False, **params):
    return FakeModule(client, params, DEFAULTS, check_mode=check, diff_mode=diff)


def stored(server, namespace="openshift-cnv"):
    return server.get("HyperConverged", "kubevirt-hyperconverged", namespace)


def test_builtin_list_has_every_model_and_its_v1_variant():
    assert len(hco.BUILTIN_OBSOLETE_CPU_MODELS) == 34
    assert hco.BUILTIN_OBSOLETE_CPU_MODELS[:4] == ("486", "486-v1", "pentium", "pentium-v1")
    assert "Opteron_G2-v1" in hco.BUILTIN_OBSOLETE_CPU_MODELS and "Conroe-v1" in hco.BUILTIN_OBSOLETE_CPU_MODELS


@pytest.mark.parametrize("current, models, state, exclusive, expected", [
    ([], ["A", "B"], "present", False, ["A", "B"]),
    (["B", "C"], ["A", "B"], "present", False, ["B", "C", "A"]),
    (["B", "C"], ["A", "A"], "present", True, ["A"]),
    (["B", "C"], [], "present", True, []),
    (["B", "C"], ["C", "X"], "absent", False, ["B"]),
])
def test_desired_list(current, models, state, exclusive, expected):
    assert hco.desired_cpu_models(current, models, state, exclusive) == expected


def test_finds_hco_in_openshift_namespace_and_is_idempotent():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", spec={"evictionStrategy": "LiveMigrate"}))
    result = hco.obsolete_cpus(module(client, cpu_models=["Penryn", "Nehalem"], diff=True))
    assert result["changed"] is True
    assert result["cpu_models"] == ["Penryn", "Nehalem"]
    assert result["effective"] == list(hco.BUILTIN_OBSOLETE_CPU_MODELS) + ["Penryn", "Nehalem"]
    assert result["hyperconverged"] == {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv",
                                        "api_version": "hco.kubevirt.io/v1beta1"}
    assert result["diff"] == {"before": {"cpuModels": [], "minCPUModel": None},
                              "after": {"cpuModels": ["Penryn", "Nehalem"], "minCPUModel": None}}
    assert stored(server)["spec"]["obsoleteCPUs"] == {"cpuModels": ["Penryn", "Nehalem"]}
    rv = stored(server)["metadata"]["resourceVersion"]
    again = hco.obsolete_cpus(module(client, cpu_models=["Nehalem"]))
    assert again["changed"] is False and stored(server)["metadata"]["resourceVersion"] == rv


def test_absent_and_exclusive():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("kubevirt-hyperconverged",
                                                spec={"obsoleteCPUs": {"cpuModels": ["A", "B", "C"]}}))
    result = hco.obsolete_cpus(module(client, cpu_models=["B"], state="absent"))
    assert result["cpu_models"] == ["A", "C"]
    result = hco.obsolete_cpus(module(client, cpu_models=["Z"], exclusive=True))
    assert result["cpu_models"] == ["Z"]
    result = hco.obsolete_cpus(module(client, cpu_models=[], exclusive=True))
    assert result["cpu_models"] == [] and result["changed"] is True
    spec = stored(server, "kubevirt-hyperconverged")["spec"]
    assert spec["obsoleteCPUs"] == {}


def test_check_mode_writes_nothing():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv"))
    result = hco.obsolete_cpus(module(client, check=True, cpu_models=["Penryn"]))
    assert result["changed"] is True and result["cpu_models"] == ["Penryn"]
    assert server.writes() == []


def test_min_cpu_model_warns_and_is_set_then_removed():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv"))
    mod = module(client, min_cpu_model="Penryn")
    result = hco.obsolete_cpus(mod)
    assert result["min_cpu_model"] == "Penryn" and result["changed"] is True
    assert mod.warnings == [hco.MIN_CPU_MODEL_WARNING]
    assert stored(server)["spec"]["obsoleteCPUs"]["minCPUModel"] == "Penryn"
    result = hco.obsolete_cpus(module(client, min_cpu_model="Penryn", state="absent"))
    assert result["min_cpu_model"] is None and "minCPUModel" not in stored(server)["spec"]["obsoleteCPUs"]


def test_builtin_models_given_are_warned_about():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv"))
    mod = module(client, cpu_models=["qemu64", "Penryn"])
    hco.obsolete_cpus(mod)
    assert mod.warnings[0].startswith("qemu64 already in the built-in list")


def test_v1_api_uses_the_virtualization_section():
    client, server = cluster(namespaces=(), served={"HyperConvergedV1", "Namespace"})
    server.add("HyperConvergedV1", hyperconverged("openshift-cnv"))
    mod = module(client, cpu_models=["Penryn"], min_cpu_model="Nehalem")
    result = hco.obsolete_cpus(mod)
    obj = server.get("HyperConvergedV1", "kubevirt-hyperconverged", "openshift-cnv")
    assert obj["spec"] == {"virtualization": {"obsoleteCPUModels": ["Penryn"]}}
    assert result["hyperconverged"]["api_version"] == "hco.kubevirt.io/v1"
    assert result["min_cpu_model"] is None and "no minCPUModel" in mod.warnings[0]


def test_hco_in_another_namespace_is_found_by_listing():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("virt-system"))
    result = hco.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert result["hyperconverged"]["namespace"] == "virt-system"


def test_errors_without_hco():
    client, server = cluster(namespaces=(), served={"Namespace"})
    with pytest.raises(InvalidInputError) as info:
        hco.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert "does not serve hco.kubevirt.io" in info.value.msg
    client, server = cluster(namespaces=())
    with pytest.raises(InvalidInputError) as info:
        hco.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert info.value.msg == ("No HyperConverged named kubevirt-hyperconverged exists in namespace openshift-cnv, "
                              "kubevirt-hyperconverged or any other namespace.")
    with pytest.raises(InvalidInputError) as info:
        hco.obsolete_cpus(module(client, cpu_models=["Penryn"], namespace="x"))
    assert info.value.msg == "No HyperConverged named kubevirt-hyperconverged exists in namespace x."


def test_exclusive_with_absent_is_refused():
    client, server = cluster(namespaces=())
    with pytest.raises(InvalidInputError):
        hco.obsolete_cpus(module(client, cpu_models=["A"], exclusive=True, state="absent"))
    assert server.requests == []
