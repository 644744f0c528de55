"""kwok's configuration: which Stages simulate the lab's kubelets.

kwok v0.8 applies the Stages given with ``--config``. The ones used here are the
"fast" variants shipped in the kwok module (copied next to the binaries by
lab/build.sh): nodes become Ready at once and keep a Lease renewed, pods become
Ready as soon as they are bound, and a pod with a deletionTimestamp is removed
straight away, the way a kubelet confirms a graceful deletion.
"""

from lab.binaries import stages_dir
from lab.errors import LabError

STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def write_config(path, bin_dir):
    stages = stages_dir(bin_dir)
    documents = []
    for relative in STAGE_FILES:
        stage = stages / relative
        if not stage.is_file():
            raise LabError(f"kwok stage {relative} missing in {stages}: re-run lab/build.sh")
        documents.append(stage.read_text().strip() + "\n")
    path.write_text("---\n".join(documents))
