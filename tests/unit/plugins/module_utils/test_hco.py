"""Obsolete CPU models in the HyperConverged resource: found automatically, edited minimally."""

import pytest

from fake_apiserver import FakeResponse
from kubevirt_objects import FakeModule, cluster, hyperconverged

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import obsolete_cpus as cpus
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError

DEFAULTS = dict(cpu_models=[], state="present", exclusive=False, min_cpu_model=None, name="kubevirt-hyperconverged",
                namespace=None)


def module(client, check=False, diff=False, **params):
    return FakeModule(client, params, DEFAULTS, check_mode=check, diff_mode=diff)


def stored(server, namespace="openshift-cnv"):
    return server.get("HyperConverged", "kubevirt-hyperconverged", namespace)


def test_builtin_list_has_every_model_and_its_v1_variant():
    assert len(cpus.BUILTIN_OBSOLETE_CPU_MODELS) == 34
    assert cpus.BUILTIN_OBSOLETE_CPU_MODELS[:4] == ("486", "486-v1", "pentium", "pentium-v1")
    assert "Opteron_G2-v1" in cpus.BUILTIN_OBSOLETE_CPU_MODELS and "Conroe-v1" in cpus.BUILTIN_OBSOLETE_CPU_MODELS


@pytest.mark.parametrize("current, models, state, exclusive, expected", [
    ([], ["A", "B"], "present", False, ["A", "B"]),
    (["B", "C"], ["A", "B"], "present", False, ["B", "C", "A"]),
    (["B", "C"], ["A", "A"], "present", True, ["A"]),
    (["B", "C"], [], "present", True, []),
    (["B", "C"], ["C", "X"], "absent", False, ["B"]),
])
def test_desired_list(current, models, state, exclusive, expected):
    assert cpus.desired_cpu_models(current, models, state, exclusive) == expected


def test_finds_hco_in_openshift_namespace_and_is_idempotent():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", spec={"evictionStrategy": "LiveMigrate"},
                                                version="1.18.1"))
    result = cpus.obsolete_cpus(module(client, cpu_models=["Penryn", "Nehalem"], diff=True))
    assert result["changed"] is True
    assert result["cpu_models"] == ["Penryn", "Nehalem"]
    assert result["effective"] == list(cpus.BUILTIN_OBSOLETE_CPU_MODELS) + ["Penryn", "Nehalem"]
    assert result["hyperconverged"] == {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv",
                                        "api_version": "hco.kubevirt.io/v1beta1"}
    assert result["diff"] == {"before": {"cpuModels": [], "minCPUModel": None},
                              "after": {"cpuModels": ["Penryn", "Nehalem"], "minCPUModel": None}}
    assert stored(server)["spec"]["obsoleteCPUs"] == {"cpuModels": ["Penryn", "Nehalem"]}
    rv = stored(server)["metadata"]["resourceVersion"]
    again = cpus.obsolete_cpus(module(client, cpu_models=["Nehalem"]))
    assert again["changed"] is False and stored(server)["metadata"]["resourceVersion"] == rv


def test_absent_and_exclusive():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("kubevirt-hyperconverged",
                                                spec={"obsoleteCPUs": {"cpuModels": ["A", "B", "C"]}}))
    result = cpus.obsolete_cpus(module(client, cpu_models=["B"], state="absent"))
    assert result["cpu_models"] == ["A", "C"]
    result = cpus.obsolete_cpus(module(client, cpu_models=["Z"], exclusive=True))
    assert result["cpu_models"] == ["Z"]
    result = cpus.obsolete_cpus(module(client, cpu_models=[], exclusive=True))
    assert result["cpu_models"] == [] and result["changed"] is True
    spec = stored(server, "kubevirt-hyperconverged")["spec"]
    assert spec["obsoleteCPUs"] == {}


def test_check_mode_writes_nothing():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv"))
    result = cpus.obsolete_cpus(module(client, check=True, cpu_models=["Penryn"]))
    assert result["changed"] is True and result["cpu_models"] == ["Penryn"]
    assert server.writes() == []


def test_min_cpu_model_warns_and_is_set_then_removed():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.18.1"))
    mod = module(client, min_cpu_model="Penryn")
    result = cpus.obsolete_cpus(mod)
    assert result["min_cpu_model"] == "Penryn" and result["changed"] is True
    assert mod.warnings == [cpus.MIN_CPU_MODEL_WARNING]
    assert stored(server)["spec"]["obsoleteCPUs"]["minCPUModel"] == "Penryn"
    result = cpus.obsolete_cpus(module(client, min_cpu_model="Penryn", state="absent"))
    assert result["min_cpu_model"] is None and "minCPUModel" not in stored(server)["spec"]["obsoleteCPUs"]


def test_builtin_models_given_are_warned_about():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.18.1"))
    mod = module(client, cpu_models=["qemu64", "Penryn"])
    cpus.obsolete_cpus(mod)
    assert mod.warnings[0].startswith("qemu64 already in the built-in list")


def test_v1_api_uses_the_virtualization_section():
    client, server = cluster(namespaces=(), served={"HyperConvergedV1", "Namespace"})
    server.add("HyperConvergedV1", hyperconverged("openshift-cnv"))
    mod = module(client, cpu_models=["Penryn"], min_cpu_model="Nehalem")
    result = cpus.obsolete_cpus(mod)
    obj = server.get("HyperConvergedV1", "kubevirt-hyperconverged", "openshift-cnv")
    assert obj["spec"] == {"virtualization": {"obsoleteCPUModels": ["Penryn"]}}
    assert result["hyperconverged"]["api_version"] == "hco.kubevirt.io/v1"
    assert result["min_cpu_model"] is None and "no minCPUModel" in mod.warnings[0]


def test_hco_in_another_namespace_is_found_by_listing():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("virt-system"))
    result = cpus.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert result["hyperconverged"]["namespace"] == "virt-system"


def test_errors_without_hco():
    client, server = cluster(namespaces=(), served={"Namespace"})
    with pytest.raises(InvalidInputError) as info:
        cpus.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert "does not serve hco.kubevirt.io" in info.value.msg
    client, server = cluster(namespaces=())
    with pytest.raises(InvalidInputError) as info:
        cpus.obsolete_cpus(module(client, cpu_models=["Penryn"]))
    assert info.value.msg == ("No HyperConverged named kubevirt-hyperconverged exists in namespace openshift-cnv, "
                              "kubevirt-hyperconverged or any other namespace.")
    with pytest.raises(InvalidInputError) as info:
        cpus.obsolete_cpus(module(client, cpu_models=["Penryn"], namespace="x"))
    assert info.value.msg == "No HyperConverged named kubevirt-hyperconverged exists in namespace x."


def test_exclusive_with_absent_is_refused():
    client, server = cluster(namespaces=())
    with pytest.raises(InvalidInputError):
        cpus.obsolete_cpus(module(client, cpu_models=["A"], exclusive=True, state="absent"))
    assert server.requests == []


# -- builtin and effective: from the KubeVirt CR, else the HCO version, else unknown -------------

def kubevirt_cr(namespace="openshift-cnv", name="kubevirt-kubevirt-hyperconverged", models=None):
    configuration = {"evictionStrategy": "LiveMigrate"}
    if models is not None:
        configuration["obsoleteCPUModels"] = {m: True for m in models}
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": name, "namespace": namespace},
            "spec": {"configuration": configuration}}


def forbid_kubevirt(server):
    server.handlers["/apis/kubevirt.io/v1/"] = lambda method, path, body: FakeResponse(
        403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "kubevirts.kubevirt.io is forbidden"})


@pytest.mark.parametrize("version, count, last", [
    ("1.4.0", 15, "kvm32"), ("1.11.0", 15, "kvm32"), ("v1.11.1", 17, "Opteron_G2"), ("1.14.0", 17, "Opteron_G2"),
    ("1.15.0", 34, "Opteron_G2-v1"), ("1.18.1", 34, "Opteron_G2-v1"), ("1.18.7", 34, "Opteron_G2-v1"),
])
def test_builtin_list_per_hco_version(version, count, last):
    models, reason = cpus.builtin_for_version(version)
    assert reason is None and len(models) == count and models[-1] == last and models[0] == "486"


@pytest.mark.parametrize("version", [None, "", "1.3.0", "1.19.0", "2.0.0", "4.18.3", "main"])
def test_builtin_list_of_an_unknown_version_is_not_guessed(version):
    models, reason = cpus.builtin_for_version(version)
    assert models is None and reason


def test_builtin_and_effective_come_from_the_kubevirt_cr():
    client, server = cluster(namespaces=())
    # HCO lists Penryn and qemu64 (also built in); the KubeVirt CR has HCO's list (here cut
    # short, and with an entry someone added through HCO's jsonpatch annotation) plus them.
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.18.1",
                                                spec={"obsoleteCPUs": {"cpuModels": ["Penryn", "qemu64"]}}))
    server.add("KubeVirt", kubevirt_cr("other", "kubevirt", models=["486"]))
    server.add("KubeVirt", kubevirt_cr(models=["486", "Penryn", "qemu64", "Westmere-IBRS"]))
    mod = module(client, cpu_models=["Nehalem", "Westmere-IBRS", "pentium"], diff=True, check=True)
    result = cpus.obsolete_cpus(mod)
    assert result["builtin_source"] == "kubevirt" and result["builtin_reason"] is None
    assert result["kubevirt"] == {"name": "kubevirt-kubevirt-hyperconverged", "namespace": "openshift-cnv"}
    assert result["hco_version"] == "1.18.1"
    assert result["builtin"] == ["486", "qemu64", "Westmere-IBRS"]
    # Check mode: the prediction for the list not yet applied.
    assert result["effective"] == ["486", "qemu64", "Westmere-IBRS", "Penryn", "Nehalem", "pentium"]
    # The warning names what the cluster has built in, not HCO's table (pentium is not there).
    assert mod.warnings == ["Westmere-IBRS already in the built-in list of obsolete CPU models; listing them in "
                            "the HyperConverged resource changes nothing."]
    assert server.writes() == []

    # qemu64 stays obsolete when the HyperConverged resource drops it: HCO 1.18.1 has it built in.
    result = cpus.obsolete_cpus(module(client, cpu_models=["Penryn", "qemu64"], state="absent"))
    assert result["cpu_models"] == [] and result["effective"] == ["486", "qemu64", "Westmere-IBRS"]


def test_kubevirt_cr_alone_in_another_namespace_is_used():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", spec={"obsoleteCPUs": {"cpuModels": ["Penryn"]}}))
    server.add("KubeVirt", kubevirt_cr("kubevirt", "kubevirt", models=["486", "Penryn"]))
    mod = module(client, cpu_models=["Penryn"])
    result = cpus.obsolete_cpus(mod)
    assert result["changed"] is False and mod.warnings == []
    assert result["builtin_source"] == "kubevirt" and result["hco_version"] is None
    assert result["kubevirt"] == {"name": "kubevirt", "namespace": "kubevirt"}
    assert result["builtin"] == ["486"] and result["effective"] == ["486", "Penryn"]


def test_kubevirt_cr_read_in_hco_namespace_when_listing_is_forbidden():
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.18.1"))
    server.add("KubeVirt", kubevirt_cr(models=["486", "Penryn"]))
    server.fail_next[("GET", "KubeVirt")] = 403  # the list only
    result = cpus.obsolete_cpus(module(client))
    assert result["builtin_source"] == "kubevirt" and result["builtin"] == ["486", "Penryn"]


@pytest.mark.parametrize("version, count", [("1.10.0", 15), ("1.14.0", 17), ("1.18.1", 34)])
def test_kubevirt_cr_forbidden_falls_back_to_the_hco_version(version, count):
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version=version))
    server.add("KubeVirt", kubevirt_cr(models=["486", "Penryn"]))
    forbid_kubevirt(server)
    mod = module(client, cpu_models=["Penryn"], check=True)
    result = cpus.obsolete_cpus(mod)
    assert result["builtin_source"] == "hco_version" and result["hco_version"] == version
    assert result["kubevirt"] is None and "permission denied" in result["builtin_reason"]
    assert result["builtin"] == cpus.builtin_for_version(version)[0] and len(result["builtin"]) == count
    assert result["effective"] == result["builtin"] + ["Penryn"]
    assert mod.warnings == []


def test_kubevirt_absent_or_without_a_list_falls_back_to_the_hco_version():
    client, server = cluster(namespaces=(), served={"HyperConverged", "Namespace"})
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.14.0"))
    result = cpus.obsolete_cpus(module(client))
    assert result["builtin_source"] == "hco_version" and len(result["builtin"]) == 17
    assert result["builtin_reason"] == "the API server does not serve kubevirt.io/v1 KubeVirt"

    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version="1.14.0"))
    result = cpus.obsolete_cpus(module(client))
    assert result["builtin_source"] == "hco_version" and result["builtin_reason"] == "no KubeVirt resource exists"
    server.add("KubeVirt", kubevirt_cr())
    result = cpus.obsolete_cpus(module(client))
    assert result["builtin_source"] == "hco_version"
    assert result["builtin_reason"] == (
        "KubeVirt openshift-cnv/kubevirt-kubevirt-hyperconverged has no spec.configuration.obsoleteCPUModels yet")


@pytest.mark.parametrize("version, says", [
    (None, "reports no HCO version"),
    ("4.18.3", "HCO version 4.18.3 is not one whose built-in list is known"),
    ("1.19.0", "HCO version 1.19.0 is not one whose built-in list is known"),
])
def test_unknown_version_without_kubevirt_cr_says_so(version, says):
    client, server = cluster(namespaces=())
    server.add("HyperConverged", hyperconverged("openshift-cnv", version=version))
    forbid_kubevirt(server)
    mod = module(client, cpu_models=["qemu64"])
    result = cpus.obsolete_cpus(mod)
    assert result["changed"] is True and result["cpu_models"] == ["qemu64"]
    assert result["builtin"] is None and result["effective"] is None
    assert result["builtin_source"] == "unknown" and result["hco_version"] == version
    assert "permission denied" in result["builtin_reason"] and says in result["builtin_reason"]
    assert len(mod.warnings) == 1
    assert mod.warnings[0].startswith("HCO's built-in obsolete CPU models are not known, so builtin and effective "
                                      "are not returned: the KubeVirt resources cannot be read")
    assert says in mod.warnings[0]
