# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HyperConverged custom resource (HCO): finding it, its version and the KubeVirt CR it owns.
What the hco_obsolete_cpus module changes in it is obsolete_cpus.py's.

``hco.kubevirt.io/v1beta1`` (what OpenShift Virtualization documents) keeps the cluster
eviction strategy in ``spec.evictionStrategy`` and the obsolete CPU models in
``spec.obsoleteCPUs.{cpuModels,minCPUModel}``; the newer ``hco.kubevirt.io/v1`` moves
them to ``spec.virtualization.{evictionStrategy,obsoleteCPUModels}``. v1beta1 is used
whenever the cluster serves it (HCO's reconciler reads it), v1 otherwise.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, InvalidInputError

DEFAULT_NAME = "kubevirt-hyperconverged"
# OpenShift Virtualization installs HCO here; upstream HCO there.
DEFAULT_NAMESPACES = ("openshift-cnv", "kubevirt-hyperconverged")

# HCO names its KubeVirt CR "kubevirt-" + the HyperConverged name, in its own namespace.
HCO_KUBEVIRT_NAME = "kubevirt-" + DEFAULT_NAME
# The entry of the HyperConverged status.versions that holds HCO's version
# (controllers/hyperconverged/hyperconverged_controller.go, hcoVersionName).
HCO_VERSION_NAME = "operator"


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


def hco_version(hco):
    """HCO's version as the HyperConverged status reports it (``status.versions``), or None."""
    for entry in (hco.obj.get("status") or {}).get("versions") or []:
        if entry.get("name") == HCO_VERSION_NAME:
            return entry.get("version") or None
    return None


def find_kubevirt(client, hco):
    """(the KubeVirt CR HCO writes, None), or (None, why it cannot be read).

    Lists KubeVirt in every namespace (one in HCO's namespace wins when there are several);
    without the right to list, reads HCO's own ``kubevirt-kubevirt-hyperconverged`` in HCO's
    namespace.
    """
    if not client.kind_served("KubeVirt"):
        return None, "the API server does not serve kubevirt.io/v1 KubeVirt"
    try:
        items, _rv = client.list("KubeVirt")
    except ApiError as exc:
        try:
            obj = client.get_or_none("KubeVirt", HCO_KUBEVIRT_NAME, hco.namespace)
        except ApiError:
            return None, "the KubeVirt resources cannot be read (%s)" % exc.msg
        if obj is None:
            return None, ("the KubeVirt resources cannot be listed (%s) and KubeVirt %s/%s does not exist"
                          % (exc.msg, hco.namespace, HCO_KUBEVIRT_NAME))
        return obj, None
    if not items:
        return None, "no KubeVirt resource exists"
    own = [i for i in items if (i.get("metadata") or {}).get("namespace") == hco.namespace]
    if len(own) == 1:
        return own[0], None
    if len(items) == 1:
        return items[0], None
    return None, "%d KubeVirt resources exist, none of them in namespace %s" % (len(items), hco.namespace)
