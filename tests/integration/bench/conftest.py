"""The benchmark smoke runs on a lab of its own, and no test of it can hang.

It never reuses the lab named by ``$KUBEVIRT_OPS_LAB_DIR`` (``make bench`` may be using
``.build/bench-lab`` meanwhile: the smoke's drains, stand-in restarts and cleanups would then
collide with the benchmark's): this ``lab`` fixture brings one up in a temporary directory
for the session and always takes it down. Each test gets SMOKE_TEST_TIMEOUT seconds; past
that it fails (SIGALRM), and the session still tears its lab down.
"""

import signal
import time

import pytest

from lab import cluster
from lab.errors import LabError
from lab.paths import LabPaths
from lab.pytest_plugin import Lab

SMOKE_TEST_TIMEOUT = 600


class SmokeTimeout(Exception):
    pass


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    paths = LabPaths(tmp_path_factory.mktemp("bench-smoke-lab"))
    try:
        try:
            cluster.up(paths)
        except LabError as e:
            pytest.fail(f"the lab did not come up: {e}\n{e.detail or ''}", pytrace=False)
        yield Lab(paths.state_dir)
    finally:
        cluster.down(paths)


@pytest.fixture(autouse=True)
def _deadline(request):
    started = time.monotonic()

    def expired(signum, frame):
        raise SmokeTimeout(f"{request.node.nodeid} still running after {time.monotonic() - started:.0f}s "
                           f"(limit {SMOKE_TEST_TIMEOUT}s)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(SMOKE_TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
