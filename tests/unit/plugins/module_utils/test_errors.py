"""API failures read as one sentence naming the object and the cause."""

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import errors


@pytest.mark.parametrize("status,cls", [(404, errors.NotFoundError), (409, errors.ConflictError),
                                        (429, errors.TooManyRequestsError), (403, errors.ApiError),
                                        (500, errors.ApiError), (418, errors.ApiError)])
def test_classes_by_status(status, cls):
    err = errors.api_error(status, "patch", errors.describe_object("VirtualMachine", "vm1", "ns1"), b"")
    assert err.__class__ is cls
    assert err.msg.startswith("Cannot patch VirtualMachine ns1/vm1: ")
    assert isinstance(err, errors.MaintenanceError)


def test_server_message_is_kept_but_not_for_404():
    body = b'{"kind":"Status","message":"admission webhook denied the request: nodeName is immutable"}'
    err = errors.api_error(422, "update", "NodeMaintenance nm-1", body)
    assert err.msg == ("Cannot update NodeMaintenance nm-1: the API server rejected it as invalid "
                       "(admission webhook denied the request: nodeName is immutable).")
    err = errors.api_error(404, "get", "Node n9", b'{"message":"nodes \\"n9\\" not found"}')
    assert err.msg == "Cannot get Node n9: it does not exist."


def test_html_bodies_are_not_pasted_into_messages():
    err = errors.api_error(502, "get", "Node n1", b"<html><body>Bad gateway</body></html>")
    assert err.msg == "Cannot get Node n1: the API server answered HTTP 502."


def test_describe_object():
    assert errors.describe_object("Node", "n1") == "Node n1"
    assert errors.describe_object("Pods", namespace="ns") == "Pods in namespace ns"
    assert errors.describe_object("Nodes") == "Nodes"
