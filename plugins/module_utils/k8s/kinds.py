# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where each kind lives in the Kubernetes API: the kind table (``RESOURCES``), KubeVirt's
subresource API, and the URL path of a kind, an object or one of its subresources.

Only the client (client.py) requests these paths; other files name kinds, never paths.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Where each kind lives: (API prefix, plural, namespaced).
RESOURCES = {
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Namespace": ("/api/v1", "namespaces", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Event": ("/api/v1", "events", True),
    # The Events the modules record (k8s/events.py).
    "Event.events.k8s.io": ("/apis/events.k8s.io/v1", "events", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "SelfSubjectAccessReview": ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews", False),
    "VirtualMachine": ("/apis/kubevirt.io/v1", "virtualmachines", True),
    "VirtualMachineInstance": ("/apis/kubevirt.io/v1", "virtualmachineinstances", True),
    "VirtualMachineInstanceMigration": ("/apis/kubevirt.io/v1", "virtualmachineinstancemigrations", True),
    "KubeVirt": ("/apis/kubevirt.io/v1", "kubevirts", True),
    "HyperConverged": ("/apis/hco.kubevirt.io/v1beta1", "hyperconvergeds", True),
    "HyperConvergedV1": ("/apis/hco.kubevirt.io/v1", "hyperconvergeds", True),
    "APIService": ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    "NodeMaintenance": ("/apis/nodemaintenance.medik8s.io/v1beta1", "nodemaintenances", False),
    "LegacyNodeMaintenance": ("/apis/nodemaintenance.kubevirt.io/v1beta1", "nodemaintenances", False),
    # Remediation that maintenance pauses (module_utils/remediation.py): medik8s NodeHealthCheck,
    # OpenShift's machine API and Cluster API MachineHealthChecks with the Machines they select.
    "NodeHealthCheck": ("/apis/remediation.medik8s.io/v1alpha1", "nodehealthchecks", False),
    "MachineHealthCheck": ("/apis/machine.openshift.io/v1beta1", "machinehealthchecks", True),
    "Machine": ("/apis/machine.openshift.io/v1beta1", "machines", True),
    "CapiMachineHealthCheck": ("/apis/cluster.x-k8s.io/v1beta1", "machinehealthchecks", True),
    "CapiMachine": ("/apis/cluster.x-k8s.io/v1beta1", "machines", True),
    # node_decommission power_off=bmh (module_utils/power.py): Metal3's BareMetalHost.
    "BareMetalHost": ("/apis/metal3.io/v1alpha1", "baremetalhosts", True),
    # node_machine through a BareMetalHost (module_utils/machine/metal3.py): its firmware, BIOS settings and policy.
    "HostFirmwareComponents": ("/apis/metal3.io/v1alpha1", "hostfirmwarecomponents", True),
    "HostFirmwareSettings": ("/apis/metal3.io/v1alpha1", "hostfirmwaresettings", True),
    "FirmwareSchema": ("/apis/metal3.io/v1alpha1", "firmwareschemas", True),
    "HostUpdatePolicy": ("/apis/metal3.io/v1alpha1", "hostupdatepolicies", True),
}

# KubeVirt's aggregated API (served by virt-api) of the actions virtctl performs: start, stop,
# restart, migrate of VirtualMachines; pause, freeze, softreboot... of VirtualMachineInstances.
# Routes: kubevirt/kubevirt pkg/virt-api/api.go (subws.PUT(...SubResourcePath("restart")) etc.).
SUBRESOURCE_GROUP = "subresources.kubevirt.io"
SUBRESOURCE_APIS = {
    "VirtualMachine": "/apis/%s/v1" % SUBRESOURCE_GROUP,
    "VirtualMachineInstance": "/apis/%s/v1" % SUBRESOURCE_GROUP,
}


def api_version_of(kind):
    """(API group, 'group/version' as in apiVersion, plural) of a kind of ``RESOURCES``."""
    base, plural, _namespaced = RESOURCES[kind]
    version = base[len("/apis/"):] if base.startswith("/apis/") else base[len("/api/"):]
    return (version.split("/")[0] if "/" in version else ""), version, plural


def resource_path(kind, name=None, namespace=None, subresource=None, prefix=None):
    """The URL path of a kind (all namespaces when ``namespace`` is None)."""
    base, plural, namespaced = RESOURCES[kind]
    if prefix:
        base = prefix
    parts = [base]
    if namespaced and namespace:
        parts.append("namespaces/%s" % namespace)
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))
