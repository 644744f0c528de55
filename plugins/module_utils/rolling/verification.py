# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The check after each node of a rolling maintenance (maintenance_verify): wait (watching,
never polling) until the node is Ready (and schedulable once it left maintenance) and every VM
that ran before the run runs again, and report the live migrations that left the node with
their timestamps, for the report.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import namespaced_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.run_state import vm_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import parse_time_utc
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Informer, wait_until


def _vm_key(item):
    if isinstance(item, str):
        return item
    return namespaced_name(item.get("namespace"), item.get("name"))


def _running_keys(vmis, ready=True):
    """{VM key: node} of the VMIs in service (Running and Ready); with ``ready=False``, of those
    in phase Running whose Ready condition is not True."""
    keys = {}
    for vmi in vmis:
        if (kubevirt.vmi_in_service(vmi) if ready else kubevirt.vmi_running_not_ready(vmi)):
            namespace, name, _owned = vm_of(vmi)
            keys[namespaced_name(namespace, name)] = kubevirt.vmi_node(vmi)
    return keys


def migrations_from(vmis, node, since=None):
    """Completed live migrations out of ``node`` (after ``since``) from the VMIs' migrationState."""
    result = []
    for vmi in vmis:
        state = (vmi.get("status") or {}).get("migrationState") or {}
        if state.get("sourceNode") != node or not state.get("completed") or state.get("failed"):
            continue
        start = parse_time_utc(state.get("startTimestamp"))
        if since is not None and start is not None and start < since:
            continue
        namespace, name, _owned = vm_of(vmi)
        result.append({"namespace": namespace, "name": name, "source": node, "target": state.get("targetNode"),
                       "start": state.get("startTimestamp"), "end": state.get("endTimestamp")})
    return sorted(result, key=lambda m: (m["end"] or "", m["namespace"], m["name"]))


class _Verification(object):
    """What verify waits for, watched through informers: the node and the VMs that must run again."""

    def __init__(self, client, params):
        self.name = params.get("name")
        self.want_schedulable = params.get("schedulable", True)
        self.expected = [_vm_key(v) for v in params.get("running_vms") or []]
        self.may_stop = set(_vm_key(v) for v in params.get("expected_stopped") or [])
        self.timeout = params.get("timeout") or 600
        self.since = parse_time_utc(params.get("migrations_since"))
        if self.since is not None:
            # migrationState timestamps have whole seconds; do not lose a migration that began in the same second.
            self.since -= datetime.timedelta(seconds=1)
        if not self.name and not self.expected:
            raise InvalidInputError("Give a node to wait for ('name') or VMs that must run ('running_vms').")
        self.owned = dict((_vm_key(v), bool(v.get("vm", True)))
                          for v in params.get("running_vms") or [] if isinstance(v, dict))
        self.informers = []
        self.node_informer = None
        self.vmi_informer = None
        self.vm_informer = None
        if self.name:
            nodes_mod.get_node(client, self.name)
            self.node_informer = self._watch(Informer(client, "Node", field_selector="metadata.name=%s" % self.name))
        if self.expected or self.wants_migrations():
            self._watch_vms(client)

    def _watch(self, informer):
        self.informers.append(informer)
        return informer

    def _watch_vms(self, client):
        if not client.kind_served("VirtualMachineInstance"):
            if self.expected:
                raise InvalidInputError("VMs were expected to run, but KubeVirt is not installed on this cluster.")
            return
        self.vmi_informer = self._watch(Informer(client, "VirtualMachineInstance"))
        if self.expected:
            # A VM its owner deleted meanwhile was not lost: it is not waited for.
            self.vm_informer = self._watch(Informer(client, "VirtualMachine"))

    def wants_migrations(self):
        return self.since is not None and bool(self.name)

    def running(self, ready=True):
        return _running_keys(self.vmi_informer.items(), ready=ready) if self.vmi_informer else {}

    def deleted(self):
        """Expected VMs whose VirtualMachine no longer exists (or is being deleted)."""
        if self.vm_informer is None:
            return []
        gone = []
        for key in self.expected:
            if not self.owned.get(key, True):
                continue  # a stand-alone VMI that stopped is lost: nothing would start it again
            namespace, vm_name = key.split("/", 1)
            vm = self.vm_informer.get(vm_name, namespace)
            if vm is None or (vm.get("metadata") or {}).get("deletionTimestamp"):
                gone.append(key)
        return gone

    def node_ok(self):
        if self.node_informer is None:
            return True
        node = self.node_informer.get(self.name)
        if node is None or not nodes_mod.is_ready(node):
            return False
        if self.want_schedulable and (nodes_mod.is_cordoned(node) or node_marks.marked_for_maintenance(node)):
            return False
        return True

    def missing(self):
        running = self.running()
        gone = set(self.deleted())
        return [k for k in self.expected if k not in running and k not in self.may_stop and k not in gone]

    def check(self):
        return self.node_ok() and not self.missing()

    def _node_pending(self):
        """What the node still lacks, as a list of at most one sentence."""
        if self.node_informer is None:
            return []
        node = self.node_informer.get(self.name)
        if node is None:
            return ["node %s is gone" % self.name]
        if not nodes_mod.is_ready(node):
            return ["node %s is not Ready (%s)" % (self.name, nodes_mod.not_ready_reason(node))]
        if not self.node_ok():
            return ["node %s is still cordoned or marked for maintenance" % self.name]
        return []

    def pending(self):
        parts = self._node_pending()
        lost = self.missing()
        if lost:
            # A VMI in phase Running whose Ready condition is not True is not back in service yet.
            unready = self.running(ready=False)
            parts.append("%d VM%s that ran before %s not running: %s" % (
                len(lost), "" if len(lost) == 1 else "s", "is" if len(lost) == 1 else "are",
                ", ".join(k + (" (Running on node %s, not Ready)" % unready[k] if k in unready else "")
                          for k in lost[:10])))
        return "; ".join(parts)

    def what(self):
        if not self.name:
            return "every VM that ran before to run"
        what = "node %s to be Ready%s" % (self.name, " and schedulable" if self.want_schedulable else "")
        if self.expected:
            what += " and every VM that ran before to run"
        return what

    def wait(self):
        try:
            wait_until(self.check, self.informers, self.timeout, self.what(), describe_pending=self.pending)
        except WaitTimeoutError as exc:
            lost = self.missing() if self.vmi_informer else []
            raise BlockedError(exc.msg, node=self.name, not_running=lost) from exc
        finally:
            for informer in self.informers:
                informer.stop()

    def _node_state(self):
        node = self.node_informer.get(self.name)
        return {"name": self.name, "ready": nodes_mod.is_ready(node), "schedulable": not nodes_mod.is_cordoned(node),
                "in_maintenance": node_marks.marked_for_maintenance(node)}

    def result(self):
        name, expected = self.name, self.expected
        vmis = self.vmi_informer.items() if self.vmi_informer else []
        running = _running_keys(vmis)
        return {
            "changed": False,
            "node": self._node_state() if name else None,
            "vms": {
                "expected": len(expected),
                "running": sum(1 for k in expected if k in running),
                "stopped_as_expected": sorted(k for k in expected if k in self.may_stop and k not in running),
                "deleted": sorted(k for k in self.deleted() if k not in running),
                "not_running": [],
                "on_node": sorted(k for k, where in running.items() if name and where == name),
                "where": dict((k, running[k]) for k in expected if k in running),
            },
            "migrations": migrations_from(vmis, name, self.since) if self.wants_migrations() else [],
        }


def _verified(client, params):
    verification = _Verification(client, params)
    verification.wait()
    return verification


def verify(client, params):
    """Wait until the node (when named) is Ready and schedulable and every VM that ran runs again."""
    return _verified(client, params).result()


def run(module):
    """maintenance_verify: the wait, and the node's Event once it is back (its maintenance story's end)."""
    verification = _verified(module.client, module.params)
    result = verification.result()
    node = verification.node_informer.get(verification.name) if verification.name else None
    if node is not None:
        vms = result["vms"]
        if module.params["schedulable"]:
            module.events.normal(reference(node, "Node"), "BackInService", "Verify",
                                 "Ready and schedulable again; %d of %d VMs that ran before run" % (
                                     vms["running"], vms["expected"]))
        else:
            module.events.normal(reference(node, "Node"), "NodeReady", "Verify", "Ready again after its maintenance")
    return result
