# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py DRAIN. Defaults match the documented
    # `oc adm drain NODE --delete-emptydir-data --ignore-daemonsets=true --force`.
    DOCUMENTATION = r"""
options:
  ignore_daemonsets:
    description:
      - Leave DaemonSet-managed pods on the node. When false, such a pod is a blocker.
    type: bool
    default: true
  delete_emptydir_data:
    description:
      - Evict pods that use emptyDir volumes (their data is lost). When false, such a pod is a blocker.
    type: bool
    default: true
  force:
    description:
      - Delete pods that no controller manages (they are not re-created). When false, such a pod is a blocker.
    type: bool
    default: true
  pod_selector:
    description:
      - Label selector; only pods matching it are evicted.
    type: str
  grace_period:
    description:
      - Seconds each pod is given to terminate. V(-1) uses the pod's own terminationGracePeriodSeconds.
    type: int
    default: -1
  disable_eviction:
    description:
      - Delete pods directly instead of using the Eviction API. This bypasses PodDisruptionBudgets; use with care.
    type: bool
    default: false
  non_migratable:
    description:
      - What to do about virtual machines that would block the drain (for example a VM with eviction strategy
        C(LiveMigrate) whose disks are not ReadWriteMany).
      - V(fail) fails before anything is changed, listing every blocker.
      - V(shutdown) stops exactly those VMs so that their run strategy re-creates them on another node.
      - V(wait) keeps retrying, as C(oc adm drain) does, until the task's C(wait_timeout).
      - The policy also applies to a VM whose live migrations keep failing during the drain (three failed
        migrations; KubeVirt retries by itself until then, waiting 20 s after the first failure and 40 s after the
        second, so the third fails a minute or more after the first). V(fail) stops the drain naming the VM and
        KubeVirt's reason, and the node stays in maintenance; V(shutdown) shuts that VM down as it shuts down
        blockers (its C(restart) subresource for C(Always) and C(RerunOnFailure), so it runs again on another node;
        C(stop) for C(Manual)); V(wait) leaves KubeVirt retrying.
      - A VM whose guest died during its live migration off the node (its virt-launcher pod failed, as when the
        machine loses power) is not a policy matter, as nothing of it runs any more. KubeVirt leaves its VMI
        claiming the node for good, so the drain restarts the VM the same way (its run strategy decides where it
        runs next) under every policy, and reports it shut down.
    type: str
    default: fail
    choices: [fail, shutdown, wait]
"""

    # Paired with module_utils/ansible_module/args.py DRAIN_GROUPED.
    GROUPED = r"""
options:
  drain_options:
    description:
      - The pod options of the drain as one dictionary, as the O(ignore_daemonsets), O(delete_emptydir_data),
        O(force), O(pod_selector), O(grace_period) and O(disable_eviction) options of the same names; for
        playbooks that keep them in one variable (the C(rolling_maintenance_drain_options) of the roles).
      - A key set here is used instead of the option of the same name; the same option changed in both places to
        different values is refused.
    type: dict
    suboptions:
      ignore_daemonsets:
        description: As O(ignore_daemonsets).
        type: bool
      delete_emptydir_data:
        description: As O(delete_emptydir_data).
        type: bool
      force:
        description: As O(force).
        type: bool
      pod_selector:
        description: As O(pod_selector).
        type: str
      grace_period:
        description: As O(grace_period).
        type: int
      disable_eviction:
        description: As O(disable_eviction).
        type: bool
"""

    # Paired with module_utils/ansible_module/args.py DRAIN_OWNER.
    OWNER = r"""
options:
  owner_pid:
    description:
      - The process ID, on the host that runs the module, of the run this drain belongs to. Once that process has
        ended, the drain stops. Nothing more is evicted, the node stays cordoned and in maintenance, KubeVirt finishes
        the live migrations already under way, and the module fails saying so.
      - Set by the module's action plugin when the module runs on the controller (connection C(local), for example a
        task delegated to localhost) to the ansible-playbook process (ansible-runner's, under AWX / AAP), so that a
        drain started as an async job (C(async) with C(poll) 0, as the roles do for several nodes at once) does not go
        on unattended after the job is cancelled or the playbook is killed. Leave it out.
      - A process that is not running when the module starts is refused before anything changes.
    type: int
"""
