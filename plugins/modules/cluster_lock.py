#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cluster_lock
short_description: Acquire, renew or release a cluster-wide maintenance lock (a Kubernetes Lease)
version_added: 0.1.0
description:
  - Makes sure only one maintenance run works on a cluster at a time, whether it runs from a laptop, a CI job or
    an automation controller (AWX/AAP) job.
  - The lock is a C(coordination.k8s.io/v1) Lease. It records the holder identity, when it was acquired, when it
    was last renewed and its TTL (C(leaseDurationSeconds)).
  - Every write carries the C(resourceVersion) that was read, so when two runs race for the lock exactly one
    wins; the other sees the winner and waits for it or fails naming it.
  - A lock whose holder did not renew it within its TTL is expired (its run crashed or was killed); the next
    run takes it over and reports whose lock it took.
  - A lock bound to its run (O(bind_to_run=true), as the roles take it) is taken over at once by a run on the same
    machine once the process of the run that holds it has ended, for example a playbook interrupted with Ctrl-C or
    killed, so that running the same command again resumes the work without waiting for the TTL.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the Lease.
    type: str
    default: kubevirt-ops-maintenance
  namespace:
    description: Namespace of the Lease. It must exist.
    type: str
    default: kube-system
  state:
    description:
      - V(present) acquires the lock, or renews it when O(holder) already holds it.
      - V(absent) releases it when O(holder) holds it (or any holder with O(force=true)). A lock held by someone
        else is left alone and the task reports no change.
    type: str
    choices: [present, absent]
    default: present
  holder:
    description:
      - Identity of the holder, recorded in the Lease.
      - With O(state=present) and no O(holder), a unique identity naming the user, the machine, the process and,
        under an automation controller, the job is generated and returned as RV(holder); pass it back to renew
        and release.
      - Required with O(state=absent) unless O(force=true).
    type: str
  ttl:
    description:
      - Seconds the lock stays valid after each acquisition or renewal (C(leaseDurationSeconds)).
      - Renew the lock (O(state=present) with the same O(holder)) more often than this. If the holder stops
        renewing, the lock expires after O(ttl) seconds and another run may take it over.
      - Choose it longer than the longest step between two renewals, and much longer than any clock skew between
        the machines that run maintenance.
    type: int
    default: 3600
  purpose:
    description: What the holder is doing, shown to anyone who finds the lock held. Kept on renewal when omitted.
    type: str
  wait:
    description:
      - When another holder has the lock, wait (watching the Lease) until it is released or expires.
      - When V(false), fail at once, naming the holder and since when it holds the lock.
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait for the lock when O(wait=true).
    type: int
    default: 300
  force:
    description:
      - With O(state=present), take the lock even if another holder has it and it has not expired.
      - With O(state=absent), release the lock whoever holds it.
      - For breaking the lock of a run known to be dead; never needed in normal operation.
    type: bool
    default: false
  bind_to_run:
    description:
      - With O(state=present), bind the lock to the run that takes it. The ansible-playbook process (ansible-runner's
        under AWX / AAP) is recorded in the Lease, with the machine, its boot and the process start time.
      - Once that process has ended, a run on the same machine takes the lock over at once, as it would an expired
        one, and says so (RV(previous_run_ended)). A run on another machine cannot see that process and waits for
        the TTL as before, so a lock held from elsewhere is never taken early.
      - Needs the module to run on the controller (connection C(local), for example delegated to localhost);
        elsewhere the lock is taken unbound, with a warning.
      - Leave it V(false) for a lock held by hand (an ad hoc command ends at once, its lock must not).
    type: bool
    default: false
  owner_pid:
    description:
      - The process the lock is bound to. Set by the module's action plugin when O(bind_to_run=true) and the module
        runs on the controller. Leave it out.
      - A process that is not running when the module starts is refused before anything changes.
    type: int
notes:
  - The user needs C(get), C(list), C(watch), C(create) and C(update) on C(leases) in O(namespace).
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Reports whether the lock would be acquired, renewed, taken over or released, without writing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Acquiring a lock the holder already has renews it and reports no change.
"""

EXAMPLES = r"""
- name: Take the maintenance lock, failing at once when someone else holds it
  kubevirt_ops.maintenance.cluster_lock:
    purpose: rolling maintenance of the workers
    ttl: 3600
  register: maintenance_lock

- name: Renew it between two long steps
  kubevirt_ops.maintenance.cluster_lock:
    holder: "{{ maintenance_lock.holder }}"
    ttl: 3600

- name: Take the lock for this playbook's run; after Ctrl-C, running the playbook again takes it over at once
  kubevirt_ops.maintenance.cluster_lock:
    purpose: firmware updates of rack 3
    bind_to_run: true
  delegate_to: localhost
  register: maintenance_lock

- name: Release it
  kubevirt_ops.maintenance.cluster_lock:
    holder: "{{ maintenance_lock.holder }}"
    state: absent

- name: Wait up to 30 minutes for another run to finish, then take the lock
  kubevirt_ops.maintenance.cluster_lock:
    wait: true
    wait_timeout: 1800

- name: Break the lock of a run that is known to be dead
  kubevirt_ops.maintenance.cluster_lock:
    state: absent
    force: true
"""

RETURN = r"""
action:
  description:
    - What the task did (or would do in check mode).
    - V(acquired), V(renewed), V(taken_over) (its holder let it expire, or O(force=true)), V(released), or
      V(none) (nothing to release, or held by someone else).
  returned: always
  type: str
  sample: acquired
acquired:
  description: Whether O(holder) holds the lock after the task.
  returned: always
  type: bool
  sample: true
holder:
  description: The holder identity used; pass it back to renew and release.
  returned: always
  type: str
  sample: "alice@bastion pid 4242 #1a2b"
previous_holder:
  description: Who held the lock before a take-over or release.
  returned: always
  type: str
  sample: "bob@laptop pid 77 #9f00"
previous_expired:
  description: Whether a lock that was taken over had expired.
  returned: always
  type: bool
  sample: false
previous_run_ended:
  description: Whether a lock that was taken over was bound to a run whose process had ended on this machine.
  returned: always
  type: bool
  sample: false
bound_to_run:
  description: Whether the lock is bound to this run's process (see O(bind_to_run)).
  returned: when O(state=present)
  type: bool
  sample: true
waited_seconds:
  description: Seconds spent waiting for another holder.
  returned: always
  type: float
  sample: 0.0
lock:
  description: The Lease after the task.
  returned: always
  type: dict
  contains:
    namespace:
      description: Namespace of the Lease.
      type: str
      sample: kube-system
    name:
      description: Name of the Lease.
      type: str
      sample: kubevirt-ops-maintenance
    holder:
      description: Current holder, V(null) when free.
      type: str
      sample: "alice@bastion pid 4242 #1a2b"
    acquired_at:
      description: When the current holder acquired it (UTC).
      type: str
      sample: "2024-05-04T22:00:01.000000Z"
    renewed_at:
      description: When it was last renewed (UTC).
      type: str
      sample: "2024-05-04T22:31:40.000000Z"
    expires_at:
      description: When it expires unless renewed (UTC).
      type: str
      sample: "2024-05-04T23:31:40.000000Z"
    ttl:
      description: The TTL in seconds.
      type: int
      sample: 3600
    transitions:
      description: How many times the lock changed hands.
      type: int
      sample: 3
    purpose:
      description: What the holder said it is doing.
      type: str
      sample: rolling maintenance of the workers
msg:
  description: One sentence saying what happened.
  returned: always
  type: str
  sample: Acquired the cluster lock kube-system/kubevirt-ops-maintenance as 'alice@bastion pid 4242 #1a2b'.
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import lock
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import cluster_lock
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    DEFAULT_LOCK_NAME,
    DEFAULT_LOCK_NAMESPACE,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            name=dict(type="str", default=DEFAULT_LOCK_NAME),
            namespace=dict(type="str", default=DEFAULT_LOCK_NAMESPACE),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            holder=dict(type="str"),
            ttl=dict(type="int", default=lock.DEFAULT_TTL),
            purpose=dict(type="str"),
            wait=dict(type="bool", default=False),
            wait_timeout=dict(type="int", default=300),
            force=dict(type="bool", default=False),
            bind_to_run=dict(type="bool", default=False),
            owner_pid=dict(type="int"),
        ),
    )
    module.run(cluster_lock.run)


if __name__ == "__main__":
    main()
