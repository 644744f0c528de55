"""virt-handler's parts of a live migration: the target and the source handler.

virt-controller (``pkg/virt-controller/watch/migration/migration.go``) creates the target
launcher pod and, once it is Ready, hands the migration off (``handleTargetPodHandoff``):
it writes ``status.migrationState`` (migrationUID, sourceNode, targetNode, targetPod) and
labels the VMI ``kubevirt.io/migrationTargetNodeName=<target>``. It then moves the
migration object Scheduled -> PreparingTarget (targetNode set) -> TargetReady
(``targetNodeAddress`` set) -> Running (``startTimestamp`` set) -> Succeeded
(``completed``), or Failed when ``migrationState.failed`` is reported.

The handlers' parts, each written as one VMI ``Update`` like upstream:

Target (``pkg/virt-handler/migration-target.go``), on the labelled node:
  1. prepare: ``targetNodeAddress`` (its pod IP, ``FindMigrationIP``) and
     ``targetDirectMigrationNodePorts`` once the target launcher runs;
  2. when the incoming domain appears (the source started): ``targetNodeDomainDetected``;
  3. when it runs on the target and its metadata carries the end time:
     ``targetNodeDomainReadyTimestamp`` and ``ackMigrationCompletion``: ``endTimestamp``,
     ``status.nodeName`` and label ``kubevirt.io/nodeName`` = target, ``evacuationNodeName``
     and the ``kubevirt.io/eviction-source`` annotation cleared,
     ``launcherContainerImageVersion`` cleared, ``migrationTransport: Unix``;
  4. ``finalizeMigration``: ``completed: true``;
  5. ``finalCleanup``: drops the target label and ``kubevirt.io/create-migration-target``.

Source (``pkg/virt-handler/migration-source.go``), on ``status.nodeName`` ==
``migrationState.sourceNode``: once the target published its address, starts the
migration in its launcher and reports the launcher's ``startTimestamp`` and ``mode``;
on failure or abort ``failed``, ``failureReason``, ``endTimestamp`` (and ``abortStatus``).

No bytes move: the transfer lasts guest memory / bandwidth, the bandwidth being the
KubeVirt CR's ``spec.configuration.migrations.bandwidthPerMigration`` when set, else the
stand-in's ``--migration-bandwidth`` ("0" = instant), or less where the migrations from and to a
node share its link (links.py: the KubeVirt CR's annotation ``kubevirt-ops.lab/migration-link``). Lab knob: a VMI or its VM
annotated ``kubevirt-ops.lab/fail-migration: "true"`` fails every migration at the end
of the transfer, reported by the source as a real failure; virt-controller then fails
the migration object and (for evacuations) retries with its own backoff. Another:
``kubevirt-ops.lab/hold-migration: "true"`` on the VMI or its VM holds every migration at the
end of the transfer (the migration object stays Running) until the annotation is removed.

A machine that dies mid-transfer (``lab node-fail``, or powered off through its BMC:
handler_nodes.node_failed) runs nothing any more: its handler and launchers write nothing.
What the side that lives on does (kubevirt v1.7 and v1.8 alike):

- Target dead: the source's libvirt loses its connection to the destination libvirtd, by
  libvirt's keepalive (qemu.conf ``keepalive_interval`` 5 s, ``keepalive_count`` 5: dropped
  after interval * (count + 1) = 30 s of silence) or at once when the target's launcher
  ended on a living host; ``MigrateToURI3`` fails with "Lost connection to destination
  host" (libvirt ``qemuMigrationAnyCompleted``), virt-launcher records it as the result
  (``migrateHelper`` -> ``setMigrationResult`` in
  ``pkg/virt-launcher/virtwrap/live-migration-source.go``) and the source handler copies
  ``failed``, ``failureReason`` and ``endTimestamp`` into ``migrationState``
  (``setMigrationProgressStatus`` in ``pkg/virt-handler/migration-source.go``).
  virt-controller then fails the migration ("source node reported migration failed",
  ``updateStatus`` in ``pkg/virt-controller/watch/migration/migration.go``). The dead
  target's pod stays Running in the API, so virt-controller's evacuation controller does
  not retry an evacuation while it does (``VMIActivePodsCount`` > 1 in
  ``pkg/virt-controller/watch/drain/evacuation/evacuation.go``): it retries once that pod
  is down or gone (the machine boots, or the node is fenced or deleted).
- Source dead: nothing more arrives on the target, whose handler reports nothing (no
  ready domain, no completion: ``updateStatus`` in ``pkg/virt-handler/migration-target.go``
  writes nothing while the migration runs). The target's libvirt drops the source's
  connection after the same 30 s and destroys the incoming domain, and virt-launcher exits
  with its qemu (``cmd/virt-launcher/virt-launcher.go``: the process monitor, then
  ``waitForFinalNotify``): handler_launcher.py ends the target pod, and virt-controller
  fails the migration ("target pod shutdown during migration", ``PodIsDown``). The VMI is
  not moved: it keeps its dead source node, phase Running and a ``migrationState`` that
  never ends (nobody writes its end: virt-controller only does while the migration had not
  started, ``handleMarkMigrationFailedOnVMI``). When the source machine boots, its handler
  finds no domain and, the migration still "in progress", leaves the VMI alone
  (``isMigrationInProgress`` in ``pkg/virt-handler/vm.go`` ``execute`` and
  ``pkg/virt-handler/controller.go``; ``processVMI`` in migration-source.go: domain not alive).

The 30 s count from the dead node's last heartbeat (its Lease's ``renewTime``, which the
death leaves alone), so they survive a restart of this process.
"""

import datetime
import hashlib

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_nodes import NODE_LEASE_NAMESPACE, handler_alive, migration_address, node_failed
from lab.standins.handler_vmi import guest_pod, owner_vm, update_vmi
from lab.standins.links import Links
from lab.standins.workqueue import Controller

CREATE_MIGRATION_TARGET_ANNOTATION = "kubevirt.io/create-migration-target"
EVICTION_SOURCE_ANNOTATION = "kubevirt.io/eviction-source"
OUTDATED_LAUNCHER_IMAGE_LABEL = "kubevirt.io/outdatedLauncherImage"
FAILED_BY_KNOB = f"Live migration failed: the VM is annotated {o.FAIL_MIGRATION_ANNOTATION}"
ABORTED = "Live migration aborted "  # sic, virt-launcher's live-migration-source.go
# libvirt's keepalive on a migration's connections (qemu.conf and virtqemud.conf defaults:
# keepalive_interval 5, keepalive_count 5): a silent peer is dropped after 5 * (5 + 1) s.
CONNECTION_TIMEOUT_SECONDS = 30.0
# MigrateToURI3's error as virt-launcher records it (err.Error() of libvirt-go's Error:
# VIR_ERR_OPERATION_FAILED = 9, VIR_FROM_QEMU = 10).
LOST_TARGET = "virError(Code=9, Domain=10, Message='operation failed: Lost connection to destination host')"


def migration_done(state):
    """migration-source.go ``isMigrationDone``."""
    return not state or bool(state.get("endTimestamp") and (state.get("completed") or state.get("failed")))


def _lease_time(value):
    """A Lease's MicroTime ("2026-11-28T13:11:05.123456Z") as an aware datetime, or None."""
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def connection_lost_in(sim, node):
    """Seconds until a migration's connection to ``node`` is dropped because its machine died
    (0: dropped), or None while it lives. The death is dated by the node's last heartbeat."""
    if not node or not node_failed(sim, node):
        return None
    lease = sim.leases.get_by(NODE_LEASE_NAMESPACE, node) or {}
    died = _lease_time(o.spec(lease).get("renewTime"))
    if died is None:
        return 0.0
    silent = (datetime.datetime.now(datetime.timezone.utc) - died).total_seconds()
    return max(0.0, CONNECTION_TIMEOUT_SECONDS - silent)


def holder_changed(event, lease, old):
    """Whether a node Lease event is more than a renewal: created, deleted or handed over."""
    if event != "MODIFIED" or old is None:
        return True
    return o.spec(old).get("holderIdentity") != o.spec(lease).get("holderIdentity")


def target_pod(sim, vmi, state):
    for pod in sim.pods.by_index("migration", state.get("migrationUid") or ""):
        if o.meta(pod, "namespace") == o.meta(vmi, "namespace"):
            return pod
    return None


def listener_ports(uid):
    """Ports the target's migration proxy listens on (``GetTargetListenerPorts``): one for
    the domain (source port 0) and the two direct-migration ports 49152 and 49153."""
    digest = hashlib.sha256((uid or "").encode()).digest()
    ports = [30000 + int.from_bytes(digest[i : i + 2], "big") % 30000 for i in (0, 2, 4)]
    return {str(ports[0]): 0, str(ports[1]): 49152, str(ports[2]): 49153}


def _mirror_target_state(state, **fields):
    """Upstream also writes these into ``targetState`` when virt-controller created it
    (decentralized migrations)."""
    if state.get("targetState") is not None:
        state["targetState"] = dict(state["targetState"], **fields)


class MigrationHandler(Controller):
    name = "handler-migration"
    workers = 4
    resync_seconds = 15.0

    def __init__(self, sim):
        super().__init__(sim)
        self._links = Links()  # the transfers under way, on the nodes' migration links
        sim.vmis.add_handler(self._on_vmi)
        sim.pods.add_handler(self._on_pod)
        sim.vms.add_handler(self._on_vm)
        sim.leases.add_handler(self._on_lease)

    def _on_lease(self, event, lease, old):
        """A node died or came back (its Lease changed hands; renewals are not looked at): the
        migrations from and to it."""
        if o.meta(lease, "namespace") != NODE_LEASE_NAMESPACE or not holder_changed(event, lease, old):
            return
        node = o.meta(lease, "name")
        for vmi in self.sim.vmis.list():
            state = o.status(vmi).get("migrationState") or {}
            if node in (state.get("sourceNode"), state.get("targetNode")):
                self.enqueue(k.key_of(vmi))

    def _on_vmi(self, event, vmi, old):
        if o.status(vmi).get("migrationState") or (old and o.status(old).get("migrationState")):
            self.enqueue(k.key_of(vmi))

    def _on_pod(self, event, pod, old):
        uid = o.labels(pod).get(o.CREATED_BY_LABEL)
        if o.labels(pod).get(o.APP_LABEL) == o.LAUNCHER and uid:
            for vmi in self.sim.vmis.by_index("uid", uid):
                self.enqueue(k.key_of(vmi))

    def _on_vm(self, event, vm, old):
        key = k.key_of(vm)
        if self.sim.vmis.get(key) is not None:
            self.enqueue(key)

    def all_keys(self):
        return [k.key_of(v) for v in self.sim.vmis.list() if o.status(v).get("migrationState")]

    def reconcile(self, key):
        vmi = self.sim.vmis.get(key)
        if vmi is None or o.deleting(vmi):
            return None
        state = o.status(vmi).get("migrationState")
        if not state or not state.get("migrationUid"):
            return None
        delays = []
        target_node = o.labels(vmi).get(o.MIGRATION_TARGET_NODE_LABEL)
        if target_node and not o.vmi_is_final(vmi) and handler_alive(self.sim, target_node):
            wrote, delay = self._target(vmi, state, target_node)
            if wrote:
                return None  # the watch brings the VMI back
            delays.append(delay)
        node = o.status(vmi).get("nodeName")
        if (
            not o.vmi_is_final(vmi)
            and node
            and node == state.get("sourceNode")
            and not migration_done(state)
            and handler_alive(self.sim, node)
        ):
            wrote, delay = self._source(vmi, state)
            if wrote:
                return None
            delays.append(delay)
        delays = [d for d in delays if d is not None]
        return min(delays) if delays else None

    # -- target -------------------------------------------------------------------------

    def _target(self, vmi, state, node):
        """One step of migration-target.go ``sync``: (wrote the VMI?, seconds until the next step)."""
        if migration_done(state):
            self._end_transfer(state)
            return self._final_cleanup(vmi), None
        if state.get("failed"):
            return False, None
        pod = target_pod(self.sim, vmi, state)
        if pod is None or o.pod_phase(pod) != "Running" or o.deleting(pod):
            return False, None  # no target launcher to talk to
        started = bool(state.get("startTimestamp"))
        if state.get("endTimestamp") and started and not state.get("completed"):
            update_vmi(self.kube, vmi, {"migrationState": dict(state, completed=True)})
            self.log.info("%s: migration %s completed on %s", k.key_of(vmi), state["migrationUid"], node)
            return True, None
        if not started:
            address = migration_address(self.sim, node)
            if address and state.get("targetNodeAddress") != address:
                ports = listener_ports(o.meta(vmi, "uid"))
                new = dict(state, targetNodeAddress=address, targetDirectMigrationNodePorts=ports)
                _mirror_target_state(new, nodeAddress=address, directMigrationNodePorts=ports)
                update_vmi(self.kube, vmi, {"migrationState": new})
                self.log.info("%s: target %s prepared at %s", k.key_of(vmi), node, address)
                return True, None
            return False, None
        # The source started: the incoming domain exists on the target.
        if node_failed(self.sim, state.get("sourceNode")):
            # Its machine died: nothing more arrives, nothing is reported here; the incoming
            # domain goes with the source's connection and the target launcher with it
            # (handler_launcher.py, ``incoming_migration_lost_in``).
            return False, None
        new = dict(state)
        if not new.get("targetNodeDomainDetected"):
            new["targetNodeDomainDetected"] = True
            _mirror_target_state(new, domainDetected=True)
        left = self._transfer_left(vmi, state)
        vm = owner_vm(self.sim, vmi)
        if left > 0 or o.fails_migrations(vmi, vm) or o.holds_migrations(vmi, vm):
            if new != state:
                update_vmi(self.kube, vmi, {"migrationState": new})
                return True, None
            return False, (left if left > 0 else None)
        # The domain runs on the target and its metadata carries the end time.
        now = o.now()
        if not new.get("targetNodeDomainReadyTimestamp"):
            new["targetNodeDomainReadyTimestamp"] = now
            _mirror_target_state(new, domainReadyTimestamp=now)
        new["endTimestamp"] = now
        self._ack_completion(vmi, new, node)
        return True, None

    def _ack_completion(self, vmi, state, node):
        status = o.status(vmi)
        changes = {
            "migrationState": state,
            "nodeName": node,
            "evacuationNodeName": None,
            "launcherContainerImageVersion": None,
            "migrationTransport": "Unix",
        }
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "MigrationRequired"]
        if len(conditions) != len(status.get("conditions") or []):
            changes["conditions"] = conditions
        labels = {o.NODE_NAME_LABEL: node}
        if OUTDATED_LAUNCHER_IMAGE_LABEL in o.labels(vmi):
            labels[OUTDATED_LAUNCHER_IMAGE_LABEL] = None
        annotations = None
        if EVICTION_SOURCE_ANNOTATION in o.annotations(vmi):
            annotations = {EVICTION_SOURCE_ANNOTATION: None}
        update_vmi(self.kube, vmi, changes, labels=labels, annotations=annotations)
        self.log.info("%s: target %s received the running domain", k.key_of(vmi), node)

    def _final_cleanup(self, vmi):
        """Whether it wrote: the target label (and annotation) go once the migration ended."""
        if o.MIGRATION_TARGET_NODE_LABEL not in o.labels(vmi):
            return False
        annotations = None
        if CREATE_MIGRATION_TARGET_ANNOTATION in o.annotations(vmi):
            annotations = {CREATE_MIGRATION_TARGET_ANNOTATION: None}
        update_vmi(self.kube, vmi, {}, labels={o.MIGRATION_TARGET_NODE_LABEL: None}, annotations=annotations)
        return True

    # -- source -------------------------------------------------------------------------

    def _source(self, vmi, state):
        uid = state["migrationUid"]
        if guest_pod(self.sim, vmi) is None:
            # No domain here (its launcher ended, e.g. the machine rebooted under it): nothing
            # to migrate and nothing to report (migration-source.go ``processVMI``,
            # ``setMigrationProgressStatus`` without a domain).
            return False, None
        if state.get("abortRequested"):
            return self._report_failure(vmi, state, ABORTED, abort=True)
        if not state.get("startTimestamp"):
            if not state.get("targetNodeAddress") or not state.get("targetDirectMigrationNodePorts"):
                return False, None  # waiting for the target to publish its ports
            self._start_transfer(vmi, state)
            update_vmi(
                self.kube,
                vmi,
                {"migrationState": dict(state, startTimestamp=o.now(), mode="PreCopy")},
            )
            self.log.info(
                "%s: migration %s started %s -> %s",
                k.key_of(vmi),
                uid,
                state.get("sourceNode"),
                state.get("targetNode"),
            )
            return True, None
        lost = self._target_lost_in(vmi, state)
        if lost is not None:
            if lost > 0:
                return False, lost  # libvirt's keepalive has not given up on the target yet
            return self._report_failure(vmi, state, LOST_TARGET)
        left = self._transfer_left(vmi, state)
        if left > 0:
            return False, left
        if o.holds_migrations(vmi, owner_vm(self.sim, vmi)):
            return False, None  # held by the lab knob; removing the annotation brings the VM or VMI back
        if o.fails_migrations(vmi, owner_vm(self.sim, vmi)):
            return self._report_failure(vmi, state, FAILED_BY_KNOB)
        return False, None  # success is the target's to acknowledge

    def _target_lost_in(self, vmi, state):
        """Seconds until the source loses its connection to the target (0: lost), None while
        the target lives: its machine died (libvirt's keepalive), or its launcher ended or went
        away on a living host (the connection closes at once)."""
        pod = target_pod(self.sim, vmi, state)
        if pod is None or o.pod_phase(pod) in ("Succeeded", "Failed"):
            return 0.0
        return connection_lost_in(self.sim, state.get("targetNode") or o.pod_node(pod))

    def _report_failure(self, vmi, state, reason, abort=False):
        new = dict(state, failed=True, failureReason=reason, endTimestamp=o.now())
        if abort:
            new["abortStatus"] = "Succeeded"
        update_vmi(self.kube, vmi, {"migrationState": new})
        self._end_transfer(state)
        self.log.info("%s: migration %s failed: %s", k.key_of(vmi), state.get("migrationUid"), reason)
        return True, None

    # -- timing -------------------------------------------------------------------------

    def _start_transfer(self, vmi, state, elapsed=0.0):
        config = self.sim.config
        self._links.start(state.get("migrationUid"), k.key_of(vmi), state.get("sourceNode"), state.get("targetNode"),
                          float(o.guest_memory_bytes(o.spec(vmi))), config.bandwidth_bytes_per_second(),
                          config.migration_link_bytes_per_second(), elapsed)

    def _end_transfer(self, state):
        """The transfer is over: the transfers that shared a link with it go faster, so they are looked at again."""
        for key in self._links.end(state.get("migrationUid"), self.sim.config.migration_link_bytes_per_second()):
            self.enqueue(key)

    def _transfer_left(self, vmi, state):
        """Seconds until the transfer ends at today's rates (links.py). A transfer started before this process
        (a restarted stand-in) counts from ``startTimestamp`` (whole seconds, so at most one second longer than
        exact), at its cap."""
        uid = state.get("migrationUid")
        if not self._links.known(uid):
            self._start_transfer(vmi, state, max(0.0, (o.seconds_since(state.get("startTimestamp")) or 0.0) - 1.0))
        left = self._links.seconds_left(uid, self.sim.config.migration_link_bytes_per_second())
        return 0.0 if left is None else left
