"""What the chaos runs found, each kept as a case that replays it on purpose (``make test-chaos-cases``): the
schedule, the world and the run of test_chaos.py, with what makes the moment certain instead of likely."""

import re

import test_chaos
from test_chaos import session

world = test_chaos.world  # the fixture

MIGRATION_LINK = "kubevirt-ops.lab/migration-link"


def slow_link(lab):
    """Each node's migration link at 64Mi/s (lab/standins/links.py): a copy takes seconds, as on hardware, so a
    cut lands while a guest is half-copied."""
    lab.kubectl("annotate", "--overwrite", "-n", "kubevirt", "kubevirt", "kubevirt", "%s=64Mi" % MIGRATION_LINK)


def normal_link(lab):
    lab.kubectl("annotate", "-n", "kubevirt", "kubevirt", "kubevirt", MIGRATION_LINK + "-", check=False)


def test_a_cut_of_the_drained_machine_while_a_guest_is_copied(lab, k8s, world, tmp_path):
    """Found by the chaos runs (a drained machine cut in a run in batches that shuts down what cannot migrate):
    the machine of the node being drained loses power while a live migration from it copies a guest. KubeVirt 1.7
    leaves that VM's VMI claiming the node for good; the drain took its failed launcher pod for a VM that had left,
    and the run refused, on every resume, to restart a machine where a VM "still ran". Now the drain restarts
    such a VM as its run strategy says and the run completes."""
    schedule = [{"trigger": "cluster:a migration in flight", "fault": "drained_machine_power_off"}]
    slow_link(lab)
    try:
        record = session(lab, k8s, world, 1002, schedule, tmp_path, batches=True, shutdown=True)
    finally:
        normal_link(lab)
    (cut,) = [f for f in record["faults"] if f["hit"]]
    assert cut["hit"].startswith("the machine of %s (VMs there: " % world["pair"][0]) and "none" not in cut["hit"], record
    assert record["violations"] == [], record
    # The VM whose copy the cut broke runs again, a new VMI of it (the drain restarted it).
    copied = re.search(r"during the migration of ([^)]+)\)$", cut["hit"]).group(1)
    assert "%s/%s" % (world["namespace"], copied) in record["restarted"], record
