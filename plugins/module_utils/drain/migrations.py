# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Live migrations that keep failing during a drain: the migrations of the namespaces whose
VMs the drain migrates, watched to tell when one VM has had too many fail to leave the node
(and which VMs use no migration slot, for the pacing of evacuations),
and the shutdown of such a VM (its run strategy decides what follows); and the VMs whose guest
died with its machine during a live migration (``stranded``), which KubeVirt leaves on the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import restart_elsewhere
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.explain import describe_failures
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Informer


class FailingMigrations:
    """The migrations of the VMs a drain migrates, one Informer per namespace (not the whole
    cluster: rights may end at those namespaces).

    ``attempts``: failed live migrations of one VM during the drain after which the VM counts
    as unable to leave the node.
    """

    def __init__(self, client, changed, attempts):
        self.client = client
        self.changed = changed
        self.attempts = attempts
        self.informers = []  # one Informer per namespace of the VMs being migrated
        self._ended_before = None  # UIDs of migrations that had ended (Succeeded or Failed) before this drain

    @property
    def generation(self):
        return sum(m.generation for m in self.informers)

    def start(self, namespaces, deadline):
        """Watch the migrations of ``namespaces``. A watch that cannot start (RBAC) only leaves
        the drain to KubeVirt's retries and the deadline."""
        for namespace in namespaces:
            informer = Informer(self.client, "VirtualMachineInstanceMigration", namespace=namespace,
                                changed=self.changed)
            self.informers.append(informer.start())
        for informer in self.informers:
            informer.wait_synced(deadline)
        for informer in [i for i in self.informers if not i.synced.is_set()]:
            informer.stop()
            self.informers.remove(informer)
        # A VM that came to the node earlier in a rolling run has a Succeeded migration from then;
        # counted as this drain's, it would free the lane of the VM asked now until its new
        # migration shows, and a third migration would wait in Pending for virt-controller's recheck.
        self._ended_before = set(m["metadata"].get("uid") for m in self._all()
                                 if (m.get("status") or {}).get("phase") in kubevirt.FINISHED_PHASES)

    def stop(self):
        for informer in self.informers:
            informer.stop()

    def _all(self):
        return [m for informer in self.informers for m in informer.items()]

    def stuck(self, targets, gave_up):
        """Launcher pods whose VM has had ``attempts`` live migrations fail during this drain
        and that nothing was decided about yet; records why in ``gave_up`` (pod key ->
        sentence) and the VM (namespace/name) in ``target.vm``."""
        if not self.informers:
            return []
        by_vmi = self._by_vmi()
        stuck = []
        for target in targets:
            if not target.launcher or target.wait_only or target.key in gave_up \
                    or target.state in ("gone", "inflight", "waiting", "ended"):
                continue
            vmi_name = kubevirt.launcher_vmi_name(target.pod)
            failed = kubevirt.failed_migrations(by_vmi.get((target.namespace, vmi_name), []))
            if len(failed) < self.attempts:
                continue
            target.vm = "%s/%s" % (target.namespace, vmi_name)
            gave_up[target.key] = describe_failures(failed)
            stuck.append(target)
        return stuck

    def not_migrating(self):
        """(namespace, VMI name) of the VMs that use no migration slot now, from their migrations
        during this drain: the newest has ended (Succeeded: the VM runs elsewhere, its old pod is on
        its way out; Failed), or one failed and the newest is still Pending - KubeVirt creates the
        next try at once but holds it back for its backoff (handleMigrationBackoff,
        pkg/virt-controller/watch/migration/migration.go: 20 s, then doubling)."""
        idle = set()
        for key, migrations in self._by_vmi().items():
            newest = max(migrations, key=lambda m: (m["metadata"].get("creationTimestamp") or "",
                                                    m["metadata"].get("name") or ""))
            phase = (newest.get("status") or {}).get("phase") or "Pending"
            failed = any((m.get("status") or {}).get("phase") == "Failed" for m in migrations)
            if phase in kubevirt.FINISHED_PHASES or (failed and phase == "Pending"):
                idle.add(key)
        return idle

    def _by_vmi(self):
        """This drain's migrations (not those that had ended before it), by (namespace, VMI name)."""
        by_vmi = {}
        for migration in self._all():
            if migration["metadata"].get("uid") in (self._ended_before or ()):
                continue
            key = (migration["metadata"].get("namespace"), (migration.get("spec") or {}).get("vmiName"))
            by_vmi.setdefault(key, []).append(migration)
        return by_vmi


def vmi_claims_node(vmi, pod, node, pods_on_node):
    """Whether the VMI of an ended launcher ``pod`` (the same VMI, by UID) still says it runs on ``node`` through
    that pod, its newest on the node (upstream's CurrentVMIPod, pkg/controller/controller.go; ``pods_on_node``: the
    node's pods): then its VM has not left the node, however the pod ended. An older pod there (the target pod of
    a migration that failed, after the VM came to the node another way) holds nothing."""
    uid = kubevirt.launcher_vmi_uid(pod)
    if vmi is None or (vmi.get("metadata") or {}).get("uid") != uid:
        return False
    if kubevirt.vmi_is_final(vmi) or kubevirt.vmi_node(vmi) != node:
        return False
    mine = [p for p in pods_on_node if kubevirt.is_launcher_pod(p) and kubevirt.launcher_vmi_uid(p) == uid]
    newest = max(mine or [pod], key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or ""))
    return newest["metadata"].get("uid") == pod["metadata"].get("uid")


def stranded(vmi, pod, node):
    """Why the VM of failed launcher ``pod``, whose VMI still says it runs on ``node`` through it
    (vmi_claims_node, which the caller has established), is stranded there, else None: the pod failed (its guest
    is gone with it: a machine that lost power, a launcher killed) while its live migration from ``node`` had
    started and not ended.

    KubeVirt (1.7) leaves such a VMI claiming the node for good: virt-handler skips a VMI whose migration
    started and never ended (``isMigrationInProgress``, pkg/virt-handler/controller.go, in ``execute`` of
    pkg/virt-handler/vm.go), the source's migration controller has no domain to read the end from
    (``processVMI`` and ``hasTargetDetectedReadyDomain``, pkg/virt-handler/migration-source.go), virt-controller
    marks a failed migration on the VMI only when it never started (``handleMarkMigrationFailedOnVMI``,
    pkg/virt-controller/watch/migration/migration.go) and fails a running VMI only when its pod is gone
    (pkg/virt-controller/watch/vmi/lifecycle.go). Nothing runs there any more: restarting the VM through its run
    strategy shuts nothing down that was alive."""
    state = kubevirt.migration_state(vmi)
    if not state.get("startTimestamp") or state.get("endTimestamp") or state.get("completed"):
        return None
    if state.get("sourcePod") not in (None, pod["metadata"].get("name")) or state.get("sourceNode") not in (None, node):
        return None  # a migration from another pod or node
    return ("its virt-launcher pod failed during its live migration to %s (the guest is gone, as when its machine "
            "loses power), and KubeVirt leaves such a VM claiming node %s: it is restarted as its run strategy says"
            % (state.get("targetNode") or "another node", node))


def shut_down_vm(client, target):
    """Shut down the VM of a launcher pod that cannot migrate, as the plan shuts its blockers
    down (its run strategy decides what follows); None when done, else the error."""
    namespace, name = target.vm.split("/", 1)
    try:
        restart_elsewhere.shut_down_given_up(client, namespace, name, kubevirt.launcher_vmi_uid(target.pod))
        outcome = None
    except ApiError as exc:
        outcome = exc if exc.status != 409 else None  # 409: that VMI is gone already, a new one runs
    except MaintenanceError as exc:
        outcome = exc
    return outcome
