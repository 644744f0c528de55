# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Live progress of a drain in the job output (ansible-playbook, ansible-runner, AWX / AAP).

The action plugins of node_maintenance and node_decommission run their module exactly as
Ansible's ``normal`` action does, while a thread of the same worker process follows the
module's progress file (module_utils/drain/progress.py ``Progress``) and prints it through the
Display: every new line at once, and the latest status again at least every
``HEARTBEAT`` seconds, so that a drain of many minutes shows where it is.

Why an action plugin and not a callback or the async_wrapper:

- A callback plugin runs in the controller's main process and sees a task start and end,
  never the module in between; ansible-runner (AWX, AAP) also imposes its own stdout
  callback (``awx_display``), so a stdout callback of ours would not be used there, and a
  second callback would need enabling in every ansible.cfg. Display lines of a worker are
  proxied to the controller, printed by ansible-playbook and recorded by ansible-runner as
  job events (``verbose``, with their own timestamps): one mechanism for both.
- ``async``/``async_status`` daemonizes the module (async_wrapper double-forks): a job
  cancelled in AWX, or an ansible-playbook that is killed, would leave the drain running
  unattended. Here the module stays a child of the worker, as without the plugin, so
  cancelling, failures, check mode, diff mode and the result are what they were.

The progress file is read on the controller, so live progress needs the module to run
there (connection ``local``: localhost, or ``delegate_to: localhost`` as the roles and
playbooks do). Otherwise, under ``become`` without a O(progress_file), with ``no_log`` or in
check mode, the module runs as it always did and only its result is shown. The module does
not need the plugin: ``progress_file`` stays optional.

A drain started as an async job (``async`` with ``poll: 0``, several nodes at once) returns at
once; its start result then carries ``live_progress`` (the file the job writes, where its new
lines start, and whether the file is ours to remove), and the ``wait_for_drains`` action
(plugins/action/wait_for_drains.py) follows the files of all the jobs it waits for.

A temporary progress file is removed when the drain ends (or, for a job, by ``wait_for_drains``);
one left behind because the run was killed is removed by the next drain on the controller
(``new_temporary_file``).

On the controller the module is also given the run's process (``owner_pid``: ansible-playbook,
or ansible-runner's, the parent of the worker that runs the action), and its drain stops once
that process is gone (module_utils/coordination/run_owner.py): an async job outlives a cancelled or killed
run otherwise.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import tempfile
import threading
import time

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_process import run_pid
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination.run_owner import process_exists

HEARTBEAT = 10.0  # seconds between two lines at most (the job output promises one per 15 s)
POLL = 1.0  # seconds between two reads of the progress file

_LINE = re.compile(r"^(?P<stamp>\S+Z) node=(?P<node>\S+) (?P<text>.*)$")
_STATUS = re.compile(
    r"^phase=(?P<phase>\S+) pods_left=(?P<pods_left>\d+)/(?P<pods>\d+) vms_left=(?P<vms_left>\d+) "
    r"progress=(?P<percent>\d+)%(?: vms=(?P<vms>\S+))?(?: last_error=(?P<error>.*))?$")


def parse_line(line):
    """(node, status dict or None, text) of one progress line; None for anything else."""
    found = _LINE.match(line.strip())
    if not found:
        return None
    text = found.group("text")
    status = _STATUS.match(text)
    return found.group("node"), (status.groupdict() if status else None), text


def describe(action, node, status, elapsed, note=None):
    """The line the job output shows."""
    head = "%s %s" % (action, node)
    if status is None:
        body = note or "planning"
    else:
        vms = [v for v in (status.get("vms") or "").split(",") if v]
        body = "%s: %s/%s pods left, %s VM%s to move%s, last error: %s, %s%%" % (
            "drained" if status["phase"] == "Succeeded" else status["phase"].lower(),
            status["pods_left"], status["pods"], status["vms_left"], "" if status["vms_left"] == "1" else "s",
            (" (migrating: %s)" % ", ".join(vms)) if vms else "", status.get("error") or "none", status["percent"])
        if note:
            body += "; " + note
    return "%s: %s [%ds]" % (head, body, int(elapsed))


class Follower:
    """Reads new lines of the progress file and displays them, with a heartbeat."""

    def __init__(self, path, display, action, node, offset=0, heartbeat=HEARTBEAT, poll=POLL):
        self.path = path
        self.display = display
        self.action = action
        self.node = node
        self.offset = offset
        self.heartbeat = heartbeat
        self.poll = poll
        self.started = time.monotonic()
        self.last_shown = self.started
        self.status = None
        self.partial = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="drain-progress")
        self.thread.daemon = True

    def start(self):
        self.thread.start()
        return self

    def finish(self):
        """Stop the thread, then show what the module wrote last."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(self.poll * 5 + 5)
        self.step(heartbeat=False)

    def _run(self):
        while not self.stop.wait(self.poll):
            try:
                self.step()
            except Exception:  # pylint: disable=broad-except
                pass  # progress is best effort; it must never change the task's outcome

    def _read(self):
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except (IOError, OSError):
            return []
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self.partial = lines.pop()  # an unfinished last line waits for its end
        return lines

    def _show(self, line):
        self.display.display(line)
        self.last_shown = time.monotonic()

    def step(self, heartbeat=True):
        now = time.monotonic()
        for line in self._read():
            parsed = parse_line(line)
            if parsed is None:
                continue
            node, status, text = parsed
            self.node = node or self.node
            if status is not None:
                self.status = status
                self._show(describe(self.action, self.node, status, now - self.started))
            else:
                self._show(describe(self.action, self.node, self.status, now - self.started,
                                    note=re.sub(r"^phase=\S+ ", "", text)))
        if heartbeat and now - self.last_shown >= self.heartbeat:
            self._show(describe(self.action, self.node, self.status, now - self.started))


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# Temporary progress files are named after the process that owns them: ansible-playbook (or
# ansible-runner's), the parent of the worker that runs the action. A file outlives its run only
# when that process was killed mid-drain; the next drain on this controller removes such files.
TEMPORARY_PREFIX = "kubevirt-ops-progress-"
_OWNED = re.compile(r"^" + re.escape(TEMPORARY_PREFIX) + r"(?P<pid>\d+)-.*\.log$")


def new_temporary_file(directory=None):
    """A new temporary progress file of this run, after removing those of runs that were killed."""
    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        names = []
    for name in names:
        owned = _OWNED.match(name)
        if owned and not process_exists(int(owned.group("pid"))):
            remove_quietly(os.path.join(directory, name))
    handle, path = tempfile.mkstemp(prefix="%s%d-" % (TEMPORARY_PREFIX, os.getppid()), suffix=".log",
                                    dir=directory)
    os.close(handle)
    return path


class DrainProgressAction(ActionBase):
    """ActionBase of the modules that drain: the ``normal`` action, plus live progress."""

    _supports_check_mode = True
    _supports_async = True

    def _follow_progress(self):
        """The progress file to follow and where its new lines start, or (None, None, None)
        when live progress is not possible (see the module docstring)."""
        task = self._task
        if task.check_mode or task.no_log:
            return None, None, None
        if task.async_val and task.poll:
            return None, None, None  # Ansible polls the job itself, and only its end reaches us
        if getattr(self._connection, "transport", None) != "local":
            return None, None, None
        given = task.args.get("progress_file")
        if given:
            path = os.path.expanduser(os.path.expandvars(str(given)))
            try:
                offset = os.path.getsize(path)
            except OSError:
                offset = 0
            return path, offset, False
        if self._play_context.become:
            return None, None, None  # the module would run as another user, who cannot write our file
        return new_temporary_file(), 0, True

    def run(self, tmp=None, task_vars=None):
        result = super(DrainProgressAction, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        wrap_async = self._task.async_val and not self._connection.has_native_async

        path, offset, ours = self._follow_progress()
        follower = None
        added = {}  # arguments the module is given beyond the task's own
        action = self._task.action.rsplit(".", 1)[-1]
        node = str(self._task.args.get("name") or "?")
        if path is not None:
            added["progress_file"] = path
            if not self._task.async_val:
                follower = Follower(path, self._display, action, node, offset=offset).start()
        owner_pid = run_pid(self) if self._task.args.get("owner_pid") is None else None
        if owner_pid is not None:
            added["owner_pid"] = owner_pid
        module_args = dict(self._task.args, **added) if added else None
        try:
            outcome = self._execute_module(module_args=module_args, task_vars=task_vars, wrap_async=wrap_async)
        except Exception:
            if ours:
                remove_quietly(path)
            raise
        finally:
            if follower is not None:
                follower.finish()
        if self._task.async_val and path is not None and not outcome.get("failed"):
            # The job runs on: wait_for_drains follows the file and removes it if it is ours.
            outcome["live_progress"] = {"file": path, "offset": offset, "temporary": ours, "action": action,
                                        "node": node}
        elif ours:
            remove_quietly(path)
        # The result shows the arguments the task was given, not those added here.
        invocation = (outcome.get("invocation") or {}).get("module_args")
        if isinstance(invocation, dict):
            for key in added:
                if key in invocation:
                    invocation[key] = self._task.args.get(key)
        result = merge_hash(result, outcome)
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
