"""What the admission webhooks decide (KubeVirt's virt-api and NMO's webhook).

- Eviction of a virt-launcher pod (upstream's pod-eviction admitter): by effective
  eviction strategy and migratability, mark the VMI for evacuation and allow, or deny
  with 429 so drains keep retrying, or simply allow. The apiserver consults the
  VMI's PodDisruptionBudget after this webhook has allowed.
- VirtualMachine create/update: ``running`` and ``runStrategy`` are mutually exclusive.
- VirtualMachineInstanceMigration create: the VMI must exist, run, be migratable and
  have no other migration in flight.
- NodeMaintenance create/update: the node must exist, only one CR per node, and
  ``spec.nodeName`` is immutable.
"""

import logging

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import effective_eviction_strategy

log = logging.getLogger(__name__)


def allowed(request, warnings=None):
    response = {"uid": request.get("uid"), "allowed": True}
    if warnings:
        response["warnings"] = warnings
    return response


def denied(request, message, code=403, reason=None):
    status = {"status": "Failure", "message": message, "code": code}
    if reason:
        status["reason"] = reason
    return {"uid": request.get("uid"), "allowed": False, "status": status}


class Admission:
    def __init__(self, sim):
        self.sim = sim
        self.kube = sim.kube

    # -- pods/eviction -------------------------------------------------------------------

    def eviction(self, request):
        namespace, name = request.get("namespace"), request.get("name")
        try:
            pod = self.kube.get(k.PODS, name, namespace)
        except k.ApiError:
            return allowed(request)  # the apiserver answers 404 itself
        if o.labels(pod).get(o.APP_LABEL) != o.LAUNCHER:
            return allowed(request)
        vmi_name = o.annotations(pod).get(o.DOMAIN_ANNOTATION)
        if not vmi_name:
            return allowed(request)
        vmi = self.sim.vmis.get_by(namespace, vmi_name) or self.kube.get_or_none(k.VMIS, vmi_name, namespace)
        if vmi is None:
            return denied(
                request, f"kubevirt failed getting the vmi: virtualmachineinstance {vmi_name} not found", 429
            )

        strategy = effective_eviction_strategy(vmi, self.sim.config)
        migratable = o.vmi_migratable(vmi)
        mark = False
        if strategy == "LiveMigrate":
            if not migratable:
                return denied(
                    request,
                    f"VMI {vmi_name} is configured with an eviction strategy but is not live-migratable",
                    429,
                    "TooManyRequests",
                )
            mark = True
        elif strategy == "LiveMigrateIfPossible":
            mark = migratable
        elif strategy == "External":
            mark = True

        node = o.status(vmi).get("nodeName")
        already = o.status(vmi).get("evacuationNodeName")
        # Only the pod the VMI runs in asks the VMI to leave; a migration target's
        # eviction is left to the disruption budget.
        if mark and not already and node and node == o.pod_node(pod):
            dry_run = bool(request.get("dryRun"))
            if not dry_run:
                try:
                    self.kube.patch(
                        k.VMIS,
                        vmi_name,
                        {"status": {"evacuationNodeName": node}},
                        namespace,
                        subresource="status",
                    )
                except k.ApiError as e:
                    return denied(request, f"kubevirt failed marking the vmi for eviction: {e.message}", 429)
                log.info("%s/%s: marked for evacuation from %s", namespace, vmi_name, node)
        return allowed(request)

    # -- VirtualMachine ------------------------------------------------------------------

    def virtual_machine(self, request):
        vm = request.get("object") or {}
        spec = o.spec(vm)
        if spec.get("running") is not None and spec.get("runStrategy") is not None:
            return denied(
                request,
                "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, "
                "please use RunStrategy instead",
                422,
                "Invalid",
            )
        warnings = []
        if spec.get("running") is not None:
            warnings.append("spec.running is deprecated, please use spec.runStrategy instead.")
        return allowed(request, warnings)

    # -- VirtualMachineInstanceMigration -------------------------------------------------

    def migration(self, request):
        migration = request.get("object") or {}
        namespace = request.get("namespace") or o.meta(migration, "namespace")
        vmi_name = o.spec(migration).get("vmiName")
        if not vmi_name:
            return denied(request, "spec.vmiName is required", 422, "Invalid")
        vmi = self.kube.get_or_none(k.VMIS, vmi_name, namespace)
        if vmi is None:
            return denied(request, f'the VMI "{namespace}/{vmi_name}" does not exist', 422, "Invalid")
        if o.vmi_is_final(vmi):
            return denied(request, "Cannot migrate VMI in finalized state.", 422, "Invalid")
        c = o.condition(vmi, "LiveMigratable")
        if c is not None and c.get("status") == "False":
            return denied(
                request,
                f"Cannot migrate VMI, Reason: {c.get('reason')}, Message: {c.get('message')}",
                422,
                "Invalid",
            )
        for other in self.sim.vmims.by_index("vmi", f"{namespace}/{vmi_name}"):
            if o.status(other).get("phase") not in o.FINAL_MIGRATION_PHASES and not o.deleting(other):
                return denied(
                    request,
                    f"in-flight migration detected. Active migration job ({o.meta(other, 'name')}) "
                    f"is currently already in progress for VMI {vmi_name}.",
                    422,
                    "Invalid",
                )
        return allowed(request)

    # -- NodeMaintenance -----------------------------------------------------------------

    def node_maintenance(self, request):
        nm = request.get("object") or {}
        node_name = o.spec(nm).get("nodeName")
        if request.get("operation") == "UPDATE":
            old = request.get("oldObject") or {}
            if o.spec(old).get("nodeName") != node_name:
                return denied(request, "updating spec.NodeName isn't allowed", 403, "Forbidden")
            return allowed(request)
        if not node_name or self.kube.get_or_none(k.NODES, node_name) is None:
            return denied(request, f"invalid nodeName, no node with name {node_name} found", 403, "Forbidden")
        for resource in (k.NODEMAINTENANCES, k.LEGACY_NODEMAINTENANCES):
            try:
                existing = self.kube.list(resource).get("items") or []
            except k.ApiError:
                continue
            for other in existing:
                if o.spec(other).get("nodeName") == node_name and o.meta(other, "name") != o.meta(nm, "name"):
                    return denied(
                        request,
                        f"invalid nodeName, a NodeMaintenance for node {node_name} already exists",
                        403,
                        "Forbidden",
                    )
        return allowed(request)
