"""cluster_lock's action plugin: the run's process is given to the module only when the task binds
the lock to its run and the module runs on the controller."""

import os
from unittest import mock

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.action.cluster_lock import ActionModule


def module_args_sent(args, transport="local"):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    connection = mock.MagicMock()
    connection.transport = transport
    connection._shell.tmpdir = None
    plugin = ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    sent = {}

    def execute(module_args=None, task_vars=None):
        sent.update(module_args)
        return {"changed": True}

    plugin._execute_module = execute
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}):
        plugin.run(task_vars={})
    return sent


@pytest.mark.parametrize("bind", [True, "yes", "true"])
def test_a_lock_bound_to_its_run_gets_the_playbook_process(bind):
    assert module_args_sent({"bind_to_run": bind})["owner_pid"] == os.getppid()


@pytest.mark.parametrize("args, transport", [
    ({}, "local"),                                   # a lock held by hand outlives the command that took it
    ({"bind_to_run": False}, "local"),
    ({"bind_to_run": True}, "ssh"),                  # a managed host cannot see the controller's processes
    ({"bind_to_run": True, "owner_pid": 4242}, "local"),  # given: kept
])
def test_otherwise_the_module_is_given_no_process_of_ours(args, transport):
    sent = module_args_sent(args, transport)
    assert sent.get("owner_pid") == args.get("owner_pid")
