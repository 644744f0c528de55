"""Randomized chaos runs (``make chaos``): seeded rolling-maintenance runs with faults drawn at random,
checked by an observer of its own (tests/integration/safety.py). ``make test`` runs a short session of
fixed seeds (``make test-chaos``); the long one is ``make chaos CHAOS_RUNS=50``.

``CHAOS_SEED=<n>`` replays one run (``<n>,<m>,...`` several); otherwise ``CHAOS_RUNS`` runs (default 5) from ``CHAOS_FIRST_SEED``
(default 1); ``CHAOS_LANES=<k>`` spreads them over k labs side by side (``lanes.py``). Results:
tests/output/chaos/chaos.{json,md}.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import results  # noqa: E402  (tests/integration/chaos)
from results import OUTPUT, seeds  # noqa: E402


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds(), ids=lambda s: "seed-%d" % s)


@pytest.fixture(scope="session", autouse=True)
def machines_through_their_bmcs(lab, k8s):
    """The runs restart machines through their BMCs (the lab's bmc-inventory.yml) and cut their power there: the
    BareMetalHosts ``lab up`` makes are detached and deleted first, as an administrator does before driving a
    Metal3 host's BMC (else the operator would power a machine back as ``spec.online`` says), and made again at
    the end."""
    from lab import metal3
    from lab.machines import bmc as lab_bmc

    bmcs = lab_bmc.load(lab.paths)
    for node in sorted(bmcs):
        metal3.release_host(k8s, node)
    yield
    for node in sorted(bmcs):
        metal3.restore_host(k8s, bmcs, node)


@pytest.fixture(scope="session")
def chaos_results():
    """Every run's record; written to tests/output/chaos/ after each run and when the session ends."""
    records = []
    yield records
    results.write(records, OUTPUT)
