#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_machine
short_description: Service the machine behind a drained node through its BMC - firmware, BIOS settings, a restart
version_added: 0.1.0
description:
  - The work a node goes into maintenance for, on the machine itself, through its BMC (Redfish, O(bmc)) or its
    Metal3 BareMetalHost - firmware images (O(firmware)), BIOS settings (O(bios)) and a restart (O(reboot)).
  - Everything asked is read and checked first, before anything changes, with every problem in one message - the BMC
    answers and takes the credentials, every firmware component and BIOS attribute exists on the machine.
  - The node must be cordoned, with no VM on it and no migration from or to it (drain it first with
    M(kubevirt_ops.maintenance.node_maintenance)); otherwise the task fails naming the VMs, with nothing changed. A
    machine is never restarted under a guest.
  - Firmware images go to the BMC (C(UpdateService.SimpleUpdate), its task followed to the end) and BIOS settings to
    the pending settings (C(Bios/Settings)); both take effect at the next boot, so the machine is then restarted
    (C(GracefulRestart), C(ForceRestart) when no new boot came within half of O(wait_timeout)). The node must come
    back Ready with a new boot ID and, on a KubeVirt node, with virt-handler beating again (a new
    C(kubevirt.io/heartbeat) and C(kubevirt.io/schedulable=true); a label left by the handler that died with the
    machine does not count), and the machine must report the versions and settings asked for; a machine that
    did not change fails the task, never silently "done".
  - Idempotent - firmware already at its version and BIOS attributes already set are left alone, and with nothing
    left to do (and O(reboot=false)) nothing is sent to the machine.
  - The role C(kubevirt_ops.maintenance.rolling_maintenance) runs this module on each node while it is drained
    (C(rolling_maintenance_reboot=bmc), C(rolling_maintenance_firmware), C(rolling_maintenance_bios)).
  - Through a BareMetalHost the restart is baremetal-operator's reboot annotation, with a key of the collection's
    own, C(reboot.metal3.io/kubevirt-ops.maintenance), mode C(soft) (C(hard) with O(graceful=false)). The
    operator powers the host off while it is there, the module removes it once the host reports
    C(poweredOn=false), and the operator powers it on again. C(spec.online), the owner's intent, is left alone,
    and another client's hold is never released. A host that is not provisioned (the operator ignores the
    annotation there) is cycled through C(spec.online); one with C(spec.online=false) or C(spec.disablePowerOff)
    is refused.
  - Through a BareMetalHost, firmware images and BIOS settings go to the host's HostFirmwareComponents
    (C(spec.updates), the versions read from C(status.components)) and HostFirmwareSettings (C(spec.settings), read
    from C(status.settings)), objects of the host's name and namespace that baremetal-operator makes. Every BIOS value
    is checked against the FirmwareSchema the settings name, before anything changes. The operator applies them while
    it services the host on the reboot, when the host's HostUpdatePolicy says C(onReboot) for them
    (C(firmwareUpdates), C(firmwareSettings)) - the policy is opt-in, so the module creates it, or sets the field it
    leaves empty; one that says C(onPreparing) (changes only while the host is prepared for provisioning) is its
    owner's choice and the task is refused with nothing changed. The module waits until the operator has judged
    the new specs valid, reboots the host, waits for C(operationalStatus) to go C(servicing) and back to C(OK), and
    verifies the versions and settings the host's objects then report. When servicing fails (C(operationalStatus)
    C(error), C(errorType) C(servicing error)) the task fails with the host's C(errorMessage); the operator then
    retries, with the machine off, for as long as the objects ask for the change. Refused as well, before anything
    changes - a host that is not provisioned, changes of someone else still pending in those objects (the reboot
    would apply them too), and an image the host's C(status.updates) says was applied already (the operator does not
    apply one twice).
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  name:
    description: Name of the node.
    type: str
    required: true
  firmware:
    description:
      - Firmware images to apply. A component the machine already runs at O(firmware[].version) is skipped.
    type: list
    elements: dict
    default: []
    suboptions:
      component:
        description:
          - The firmware to update - V(bios) (the version the System reports as C(BiosVersion)) or the C(Id) of an
            entry of the BMC's C(UpdateService/FirmwareInventory) (for example a NIC or the BMC itself).
          - Through a BareMetalHost, a component of its HostFirmwareComponents - V(bios), V(bmc) or C(nic:<id>).
        type: str
        required: true
      url:
        description: The URL the BMC downloads the image from (C(ImageURI); through a BareMetalHost the C(url) of its
          HostFirmwareComponents update).
        type: str
        required: true
      version:
        description: The version the machine must report for the component after the restart.
        type: str
        required: true
  bios:
    description:
      - BIOS attributes to set, as the BMC names them (C(Bios.Attributes)); values compare case-insensitively.
      - Through a BareMetalHost, settings of its HostFirmwareSettings, each value checked against its FirmwareSchema
        (allowed values, bounds, lengths, read-only) before anything changes.
    type: dict
    default: {}
  reboot:
    description:
      - Restart the machine even when no firmware or BIOS change needs it. With firmware or BIOS changes the machine
        is restarted whatever this says.
    type: bool
    default: false
  graceful:
    description: Ask for a graceful restart first (C(GracefulRestart)); V(false) forces it at once.
    type: bool
    default: true
  bmh:
    description:
      - The node's BareMetalHost, when its providerID does not name it and O(bmc) is not given.
    type: dict
    suboptions:
      name:
        description: Name of the BareMetalHost.
        type: str
        required: true
      namespace:
        description: Namespace of the BareMetalHost.
        type: str
        required: true
  progress_file:
    description: A file to append progress lines to (they also go to the system log of the host that runs the module).
    type: path
  wait_timeout:
    description: How many seconds the whole task may take at most (firmware tasks, restart, servicing, node Ready).
    type: int
    default: 1800
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.lock
  - kubevirt_ops.maintenance.bmc
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
    details: Reads and checks the machine and the node, and returns what would change; VMs still on the node are
      returned in RV(running_vms) instead of failing, so a check can run before the drain.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Firmware at its version and BIOS attributes already set report no change, unless O(reboot=true).
seealso:
  - module: kubevirt_ops.maintenance.node_maintenance
  - module: kubevirt_ops.maintenance.node_fence
"""

EXAMPLES = r"""
- name: Drain worker-3
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    state: present

- name: New BIOS firmware and SR-IOV on, through the BMC, then a restart
  kubevirt_ops.maintenance.node_machine:
    name: worker-3
    bmc: "{{ hostvars['worker-3'].bmc }}"
    firmware:
      - component: bios
        url: https://firmware.example.com/r740/bios-2.19.1.exe
        version: 2.19.1
    bios:
      SriovGlobalEnable: Enabled
  register: serviced

- name: Give the node back
  kubevirt_ops.maintenance.node_maintenance:
    name: worker-3
    state: absent

- name: Only a restart, through the node's BareMetalHost
  kubevirt_ops.maintenance.node_machine:
    name: worker-4
    reboot: true

- name: New BIOS firmware and SR-IOV on, through the node's BareMetalHost (its operator services it on the reboot)
  kubevirt_ops.maintenance.node_machine:
    name: worker-5
    bmh:
      name: worker-5
      namespace: openshift-machine-api
    firmware:
      - component: bios
        url: https://firmware.example.com/r740/bios-2.19.1.exe
        version: 2.19.1
    bios:
      SriovGlobalEnable: Enabled
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-3
machine:
  description: The machine and what this task did to it; never credentials.
  returned: always
  type: dict
  sample: {road: redfish, address: "https://bmc-worker-3.example.com/redfish/v1/Systems/1", power_state: "On",
           boot_id_before: 5d1c..., boot_id_after: 9f0e..., firmware_before: {bios: 2.18.0},
           firmware_after: {bios: 2.19.1}, bios_changed: {SriovGlobalEnable: {before: Disabled, after: Enabled}},
           actions: [{action: firmware bios 2.19.1, started: "2026-11-28T17:02:11Z", seconds: 0.4}]}
  contains:
    road:
      description: C(redfish) or C(metal3).
      type: str
    address:
      description: The Redfish System's URL (road C(redfish)).
      type: str
    bmh:
      description: C(namespace/name) of the BareMetalHost (road C(metal3)).
      type: str
    power_state:
      description: C(On) or C(Off) as the BMC (or BareMetalHost) reported it when the task began.
      type: str
    boot_id_before:
      description: The node's boot ID when the task began.
      type: str
    boot_id_after:
      description: The node's boot ID after the restart (null without one).
      type: str
    firmware_before:
      description: The version of each component of O(firmware) when the task began.
      type: dict
    firmware_after:
      description: The version of each component of O(firmware) after the restart (in check mode, would be).
      type: dict
    bios_changed:
      description: The BIOS attributes this task changed (would change), each with C(before) and C(after).
      type: dict
    actions:
      description: What was done to the machine, in order, each with C(action), C(started) (UTC) and C(seconds).
      type: list
      elements: dict
running_vms:
  description: In check mode, C(namespace/name) of the VMIs still on the node (the real run would refuse them).
  returned: always
  type: list
  elements: str
duration_seconds:
  description: Wall time of the task, when it changed something.
  returned: when changed
  type: float
  sample: 184.2
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import args
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.servicing.runner import run


def main():
    module = MaintenanceModule(
        argument_spec=args.spec(
            args.LOCK,
            args.BMC,
            args.BMH,
            args.MACHINE_WORK,
            dict(
                name=dict(type="str", required=True),
                graceful=dict(type="bool", default=True),
                progress_file=dict(type="path"),
                wait_timeout=dict(type="int", default=1800),
            ),
        ),
    )
    module.run(run)


if __name__ == "__main__":
    main()
