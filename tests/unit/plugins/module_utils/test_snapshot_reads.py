"""The snapshot's lists are read side by side, and a failure is reported as one read after the
other would report it."""

import threading

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.snapshot import run_side_by_side


def test_reads_run_at_the_same_time():
    # Each read waits for the other: read one after the other, the barrier would time out.
    barrier = threading.Barrier(3, timeout=10)
    done = []

    def read(name):
        barrier.wait()
        done.append(name)

    run_side_by_side([lambda: read("pods"), lambda: read("vms"), lambda: read("vmis")])
    assert sorted(done) == ["pods", "vmis", "vms"]


def test_every_read_finishes_and_the_first_failure_in_order_is_raised():
    finished = []
    later_failed = threading.Event()

    def nodes():
        later_failed.wait(10)  # the later read fails first in time
        raise ValueError("nodes: forbidden")

    def pods():
        finished.append("pods")

    def vms():
        later_failed.set()
        raise KeyError("vms")

    with pytest.raises(ValueError, match="nodes: forbidden"):
        run_side_by_side([nodes, pods, vms])
    assert finished == ["pods"]


def test_a_single_read_runs_in_this_thread():
    seen = []
    run_side_by_side([lambda: seen.append(threading.current_thread())])
    assert seen == [threading.current_thread()]
