"""The contract suite runs against the real KubeVirt control plane.

It uses the session's ``lab`` (lab/pytest_plugin.py): real virt-controller and virt-api of
the release given by ``--kubevirt-version`` or ``$KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION``
(default 1.7.0), shared with the other suites of the run.

Every test records the KubeVirt it ran against (what virt-api reports on
``/apis/subresources.kubevirt.io/v1/version``): printed in its captured output and stored
as the ``kubevirt_version`` property of its report (JUnit XML).
"""

import json

import pytest


@pytest.fixture(scope="session")
def kubevirt_version(lab):
    """virt-api's own answer, e.g. {"gitVersion": "v1.7.0", ...}."""
    out = lab.kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1/version").stdout
    return json.loads(out)


@pytest.fixture(autouse=True)
def _record_kubevirt_version(request, record_property):
    if "lab" not in request.fixturenames:  # the unit checks need no cluster
        return
    version = request.getfixturevalue("kubevirt_version").get("gitVersion")
    record_property("kubevirt_version", version)
    print(f"KubeVirt {version} (virt-controller and virt-api, real); virt-handler stand-in")


def release(kubevirt_version):
    """(major, minor) of the running KubeVirt, for rows that changed between releases."""
    major, minor = kubevirt_version["gitVersion"].lstrip("v").split(".")[:2]
    return int(major), int(minor)
