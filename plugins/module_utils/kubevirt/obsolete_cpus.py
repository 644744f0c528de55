# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hco_obsolete_cpus module: the CPU models VMs must not use, set in the HyperConverged CR
(hco.py finds it), with the lists HCO itself adds, release by release."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.hco import (
    find_kubevirt,
    hco_version,
    require,
)

# HCO's hard-coded obsolete CPU models (``hardcodedObsoleteCPUModels``), which it merges with the
# HyperConverged CR's own list into the KubeVirt CR's spec.configuration.obsoleteCPUModels, every
# value true (``getObsoleteCPUConfig``), and puts back whenever someone edits the KubeVirt CR
# (``UpdateCR`` copies the whole spec). Source, kubevirt/hyperconverged-cluster-operator:
#   v1.4.0 - v1.6.0    pkg/controller/operands/kubevirt.go
#   v1.7.0 - v1.15.2   controllers/operands/kubevirt.go
#   v1.16.0 - v1.18.1  controllers/handlers/kubevirt.go (main at 03da3cff7 unchanged)
# v1.4.0 - v1.11.0: the 15 models below; v1.11.1 adds Opteron_G1 and Opteron_G2; v1.15.0 adds
# each model's "-v1" variant (libvirt's versioned names). Before v1.4.0 HCO had no obsoleteCPUs
# and did not set the KubeVirt list.
# KubeVirt itself (kubevirt/kubevirt pkg/virt-handler/node-labeller/cpu_plugin.go) treats a model
# as obsolete when it is a key of the map, whatever its value, and uses its own
# DefaultObsoleteCPUModels (pkg/virt-handler/node-labeller/util/util.go) only when the map is
# empty; pkg/virt-config applies no default. With HCO the map is never empty.
_OBSOLETE_BASE_MODELS_15 = (
    "486", "pentium", "pentium2", "pentium3", "pentiumpro", "coreduo", "n270", "core2duo", "Conroe",
    "athlon", "phenom", "qemu64", "qemu32", "kvm64", "kvm32",
)
_OBSOLETE_BASE_MODELS = _OBSOLETE_BASE_MODELS_15 + ("Opteron_G1", "Opteron_G2")
# The newest list (HCO >= 1.15.0): each model also as '-v1'.
BUILTIN_OBSOLETE_CPU_MODELS = tuple(m for base in _OBSOLETE_BASE_MODELS for m in (base, base + "-v1"))
# (first HCO version, its hard-coded list), oldest first.
HCO_BUILTIN_OBSOLETE_CPU_MODELS = (
    ((1, 4, 0), _OBSOLETE_BASE_MODELS_15),
    ((1, 11, 1), _OBSOLETE_BASE_MODELS),
    ((1, 15, 0), BUILTIN_OBSOLETE_CPU_MODELS),
)
# The newest HCO minor release whose source was checked; later ones are not guessed.
HCO_NEWEST_KNOWN = (1, 18)
MIN_CPU_MODEL_WARNING = (
    "min_cpu_model sets spec.obsoleteCPUs.minCPUModel, which is deprecated and ignored by recent versions of the "
    "HyperConverged Cluster Operator; the CPU models a VM can use are decided by cpu_models and the built-in list.")


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


def builtin_for_version(version):
    """(HCO's hard-coded obsolete CPU models in ``version``, None), or (None, why they are not known)."""
    if not version:
        return None, "the HyperConverged resource reports no HCO version (status.versions)"
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version)
    parsed = tuple(int(part) for part in match.groups()) if match else None
    first = HCO_BUILTIN_OBSOLETE_CPU_MODELS[0][0]
    if parsed is None or parsed[:2] > HCO_NEWEST_KNOWN or parsed < first:
        return None, ("HCO version %s is not one whose built-in list is known (upstream HCO %s to %s.x; "
                      "OpenShift Virtualization versions are not mapped)"
                      % (version, ".".join(str(p) for p in first), ".".join(str(p) for p in HCO_NEWEST_KNOWN)))
    chosen = None
    for since, models in HCO_BUILTIN_OBSOLETE_CPU_MODELS:
        if parsed >= since:
            chosen = models
    return list(chosen), None


class ObsoleteCPUSource:
    """Where HCO's built-in obsolete CPU models are read from on this cluster.

    From the KubeVirt CR's ``spec.configuration.obsoleteCPUModels`` when it can be read
    (what KubeVirt really uses: HCO's list merged with the HyperConverged CR's), else from the
    table of HCO versions, else unknown (``models(...)`` is None).
    """

    def __init__(self, client, hco):
        self.version = hco_version(hco)
        self.table, version_reason = builtin_for_version(self.version)
        self.kubevirt, self.reason = find_kubevirt(client, hco)
        self.kubevirt_models = None
        if self.kubevirt is not None:
            configuration = (self.kubevirt.get("spec") or {}).get("configuration") or {}
            # KubeVirt treats every key as obsolete, whatever its value (cpu_plugin.go).
            self.kubevirt_models = list(configuration.get("obsoleteCPUModels") or {})
            if not self.kubevirt_models:
                meta = self.kubevirt.get("metadata") or {}
                self.reason = ("KubeVirt %s/%s has no spec.configuration.obsoleteCPUModels yet"
                               % (meta.get("namespace"), meta.get("name")))
        if self.kubevirt_models:
            self.source = "kubevirt"
        elif self.table is not None:
            self.source = "hco_version"
        else:
            self.source = "unknown"
            self.reason = "%s, and %s" % (self.reason, version_reason)

    def models(self, hco_models):
        """HCO's built-in models, given the models the HyperConverged CR lists now (None: unknown).

        From the KubeVirt CR: its models minus those the HyperConverged CR lists, except
        those also in the known hard-coded list of this HCO version (HCO keeps them when
        the CR drops them).
        """
        if self.source == "kubevirt":
            listed, kept = set(hco_models), set(self.table or ())
            return [m for m in self.kubevirt_models if m not in listed or m in kept]
        if self.source == "hco_version":
            return list(self.table)
        return None

    def describe_kubevirt(self):
        if self.source != "kubevirt":
            return None
        meta = self.kubevirt.get("metadata") or {}
        return dict(name=meta.get("name"), namespace=meta.get("namespace"))


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
    source = ObsoleteCPUSource(client, hco)
    if source.source == "unknown":
        module.warn("HCO's built-in obsolete CPU models are not known, so builtin and effective are not returned: "
                    "%s." % source.reason)
    known = source.models(patches.value_at(hco.obj, hco.cpu_models_path) or [])
    if state == "present" and known is not None:
        builtin = [m for m in cpu_models if m in known]
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
    if outcome["changed"]:
        module.events.normal(reference(after_obj, hco.kind), "ObsoleteCPUModelsChanged", "Update",
                             "spec.obsoleteCPUs.cpuModels %s -> %s%s" % (
                                 ", ".join(outcome["before"]) or "none", ", ".join(outcome["after"]) or "none",
                                 "; minCPUModel %s -> %s" % (outcome["min_before"], outcome["min_after"])
                                 if outcome["min_after"] != outcome["min_before"] else ""))
    # HCO writes the KubeVirt CR asynchronously: effective is what it writes for the list
    # after the task (getObsoleteCPUConfig), not waited for and read back.
    builtin = source.models(outcome["before"])
    result = dict(
        changed=outcome["changed"],
        cpu_models=outcome["after"],
        builtin=builtin,
        effective=None if builtin is None else _unique(builtin + outcome["after"]),
        builtin_source=source.source,
        builtin_reason=source.reason if source.source != "kubevirt" else None,
        kubevirt=source.describe_kubevirt(),
        hco_version=source.version,
        min_cpu_model=outcome["min_after"],
        hyperconverged=dict(name=hco.name, namespace=hco.namespace, api_version=hco.api_version),
    )
    if module.diff_mode:
        before, after = {"cpuModels": outcome["before"]}, {"cpuModels": outcome["after"]}
        if hco.min_cpu_model_path:
            before["minCPUModel"], after["minCPUModel"] = outcome["min_before"], outcome["min_after"]
        result["diff"] = {"before": before, "after": after}
    return result
