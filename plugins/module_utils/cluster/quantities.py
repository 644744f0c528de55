# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resource quantities as the scheduler counts them: Kubernetes quantities ('250m', '1.5Gi')
as numbers, what a pod requests, what a node has room for, and amounts written back for
people ('cpu 500m', 'memory 2Gi').
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_SUFFIXES = {
    "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]{0,2})$")


def parse_quantity(value):
    """A Kubernetes resource quantity ('250m', '1.5Gi', '2', 1e3) -> float; 0 when unparseable."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        return 0.0
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


RESOURCE_NAMES = ("cpu", "memory")  # always counted; any other requested resource is counted when requested


def _add_requests(totals, requests, combine):
    for name, value in (requests or {}).items():
        amount = parse_quantity(value)
        if amount:
            totals[name] = combine(totals.get(name, 0.0), amount)


def pod_requests(pod_spec):
    """{'cpu': cores, 'memory': bytes, 'pods': 1, other resource: amount} the scheduler reserves for the pod.

    Every requested resource counts, as in the scheduler's NodeResourcesFit: hugepages-<size>,
    ephemeral-storage and extended resources (GPUs, KubeVirt's devices.kubevirt.io/kvm) besides
    CPU and memory; containers add up, overhead adds. Init containers run one after the other: the
    pod needs the most any of them needs, beside the sidecars (init containers with restartPolicy
    Always) started before it, which keep running and add up with the containers (PodRequests,
    k8s.io/component-helpers/resource/helpers.go).
    """
    def add(a, b):
        return a + b

    totals = dict((r, 0.0) for r in RESOURCE_NAMES)
    for container in pod_spec.get("containers") or []:
        _add_requests(totals, (container.get("resources") or {}).get("requests"), add)
    sidecars, init_peak = {}, {}
    for container in pod_spec.get("initContainers") or []:
        requests = (container.get("resources") or {}).get("requests")
        if container.get("restartPolicy") == "Always":
            _add_requests(totals, requests, add)
            _add_requests(sidecars, requests, add)
            _add_requests(init_peak, sidecars, max)
        else:
            during = dict(sidecars)
            _add_requests(during, requests, add)
            _add_requests(init_peak, during, max)
    _add_requests(totals, init_peak, max)
    _add_requests(totals, pod_spec.get("overhead"), add)
    totals["pods"] = 1.0
    return totals


def node_room(node):
    """The node's allocatable resources as numbers (pod slots 110 when not reported)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    room = dict((name, parse_quantity(value)) for name, value in allocatable.items())
    for name in RESOURCE_NAMES:
        room.setdefault(name, 0.0)
    room["pods"] = room.get("pods") or 110.0
    return room


def format_amount(resource, value):
    """'cpu 500m', 'memory 2Gi', '3 pods', 'hugepages-2Mi 1Gi', 'nvidia.com/gpu 1'."""
    value = max(0.0, value)
    if resource == "cpu":
        return "cpu " + format_cpu(value)
    if resource == "pods":
        return "%d pods" % value
    if resource == "memory" or resource.startswith("hugepages-") or resource == "ephemeral-storage":
        return "%s %s" % (resource, format_memory(value))
    return "%s %s" % (resource, ("%d" % value) if abs(value - round(value)) < 1e-9 else ("%g" % value))


def format_cpu(cores):
    if cores >= 1 and abs(cores - round(cores)) < 1e-9:
        return "%d" % round(cores)
    return "%dm" % round(cores * 1000)


def format_memory(value):
    for suffix, size in (("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10)):
        if value >= size:
            amount = value / size
            return ("%d%s" % (round(amount), suffix)) if abs(amount - round(amount)) < 0.05 else \
                ("%.1f%s" % (amount, suffix))
    return "%d" % round(value)
