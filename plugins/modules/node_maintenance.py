#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_maintenance
short_description: Put a node into maintenance, with its VMs live-migrated or deliberately shut down
version_added: 0.1.0
description:
  - Does what C(oc adm cordon), C(oc adm drain --delete-emptydir-data --ignore-daemonsets=true --force), a watch on
    the migrations and a hunt for the VM that blocks would do by hand - or the same through a NodeMaintenance custom
    resource when the node-maintenance operator is installed.
  - Before changing anything it computes the plan of the drain, the same plan
    M(kubevirt_ops.maintenance.node_maintenance_info) reports. The plan says which pods go, what happens to each VM
    according to its effective eviction strategy, live-migratability and run strategy, whether another node can take
    each VM, and which PodDisruptionBudgets allow no disruption. With O(non_migratable=fail) the task fails listing
    every blocker and changes nothing.
  - With O(method=drain), the node is cordoned and gets the taint C(medik8s.io/drain:NoSchedule) and the label
    C(remediation.medik8s.io/exclude-from-remediation=true), as the node-maintenance operator sets them; what was
    added is recorded in the node annotation C(maintenance.kubevirt-ops.io/node-maintenance), so that O(state=absent)
    removes exactly that. Pods are evicted concurrently through the Eviction API; a refusal by a PodDisruptionBudget
    (HTTP 429) is retried as soon as a watch shows that budget allowing a disruption again, else with backoff.
  - With O(method=cr), a NodeMaintenance (C(nodemaintenance.medik8s.io), or C(nodemaintenance.kubevirt.io) when only
    that API is served) named C(kubevirt-ops-<node>) is created and its status is reported in the same shape.
  - With O(method=auto) (the default) and the node-maintenance operator installed, the node enters maintenance as with
    O(method=drain) (cordon, taints, label and the record, which names method C(cr)), its VMs are evacuated as that
    drain evacuates them (paced to KubeVirt's free migration lanes), and then the NodeMaintenance is created; the
    operator drains the other pods and holds the node (see O(method)).
  - With either method, entering maintenance takes off the taint C(kubevirt-ops.io/maintenance-pending:PreferNoSchedule)
    that a rolling run (M(kubevirt_ops.maintenance.pending_nodes)) puts on the nodes still to do; the node is cordoned
    now, and done once it leaves maintenance, so VMs leaving the next nodes may come to it then. Leaving maintenance
    does not put it back.
  - Refuses, unless told otherwise, the last schedulable node, a control-plane node whose loss would break etcd
    quorum, and a node that a NodeMaintenance created by someone else already holds.
  - Progress (one line per change, with the pods left, the VMs still to leave the node by name, the last error and the
    percentage) goes to the system log of the host that runs the module and, when O(progress_file) is set, to that file.
    When the module runs on the controller (connection C(local), for example a task delegated to C(localhost)), the action
    plugin of this module also prints it in the job output while the drain runs (C(ansible-playbook), ansible-runner,
    AWX / AAP job output), each change and the latest status at least every 10 seconds. Started as an async job
    (C(async) with C(poll=0)), for example to drain several nodes at once, M(kubevirt_ops.maintenance.wait_for_drains)
    prints it while it waits for the jobs.
  - While virt-api is down, KubeVirt's eviction webhook refuses every eviction of a virt-launcher pod; the drain keeps
    waiting (until O(wait_timeout)) and its progress says "virt-api is not answering", then when it answers again.
  - When the node goes NotReady during the drain (its kubelet stopped) and stays so for 60 seconds with pods still on
    it, the drain stops instead of waiting out O(wait_timeout) - those pods can no longer confirm that they stopped -
    and the module fails with one sentence naming the node, its Ready condition and the pods left; the node stays
    cordoned and in maintenance (phase V(Failed)).
  - >-
    Node remediation is paused for the time of the maintenance (O(pause_remediation)), so that a node rebooting for a
    firmware update is not rebooted or reprovisioned by a health check half-way. Before the node is cordoned, every
    medik8s NodeHealthCheck (C(remediation.medik8s.io)) whose C(spec.selector) matches the node gets the entry
    C(kubevirt-ops: maintenance of node <name>) in C(spec.pauseRequests), and every MachineHealthCheck of OpenShift's
    machine API (C(machine.openshift.io)) or of Cluster API (C(cluster.x-k8s.io)) that selects the node's Machine gets
    the annotation C(cluster.x-k8s.io/paused) (the nodes it is paused for are listed in its annotation
    C(maintenance.kubevirt-ops.io/paused-for)). Only the kinds the cluster serves are looked at; without a Machine for the
    node in the cluster no MachineHealthCheck is paused. What was paused is recorded on the node (annotation
    C(maintenance.kubevirt-ops.io/remediation-paused)) and restored by O(state=absent), also after an interrupted run,
    and when entering maintenance fails. A check someone else paused, and other entries of C(spec.pauseRequests), are
    left as they are. The node also gets the label C(remediation.medik8s.io/exclude-from-remediation=true) with the
    other marks of maintenance, whatever O(pause_remediation) says.
  - >-
    O(state=absent) ends maintenance, and aborts one that was interrupted or failed half-way. On a node in maintenance
    it cancels the evacuations still pending there (VMIs whose C(status.evacuationNodeName) names the node: through
    KubeVirt's C(evacuate/cancel) action from KubeVirt 1.7 on, else by removing that field) and deletes the node's
    evacuation migrations that have not started yet, then uncordons the node, removes this collection's marks and
    restores the remediation it paused. VMs that moved away do not move back by themselves.
  - >-
    Respects the cluster lock O(lock) (by default the one the C(rolling_maintenance) role takes) for both states. While
    another run holds it, O(state=present) is refused, and so is O(state=absent) whenever it would change the node,
    since ending maintenance uncordons a node that the run holding the lock may have drained on purpose and may still
    be working on (a firmware update, a reboot), and its VMs and pods would start landing on it. A node with nothing
    to undo is reported unchanged, as without a lock. To end a maintenance that a dead run left behind, let its lock
    expire or release it (M(kubevirt_ops.maintenance.cluster_lock) with
    O(kubevirt_ops.maintenance.cluster_lock#module:force=true)), or set O(lock.name) to an empty string.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  state:
    description:
      - V(present) puts the node into maintenance and (with O(wait=true)) returns when it is drained.
      - V(absent) ends maintenance; with O(method=cr) it deletes the NodeMaintenance this collection created and waits
        until the operator released the node (uncordoned, its taints and label gone) and the release lasts. The node
        lifecycle controller can put C(node.kubernetes.io/unschedulable) back from a stale view of the cordon, so the
        release counts once that controller was seen taking the taint off the uncordoned node, or else once it held
        for 2 seconds.
    type: str
    choices: [present, absent]
    default: present
  reason:
    description: Why the node is in maintenance; recorded on the node or in the NodeMaintenance.
    type: str
  method:
    description:
      - V(drain) drains the node directly. V(cr) creates a NodeMaintenance custom resource and lets the operator drain.
      - V(auto) uses V(cr) when the cluster serves the NodeMaintenance API and no option the operator ignores (below)
        is set, else V(drain); a node already in maintenance by this collection keeps the method it was entered with
        (with a warning naming the ignored options when that is V(cr)). RV(method_reason) says why.
      - The node-maintenance operator drains every node the same way, whatever the task says (a NodeMaintenance
        holds only the node and the reason). It evicts every pod through the Eviction API, each with its own grace
        period, pods with emptyDir data and pods no controller manages included, leaves DaemonSet pods, and retries a
        VM whose live migrations keep failing until the NodeMaintenance is deleted. So it ignores O(pod_selector),
        O(grace_period) other than V(-1), O(disable_eviction=true), O(force=false), O(ignore_daemonsets=false),
        O(delete_emptydir_data=false) and O(non_migratable=shutdown) for VMs whose migrations keep failing (the VMs
        that cannot migrate at all are shut down by the module with either method). With V(cr), the default
        O(non_migratable=fail) does not stop the drain at such a VM either; the operator keeps retrying and the task
        fails at O(wait_timeout), the node staying in maintenance.
      - V(cr) with any of those options set refuses, naming them, and changes nothing.
      - V(drain) asks KubeVirt to evacuate the node's VMs only as fast as it migrates them (no more at once than its
        C(parallelOutboundMigrationsPerNode) and C(parallelMigrationsPerCluster)), so each migration starts as a slot
        frees; the operator, like C(kubectl drain), asks for all of them at once, and KubeVirt looks again at the
        migrations it holds back only every 5 seconds (C(handleTargetPodCreation) in
        C(pkg/virt-controller/watch/migration/migration.go) of KubeVirt 1.7).
      - When V(auto) chooses V(cr) and O(wait=true), the VMs leave first at KubeVirt's own pace and the
        NodeMaintenance comes after them. The node is cordoned, tainted, labelled and recorded as by V(drain), the
        virt-launcher pods are evicted as V(drain) evicts them (VMs that cannot migrate handled by O(non_migratable),
        VMs with a C(restart_elsewhere) fate started again elsewhere), the finished virt-launcher pods the
        migrations left on the node are evicted and followed until gone (the operator would evict them and poll
        once a second for their deletion; one it may not evict is left to it), and then the NodeMaintenance is
        created and followed until it is V(Succeeded). The operator finds the node already cordoned and tainted as it would do
        it itself, drains the other pods, and takes its Lease C(medik8s-leases/node-<name>), so what the
        NodeMaintenance gives stays - the console's maintenance state, the Lease that keeps medik8s remediation
        away, a drain of the rest that goes on if this task dies. RV(method) is V(cr) and RV(method_reason) says
        that the VMs left first. Measured on the lab (6 VMs off one node, KubeVirt 1.7, 2 migrations per node),
        V(auto) 19.0 s, V(drain) 17.8 s, V(cr) 30.3 s; no migration was held Pending by KubeVirt's limits with
        V(auto) (0.4-1.3 s each in Pending), four were with V(cr) (up to 12.8 s).
      - An evacuation that fails or times out ends the task as a failed drain does, with RV(phase) V(Failed), the pods
        left explained, the node left cordoned with this collection's marks and no NodeMaintenance. A later task
        with V(auto) (or V(cr)) resumes it and creates the NodeMaintenance; V(drain) takes it over as a drain;
        O(state=absent) ends it as a drain's. With O(wait=false), V(auto) creates the NodeMaintenance at once and
        the operator drains everything at its pace, as with V(cr).
    type: str
    choices: [auto, drain, cr]
    default: auto
  drain:
    description:
      - With O(state=present), whether to drain the node. V(false) puts it into maintenance without evicting anything;
        it is cordoned and tainted and recorded as in maintenance by this collection (RV(phase) V(Running), the VMs
        and pods it runs listed as pending), and the remediation that covers it is paused. A later task with
        V(true) finds the maintenance its own and drains the node; O(state=absent) ends it as any other.
      - For taking several nodes out of scheduling before any of them drains, so that the VMs and pods leaving one
        cannot land on another about to be drained (the C(rolling_maintenance) role does this for a batch).
      - The node-maintenance operator always drains, so V(false) needs O(method=drain) or V(auto) (which then
        chooses V(drain)); O(method=cr) refuses it. The blockers are checked as for a drain, before anything changes.
    type: bool
    default: true
  allow_last_schedulable_node:
    description:
      - Allow maintenance of the only node that is Ready, uncordoned and untainted. Its pods then have nowhere to go.
    type: bool
    default: false
  allow_control_plane:
    description:
      - Allow maintenance of a control-plane node even when the Ready control-plane nodes left would be below etcd
        quorum, or the C(etcd-guard-pdb) PodDisruptionBudget in C(openshift-etcd) allows no disruption.
    type: bool
    default: false
  pause_remediation:
    description:
      - Pause the NodeHealthChecks and MachineHealthChecks that cover the node while it is in maintenance (see the
        description); V(false) leaves them alone. O(state=absent) restores what an earlier run paused either way.
    type: bool
    default: true
  progress_file:
    description:
      - A file to append progress lines to while the drain runs. The lines also go to the system log of the host that
        runs the module, and to the job output (see the description); this option is not needed for that.
    type: path
  wait_timeout:
    description:
      - How many seconds the whole task may take at most, drain included. When it runs out, the node stays cordoned,
        RV(phase) is V(Failed) and RV(last_error) says for each pod left why it is still there.
    type: int
    default: 1800
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.drain
  - kubevirt_ops.maintenance.drain.grouped
  - kubevirt_ops.maintenance.drain.owner
  - kubevirt_ops.maintenance.wait
  - kubevirt_ops.maintenance.lock
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Returns the same keys, predicted from the plan, and the plan itself in RV(plan). Blockers fail the task as a real run would.
  diff_mode:
    support: full
    details: Shows the node's C(unschedulable), taints and exclude-from-remediation label before and after.
  idempotent:
    support: full
    details: A node already drained reports no change. A run interrupted half-way and started again finishes the job.
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance_info
  - module: kubevirt_ops.maintenance.node_decommission
notes:
  - Needs to list nodes, pods, PodDisruptionBudgets and KubeVirt objects cluster-wide, patch nodes, create
    C(pods/eviction) in the namespaces of the node's pods (with O(method=auto) choosing the NodeMaintenance, of
    its virt-launcher pods), and (for O(method=cr), or V(auto) choosing it) create and delete NodeMaintenances.
    Missing permissions are reported before anything is changed.
  - Pausing remediation needs to list and patch the NodeHealthChecks and MachineHealthChecks (and list the Machines) the
    cluster serves; cancelling evacuations needs update of C(virtualmachineinstances/evacuate) (the action C(evacuate/cancel)) of
    C(subresources.kubevirt.io) (KubeVirt 1.7 and later; patch of C(virtualmachineinstances) before) and delete of
    C(virtualmachineinstancemigrations) in the VMs' namespaces.
  - A C(RerunOnFailure) VM the drain shuts down (which KubeVirt does not start again after a clean shutdown, so the
    collection does) carries the label and annotation C(maintenance.kubevirt-ops.io/start-again) from before the
    drain shuts it down until it was started. A run stopped in between (the playbook killed, or O(wait=false)) leaves
    it to the next call for the node to start, O(state=present) (waiting until it runs elsewhere) or
    O(state=absent) (RV(vms_started_again)).
"""

EXAMPLES = r"""
- name: Put worker-3 into maintenance; fail listing every VM that would block
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    reason: firmware update

- name: Same, but stop the VMs that cannot migrate so their run strategy restarts them elsewhere
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    non_migratable: shutdown
    progress_file: "{{ playbook_dir }}/worker-3.progress"

- name: What would happen (nothing is changed)
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
  check_mode: true
  register: preview

- name: Through the node-maintenance operator
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    method: cr
    wait_timeout: 3600

- name: Take worker-3 and worker-4 out of scheduling first, so nothing leaving one lands on the other
  kubevirt_ops.maintenance.node_maintenance:
    name: "{{ item }}"
    drain: false
  loop: [worker-3, worker-4]

- name: Then drain both
  kubevirt_ops.maintenance.node_maintenance:
    name: "{{ item }}"
  loop: [worker-3, worker-4]

- name: End maintenance
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    state: absent
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-3
method:
  description: How maintenance was entered (or, with O(state=absent), ended).
  returned: always
  type: str
  sample: drain
method_reason:
  description:
    - Why RV(method) was used, one sentence; with O(method=auto), which way it went (for example that the
      NodeMaintenance operator ignores an option that is set, so the node is drained directly). When the choice
      leaves options unused, or avoids the installed operator because of them, the same sentence is also a warning.
    - When O(method=auto) evacuates the VMs before it creates the NodeMaintenance, a second sentence says so.
  returned: always
  type: str
  sample: "method auto chose drain: the NodeMaintenance operator ignores pod_selector='app=web' (it evicts every pod)."
phase:
  description:
    - V(Succeeded) when every evictable pod is gone, V(Running) when O(wait=false) returned before (or
      O(drain=false) drained nothing), V(Failed) when the drain could not finish (the task then fails, with these keys set). Null with O(state=absent).
    - In check mode, the phase the run would end in.
  returned: always
  type: str
  sample: Succeeded
total_pods:
  description: Pods on the node when the drain started (all of them, as the node-maintenance operator counts).
  returned: always
  type: int
  sample: 14
eviction_pods:
  description: Pods the drain evicts (or, with O(disable_eviction=true), deletes).
  returned: always
  type: int
  sample: 11
pending_pods:
  description: Pods still to go, as C(namespace/name).
  returned: always
  type: list
  elements: str
  sample: [vms/virt-launcher-db-1-x7k2p]
drain_progress:
  description: Percentage of RV(eviction_pods) gone.
  returned: always
  type: int
  sample: 100
vms:
  description: Where the VMs that ran on the node went. In check mode, the prediction.
  returned: always
  type: dict
  contains:
    migrated:
      description: VMs live-migrated off the node. In check mode, RV(vms.migrated[].target) is a node with room, the scheduler decides.
      type: list
      elements: dict
      sample: [{namespace: vms, name: web-1, source: worker-3, target: worker-1}]
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        source:
          description: The node maintained.
          type: str
        target:
          description: The node the VM runs on now.
          type: str
    shut_down:
      description: VMs whose VMI was shut down (by the eviction, or by O(non_migratable=shutdown)).
      type: list
      elements: dict
      sample: [{namespace: vms, name: batch-1, source: worker-3, run_strategy: Always, outcome: restart_elsewhere}]
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        source:
          description: The node maintained.
          type: str
        run_strategy:
          description: The VM's run strategy (null for a VMI without a VM).
          type: str
        outcome:
          description:
            - V(restart_elsewhere) (run strategy C(Always) or C(RerunOnFailure)), V(stay_stopped) (C(Manual),
              C(Once)), or V(shutdown) (a VMI without a VM, gone for good).
          type: str
        restart_by:
          description:
            - For V(restart_elsewhere), who starts it again, V(kubevirt) or V(collection) (see RV(plan.vms[].restart_by)).
          type: str
          returned: when the VM is started again
        restarted_on:
          description: The node the VM runs on again, once it was started there.
          type: str
          returned: when the VM was started again and runs
    blocked:
      description: VMs still on the node at the end, with why.
      type: list
      elements: dict
      sample: [{namespace: vms, name: db-1, reason: "VM vms/db-1 is not live-migratable (DisksNotLiveMigratable) ..."}]
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        reason:
          description: Why it is still there.
          type: str
    pending:
      description: With O(wait=false), VMs still leaving the node when the task returned.
      type: list
      elements: dict
      sample: []
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM.
          type: str
        source:
          description: The node maintained.
          type: str
        outcome:
          description: What the plan expects (V(migrate), V(restart_elsewhere), V(stay_stopped)).
          type: str
duration_seconds:
  description: Wall time of the task.
  returned: always
  type: float
  sample: 42.7
last_error:
  description: Why the drain did not finish, naming for each pod left the PodDisruptionBudget, VM or migration that holds it.
  returned: always
  type: str
  sample: null
remediation_paused:
  description:
    - What maintenance paused of node remediation in this run (in check mode, would pause). Empty when nothing needed it.
  returned: always
  type: list
  elements: dict
  sample: [{kind: NodeHealthCheck, api_version: remediation.medik8s.io/v1alpha1, namespace: null, name: nhc-workers,
            how: pauseRequests}]
  contains:
    kind:
      description: V(NodeHealthCheck), V(MachineHealthCheck), or V(Node) for the exclude-from-remediation label.
      type: str
    api_version:
      description: API version of the object (tells OpenShift's and Cluster API's MachineHealthCheck apart).
      type: str
    namespace:
      description: Namespace of a MachineHealthCheck; null for cluster-scoped objects.
      type: str
    name:
      description: Name of the object.
      type: str
    how:
      description: V(pauseRequests) (an entry of ours), V(annotation) (C(cluster.x-k8s.io/paused)) or V(label).
      type: str
remediation_restored:
  description:
    - Remediation pauses of this collection for the node that were undone (by O(state=absent), or because entering
      maintenance failed), in the shape of RV(remediation_paused).
  returned: always
  type: list
  elements: dict
  sample: []
evacuations_cancelled:
  description: With O(state=absent), the VMIs whose pending evacuation from the node was cancelled.
  returned: always
  type: list
  elements: dict
  sample: [{namespace: vms, name: db-1, node: worker-3, how: evacuate/cancel}]
  contains:
    namespace:
      description: Namespace of the VMI.
      type: str
    name:
      description: Name of the VMI.
      type: str
    node:
      description: The node it was to leave.
      type: str
    how:
      description: V(evacuate/cancel) (KubeVirt's action, 1.7 and later) or V(status) (the VMI's field removed).
      type: str
vms_started_again:
  description:
    - With O(state=absent), the C(RerunOnFailure) VMs, as C(namespace/name), that an earlier drain of the node shut
      down and a run stopped before starting them again (they carry the C(maintenance.kubevirt-ops.io/start-again)
      mark); they are started once the node is back in service (in check mode, those that would be).
  returned: when O(state=absent)
  type: list
  elements: str
  sample: [vms/batch-1]
migrations_deleted:
  description: With O(state=absent), the node's evacuation migrations that had not started, deleted, as C(namespace/name).
  returned: always
  type: list
  elements: str
  sample: [vms/kubevirt-evacuation-x7k2p]
lock:
  description:
    - The cluster lock that another run holds, as M(kubevirt_ops.maintenance.cluster_lock) returns it in RV(kubevirt_ops.maintenance.cluster_lock#module:lock).
  returned: when the task fails because another run holds O(lock)
  type: dict
  sample: {namespace: kube-system, name: kubevirt-ops-maintenance, holder: "alice@bastion pid 4242 #1a2b", ttl: 3600}
msg:
  description: With O(state=absent), what was done and that VMs do not move back by themselves.
  returned: when O(state=absent)
  type: str
  sample: Node worker-3 left maintenance. VMs that left the node during maintenance do not move back by themselves.
plan:
  description: The plan of the drain, as M(kubevirt_ops.maintenance.node_maintenance_info) reports it.
  returned: in check mode with O(state=present)
  type: dict
  contains:
    evict:
      description: Pods that would be evicted, as C(namespace/name).
      type: list
      elements: str
    skip:
      description: Pods left on the node, with why.
      type: list
      elements: dict
      contains:
        pod:
          description: The pod, as C(namespace/name).
          type: str
        reason:
          description: Why it stays (or, starting with C(blocks the drain), why it stops the drain).
          type: str
    vms:
      description: Each VM on the node and what the drain does to it.
      type: list
      elements: dict
      contains:
        namespace:
          description: Namespace of the VM.
          type: str
        name:
          description: Name of the VM (of the VMI when no VM owns it).
          type: str
        eviction_strategy:
          description: Effective eviction strategy (the VMI's own, else the cluster default; null when none).
          type: str
        live_migratable:
          description: The VMI's C(LiveMigratable) condition.
          type: bool
        reason:
          description: Why it is not live-migratable (null when it is).
          type: str
        outcome:
          description:
            - V(migrate) (live migration), V(restart_elsewhere) (shut down, then started on another node by its run
              strategy), V(stay_stopped) (shut down, run strategy C(Manual) or C(Once)), V(shutdown) (a VMI without a
              VM, gone for good), V(block) (eviction strategy C(LiveMigrate) but not live-migratable, so the drain
              cannot finish) or V(external) (eviction strategy C(External), for which KubeVirt only marks the VMI and an
              external controller has to move or stop it).
          type: str
        run_strategy:
          description: The VM's run strategy.
          type: str
        memory:
          description: Bytes of guest memory a live migration of the VM copies (0 when unknown).
          type: int
        explanation:
          description: One sentence saying what happens to the VM and why (eviction strategy, live-migratability,
            run strategy).
          type: str
        restart_by:
          description:
            - Who starts a shut-down VM again on another node, V(kubevirt) (run strategy C(Always)) or
              V(collection) (C(RerunOnFailure), which KubeVirt does not restart after a clean shutdown, so the
              collection asks it to start the VM once its old VMI has ended); null when nobody does.
          type: str
        target:
          description:
            - The node the plan expects the VM to run on afterwards (the scheduler's rules applied to what runs there and
              to what the plan moves first); null when it stays stopped or no node would take it.
          type: str
    blockers:
      description: What stops maintenance, one sentence each, saying what to do.
      type: list
      elements: str
    capacity_ok:
      description:
        - Whether the other nodes can take everything that would move by the scheduler's rules (node selection,
          taints and tolerations, every requested resource (CPU, memory, pod slots, hugepages, extended resources
          such as GPUs and C(devices.kubevirt.io/kvm)), required pod affinity and anti-affinity (both ways) and
          topology spread constraints (C(DoNotSchedule); the node being drained counts as a domain, as it does for
          the scheduler)).
      type: bool
    pdbs:
      description: PodDisruptionBudgets over pods to evict that allow no disruption now.
      type: list
      elements: dict
      contains:
        namespace:
          description: Namespace of the budget.
          type: str
        name:
          description: Name of the budget.
          type: str
        disruptions_allowed:
          description: C(status.disruptionsAllowed).
          type: int
        pods:
          description: The node's pods it covers.
          type: list
          elements: str
        never_allows:
          description: True when the budget can never allow a disruption at the current scale (a blocker).
          type: bool
    pending:
      description:
        - Pods that would leave the node and that no other node would take (their own node selection,
          affinity or topology spread rules allow none); they stay C(Pending) after the drain, which still
          completes. VMs that no node would take are blockers instead.
      type: list
      elements: dict
      contains:
        pod:
          description: The pod, C(namespace/name).
          type: str
        reason:
          description: Why no node would take it.
          type: str
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance.runner import run


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.DRAIN,
            args.DRAIN_GROUPED,
            args.DRAIN_OWNER,
            args.WAIT,
            args.LOCK,
            dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                reason=dict(type="str"),
                method=dict(type="str", choices=["auto", "drain", "cr"], default="auto"),
                drain=dict(type="bool", default=True),
                allow_last_schedulable_node=dict(type="bool", default=False),
                allow_control_plane=dict(type="bool", default=False),
                pause_remediation=dict(type="bool", default=True),
                progress_file=dict(type="path"),
            ),
            wait_timeout=dict(type="int", default=1800),
        ),
    )
    module.run(run)


if __name__ == "__main__":
    main()
