# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HyperConverged custom resource (HCO): finding it and its cluster-wide settings.

``hco.kubevirt.io/v1beta1`` (what OpenShift Virtualization documents) keeps the cluster
eviction strategy in ``spec.evictionStrategy`` and the obsolete CPU models in
``spec.obsoleteCPUs.{cpuModels,minCPUModel}``; the newer ``hco.kubevirt.io/v1`` moves
them to ``spec.virtualization.{evictionStrategy,obsoleteCPUModels}``. v1beta1 is used
whenever the cluster serves it (HCO's reconciler reads it), v1 otherwise.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import ApiError, InvalidInputError

DEFAULT_NAME = "kubevirt-hyperconverged"
# OpenShift Virtualization installs HCO here; upstream HCO there.
DEFAULT_NAMESPACES = ("openshift-cnv", "kubevirt-hyperconverged")

_OBSOLETE_BASE_MODELS = (
    "486", "pentium", "pentium2", "pentium3", "pentiumpro", "coreduo", "n270", "core2duo", "Conroe",
    "athlon", "phenom", "qemu64", "qemu32", "kvm64", "kvm32", "Opteron_G1", "Opteron_G2",
)
# HCO's built-in list of obsolete CPU models, not shown in the CR; each also as '-v1'.
BUILTIN_OBSOLETE_CPU_MODELS = tuple(m for base in _OBSOLETE_BASE_MODELS for m in (base, base + "-v1"))

MIN_CPU_MODEL_WARNING = (
    "min_cpu_model sets spec.obsoleteCPUs.minCPUModel, which is deprecated and ignored by recent versions of the "
    "HyperConverged Cluster Operator; the CPU models a VM can use are decided by cpu_models and the built-in list.")


class HyperConverged:
    """One HyperConverged object and where its fields are in the API version it was read with."""

    def __init__(self, kind, obj):
        self.kind = kind
        self.obj = obj
        self.v1 = kind == "HyperConvergedV1"

    @property
    def name(self):
        return self.obj["metadata"]["name"]

    @property
    def namespace(self):
        return self.obj["metadata"].get("namespace")

    @property
    def api_version(self):
        return "hco.kubevirt.io/v1" if self.v1 else "hco.kubevirt.io/v1beta1"

    def describe(self):
        return "HyperConverged %s/%s" % (self.namespace, self.name)

    @property
    def eviction_strategy_path(self):
        return ("spec", "virtualization", "evictionStrategy") if self.v1 else ("spec", "evictionStrategy")

    @property
    def cpu_models_path(self):
        return ("spec", "virtualization", "obsoleteCPUModels") if self.v1 else ("spec", "obsoleteCPUs", "cpuModels")

    @property
    def min_cpu_model_path(self):
        """None in hco.kubevirt.io/v1, which dropped the field."""
        return None if self.v1 else ("spec", "obsoleteCPUs", "minCPUModel")


def served_kind(client):
    """'HyperConverged' (v1beta1), 'HyperConvergedV1', or None when HCO's CRD is not installed."""
    for kind in ("HyperConverged", "HyperConvergedV1"):
        if client.kind_served(kind):
            return kind
    return None


def find(client, name=None, namespace=None):
    """The HyperConverged object, or None.

    Without ``namespace``, looks in openshift-cnv and kubevirt-hyperconverged, then across
    all namespaces. Without ``name``, takes the default name, else the only HyperConverged
    of the cluster.
    """
    kind = served_kind(client)
    if kind is None:
        return None
    namespaces = [namespace] if namespace else list(DEFAULT_NAMESPACES)
    for candidate in namespaces:
        obj = client.get_or_none(kind, name or DEFAULT_NAME, candidate)
        if obj is not None:
            return HyperConverged(kind, obj)
    try:
        items, _rv = client.list(kind, namespace=namespace)
    except ApiError:
        return None  # for example no right to list across namespaces
    if name:
        items = [i for i in items if i["metadata"]["name"] == name]
    if len(items) == 1:
        return HyperConverged(kind, items[0])
    return None


def not_found_error(client, name, namespace):
    if served_kind(client) is None:
        return InvalidInputError(
            "No HyperConverged resource exists: the API server does not serve hco.kubevirt.io (the HyperConverged "
            "Cluster Operator of OpenShift Virtualization is not installed).")
    where = "namespace %s" % namespace if namespace else "namespace %s or any other namespace" % ", ".join(DEFAULT_NAMESPACES)
    return InvalidInputError("No HyperConverged named %s exists in %s." % (name or DEFAULT_NAME, where),
                             name=name or DEFAULT_NAME, namespace=namespace)


def require(client, name=None, namespace=None):
    hco = find(client, name, namespace)
    if hco is None:
        raise not_found_error(client, name, namespace)
    return hco


def _unique(items):
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def desired_cpu_models(current, cpu_models, state, exclusive):
    """The CR list after the task: present adds (keeping order), exclusive replaces, absent removes."""
    cpu_models = _unique(cpu_models)
    if state == "absent":
        return [m for m in current if m not in cpu_models]
    if exclusive:
        return cpu_models
    return list(current) + [m for m in cpu_models if m not in current]


def obsolete_cpus(module):
    """hco_obsolete_cpus: edit the obsolete CPU models of the HyperConverged resource."""
    params = module.params
    state = params["state"]
    if params["exclusive"] and state == "absent":
        raise InvalidInputError("Option exclusive=true only applies to state=present: it makes the list exactly "
                                "cpu_models; to remove models, use state=absent without exclusive.")
    cpu_models = list(params.get("cpu_models") or [])
    min_cpu_model = params.get("min_cpu_model")
    client = module.client
    hco = require(client, params.get("name"), params.get("namespace"))
    if min_cpu_model is not None:
        if hco.v1:
            module.warn("min_cpu_model is ignored: %s uses hco.kubevirt.io/v1, which has no minCPUModel." % hco.describe())
            min_cpu_model = None
        else:
            module.warn(MIN_CPU_MODEL_WARNING)
    if state == "present":
        builtin = [m for m in cpu_models if m in BUILTIN_OBSOLETE_CPU_MODELS]
        if builtin:
            module.warn("%s already in the built-in list of obsolete CPU models; listing them in the "
                        "HyperConverged resource changes nothing." % ", ".join(builtin))

    def plan(obj):
        current = list(patches.value_at(obj, hco.cpu_models_path) or [])
        after = desired_cpu_models(current, cpu_models, state, params["exclusive"])
        changes = []
        if after != current:
            changes.append((hco.cpu_models_path, after or None))
        min_before = patches.value_at(obj, hco.min_cpu_model_path) if hco.min_cpu_model_path else None
        min_after = min_before
        if min_cpu_model is not None:
            if state == "present":
                min_after = min_cpu_model
            elif min_before == min_cpu_model:
                min_after = None
            if min_after != min_before:
                changes.append((hco.min_cpu_model_path, min_after))
        operations = patches.set_fields(obj, changes)
        return operations, dict(before=current, after=after, min_before=min_before, min_after=min_after,
                                changed=bool(operations))

    outcome, after_obj = patches.update_guarded(client, hco.kind, hco.obj, plan, write=not module.check_mode)
    if not module.check_mode and outcome["min_after"] != outcome["min_before"]:
        kept = patches.value_at(after_obj, hco.min_cpu_model_path)
        if kept != outcome["min_after"]:
            # HCO that stores hco.kubevirt.io/v1 (no minCPUModel there) drops the field on
            # conversion: report what the cluster kept, so a second run is unchanged too.
            module.warn("%s did not keep spec.obsoleteCPUs.minCPUModel: the cluster stores HyperConverged as "
                        "hco.kubevirt.io/v1, which has no such field; min_cpu_model has no effect there."
                        % hco.describe())
            outcome["min_after"] = kept
            outcome["changed"] = outcome["after"] != outcome["before"]
    result = dict(
        changed=outcome["changed"],
        cpu_models=outcome["after"],
        builtin=list(BUILTIN_OBSOLETE_CPU_MODELS),
        effective=_unique(list(BUILTIN_OBSOLETE_CPU_MODELS) + outcome["after"]),
        min_cpu_model=outcome["min_after"],
        hyperconverged=dict(name=hco.name, namespace=hco.namespace, api_version=hco.api_version),
    )
    if module.diff_mode:
        before, after = {"cpuModels": outcome["before"]}, {"cpuModels": outcome["after"]}
        if hco.min_cpu_model_path:
            before["minCPUModel"], after["minCPUModel"] = outcome["min_before"], outcome["min_after"]
        result["diff"] = {"before": before, "after": after}
    return result
