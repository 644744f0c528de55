"""VirtualMachineInstance controller: the launcher pod, and the VMI status that follows it.

Phases follow the pod as upstream's virt-controller and virt-handler report them:
pod created -> Scheduling, pod bound to a node -> Scheduled (status.nodeName and the
kubevirt.io/nodeName label set), pod running and ready -> Running. A VMI whose pod
is gone (evicted, deleted, or garbage-collected after its node was deleted) fails;
the VM controller then applies the run strategy. A VMI on a NotReady node keeps its
place while its pod object exists, as upstream does.

The simulated guest "boots" once its disruption budget (when one is required) is in
force, so a drain that starts right after a VMI is Running meets the same 429s it
would meet on a real cluster, where booting takes far longer than the budget.
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.launcher_pod import launcher_pod
from lab.kubevirt_sim.migratability import live_migratable_condition
from lab.kubevirt_sim.pdb import pdb_required
from lab.kubevirt_sim.workqueue import Controller, Expectations


def _owner_vmi_key(obj):
    for ref in o.meta(obj, "ownerReferences") or []:
        if ref.get("kind") == "VirtualMachineInstance":
            return f"{o.meta(obj, 'namespace')}/{ref['name']}"
    return None


class VMIController(Controller):
    name = "vmi-controller"
    workers = 2

    def __init__(self, sim):
        super().__init__(sim)
        self.pod_expectations = Expectations()
        sim.vmis.add_handler(lambda event, vmi, old: self.enqueue(k.key_of(vmi)))
        sim.pods.add_handler(self._on_owned)
        sim.pdbs.add_handler(self._on_owned)
        sim.pvcs.add_handler(self._on_pvc)
        sim.vmims.add_handler(self._on_migration)
        sim.nodes.add_handler(self._on_node)
        sim.kubevirts.add_handler(lambda event, obj, old: self._enqueue_all())

    def _on_owned(self, event, obj, old):
        key = _owner_vmi_key(obj)
        if key:
            self.enqueue(key)

    def _on_pvc(self, event, pvc, old):
        for vmi in self.sim.vmis.by_index("claim", k.key_of(pvc)):
            self.enqueue(k.key_of(vmi))

    def _on_migration(self, event, migration, old):
        self.enqueue(f"{o.meta(migration, 'namespace')}/{o.spec(migration).get('vmiName')}")

    def _on_node(self, event, node, old):
        if event == "DELETED" or o.node_ready(node) != o.node_ready(old or node):
            for vmi in self.sim.vmis.by_index("node", o.meta(node, "name")):
                self.enqueue(k.key_of(vmi))

    def _enqueue_all(self):
        for key in self.sim.vmis.keys():
            self.enqueue(key)

    def all_keys(self):
        return self.sim.vmis.keys()

    # -- reconcile ----------------------------------------------------------------------

    def reconcile(self, key):
        vmi = self.sim.vmis.get(key)
        if vmi is None:
            return None
        pods = self.sim.pods.by_index("created-by", o.meta(vmi, "uid"))
        if o.deleting(vmi):
            return self._finalize(vmi, pods)
        phase = o.status(vmi).get("phase") or ""
        if phase in o.FINAL_VMI_PHASES:
            self._delete_pods(pods)
            self.sim.budgets.sync(vmi, migratable=False)
            return None

        migratable = live_migratable_condition(vmi, self.sim.pvcs.get_by)
        self.sim.budgets.sync(vmi, migratable["status"] == "True")

        if phase in ("", "Pending"):
            return self._create_launcher(key, vmi, pods, migratable)

        node_name = o.status(vmi).get("nodeName")
        if node_name and self.sim.nodes.synced and self.sim.nodes.get(node_name) is None:
            self._fail(vmi, pods, "NodeDeleted", f"node {node_name} was deleted", force=True)
            return None

        active = self._active_pod(vmi, pods)
        if active is None:
            if self.pod_expectations.pending(key) == o.meta(vmi, "uid"):
                return 0.5
            return self._launcher_gone(key)
        self.pod_expectations.observed(key)

        if phase == "Running" and o.annotations(vmi).get(o.GUEST_SHUTDOWN_ANNOTATION) == "true":
            # The phase first: once final, the next pass removes the pod.
            self._finish(vmi, "Succeeded", "GuestShutdown", "the guest shut itself down")
            return None
        if o.pod_phase(active) in ("Failed", "Succeeded"):
            self._finish(vmi, "Failed" if o.pod_phase(active) == "Failed" else "Succeeded", "PodTerminated")
            return None
        self._sync_status(vmi, active, migratable)
        return None

    @staticmethod
    def _active_pod(vmi, pods):
        """The pod the guest runs in: the one on status.nodeName once scheduled
        (after a migration that is the former target), before that the first
        launcher that is not a migration target."""
        node_name = o.status(vmi).get("nodeName")
        for pod in pods:
            if node_name and o.pod_node(pod) == node_name:
                return pod
            if not node_name and not o.is_migration_target(pod):
                return pod
        return None

    def _create_launcher(self, key, vmi, pods, migratable):
        uid = o.meta(vmi, "uid")
        if not any(not o.is_migration_target(p) for p in pods):
            if self.pod_expectations.pending(key) == uid:
                return 0.5
            try:
                self.kube.create(k.PODS, launcher_pod(vmi))
            except k.ApiError as e:
                if e.status == 403 and "serviceaccount" in e.message:
                    return 1.0  # a brand-new namespace: its default ServiceAccount is coming
                raise
            self.pod_expectations.expect(key, uid)
        patch = {
            "phase": "Scheduling",
            "conditions": o.merge_conditions(
                o.status(vmi).get("conditions"),
                [{"type": "Ready", "status": "False", "reason": "PodNotScheduled"}, migratable],
            ),
            "guestOSInfo": {},
            "qosClass": "Burstable",
        }
        self._patch_status(vmi, patch, precondition=True)
        return None

    def _sync_status(self, vmi, pod, migratable):
        st = o.status(vmi)
        phase = st.get("phase")
        node = o.pod_node(pod)
        patch = {}
        if phase == "Scheduling" and node:
            phase = patch["phase"] = "Scheduled"
            patch["nodeName"] = node
        if phase == "Scheduled" and o.pod_phase(pod) == "Running" and o.pod_ready(pod):
            needs_budget = pdb_required(vmi, self.sim.config, migratable["status"] == "True")
            if not needs_budget or self.sim.budgets.in_force(vmi):
                phase = patch["phase"] = "Running"

        ready = phase == "Running" and o.pod_ready(pod)
        conditions = [
            (
                {"type": "Ready", "status": "True"}
                if ready
                else {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodNotReady" if node else "PodNotScheduled",
                }
            ),
            migratable,
        ]
        if o.pod_unschedulable(pod):
            scheduled = o.condition(pod, "PodScheduled")
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": scheduled.get("message", ""),
                }
            )
        if not o.conditions_equal(st.get("conditions"), conditions):
            patch["conditions"] = o.merge_conditions(st.get("conditions"), conditions)

        pod_ip = o.status(pod).get("podIP")
        if pod_ip:
            interfaces = [
                {"name": "default", "ipAddress": pod_ip, "ipAddresses": [pod_ip], "infoSource": "domain"}
            ]
            if st.get("interfaces") != interfaces:
                patch["interfaces"] = interfaces
        if node:
            active_pods = {o.meta(pod, "uid"): node}
            if st.get("activePods") != active_pods:
                patch["activePods"] = active_pods
        current_node = patch.get("nodeName") or st.get("nodeName")
        if st.get("evacuationNodeName") and st.get("evacuationNodeName") != current_node:
            patch["evacuationNodeName"] = None  # it left the node it was asked to leave
        method = "LiveMigration" if migratable["status"] == "True" else None
        if method and st.get("migrationMethod") != method:
            patch["migrationMethod"] = method
        # The node label comes first, as KubeVirt's controller sets it when the VMI is
        # scheduled: nobody sees a Running VMI without it.
        if current_node and o.labels(vmi).get(o.NODE_NAME_LABEL) != current_node:
            vmi = self.kube.patch(
                k.VMIS,
                o.meta(vmi, "name"),
                {"metadata": {"labels": {o.NODE_NAME_LABEL: current_node},
                              "resourceVersion": o.meta(vmi, "resourceVersion")}},
                o.meta(vmi, "namespace"),
            )
        if patch:
            self._patch_status(vmi, patch, precondition="phase" in patch)

    def _launcher_gone(self, key):
        """The cache shows no launcher where the VMI runs. Confirm from the apiserver
        (a migration may have just moved the VMI) before failing it."""
        namespace, name = k.split_key(key)
        vmi = self.kube.get_or_none(k.VMIS, name, namespace)
        if vmi is None or o.deleting(vmi) or o.vmi_is_final(vmi):
            return None
        selector = f"{o.CREATED_BY_LABEL}={o.meta(vmi, 'uid')}"
        pods = self.kube.list(k.PODS, namespace, label_selector=selector).get("items") or []
        if self._active_pod(vmi, pods) is not None:
            return 0.5  # the cache is behind
        self._fail(vmi, pods, "PodTerminated", "the virt-launcher pod is gone (evicted or deleted)")
        return None

    def _fail(self, vmi, pods, reason, message, force=False):
        self._delete_pods(pods, grace_period=0 if force else None)
        self._finish(vmi, "Failed", reason, message)

    def _finish(self, vmi, phase, reason, message=""):
        self.log.info("%s: VMI %s (%s)", k.key_of(vmi), phase, message or reason)
        conditions = o.merge_conditions(
            o.status(vmi).get("conditions"),
            [{"type": "Ready", "status": "False", "reason": reason, "message": message}],
        )
        self._patch_status(
            vmi, {"phase": phase, "reason": reason, "conditions": conditions}, precondition=True
        )

    def _finalize(self, vmi, pods):
        """A VMI being deleted: its pods go first, then our finalizer."""
        self._delete_pods(pods)
        for pod in pods:
            node = o.pod_node(pod)
            if node and self.sim.nodes.synced and self.sim.nodes.get(node) is None:
                # Nothing will ever confirm the pod's end on a node that is gone.
                self._delete_pods([pod], grace_period=0)
        if pods:
            return 1.0
        finalizers = o.meta(vmi, "finalizers") or []
        if o.VMI_FINALIZER in finalizers:
            self.kube.patch(
                k.VMIS,
                o.meta(vmi, "name"),
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != o.VMI_FINALIZER] or None,
                        "resourceVersion": o.meta(vmi, "resourceVersion"),
                    }
                },
                o.meta(vmi, "namespace"),
            )
        return None

    def _delete_pods(self, pods, grace_period=None):
        for pod in pods:
            if grace_period is None and o.deleting(pod):
                continue
            self.kube.delete(k.PODS, o.meta(pod, "name"), o.meta(pod, "namespace"), grace_period=grace_period)

    def _patch_status(self, vmi, patch, precondition=False):
        body = {"status": patch}
        if precondition:
            body["metadata"] = {"resourceVersion": o.meta(vmi, "resourceVersion")}
        self.kube.patch(k.VMIS, o.meta(vmi, "name"), body, o.meta(vmi, "namespace"), subresource="status")
