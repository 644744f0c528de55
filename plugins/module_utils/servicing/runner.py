# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_machine: the machine behind a drained node serviced through its road - firmware, BIOS settings, a restart.

Order, as a server applies BIOS flashes and settings: everything asked of the machine is read and checked first
(the BMC answers, every firmware component and BIOS attribute exists), then the node must be cordoned with no VM
on it and no migration from or to it, then the firmware images go to the BMC and the BIOS settings are written
(both pending until the next boot), then the machine restarts and the node must come back Ready with a new boot
ID (``status.nodeInfo.bootID``, which the kubelet reads from the kernel at every start), and finally the versions
and settings the machine reports must be the ones asked for. A machine that did not change is a failure, never
"done".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MachineError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import now_seconds
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.lock import refuse_while_held
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission, require
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, wait_for_object
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import vms as vms_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import road
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import summary as machine_summary
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import story

_URL = re.compile(r"^(https?|ftp|sftp|nfs|cifs|tftp)://[^\s/]+\S*$", re.IGNORECASE)


def check_firmware(entries):
    """The firmware option's entries, each {component, url, version} with every field given; InvalidInputError
    naming the entry and field otherwise (before anything is read)."""
    checked = []
    for index, entry in enumerate(entries or []):
        for field in ("component", "url", "version"):
            if not str(entry.get(field) or "").strip():
                raise InvalidInputError("Option firmware[%d].%s is missing: each firmware entry names its component, the "
                                        "url of its image and the version the machine must report afterwards."
                                        % (index, field), option="firmware[%d].%s" % (index, field))
        if not _URL.match(entry["url"].strip()):
            raise InvalidInputError("Option firmware[%d].url must be the URL of the image the BMC downloads "
                                    "(http, https, ...); got %r." % (index, entry["url"]),
                                    option="firmware[%d].url" % index)
        checked.append({"component": entry["component"].strip(), "url": entry["url"].strip(),
                        "version": str(entry["version"]).strip()})
    components = [entry["component"] for entry in checked]
    twice = sorted(set(c for c in components if components.count(c) > 1))
    if twice:
        raise InvalidInputError("Option firmware names component %s more than once; give one image per component."
                                % ", ".join(twice), option="firmware")
    return checked


def same_value(wanted, reported):
    """A BIOS attribute as asked equals the one a BMC reports (``Enabled`` and ``enabled``, 3 and "3")."""
    return str(wanted).strip().lower() == str(reported).strip().lower()


class Reading:
    """What node ``name``'s machine was found to be, and what servicing it as asked would change (``read``)."""

    def __init__(self, machine, summary, updates, settings):
        self.machine = machine
        self.summary = summary
        self.updates = updates
        self.settings = settings

    def changes(self, reboot):
        """Whether servicing the machine would touch it (firmware to flash, BIOS settings to write, a restart)."""
        return bool(self.updates or self.settings or reboot)


def read(client, name, node, params, firmware, bios, given):
    """Read and check everything asked of node ``name``'s machine, changing nothing: its road (``given``,
    road.check_options, else its BareMetalHost) answers and takes the credentials, every firmware component and
    BIOS attribute exists, and the road would take the changes; every problem of the machine in one sentence
    (InvalidInputError or MachineError). ``firmware`` and ``bios`` as check_firmware and the option give them.
    Shared by node_machine and the rolling preflight, which reads every machine of a run before anything changes."""
    machine = road.resolve(client, name, node, params, given)
    summary = dict(machine.as_dict(), boot_id_before=nodes_mod.boot_id(node), boot_id_after=None, firmware_before={},
                   firmware_after={}, bios_changed={}, actions=[])
    summary["power_state"] = machine.power_state()
    versions = machine.firmware_versions() if firmware else {}
    attributes = machine.bios_attributes() if bios else {}
    _refuse_unknown(name, firmware, versions, bios, attributes)
    updates = [entry for entry in firmware if versions[entry["component"]] != entry["version"]]
    settings = dict((key, value) for key, value in bios.items() if not same_value(value, attributes[key]))
    # What the road itself would refuse (a BareMetalHost's FirmwareSchema, its HostUpdatePolicy), before anything.
    machine.check_changes(updates, settings)
    summary["firmware_before"] = dict((entry["component"], versions[entry["component"]]) for entry in firmware)
    summary["bios_changed"] = dict((key, {"before": attributes[key], "after": value}) for key, value in settings.items())
    return Reading(machine, summary, updates, settings)


def run(module):
    params = module.params
    name = params["name"]
    deadline = Deadline(params["wait_timeout"])
    firmware = check_firmware(params.get("firmware"))
    bios = dict(params.get("bios") or {})
    given = road.check_options(params)
    client = module.client
    node = client.get_or_none("Node", name)
    if node is None:
        raise InvalidInputError("Node %s does not exist." % name, option="name")
    refuse_while_held(client, params.get("lock"), "Node %s's machine was not serviced" % name, node=name)
    reading = read(client, name, node, params, firmware, bios, given)
    machine, summary, updates, settings = reading.machine, reading.summary, reading.updates, reading.settings
    result = {"changed": False, "node": name, "machine": summary, "running_vms": []}
    if not reading.changes(params["reboot"]):
        summary["firmware_after"] = dict(summary["firmware_before"])
        return result

    running = _refuse_unless_drained(client, name, node, module.check_mode)
    result["changed"] = True
    if module.check_mode:
        # Not a failure here: a check ahead of the drain (the rolling role's preflight) finds the VMs still there.
        result["running_vms"] = running
        summary["firmware_after"] = dict((entry["component"], entry["version"]) for entry in firmware)
        return result

    require(client, [Permission("get", "nodes"), Permission("watch", "nodes"),
                     Permission("list", "virtualmachineinstances", group="kubevirt.io"),
                     Permission("list", "virtualmachineinstancemigrations", group="kubevirt.io")]
            + machine.permissions(), "service the machine of node %s" % name)
    progress = Progress(name, log=module.ansible.log, path=params.get("progress_file"))
    with story.told_on_failure(module.events, node, story.FAILED_MACHINE_SERVICE, "Machine servicing",
                               changed=lambda: bool(summary["actions"]), action="Service"):
        for entry in updates:
            progress.line("phase=Running firmware %s %s -> %s through %s" % (
                entry["component"], summary["firmware_before"][entry["component"]], entry["version"], machine.describe()))
            with _action(summary, "firmware %s %s" % (entry["component"], entry["version"])):
                machine.update_firmware(entry["component"], entry["url"], deadline.remaining())
        if settings:
            progress.line("phase=Running BIOS settings %s through %s" % (", ".join(sorted(settings)), machine.describe()))
            with _action(summary, "bios %s" % ", ".join(sorted(settings))):
                machine.set_bios(settings)
        if summary["actions"]:
            # The firmware tasks took their time: the node is checked again right before the restart.
            node = client.get("Node", name)
            _refuse_unless_drained(client, name, node, False, staged=True)
        node = _restart(module, client, name, node, machine, summary, deadline, progress)
        _verify(module, name, machine, firmware, bios, summary)
    story.machine_serviced(module.events, node, machine_summary.text(summary))
    result["duration_seconds"] = round(deadline.elapsed(), 1)
    progress.line("phase=Succeeded machine serviced: %s" % machine_summary.text(summary))
    return result


def _refuse_unknown(name, firmware, versions, bios, attributes):
    problems = []
    for index, entry in enumerate(firmware):
        if entry["component"] not in versions:
            problems.append("option firmware[%d].component %s names no firmware of node %s's machine (it reports %s)"
                            % (index, entry["component"], name, ", ".join(sorted(versions)) or "none"))
    unknown = sorted(key for key in bios if key not in attributes)
    if unknown:
        problems.append("option bios names %s %s, which node %s's machine does not have" % (
            "attribute" if len(unknown) == 1 else "attributes", ", ".join(unknown), name))
    if problems:
        text = "; ".join(problems)
        raise InvalidInputError(text[0].upper() + text[1:] + "; nothing was changed.",
                                option="firmware" if problems[0].startswith("option firmware") else "bios")


def _refuse_unless_drained(client, name, node, check_mode, staged=False):
    """The VMs still on the node (check mode), or BlockedError when the node is not cordoned, a VM runs there or a
    migration goes from or to it: a machine is never restarted under a guest. ``staged``: firmware or BIOS
    changes were handed to the BMC already (they wait for the machine's next restart)."""
    left = ("the firmware and BIOS changes handed to the BMC wait for the machine's next restart" if staged
            else "nothing was changed")
    running = sorted("%s/%s" % (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
                     for vmi in vms_mod.vmis_on_node(client, name))
    if check_mode:
        return running
    if not (node.get("spec") or {}).get("unschedulable"):
        raise BlockedError("Node %s is not cordoned: a machine is serviced only while its node is in maintenance "
                           "(node_maintenance state=present); %s." % (name, left), node=name)
    migrating = []
    for migration in client.list("VirtualMachineInstanceMigration")[0]:
        if not kubevirt.migration_in_flight(migration):
            continue
        # Its nodes as the migration and its VMI say them (the VMI's node is the source until it completes).
        namespace = migration["metadata"]["namespace"]
        vmi_name = (migration.get("spec") or {}).get("vmiName")
        vmi = client.get_or_none("VirtualMachineInstance", vmi_name, namespace) if vmi_name else None
        states = [(migration.get("status") or {}).get("migrationState") or {}, kubevirt.migration_state(vmi or {})]
        nodes = set([kubevirt.vmi_node(vmi or {})] + [state.get(key) for state in states
                                                      for key in ("sourceNode", "targetNode")])
        if name in nodes:
            migrating.append("%s/%s" % (namespace, migration["metadata"]["name"]))
    if running or migrating:
        raise BlockedError("Node %s's machine was not restarted: %s; drain the node first (node_maintenance); %s." % (
                           name, "; ".join(
                               part for part in ("VMs still run there: %s" % ", ".join(running) if running else "",
                                                 "migrations from or to it are in flight: %s" % ", ".join(migrating)
                                                 if migrating else "") if part), left),
                           node=name, running_vms=running, migrations=migrating)
    return running


class _action:
    """Times one machine action into ``summary['actions']``: {action, started, seconds}."""

    def __init__(self, summary, action):
        self.summary = summary
        self.entry = {"action": action, "started": None, "seconds": None}

    def __enter__(self):
        self.entry["started"] = now_seconds()
        self._begun = time.monotonic()
        self.summary["actions"].append(self.entry)
        return self.entry

    def __exit__(self, kind, exc, tb):
        self.entry["seconds"] = round(time.monotonic() - self._begun, 1)
        return False


def _restart(module, client, name, node, machine, summary, deadline, progress):
    """Restart the machine and wait until the node is Ready with a new boot ID. A graceful restart that has not
    brought a new boot within half of what is left is followed by a forced one."""
    before = nodes_mod.boot_id(node)
    # On a KubeVirt node the machine is back once virt-handler beat again and takes VMs, not at the kubelet's Ready.
    handler = nodes_mod.virt_handler_heartbeat(node) if nodes_mod.runs_virt_handler(node) else False
    graceful = module.params["graceful"]
    with _action(summary, "restart") as entry:
        sent = [machine.restart(deadline.remaining(), graceful=graceful)]
        progress.line("phase=Running restarting the machine of node %s (%s), waiting for a new boot" % (
            name, sent[-1]))
        try:
            node = _wait_boot(client, name, before, handler,
                              deadline.remaining() / 2.0 if graceful else deadline.remaining())
        except WaitTimeoutError:
            if not graceful:
                raise
            sent.append(machine.restart(deadline.remaining(), graceful=False))
            progress.line("phase=Running no new boot after %s, %s sent" % (sent[0], sent[-1]))
            node = _wait_boot(client, name, before, handler, deadline.remaining())
        entry["action"] = "restart (%s)" % ", ".join(sent)
    summary["boot_id_after"] = nodes_mod.boot_id(node)
    story.machine_restarted(module.events, node, "%s, %s" % (machine.describe(), ", ".join(sent)))
    return node


def _wait_boot(client, name, before, handler, timeout):
    """The node once Ready with a boot ID other than ``before`` and, unless ``handler`` is False, virt-handler's
    heartbeat other than ``handler`` (its annotation before the restart) with the node taking VMs again."""
    def booted(current):
        return current is not None and nodes_mod.boot_id(current) not in (None, before) and \
            nodes_mod.is_ready(current) and (handler is False or nodes_mod.virt_handler_back(current, handler))

    def pending():
        current = client.get_or_none("Node", name) or {}
        if nodes_mod.boot_id(current) in (None, before):
            return "its boot ID is still %s" % before
        if not nodes_mod.is_ready(current):
            return "booted again, but %s" % nodes_mod.not_ready_reason(current)
        return "booted again and Ready, but virt-handler has not beaten since (label %s=%s)" % (
            nodes_mod.KUBEVIRT_SCHEDULABLE_LABEL, nodes_mod.labels_of(current).get(nodes_mod.KUBEVIRT_SCHEDULABLE_LABEL))

    what = "node %s to boot again and be Ready%s" % (name, "" if handler is False else ", virt-handler with it")
    return wait_for_object(client, "Node", name, booted, timeout, what, describe_pending=pending)


def _verify(module, name, machine, firmware, bios, summary):
    """The machine reports what was asked: MachineError naming every difference otherwise."""
    problems = []
    if firmware:
        after = machine.firmware_versions()
        summary["firmware_after"] = dict((entry["component"], after.get(entry["component"])) for entry in firmware)
        for index, entry in enumerate(firmware):
            if after.get(entry["component"]) != entry["version"]:
                problems.append("firmware %s reports version %s, not %s (firmware[%d].version)" % (
                    entry["component"], after.get(entry["component"]), entry["version"], index))
    if bios:
        after = machine.bios_attributes()
        for key, value in sorted(bios.items()):
            if not same_value(value, after.get(key)):
                problems.append("BIOS attribute %s is %s, not %s" % (key, after.get(key), value))
    if problems:
        raise MachineError("Node %s's machine booted again but did not take what was asked: %s." % (
            name, "; ".join(problems)), node=name, machine=summary)
