# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error family of the collection.

Every failure a module can report is a ``MaintenanceError``. Shared code raises it
(``raise ... from exc``); only the module wrapper turns it into ``fail_json``, so every
module fails the same way: one sentence naming the object and the cause, plus
structured details.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


class MaintenanceError(Exception):
    """Base of every error this collection reports to a user."""

    def __init__(self, msg, **details):
        super(MaintenanceError, self).__init__(msg)
        self.msg = msg
        self.details = details


class ConfigurationError(MaintenanceError):
    """The connection settings (kubeconfig, host, certificates) cannot be used."""


class InvalidInputError(MaintenanceError):
    """The task's options are inconsistent or name something that cannot exist."""


class ApiError(MaintenanceError):
    """The API server refused or failed a request."""

    def __init__(self, msg, status=None, reason=None, **details):
        super(ApiError, self).__init__(msg, status=status, reason=reason, **details)
        self.status = status
        self.reason = reason


class NotFoundError(ApiError):
    """The object does not exist (HTTP 404)."""


class ConflictError(ApiError):
    """The object changed or already exists (HTTP 409)."""


class TooManyRequestsError(ApiError):
    """HTTP 429: for an eviction, a PodDisruptionBudget says "not now"."""

    def __init__(self, msg, retry_after=None, **details):
        super(TooManyRequestsError, self).__init__(msg, **details)
        self.retry_after = retry_after


class ConnectionFailedError(MaintenanceError):
    """The API server could not be reached (refused, reset, TLS, timeout)."""


class MachineError(MaintenanceError):
    """A machine's BMC could not be reached, refused a request or failed it."""


class WaitTimeoutError(MaintenanceError):
    """A wait reached its deadline before the condition held."""


class BlockedError(MaintenanceError):
    """Maintenance cannot proceed safely; ``details['blockers']`` lists why."""


_STATUS_CAUSES = {
    400: "the request is malformed",
    401: "the credentials were rejected (expired or invalid token or certificate)",
    403: "permission denied",
    404: "it does not exist",
    405: "the API server does not allow this operation",
    409: "it was changed by someone else or already exists",
    410: "the requested version is too old",
    415: "the API server does not accept this patch type",
    422: "the API server rejected it as invalid",
    429: "the API server asked to retry later",
    500: "the API server failed with an internal error",
    503: "the API server is unavailable",
    504: "the API server timed out",
}

_STATUS_CLASSES = {404: NotFoundError, 409: ConflictError, 429: TooManyRequestsError}


def describe_object(kind, name=None, namespace=None):
    """'Node lab-worker-1', 'VirtualMachine ns1/vm1', 'VirtualMachines in ns1'."""
    if name:
        return "%s %s" % (kind, "%s/%s" % (namespace, name) if namespace else name)
    if namespace:
        return "%s in namespace %s" % (kind, namespace)
    return kind


def _status_message(body):
    """The human part of a Kubernetes Status body, if the body is one."""
    if not body:
        return None
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except ValueError:
        text = body.strip()
        return text[:300] if text and "<html" not in text.lower() else None
    if isinstance(data, dict):
        return data.get("message") or None
    return None


def api_error(status, verb, obj, body=None, retry_after=None):
    """Turn an HTTP error of the API server into one sentence naming the object and cause.

    ``verb`` is what we tried ('get', 'patch', 'evict', ...), ``obj`` a description from
    :func:`describe_object`.
    """
    cause = _STATUS_CAUSES.get(status) or ("the API server answered HTTP %s" % status)
    server_says = _status_message(body)
    msg = "Cannot %s %s: %s" % (verb, obj, cause)
    if server_says and status != 404:
        msg += " (%s)" % server_says.rstrip(".")
    msg += "."
    cls = _STATUS_CLASSES.get(status, ApiError)
    details = {"status": status, "reason": cause}
    if cls is TooManyRequestsError:
        return TooManyRequestsError(msg, retry_after=retry_after, server_message=server_says, **details)
    return cls(msg, server_message=server_says, **details)
