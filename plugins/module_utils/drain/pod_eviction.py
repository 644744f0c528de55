# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The eviction of one pod, as a drain asks for it: an Eviction (or, with ``disable_eviction``,
a deletion with the grace period), and what the API server's answer means for the drain.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    ApiError,
    MaintenanceError,
    NotFoundError,
    TooManyRequestsError,
)


def evict_pod(client, name, namespace, options):
    """Ask once for the pod to go; returns ``(outcome, reason)``.

    ``granted`` (the pod is going), ``gone`` (it was gone already), ``blocked`` with the
    refusal (a budget, KubeVirt's webhook, a terminating namespace, virt-api down: a retry may
    succeed) or ``fatal`` with the error.
    """
    grace = options.grace_period
    try:
        if options.disable_eviction:
            body = {"apiVersion": "v1", "kind": "DeleteOptions"}
            if grace >= 0:
                body["gracePeriodSeconds"] = grace
            client.delete("Pod", name, namespace, body=body, missing_ok=False)
        else:
            body = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": name, "namespace": namespace}}
            if grace >= 0:
                body["deleteOptions"] = {"gracePeriodSeconds": grace}
            client.create("Pod", body, namespace=namespace, subresource="eviction", name=name,
                          retry_429=False, verb="evict")
        outcome, reason = "granted", None
    except NotFoundError:
        outcome, reason = "gone", None
    except TooManyRequestsError as exc:
        outcome, reason = "blocked", exc.details.get("server_message") or exc.msg
    except ApiError as exc:
        message = exc.details.get("server_message") or exc.msg
        if exc.status in (403, 400, 422) and "admission webhook" in (message or ""):
            outcome, reason = "blocked", message  # KubeVirt's webhook said no: a retry may succeed
        elif exc.status == 403 and "being terminated" in (message or ""):
            # NamespaceTerminating: no eviction can be created there, but the namespace
            # controller is deleting the pod anyway; wait for it, as kubectl drain does.
            outcome, reason = "blocked", message
        elif exc.status == 500 and "PodDisruptionBudget" in (message or ""):
            outcome, reason = "blocked", message  # more than one PDB: retried until fixed or the deadline
        elif kubevirt_settings.webhook_unreachable(exc.status, message):
            # virt-api's eviction webhook fails closed (failurePolicy Fail): while virt-api is
            # down every launcher-pod eviction gets a 500. Keep waiting; it comes back.
            outcome, reason = "blocked", kubevirt_settings.VIRT_API_DOWN % message
        else:
            outcome, reason = "fatal", exc
    except MaintenanceError as exc:
        outcome, reason = "fatal", exc
    return outcome, reason
