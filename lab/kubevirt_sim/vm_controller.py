"""VirtualMachine controller: one VMI per running VM, driven by the run strategy.

Follows upstream virt-controller: the run strategy (or the deprecated ``running``)
decides whether a VMI should exist, and ``status.stateChangeRequests`` (written by
the start/stop/restart actions) asks for explicit stops and starts:

- Always: a VMI always exists; a final or stop-requested VMI is deleted and re-created.
- RerunOnFailure: a Failed VMI is deleted and re-created; a Succeeded one is deleted
  and left stopped.
- Manual: only stop/start requests act.
- Halted: no VMI; a start request turns the strategy into Always.
- Once: started when there is no VMI; an ended VMI stays.

Re-creating always means a new VMI object (new UID).
"""

import copy

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.workqueue import Controller, Expectations

GENERATION_ANNOTATION = "kubevirt.io/vm-generation"


def run_strategy(vm):
    spec = o.spec(vm)
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if spec.get("running") is not None:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def owned_by(obj, owner_uid):
    return any(ref.get("uid") == owner_uid for ref in o.meta(obj, "ownerReferences") or [])


class VMController(Controller):
    name = "vm-controller"
    workers = 2

    def __init__(self, sim):
        super().__init__(sim)
        self.expectations = Expectations()
        sim.vms.add_handler(lambda event, vm, old: self.enqueue(k.key_of(vm)))
        sim.vmis.add_handler(self._on_vmi)

    def _on_vmi(self, event, vmi, old):
        if any(ref.get("kind") == "VirtualMachine" for ref in o.meta(vmi, "ownerReferences") or []):
            self.enqueue(k.key_of(vmi))

    def all_keys(self):
        return self.sim.vms.keys()

    # -- reconcile ----------------------------------------------------------------------

    def reconcile(self, key):
        vm = self.sim.vms.get(key)
        if vm is None:
            return None  # the garbage collector removes the VMI through its owner reference
        vmi = self.sim.vmis.get(key)
        if vmi is not None and not owned_by(vmi, o.meta(vm, "uid")):
            vmi = None  # a VMI of the same name that is not ours: leave it alone

        waiting = self._awaiting_cache(key, vmi)
        if waiting:
            return waiting

        strategy = run_strategy(vm)
        requests = self._trim_requests(o.status(vm).get("stateChangeRequests") or [], vmi)

        if not o.deleting(vm):
            requests = self._sync_run_strategy(vm, vmi, strategy, requests)
            if requests is None:
                return None  # the spec was changed; the watch brings the VM back
        self._update_status(vm, vmi, strategy, requests)
        return None

    def _awaiting_cache(self, key, vmi):
        """Seconds to wait while our last create/delete has not reached the cache."""
        expected = self.expectations.pending(key)
        if expected is None:
            return None
        action, uid = expected
        if action == "created" and (vmi is None or o.meta(vmi, "uid") != uid):
            return 0.5
        if action == "deleted" and vmi is not None and o.meta(vmi, "uid") == uid and not o.deleting(vmi):
            return 0.5
        self.expectations.observed(key)
        return None

    @staticmethod
    def _trim_requests(requests, vmi):
        """Drop the requests already carried out, as upstream does before acting."""
        requests = [dict(r) for r in requests]
        while requests:
            first = requests[0]
            if first.get("action") == "Stop":
                if vmi is None or (first.get("uid") and first["uid"] != o.meta(vmi, "uid")):
                    requests.pop(0)
                    continue
                break
            if first.get("action") == "Start":
                if vmi is not None and not o.deleting(vmi) and not o.vmi_is_final(vmi):
                    requests.pop(0)
                    continue
                break
            requests.pop(0)  # unknown action
        return requests

    def _sync_run_strategy(self, vm, vmi, strategy, requests):
        """Act on the strategy; returns the (possibly extended) request list, or None
        when the VM spec itself was changed."""
        stop_requested = bool(requests) and requests[0].get("action") == "Stop" and vmi is not None
        start_requested = bool(requests) and requests[0].get("action") == "Start"
        key = k.key_of(vm)

        if strategy == "Always":
            if vmi is None:
                self._start(vm)
            elif (stop_requested or o.vmi_is_final(vmi)) and not o.deleting(vmi):
                self._stop(key, vmi)
        elif strategy == "RerunOnFailure":
            if vmi is not None:
                phase = o.status(vmi).get("phase")
                if not o.deleting(vmi) and (stop_requested or phase in ("Failed", "Succeeded")):
                    if phase == "Failed" and not stop_requested and not start_requested:
                        # Record the restart before deleting: once the VMI is gone
                        # nothing else would tell a failure from a clean shutdown.
                        self._add_start_request(vm, requests)
                        return None
                    self._stop(key, vmi)
            elif start_requested or o.status(vm).get("runStrategy") != strategy:
                self._start(vm)
        elif strategy == "Manual":
            if vmi is not None:
                if stop_requested and not o.deleting(vmi):
                    self._stop(key, vmi)
            elif start_requested:
                self._start(vm)
        elif strategy == "Halted":
            if vmi is not None:
                if not o.deleting(vmi):
                    self._stop(key, vmi)
            elif start_requested:
                self._set_run_strategy(vm, "Always")
                return None
        elif strategy == "Once":
            if vmi is None:
                self._start(vm)
        return requests

    # -- actions ------------------------------------------------------------------------

    def _start(self, vm):
        self._ensure_data_volume_claims(vm)
        template = o.spec(vm).get("template") or {}
        tmeta = template.get("metadata") or {}
        annotations = dict(tmeta.get("annotations") or {})
        annotations[GENERATION_ANNOTATION] = str(o.meta(vm, "generation", 1))
        vmi = {
            "apiVersion": k.VMIS.api_version,
            "kind": k.VMIS.kind,
            "metadata": {
                "name": o.meta(vm, "name"),
                "namespace": o.meta(vm, "namespace"),
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [k.owner_reference(vm)],
                "finalizers": [o.VMI_FINALIZER],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        created = self.kube.create(k.VMIS, vmi)
        self.expectations.expect(k.key_of(vm), ("created", o.meta(created, "uid")))
        self.log.info("%s: started VMI %s", k.key_of(vm), o.meta(created, "uid"))

    def _stop(self, key, vmi):
        uid = o.meta(vmi, "uid")
        self.kube.delete(k.VMIS, o.meta(vmi, "name"), o.meta(vmi, "namespace"), preconditions={"uid": uid})
        self.expectations.expect(key, ("deleted", uid))
        self.log.info("%s: stopping VMI %s", key, uid)

    def _add_start_request(self, vm, requests):
        body = {
            "metadata": {"resourceVersion": o.meta(vm, "resourceVersion")},
            "status": {"stateChangeRequests": requests + [{"action": "Start"}]},
        }
        self.kube.patch(k.VMS, o.meta(vm, "name"), body, o.meta(vm, "namespace"), subresource="status")

    def _set_run_strategy(self, vm, strategy):
        spec = o.spec(vm)
        if spec.get("runStrategy") is None and spec.get("running") is not None:
            patch = {"spec": {"running": strategy == "Always"}}
        else:
            patch = {"spec": {"runStrategy": strategy}}
        patch["metadata"] = {"resourceVersion": o.meta(vm, "resourceVersion")}
        self.kube.patch(k.VMS, o.meta(vm, "name"), patch, o.meta(vm, "namespace"))

    def _ensure_data_volume_claims(self, vm):
        """Stand-in for CDI: a PVC for every dataVolumeTemplate, owned by the VM."""
        for template in o.spec(vm).get("dataVolumeTemplates") or []:
            name = o.meta(template, "name")
            namespace = o.meta(vm, "namespace")
            if not name or self.sim.pvcs.get_by(namespace, name) is not None:
                continue
            dv_spec = template.get("spec") or {}
            source = dv_spec.get("pvc") or dv_spec.get("storage") or {}
            pvc_spec = {
                "accessModes": source.get("accessModes") or ["ReadWriteOnce"],
                "resources": source.get("resources") or {"requests": {"storage": "1Gi"}},
            }
            for field in ("storageClassName", "volumeMode"):
                if source.get(field):
                    pvc_spec[field] = source[field]
            pvc = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "ownerReferences": [k.owner_reference(vm)],
                },
                "spec": pvc_spec,
            }
            try:
                self.kube.create(k.PVCS, pvc)
            except k.ApiError as e:
                if not e.already_exists:
                    raise

    # -- status -------------------------------------------------------------------------

    def _update_status(self, vm, vmi, strategy, requests):
        current = o.status(vm)
        desired = {
            "printableStatus": self._printable_status(vm, vmi, strategy),
            "created": vmi is not None,
            "ready": vmi is not None
            and o.status(vmi).get("phase") == "Running"
            and o.condition_true(vmi, "Ready"),
            "runStrategy": strategy,
            "conditions": self._conditions(vmi),
            "observedGeneration": o.meta(vm, "generation"),
            "desiredGeneration": o.meta(vm, "generation"),
        }
        patch = {}
        for field, value in desired.items():
            if field == "conditions":
                if not o.conditions_equal(current.get("conditions"), value):
                    patch["conditions"] = o.merge_conditions(current.get("conditions"), value)
            elif current.get(field) != value:
                patch[field] = value
        requests_changed = (current.get("stateChangeRequests") or []) != requests
        if requests_changed:
            patch["stateChangeRequests"] = requests or None
        if not patch:
            return
        body = {"status": patch}
        if requests_changed:
            # stateChangeRequests are also written by the start/stop/restart actions:
            # never overwrite a request we have not seen.
            body["metadata"] = {"resourceVersion": o.meta(vm, "resourceVersion")}
        self.kube.patch(k.VMS, o.meta(vm, "name"), body, o.meta(vm, "namespace"), subresource="status")

    @staticmethod
    def _conditions(vmi):
        if vmi is None:
            return [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "VMINotExists",
                    "message": "VMI does not exist",
                }
            ]
        conditions = []
        for c in o.status(vmi).get("conditions") or []:
            conditions.append(
                {key: c.get(key) for key in ("type", "status", "reason", "message") if c.get(key)}
            )
        if not any(c["type"] == "Ready" for c in conditions):
            conditions.insert(0, {"type": "Ready", "status": "False", "reason": "VMINotReady"})
        return conditions

    def _printable_status(self, vm, vmi, strategy):
        if o.deleting(vm):
            return "Terminating"
        if vmi is None:
            return "Stopped"
        phase = o.status(vmi).get("phase")
        if o.deleting(vmi) or (strategy == "Halted" and phase not in o.FINAL_VMI_PHASES):
            return "Stopping"
        if phase in o.FINAL_VMI_PHASES:
            return "Stopped"
        migration = o.status(vmi).get("migrationState") or {}
        if migration.get("startTimestamp") and not migration.get("endTimestamp"):
            return "Migrating"
        if phase == "Running":
            return "Running"
        scheduled = o.condition(vmi, "PodScheduled")
        if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            return "ErrorUnschedulable"
        namespace = o.meta(vmi, "namespace")
        for claim in o.claim_names(o.spec(vmi)):
            pvc = self.sim.pvcs.get_by(namespace, claim)
            if pvc is None:
                return "ErrorPvcNotFound"
            if o.status(pvc).get("phase") != "Bound":
                return "WaitingForVolumeBinding"
        return "Starting"
