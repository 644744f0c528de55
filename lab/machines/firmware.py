"""The machines' firmware as their BMCs serve it over Redfish: the firmware inventory, ``SimpleUpdate`` and its Task.

The emulator (sushy-tools 2.2.0) links ``/redfish/v1/UpdateService/FirmwareInventory`` but does not serve it; it
answers ``UpdateService.SimpleUpdate`` at once with 204 and the ``Location`` of a fixed Task 42 that always reads
Completed (``emulator/controllers/update_service.py``, ``main.py`` ``simple_task``, ``templates/task.json``), and its
Managers all report ``FirmwareVersion`` 1.00 (``main.py`` ``manager_resource``). :func:`install` adds to the
emulator's application what a server's BMC does instead. One Redfish service serves every machine, so each
inventory member names its machine (the node's name, which is its System's ``Name``); a real BMC serving several
Systems tells their firmware apart the same way, by ``RelatedItem``.

- ``GET /redfish/v1/UpdateService/FirmwareInventory``: two members per machine, ``<node>.BIOS`` and ``<node>.BMC``.
- ``GET /redfish/v1/UpdateService/FirmwareInventory/<node>.BIOS`` (or ``.BMC``): a ``SoftwareInventory`` (DMTF
  ``SoftwareInventory.v1_2_0``, what sushy reads): ``Id``, ``Name``, ``Version`` (what the machine runs now),
  ``Updateable``, ``SoftwareId``, ``Status`` and ``RelatedItem`` (the System; the BMC's also its Manager), and
  ``Oem.Lab.StagedVersion``: the version that runs from the next power on (null when none; Oem is where Redfish
  keeps what the standard does not define).
- ``GET /redfish/v1/Managers/<id>``: ``FirmwareVersion`` is the BMC version the machine runs, as in its inventory
  (what Ironic reads as the BMC's version, ``ironic/drivers/modules/redfish/firmware.py``).
- ``POST /redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate`` (``ImageURI``, ``Targets``): each target is a
  System (its BIOS, as the emulator has it) or an inventory member (that BIOS or BMC). The emulator's refusals
  stay: 400 without ``ImageURI`` or ``Targets``, 400 "Manager is not currently a supported Target.", 404 for a
  System (or member) that does not exist. Accepted: 202 with the Task and ``Location:
  /redfish/v1/TaskService/Tasks/<n>``.
- ``GET /redfish/v1/TaskService/Tasks/<n>``: the Task (``Task.v1_4_3``, the emulator's), 202 Accepted while it runs
  (``TaskState`` Running), 200 once it ended: ``Completed``/``OK`` with the new version staged
  (``Update.1.0.AwaitToActivate``), or ``Exception``/``Critical`` with nothing staged (``Update.1.0.ApplyFailed``,
  a BMC with the ``fail_update`` fault). Its URI is its own task monitor: the emulator's ``Location`` names the
  Task, and sushy follows the ``@odata.id`` of the answer and counts a Task as processing while it answers 202
  (``sushy/taskmonitor.py`` ``from_response``, ``resources/taskservice/task.py`` ``is_processing``).
  ``GET /redfish/v1/TaskService/Tasks``: every Task since the BMCs started.

A flash takes :data:`UPDATE_SECONDS`. The new version is the running one with its minor number raised, whatever the
image (the emulator's rule), and it takes effect when the machine next powers on (lab/machines/redfish.py): a BIOS
as servers apply a flash, a BMC firmware too (a real BMC activates it when it resets itself; the lab's BMCs reset
with their machine).
"""

import collections
import itertools
import json
import threading
import time

from sushy_tools import error

INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
TASKS = "/redfish/v1/TaskService/Tasks"
# How long a flash takes before its task ends.
UPDATE_SECONDS = 2.0

Component = collections.namedtuple("Component", "suffix key name")
# What a machine has, by the names Metal3's HostFirmwareComponents gives them: the inventory member's suffix, the
# lab driver's version key (the emulator's BiosVersion) and the member's Name.
COMPONENTS = {
    "bios": Component("BIOS", "BiosVersion", "BIOS"),
    "bmc": Component("BMC", "BmcVersion", "BMC firmware"),
}
_BY_SUFFIX = dict((part.suffix, name) for name, part in COMPONENTS.items())


def member_id(node, component):
    """The inventory member of ``component`` (bios, bmc) of ``node``'s machine: ``<node>.BIOS``, ``<node>.BMC``."""
    return "%s.%s" % (node, COMPONENTS[component].suffix)


def flashed_version(version):
    """The version a machine runs after a flash, whatever the image: the emulator raises the minor number
    (sushy-tools ``emulator/controllers/update_service.py``)."""
    major, minor, patch = version.split(".")
    return "%s.%d.%s" % (major, int(minor) + 1, patch)


def _system_path(uuid):
    return "/redfish/v1/Systems/%s" % uuid


def _now(stamp):
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(stamp))


def _json(doc, status=200, headers=None):
    import flask

    return flask.Response(json.dumps(doc, indent=4), status=status, headers=headers or {},
                          content_type="application/json")


# -- the firmware inventory ----------------------------------------------------------------------------------------

def _member(app, uuid, component):
    systems = app.systems
    part = COMPONENTS[component]
    node = systems.name(uuid)
    related = [_system_path(uuid)]
    if component == "bmc":
        related += ["/redfish/v1/Managers/%s" % manager for manager in app.managers.get_managers_for_system(uuid)]
    ident = member_id(node, component)
    return {
        "@odata.type": "#SoftwareInventory.v1_2_0.SoftwareInventory",
        "@odata.id": "%s/%s" % (INVENTORY, ident),
        "Id": ident,
        "Name": part.name,
        "Description": "%s of %s" % (part.name, node),
        "SoftwareId": part.suffix,
        "Version": systems.get_versions(uuid)[part.key],
        "Updateable": True,
        "Status": {"State": "Enabled", "Health": "OK"},
        "RelatedItem": [{"@odata.id": path} for path in related],
        "RelatedItem@odata.count": len(related),
        "Oem": {"Lab": {"StagedVersion": systems.get_staged_versions(uuid).get(part.key)}},
    }


def _member_of(systems, member):
    """(System UUID, component) of inventory member ``member``; NotFound (404) when there is no such member."""
    node, _, suffix = member.rpartition(".")
    uuid = None
    if node and suffix in _BY_SUFFIX:
        try:
            uuid = systems.uuid(node)
        except error.NotFound:
            pass
    if uuid is None or systems.name(uuid) != node:
        raise error.NotFound("Firmware inventory item %s was not found" % member)
    return uuid, _BY_SUFFIX[suffix]


def _resolve(systems, target):
    """(System UUID, component) that a ``SimpleUpdate`` target names; the emulator's errors otherwise (it takes the
    last segment of any other URI for a System)."""
    path = str(target).rstrip("/")
    if "Manager" in path:
        raise error.BadRequest("Manager is not currently a supported Target.")
    if INVENTORY + "/" in path:
        return _member_of(systems, path.split(INVENTORY + "/", 1)[1])
    return systems.uuid(path.rsplit("/", 1)[-1]), "bios"


# -- update tasks ---------------------------------------------------------------------------------------------------

class UpdateTasks:
    """The Tasks of ``SimpleUpdate``: each ends :data:`UPDATE_SECONDS` after it started, on its own."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tasks = {}
        self._ids = itertools.count(1)

    def start(self, systems, image_uri, targets, fails):
        """A new Running task flashing ``targets`` ([(uuid, component)]); its document as it starts."""
        with self._lock:
            ident = str(next(self._ids))
            task = {"id": ident, "image": image_uri, "targets": targets, "fails": fails, "state": "Running",
                    "status": "OK", "start": time.time(), "end": None, "messages": []}
            self._tasks[ident] = task
            started = self._document(task)
        timer = threading.Timer(UPDATE_SECONDS, self._end, (systems, ident))
        timer.daemon = True
        timer.start()
        return started

    def _end(self, systems, ident):
        with self._lock:
            task = self._tasks[ident]
            messages = []
            try:
                for uuid, component in task["targets"]:
                    where = "%s/%s" % (INVENTORY, member_id(systems.name(uuid), component))
                    if task["fails"]:
                        messages.append(_message("ApplyFailed", "Critical", task["image"], where))
                        continue
                    key = COMPONENTS[component].key
                    systems.set_versions(uuid, {key: flashed_version(systems.get_versions(uuid)[key])})
                    messages.append(_message("AwaitToActivate", "OK", task["image"], where))
            except Exception as exc:  # noqa: BLE001 - a flash that breaks ends its task, as on a BMC
                task["fails"] = True
                messages.append(_message("ApplyFailed", "Critical", task["image"], str(exc)))
            task.update(state="Exception" if task["fails"] else "Completed",
                        status="Critical" if task["fails"] else "OK", end=time.time(), messages=messages)

    def get(self, ident):
        """(document, still running) of task ``ident``; NotFound when there is none."""
        with self._lock:
            task = self._tasks.get(ident)
            if task is None:
                raise error.NotFound("Task %s was not found" % ident)
            return self._document(task), task["end"] is None

    def idents(self):
        with self._lock:
            return list(self._tasks)

    @staticmethod
    def _document(task):
        uri = "%s/%s" % (TASKS, task["id"])
        doc = {
            "@odata.type": "#Task.v1_4_3.Task",
            "@odata.id": uri,
            "Id": task["id"],
            "Name": "Task %s" % task["id"],
            "TaskMonitor": uri,
            "TaskState": task["state"],
            "TaskStatus": task["status"],
            "PercentComplete": 0 if task["end"] is None else 100,
            "StartTime": _now(task["start"]),
            "Messages": list(task["messages"]),
        }
        if task["end"] is not None:
            doc["EndTime"] = _now(task["end"])
        return doc


_MESSAGES = {
    # DMTF Update message registry 1.0.
    "AwaitToActivate": ("Awaiting for an action to proceed with activating image '%s' on '%s'.",
                        "Power cycle the machine to activate the image."),
    "ApplyFailed": ("Installation of image '%s' to '%s' failed.", "Retry the update."),
}


def _message(key, severity, image, where):
    text, resolution = _MESSAGES[key]
    return {"MessageId": "Update.1.0.%s" % key, "Message": text % (image, where), "MessageArgs": [image, where],
            "Severity": severity, "Resolution": resolution}


TASKS_OF_THE_BMCS = UpdateTasks()


# -- the emulator's application ------------------------------------------------------------------------------------

def install(emulator, tasks=TASKS_OF_THE_BMCS):
    """Serve the firmware inventory and update tasks in the emulator's application (``emulator``: its ``main``
    module), with the emulator's basic auth and error answers."""
    import flask

    app = emulator.app

    def inventory():
        members = []
        for uuid in sorted(app.systems.systems, key=app.systems.name):
            members += [{"@odata.id": "%s/%s" % (INVENTORY, member_id(app.systems.name(uuid), name))}
                        for name in sorted(COMPONENTS)]
        return _json({"@odata.type": "#SoftwareInventoryCollection.SoftwareInventoryCollection",
                      "@odata.id": INVENTORY, "Name": "Firmware Inventory Collection",
                      "Members": members, "Members@odata.count": len(members)})

    def inventory_member(member):
        uuid, component = _member_of(app.systems, member)
        return _json(_member(app, uuid, component))

    def simple_update():
        body = flask.request.get_json(force=True, silent=True) or {}
        image_uri, targets = body.get("ImageURI"), body.get("Targets")
        if not image_uri or not targets:
            raise error.BadRequest("Missing ImageURI and/or Targets.")
        if not isinstance(targets, list):
            raise error.BadRequest("Targets must be an array of URIs.")
        resolved = [_resolve(app.systems, target) for target in targets]
        fails = any(app.systems.update_fails(uuid) for uuid, _component in resolved)
        started = tasks.start(app.systems, image_uri, resolved, fails)
        return _json(started, 202, {"Location": started["@odata.id"]})

    def task(ident):
        doc, running = tasks.get(ident)
        return _json(doc, 202 if running else 200)

    def task_collection():
        members = [{"@odata.id": "%s/%s" % (TASKS, ident)} for ident in tasks.idents()]
        return _json({"@odata.type": "#TaskCollection.TaskCollection", "@odata.id": TASKS, "Name": "Task Collection",
                      "Members": members, "Members@odata.count": len(members)})

    manager = app.view_functions["manager_resource"]

    def manager_resource(identity):
        answer = manager(identity=identity)
        if flask.request.method == "GET" and answer.status_code == 200:
            doc = answer.get_json()
            if "FirmwareVersion" in doc:
                doc["FirmwareVersion"] = app.systems.get_versions(app.systems.uuid(identity))["BmcVersion"]
                answer.set_data(json.dumps(doc, indent=4))
        return answer

    app.add_url_rule(INVENTORY, "lab_firmware_inventory", inventory)
    app.add_url_rule(INVENTORY + "/<member>", "lab_firmware_inventory_member", inventory_member)
    app.add_url_rule(TASKS, "lab_tasks", task_collection)
    app.add_url_rule(TASKS + "/<ident>", "lab_task", task)
    app.view_functions["UpdateService.update_service_simple_update"] = simple_update
    # The emulator's own rule for its fixed Task 42 comes before the lab's: it serves the lab's task 42.
    app.view_functions["simple_task"] = lambda: task("42")
    app.view_functions["manager_resource"] = manager_resource
