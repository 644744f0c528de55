"""virt-launcher and the kubelet, for launcher pods (KWOK runs no process in them).

What a real node does with a virt-launcher pod, beyond what KWOK's stages do:

- Graceful deletion: the kubelet sends SIGTERM; virt-launcher keeps the pod alive until
  virt-handler has shut the guest down (the VMI is final, see handler_vmi.py), then
  exits and the kubelet confirms the deletion. KWOK's pod-delete stage would remove the
  pod at once, so lab/kwok.py leaves launcher pods out of it (``launchers_by_handler``)
  and this controller confirms their deletion instead. A pod whose guest is not running
  there (a migration target before the hand-over, a source after it, a pod of a final
  VMI) goes at once.
- Exit: virt-launcher exits when its domain is gone: after the guest ended (VMI final),
  on the source once a migration completed, on the target once a migration failed
  (``SignalTargetPodCleanup``), or when the source's machine died mid-transfer (the
  target's libvirt drops the source's connection after its keepalive and destroys the
  incoming domain; virt-launcher's process monitor sees qemu gone and it exits:
  ``cmd/virt-launcher/virt-launcher.go``; see handler_migration.py). The pod then turns
  ``Succeeded`` (all containers terminated with exit code 0, reason Completed), as
  ``kubectl get pods`` shows ``Completed`` after a live migration.

- Image IDs: a kubelet reports each container's ``imageID`` (the image's digest);
  KWOK leaves it empty. virt-controller needs it to migrate a VMI with containerDisks
  (the target pod must run the same image: "can not proceed with the migration when no
  reproducible image digest can be detected"), so it is filled in with a digest derived
  from the image name.

Nothing happens on a failed node: its kubelet is dead (``lab node-fail``) or cut off (``lab node-partition``).
"""

import hashlib

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_migration import connection_lost_in, holder_changed, migration_done
from lab.standins.handler_nodes import NODE_LEASE_NAMESPACE, node_failed
from lab.standins.handler_vmi import guest_pod
from lab.standins.workqueue import Controller


def image_id(image):
    """``<repository>@sha256:<digest>`` as a kubelet reports it, stable per image name."""
    repository = (image or "").split("@")[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256((image or '').encode()).hexdigest()}"


def _vmi_of(sim, pod):
    uid = o.labels(pod).get(o.CREATED_BY_LABEL)
    for vmi in sim.vmis.by_index("uid", uid) if uid else ():
        return vmi
    return None


def in_flight_target(vmi, pod):
    """Whether the pod is the target pod of the VMI's current migration."""
    state = o.status(vmi).get("migrationState") or {}
    return o.is_migration_target(pod) and o.labels(pod).get(o.MIGRATION_JOB_LABEL) == state.get("migrationUid")


def guest_runs_in(sim, vmi, pod):
    """Whether the pod's launcher holds the running guest (its domain is alive there)."""
    if vmi is None or o.vmi_is_final(vmi):
        return False
    held = guest_pod(sim, vmi)
    return held is not None and o.meta(held, "uid") == o.meta(pod, "uid")


def incoming_migration_lost_in(sim, vmi, pod):
    """For the target pod of a migration under way whose source machine died: seconds until the
    target's libvirt drops the source's connection and destroys the incoming domain (0: done);
    None for any other pod."""
    if vmi is None or o.vmi_is_final(vmi) or not in_flight_target(vmi, pod):
        return None
    state = o.status(vmi).get("migrationState") or {}
    if not state.get("startTimestamp") or state.get("endTimestamp") or guest_runs_in(sim, vmi, pod):
        return None
    return connection_lost_in(sim, state.get("sourceNode"))


def launcher_exited(sim, vmi, pod):
    """Whether virt-launcher in this (not deleted) pod has exited."""
    if vmi is None:
        return False  # virt-controller deletes the pods of a deleted VMI
    if o.vmi_is_final(vmi):
        return True
    state = o.status(vmi).get("migrationState") or {}
    if in_flight_target(vmi, pod) and not guest_runs_in(sim, vmi, pod):
        # A target is told to clean up once its migration failed, and loses its incoming
        # domain when the source's machine died.
        if migration_done(state) and bool(state.get("failed")):
            return True
        return incoming_migration_lost_in(sim, vmi, pod) == 0
    if guest_runs_in(sim, vmi, pod):
        return False
    # A pod the guest has left: the source of the last migration, once it completed.
    if not (state.get("completed") and not state.get("failed") and migration_done(state)):
        return False
    if state.get("sourcePod"):
        return o.meta(pod, "name") == state["sourcePod"]
    return o.pod_node(pod) == state.get("sourceNode") != o.status(vmi).get("nodeName")


class LauncherPods(Controller):
    name = "handler-launcher"
    workers = 4
    resync_seconds = 30.0

    def __init__(self, sim):
        super().__init__(sim)
        sim.pods.add_handler(self._on_pod)
        sim.vmis.add_handler(self._on_vmi)
        sim.leases.add_handler(self._on_lease)

    def _on_lease(self, event, lease, old):
        """A node died: the target pods of the migrations from it."""
        if o.meta(lease, "namespace") != NODE_LEASE_NAMESPACE or not holder_changed(event, lease, old):
            return
        for vmi in self.sim.vmis.list():
            if (o.status(vmi).get("migrationState") or {}).get("sourceNode") == o.meta(lease, "name"):
                self._on_vmi(event, vmi, None)

    def _on_pod(self, event, pod, old):
        if event != "DELETED" and o.labels(pod).get(o.APP_LABEL) == o.LAUNCHER:
            self.enqueue(k.key_of(pod))

    def _on_vmi(self, event, vmi, old):
        for pod in self.sim.pods.by_index("created-by", o.meta(vmi, "uid")):
            self.enqueue(k.key_of(pod))

    def all_keys(self):
        return [k.key_of(p) for p in self.sim.pods.list() if o.labels(p).get(o.APP_LABEL) == o.LAUNCHER]

    def reconcile(self, key):
        pod = self.sim.pods.get(key)
        if pod is None or not o.pod_node(pod) or node_failed(self.sim, o.pod_node(pod)):
            return None
        vmi = _vmi_of(self.sim, pod)
        if o.deleting(pod):
            if o.pod_phase(pod) == "Running" and guest_runs_in(self.sim, vmi, pod):
                return None  # virt-launcher waits for the guest to shut down
            self.kube.delete(
                k.PODS,
                o.meta(pod, "name"),
                o.meta(pod, "namespace"),
                grace_period=0,
                preconditions={"uid": o.meta(pod, "uid")},
            )
            self.log.info("%s: deletion confirmed on %s", key, o.pod_node(pod))
            return None
        if o.pod_phase(pod) == "Running" and launcher_exited(self.sim, vmi, pod):
            self._complete(pod)
        elif o.pod_phase(pod) == "Running":
            self._report_image_ids(pod)
            return incoming_migration_lost_in(self.sim, vmi, pod) or None
        return None

    def _report_image_ids(self, pod):
        patch = {}
        for field in ("containerStatuses", "initContainerStatuses"):
            statuses = o.status(pod).get(field) or []
            if any(not cs.get("imageID") for cs in statuses):
                patch[field] = [dict(cs, imageID=cs.get("imageID") or image_id(cs.get("image"))) for cs in statuses]
        if patch:
            self.kube.patch(
                k.PODS, o.meta(pod, "name"), {"status": patch}, namespace=o.meta(pod, "namespace"), subresource="status"
            )

    def _complete(self, pod):
        now = o.now()
        statuses = []
        for cs in o.status(pod).get("containerStatuses") or []:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or now
            statuses.append(
                dict(
                    cs,
                    ready=False,
                    started=False,
                    state={
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": started,
                            "finishedAt": now,
                        }
                    },
                )
            )
        conditions = []
        for c in o.status(pod).get("conditions") or []:
            if c.get("type") in ("Ready", "ContainersReady"):
                c = dict(c, status="False", reason="PodCompleted", lastTransitionTime=now)
            conditions.append(c)
        patch = {"status": {"phase": "Succeeded", "conditions": conditions, "containerStatuses": statuses}}
        self.kube.patch(k.PODS, o.meta(pod, "name"), patch, namespace=o.meta(pod, "namespace"), subresource="status")
        self.log.info("%s: virt-launcher exited, pod Succeeded", k.key_of(pod))
