"""Test-only callback: every task result as one JSON line in the file $KVOPS_RESULT_LOG.

It runs next to the normal stdout callback, so tests see exactly what a user sees on the
terminal (and can grep it) and still get structured results, for ad-hoc runs and playbooks.
"""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: result_log
type: aggregate
short_description: task results as JSON lines, for tests
description: Appends every task result to the file named by the environment variable KVOPS_RESULT_LOG.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "result_log"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self):
        super().__init__()
        self.path = os.environ.get("KVOPS_RESULT_LOG")

    def _write(self, status, result, **extra):
        if not self.path:
            return
        task = result._task
        outcome = dict(result._result)
        if status == "failed":
            outcome.setdefault("failed", True)
        line = {
            "status": status,
            "task": task.get_name(),
            "name": task.name,
            "action": task.action,
            "host": result._host.get_name(),
            "result": outcome,
        }
        line.update(extra)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(line, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._write("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write("failed", result, ignore_errors=ignore_errors)

    def v2_runner_on_skipped(self, result):
        self._write("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._write("unreachable", result)
