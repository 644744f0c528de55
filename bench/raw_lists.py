"""The API server's share of a plan's cluster read: the lists the plan reads (nodes, pods, VMIs,
VMs, PodDisruptionBudgets), page by page as the collection's client pages them (500 per page),
each body received and dropped without decoding. Scenario 5 measures it beside the modules, so
the time the API server alone needs on the same machine is a figure of the run, not a guess.

    python -m bench.raw_lists KUBECONFIG   ->   {"pages": .., "mib": .., "by_kind": {...}} on stdout
"""

import json
import sys
import time

from bench.kube import Kube

KINDS = ("Node", "Pod", "VirtualMachineInstance", "VirtualMachine", "PodDisruptionBudget")


def main(argv):
    kube = Kube(argv[0], user_agent="kubevirt-ops-bench-raw-lists/1")
    by_kind = {}
    for kind in KINDS:
        started = time.monotonic()
        pages, size = kube.read_list_raw(kind)
        by_kind[kind] = {"pages": pages, "mib": round(size / 2**20, 1), "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps({"pages": sum(k["pages"] for k in by_kind.values()),
                      "mib": round(sum(k["mib"] for k in by_kind.values()), 1), "by_kind": by_kind}))


if __name__ == "__main__":
    main(sys.argv[1:])
