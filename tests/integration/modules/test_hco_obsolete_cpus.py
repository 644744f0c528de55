"""hco_obsolete_cpus against the lab: present/absent/exclusive idempotence, check and diff mode,
what HCO passes on to KubeVirt (builtin and effective read back from the KubeVirt CR), the min_cpu_model
warning, and the error without a HyperConverged."""

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.standins.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS as LAB_HCO_BUILTIN
from lab.wait import wait_for

HCO = ("hco.kubevirt.io", "v1beta1", "kubevirt-hyperconverged", "hyperconvergeds", "kubevirt-hyperconverged")
BUILTIN_SAMPLE = ("486", "qemu64-v1", "Opteron_G2")


def hco(k8s):
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(*HCO)


def kubevirt_obsolete(k8s):
    items = client.CustomObjectsApi(k8s).list_cluster_custom_object("kubevirt.io", "v1", "kubevirts")["items"]
    return set(m for m, on in (items[0]["spec"]["configuration"].get("obsoleteCPUModels") or {}).items() if on)


def rv(k8s):
    """The HyperConverged's resourceVersion once HCO has caught up with its spec (it records
    status.observedGeneration after it has written the KubeVirt CR, a write of its own)."""
    def settled():
        current = hco(k8s)
        observed = (current.get("status") or {}).get("observedGeneration")
        return current["metadata"]["resourceVersion"] if observed == current["metadata"].get("generation") else None

    return wait_for(settled, 30, "HCO to observe the HyperConverged's generation")


@pytest.fixture
def clean_hco(k8s):
    """Start from an empty obsolete-CPU list and put the original back afterwards."""
    custom = client.CustomObjectsApi(k8s)
    original = copy.deepcopy(hco(k8s)["spec"].get("obsoleteCPUs"))
    custom.patch_namespaced_custom_object(*HCO, {"spec": {"obsoleteCPUs": None}})
    wait_for(lambda: kubevirt_obsolete(k8s) == set(LAB_HCO_BUILTIN), 30,
             "HCO to put only its built-in models in the KubeVirt CR")
    yield
    custom.patch_namespaced_custom_object(*HCO, {"spec": {"obsoleteCPUs": original}})


def test_present_absent_exclusive(k8s, run_module, clean_hco):
    args = {"cpu_models": ["Penryn", "Nehalem"]}
    version = rv(k8s)
    checked = run_module("hco_obsolete_cpus", args, check=True, diff=True)
    assert checked["changed"] is True and checked["cpu_models"] == ["Penryn", "Nehalem"]
    assert checked["diff"] == {"before": {"cpuModels": [], "minCPUModel": None},
                               "after": {"cpuModels": ["Penryn", "Nehalem"], "minCPUModel": None}}
    assert rv(k8s) == version, "check mode wrote nothing"

    result = run_module("hco_obsolete_cpus", args)
    assert result["changed"] is True
    assert hco(k8s)["spec"]["obsoleteCPUs"]["cpuModels"] == ["Penryn", "Nehalem"]
    assert len(result["builtin"]) == 34 and all(m in result["builtin"] for m in BUILTIN_SAMPLE)
    assert result["effective"] == result["builtin"] + ["Penryn", "Nehalem"]
    assert result["hyperconverged"] == {"name": "kubevirt-hyperconverged", "namespace": "kubevirt-hyperconverged",
                                        "api_version": "hco.kubevirt.io/v1beta1"}
    wait_for(lambda: {"Penryn", "Nehalem"} <= kubevirt_obsolete(k8s), 30, "HCO to pass the models to KubeVirt")
    assert set(BUILTIN_SAMPLE) <= kubevirt_obsolete(k8s)
    version = rv(k8s)
    assert run_module("hco_obsolete_cpus", {"cpu_models": ["Nehalem"]})["changed"] is False
    assert rv(k8s) == version

    result = run_module("hco_obsolete_cpus", {"cpu_models": ["Penryn", "Haswell"], "state": "absent"}, diff=True)
    assert result["changed"] is True and result["cpu_models"] == ["Nehalem"]
    assert result["diff"]["before"]["cpuModels"] == ["Penryn", "Nehalem"]
    assert run_module("hco_obsolete_cpus", {"cpu_models": ["Penryn"], "state": "absent"})["changed"] is False

    result = run_module("hco_obsolete_cpus", {"cpu_models": ["SandyBridge", "Westmere"], "exclusive": True})
    assert result["cpu_models"] == ["SandyBridge", "Westmere"]
    version = rv(k8s)
    assert run_module("hco_obsolete_cpus", {"cpu_models": ["SandyBridge", "Westmere"],
                                            "exclusive": True})["changed"] is False
    assert rv(k8s) == version
    wait_for(lambda: "Nehalem" not in kubevirt_obsolete(k8s), 30, "HCO to drop Nehalem from KubeVirt")


def kubectl_obsolete(lab):
    """spec.configuration.obsoleteCPUModels of the KubeVirt CR, as `kubectl get kubevirts -A -o json` shows it."""
    items = json.loads(lab.kubectl("get", "kubevirts.kubevirt.io", "-A", "-o", "json").stdout)["items"]
    assert len(items) == 1
    return items[0]["spec"]["configuration"].get("obsoleteCPUModels") or {}


def true_keys(models):
    return {m for m, on in models.items() if on}


def test_builtin_and_effective_are_what_kubevirt_uses(lab, k8s, run_module, clean_hco):
    args = {"cpu_models": ["Haswell-noTSX"]}
    checked = run_module("hco_obsolete_cpus", args, check=True)
    assert checked["builtin_source"] == "kubevirt" and checked["hco_version"] == "1.18.1"
    assert checked["kubevirt"] == {"name": "kubevirt", "namespace": "kubevirt"} and checked["builtin_reason"] is None
    assert set(checked["builtin"]) == true_keys(kubectl_obsolete(lab))
    # Check mode predicts what HCO will write; nothing is written.
    assert checked["effective"] == checked["builtin"] + ["Haswell-noTSX"]
    assert "Haswell-noTSX" not in kubectl_obsolete(lab)

    result = run_module("hco_obsolete_cpus", args)
    assert result["changed"] is True and result["effective"] == checked["effective"]
    wait_for(lambda: "Haswell-noTSX" in kubectl_obsolete(lab), 30, "HCO to pass Haswell-noTSX to KubeVirt")
    models = kubectl_obsolete(lab)
    assert models["Haswell-noTSX"] is True
    assert set(result["effective"]) == true_keys(models) and len(result["effective"]) == len(models)

    again = run_module("hco_obsolete_cpus", args)  # now read back from the KubeVirt CR
    assert again["changed"] is False
    assert again["builtin"] == result["builtin"] and set(again["effective"]) == true_keys(kubectl_obsolete(lab))

    warned = run_module("hco_obsolete_cpus", {"cpu_models": ["qemu64-v1"]}, check=True)
    assert "qemu64-v1 already in the built-in list" in str(warned.get("warnings"))

    result = run_module("hco_obsolete_cpus", dict(args, state="absent"))
    assert result["changed"] is True and "Haswell-noTSX" not in result["effective"]
    wait_for(lambda: "Haswell-noTSX" not in kubectl_obsolete(lab), 30, "HCO to drop Haswell-noTSX from KubeVirt")
    assert set(result["effective"]) == true_keys(kubectl_obsolete(lab))


def test_min_cpu_model_warns_and_is_kept_by_hco_storing_v1beta1(k8s, run_module, clean_hco):
    # HCO 1.18.1 stores hco.kubevirt.io/v1beta1: minCPUModel is kept (and ignored by HCO). An HCO that
    # stores v1 drops it, and the module says so (tests/unit/plugins/modules/test_vm_config_modules.py).
    result = run_module("hco_obsolete_cpus", {"min_cpu_model": "Penryn", "namespace": "kubevirt-hyperconverged"})
    assert result["changed"] is True and result["min_cpu_model"] == "Penryn"
    assert "ignored by recent versions" in str(result.get("warnings"))
    assert "did not keep" not in str(result.get("warnings"))
    assert hco(k8s)["spec"]["obsoleteCPUs"]["minCPUModel"] == "Penryn"
    again = run_module("hco_obsolete_cpus", {"min_cpu_model": "Penryn"})
    assert again["changed"] is False and again["min_cpu_model"] == "Penryn"
    result = run_module("hco_obsolete_cpus", {"min_cpu_model": "Penryn", "cpu_models": ["Penryn"]})
    assert result["changed"] is True and result["cpu_models"] == ["Penryn"] and result["min_cpu_model"] == "Penryn"
    result = run_module("hco_obsolete_cpus", {"min_cpu_model": "Penryn", "state": "absent"})
    assert result["changed"] is True and result["min_cpu_model"] is None and result["cpu_models"] == ["Penryn"]
    assert "minCPUModel" not in hco(k8s)["spec"]["obsoleteCPUs"]


def test_error_without_hyperconverged(k8s, run_module):
    custom = client.CustomObjectsApi(k8s)
    saved = hco(k8s)
    custom.delete_namespaced_custom_object(*HCO)

    def gone():
        try:
            hco(k8s)
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_for(gone, 30, "the HyperConverged resource to be deleted")
    try:
        result = run_module("hco_obsolete_cpus", {"cpu_models": ["Penryn"]})
        assert result["failed"] is True
        assert result["msg"] == ("No HyperConverged named kubevirt-hyperconverged exists in namespace openshift-cnv, "
                                 "kubevirt-hyperconverged or any other namespace.")
        result = run_module("hco_obsolete_cpus", {"cpu_models": ["Penryn"], "name": "other", "namespace": "x"})
        assert result["msg"] == "No HyperConverged named other exists in namespace x."
    finally:
        body = {"apiVersion": saved["apiVersion"], "kind": saved["kind"],
                "metadata": {"name": saved["metadata"]["name"], "namespace": saved["metadata"]["namespace"]},
                "spec": saved["spec"]}
        custom.create_namespaced_custom_object(*HCO[:4], body)
