# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which VirtualMachines a task acts on, and acting on many of them at once.

The options are ``args.VM_SELECTION`` (doc fragment ``vm_selection``): one VM by
``name`` + ``namespace``, the VMs of a ``namespace`` or of ``all_namespaces``, narrowed
by ``label_selector``. Selection lists once; work on the selected VMs runs in a bounded
thread pool and reports one result per VM, in a stable order.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_key
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    InvalidInputError,
    MaintenanceError,
    NotFoundError,
)

# Concurrent writes per task: fast for thousands of VMs, gentle on the API server.
WORKERS = 8


class Selection:
    """The VM selection options of a task, validated."""

    def __init__(self, params):
        self.name = params.get("name")
        self.namespace = params.get("namespace")
        self.label_selector = params.get("label_selector")
        self.all_namespaces = bool(params.get("all_namespaces"))

    @property
    def given(self):
        return bool(self.name or self.namespace or self.label_selector or self.all_namespaces)

    @property
    def list_namespace(self):
        """The namespace to list in (None = all namespaces)."""
        return None if self.all_namespaces else self.namespace

    def validate(self):
        if self.name and self.all_namespaces:
            raise InvalidInputError(
                "Options name=%s and all_namespaces=true exclude each other: a VirtualMachine is named within one "
                "namespace, so give name with namespace." % self.name)
        if self.name and not self.namespace:
            raise InvalidInputError(
                "Option name=%s needs namespace: a VirtualMachine name is only unique within its namespace." % self.name)
        if self.name and self.label_selector:
            raise InvalidInputError(
                "Options name=%s and label_selector exclude each other: select one VirtualMachine by name, or several "
                "by label." % self.name)
        if self.namespace and self.all_namespaces:
            raise InvalidInputError(
                "Options namespace=%s and all_namespaces=true exclude each other." % self.namespace)
        if not self.namespace and not self.all_namespaces:
            raise InvalidInputError(
                "No VirtualMachines selected: give name and namespace, a namespace (optionally with label_selector), "
                "or all_namespaces=true (optionally with label_selector).")
        return self

    def describe(self):
        if self.name:
            return "VirtualMachine %s/%s" % (self.namespace, self.name)
        where = "in all namespaces" if self.all_namespaces else "in namespace %s" % self.namespace
        if self.label_selector:
            return "VirtualMachines %s matching '%s'" % (where, self.label_selector)
        return "VirtualMachines %s" % where


def _kubevirt_missing(client):
    return not client.kind_served("VirtualMachine")


def _not_installed_error():
    return InvalidInputError(
        "The API server does not serve kubevirt.io/v1 VirtualMachines: KubeVirt (or OpenShift Virtualization) is not "
        "installed on this cluster.")


def require_namespace(client, namespace):
    if client.get_or_none("Namespace", namespace) is None:
        raise InvalidInputError("Namespace %s does not exist." % namespace, namespace=namespace)


def select(client, selection, warn):
    """The selected VirtualMachine objects, sorted by namespace/name.

    A named VM or a namespace that does not exist is an error; a selector that matches
    nothing is not (``warn`` is told).
    """
    if selection.name:
        vm = client.get_or_none("VirtualMachine", selection.name, selection.namespace)
        if vm is None:
            require_namespace(client, selection.namespace)
            if _kubevirt_missing(client):
                raise _not_installed_error()
            raise InvalidInputError("VirtualMachine %s/%s does not exist." % (selection.namespace, selection.name),
                                    namespace=selection.namespace, name=selection.name)
        return [vm]
    if selection.namespace:
        require_namespace(client, selection.namespace)
    try:
        items, _rv = client.list("VirtualMachine", namespace=selection.list_namespace,
                                 label_selector=selection.label_selector)
    except NotFoundError as exc:
        raise _not_installed_error() from exc
    if not items:
        warn("No VirtualMachine matched (%s); nothing to do." % selection.describe())
    return sorted(items, key=object_key)


def vmis_on_node(client, name):
    """The VMIs not final on node ``name`` (listed by virt-controller's node label, checked against the status)."""
    return [vmi for vmi in client.list("VirtualMachineInstance",
                                       label_selector="%s=%s" % (kubevirt.NODE_NAME_LABEL, name))[0]
            if kubevirt.vmi_node(vmi) == name and not kubevirt.vmi_is_final(vmi)]


def index_by_key(objects):
    return dict((object_key(o), o) for o in objects)


def list_vmis(client, selection, vms):
    """The VMIs of the selected VMs, by (namespace, name): one request."""
    if not vms:
        return {}
    if len(vms) == 1:
        namespace, name = object_key(vms[0])
        vmi = client.get_or_none("VirtualMachineInstance", name, namespace)
        return {(namespace, name): vmi} if vmi else {}
    items, _rv = client.list("VirtualMachineInstance", namespace=selection.list_namespace)
    wanted = set(object_key(vm) for vm in vms)
    return dict((object_key(v), v) for v in items if object_key(v) in wanted)


class Outcome:
    """What happened to one item of a parallel run: its result or its error."""

    def __init__(self, item, result=None, error=None):
        self.item = item
        self.result = result
        self.error = error


def _capture(func, item):
    try:
        return Outcome(item, result=func(item))
    except MaintenanceError as exc:
        return Outcome(item, error=exc)


def run_parallel(func, items, workers=WORKERS):
    """``func(item)`` for every item, at most ``workers`` at a time; Outcomes in input order.

    A ``MaintenanceError`` of one item does not stop the others; any other exception is
    a bug and propagates.
    """
    items = list(items)
    if len(items) <= 1 or workers <= 1:
        return [_capture(func, item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(_capture, func, item) for item in items]
        return [future.result() for future in futures]


def raise_failures(outcomes, what, key_of=object_key, **details):
    """One error naming every item whose work failed (after the others were done).

    ``details`` (for example the per-VM results so far) go into the failed result.
    """
    failed = [o for o in outcomes if o.error is not None]
    if not failed:
        return
    causes = "; ".join(o.error.msg.rstrip(".") for o in failed[:5])
    more = " (and %d more)" % (len(failed) - 5) if len(failed) > 5 else ""
    raise MaintenanceError(
        "%s failed for %d of %d VirtualMachines: %s%s." % (what, len(failed), len(outcomes), causes, more),
        failed=[dict(namespace=key_of(o.item)[0], name=key_of(o.item)[1], error=o.error.msg) for o in failed],
        **details)
