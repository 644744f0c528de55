"""A local Kubernetes lab: a real control plane as local processes, KWOK-simulated nodes.

Run ``python -m lab up`` from the repository root; the admin kubeconfig it writes
(``.lab/kubeconfig`` by default) together with ``kubectl`` is the whole interface for
other tooling.
"""

from lab.errors import LabError

__all__ = ["LabError"]
