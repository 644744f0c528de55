# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waits for drains started as async jobs (several nodes at once) and shows their progress
while they run: the module documentation is plugins/modules/wait_for_drains.py.

Each job's state comes from Ansible's own ``async_status`` module, as the ``async_status``
action asks for it; the progress comes from the files the drains write, followed by one
``Follower`` per job (plugin_utils/drain_progress.py), the same lines a drain run without
``async`` prints. With a local connection the jobs' results files are on this machine: between
two reads of the states the wait looks at them (``ended_locally``) and reads the states at once
when one says its job ended, so the wait ends with the last drain, not up to ``poll`` seconds
later."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible.plugins.action import ActionBase

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.drain_progress import (
    HEARTBEAT,
    Follower,
    remove_quietly,
)

ARGUMENT_SPEC = {
    "jobs": {"type": "list", "elements": "dict", "required": True},
    "timeout": {"type": "int", "default": 3600},
    "poll": {"type": "float", "default": 5.0},
}


# Seconds between two looks at the local jobs' results files (a small read each; a read of a job's state
# through async_status runs a module, so those stay every ``poll`` seconds).
LOCAL_LOOK = 0.2


def ended_locally(path):
    """Whether an async job's results file says the job ended, as async_status reads it (a result without
    ``started``: async_wrapper replaces its start record with the module's result in one rename). False
    while it runs, and when the file cannot be read."""
    try:
        with open(path) as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "started" not in data


def job_node(job):
    """The node of a job: its live progress names it, else the loop item it was started for."""
    node = (job.get("live_progress") or {}).get("node")
    if node:
        return node
    item = job.get("item")
    return item if isinstance(item, str) else None


def summary(entries):
    failed = [e["node"] or e["ansible_job_id"] for e in entries if e.get("failed")]
    if not failed:
        return None
    return "The drain of %d of %d node%s failed: %s." % (
        len(failed), len(entries), "" if len(entries) == 1 else "s", ", ".join(str(f) for f in failed))


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def __init__(self, *args, **kwargs):
        super(ActionModule, self).__init__(*args, **kwargs)
        self._expanded_async_dir = None

    def _async_dir(self):
        """Where the jobs write their status (the shell's async_dir); expanding "~" runs a command, so once."""
        if self._expanded_async_dir is None:
            self._expanded_async_dir = self._remote_expand_user(
                self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._expanded_async_dir

    def _status(self, jid, task_vars):
        args = {"jid": jid, "mode": "status", "_async_dir": self._async_dir()}
        return self._execute_module(module_name="ansible.legacy.async_status", module_args=args, task_vars=task_vars)

    def _local(self):
        return getattr(self._connection, "transport", None) == "local"

    @staticmethod
    def _pause(seconds, files):
        """Sleep ``seconds``, or less once one of the local results ``files`` says its job ended."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or any(ended_locally(path) for path in files):
                return
            time.sleep(min(LOCAL_LOOK, left) if files else left)

    def _followers(self, jobs):
        local = self._local()
        followers = {}
        for index, job in enumerate(jobs):
            live = job.get("live_progress") or {}
            if local and live.get("file"):
                followers[index] = Follower(live["file"], self._display, live.get("action") or "node_maintenance",
                                            job_node(job) or "?", offset=int(live.get("offset") or 0)).start()
        return followers

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        jobs = args["jobs"]
        entries = [None] * len(jobs)
        waiting = {}
        for index, job in enumerate(jobs):
            if job.get("ansible_job_id") and not job.get("failed") and not job.get("skipped"):
                waiting[index] = job["ansible_job_id"]
            else:  # never started (skipped, or refused at its start): its own result is its end
                entries[index] = dict(job, node=job_node(job), finished=True)
        followers = self._followers(jobs)
        # The jobs' results files to look at between two reads of their states (a local connection only); a file
        # that says its job ended while async_status says otherwise is not looked at again (never a busy wait).
        results_files = dict((index, jobs[index]["results_file"]) for index in waiting
                             if self._local() and jobs[index].get("results_file"))
        started = time.monotonic()
        last_shown = started
        try:
            while waiting:
                for index, jid in sorted(waiting.items()):
                    said_ended = index in results_files and ended_locally(results_files[index])
                    status = self._status(jid, task_vars)
                    if status.get("finished"):  # also a job that cannot be found or read: failed and finished
                        entries[index] = dict(status, node=job_node(jobs[index]), ansible_job_id=jid, finished=True)
                        del waiting[index]
                        results_files.pop(index, None)
                        if index in followers:
                            followers.pop(index).finish()
                    elif said_ended:
                        del results_files[index]
                if not waiting:
                    break
                elapsed = time.monotonic() - started
                if elapsed >= args["timeout"]:
                    for index, jid in waiting.items():
                        entries[index] = {"node": job_node(jobs[index]), "ansible_job_id": jid, "finished": False,
                                          "failed": True,
                                          "msg": "Timed out after %ds waiting for the drain of node %s (async job %s); "
                                                 "it may still be running." % (args["timeout"], job_node(jobs[index]),
                                                                               jid)}
                    break
                if not followers and time.monotonic() - last_shown >= HEARTBEAT:
                    self._display.display("waiting for the drain%s of %s [%ds]" % (
                        "" if len(waiting) == 1 else "s",
                        ", ".join(str(job_node(jobs[i]) or jid) for i, jid in sorted(waiting.items())), int(elapsed)))
                    last_shown = time.monotonic()
                self._pause(args["poll"], list(results_files.values()))
        finally:
            for follower in followers.values():
                follower.finish()
            for job in jobs:
                live = job.get("live_progress") or {}
                if live.get("temporary") and live.get("file"):
                    remove_quietly(live["file"])
            self._remove_tmp_path(self._connection._shell.tmpdir)
        for entry in entries:  # as Ansible's own loop results: failed and changed always there
            entry["failed"] = bool(entry.get("failed"))
            entry["changed"] = bool(entry.get("changed"))
        result["results"] = entries
        result["changed"] = any(e.get("changed") for e in entries)
        failure = summary(entries)
        if failure:
            result["failed"] = True
            result["msg"] = failure
        return result
