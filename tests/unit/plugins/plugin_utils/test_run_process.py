"""run_pid: the run's process as the worker knew it when it started, even once that process is gone."""

import multiprocessing
import os
import time
from unittest import mock

from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_process import run_pid


def local_action():
    action = mock.MagicMock()
    action._connection.transport = "local"
    return action


def _worker(answers):
    """A worker of the run (Ansible's WorkerProcess is a forked multiprocessing.Process): waits until
    its run's process is gone, then asks for it."""
    run = multiprocessing.parent_process()
    run.join(30)  # the parent's sentinel: closed once the run's process has exited
    # The kernel closes an exiting process's files before it hands its children to init or a
    # subreaper: wait for the hand-over itself.
    deadline = time.monotonic() + 30
    while os.getppid() == run.pid and time.monotonic() < deadline:
        time.sleep(0.01)
    answers.send((run_pid(local_action()), os.getppid()))


def _playbook(answers):
    """The run's process (ansible-playbook): starts a worker and is killed under it."""
    worker = multiprocessing.get_context("fork").Process(target=_worker, args=(answers,))
    worker.start()
    answers.send(os.getpid())
    os._exit(0)  # killed: no cleanup, the worker lives on


def test_a_worker_whose_run_was_killed_names_the_dead_run_not_its_new_parent():
    """An AWX job cancelled under a running task: the worker is re-parented (to init or a subreaper),
    and a lock or drain bound to that parent would never end; run_pid names the run that is gone."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    playbook = context.Process(target=_playbook, args=(sender,))
    playbook.start()
    playbook_pid = receiver.recv()
    playbook.join(30)
    assert receiver.poll(60), "the worker did not answer"
    named, parent_now = receiver.recv()
    assert named == playbook_pid
    assert parent_now != playbook_pid


def test_outside_a_worker_the_parent_process_is_the_run():
    assert run_pid(local_action()) == os.getppid()


def test_a_module_on_a_managed_host_is_given_no_run():
    action = mock.MagicMock()
    action._connection.transport = "ssh"
    assert run_pid(action) is None
