"""The Events the collection recorded about an object, as ``kubectl get events`` shows them."""

from kubernetes import client

REPORTING_CONTROLLER = "kubevirt-ops.io/maintenance"
RUN_ANNOTATION = "maintenance.kubevirt-ops.io/run"


def of(k8s, name, kind=None, namespace=None):
    """Our Events about the object ``name`` (``kubectl get events --field-selector
    involvedObject.name=NAME``), oldest first: dicts of reason, type, count, note, run, related,
    namespace and name."""
    selector = "involvedObject.name=%s" % name + (",involvedObject.kind=%s" % kind if kind else "")
    core = client.CoreV1Api(k8s)
    if namespace:
        items = core.list_namespaced_event(namespace, field_selector=selector).items
    else:
        items = core.list_event_for_all_namespaces(field_selector=selector).items
    ours = [e for e in items if e.reporting_component == REPORTING_CONTROLLER]
    ours.sort(key=lambda e: (e.event_time, int(e.metadata.resource_version)))
    return [{
        "reason": e.reason,
        "type": e.type,
        # The core view of an events.k8s.io Event: series.count is "count" (1 when no series).
        "count": e.series.count if e.series else 1,
        "note": e.message,
        "run": (e.metadata.annotations or {}).get(RUN_ANNOTATION),
        "related": e.related.name if e.related else None,
        "namespace": e.metadata.namespace,
        "name": e.metadata.name,
    } for e in ours]


def reasons(k8s, name, kind=None, namespace=None):
    return [e["reason"] for e in of(k8s, name, kind, namespace)]
