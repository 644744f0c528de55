"""kwok's configuration: which Stages simulate the lab's kubelets.

kwok v0.8 applies the Stages given with ``--config``. The ones used here are the
"fast" variants shipped in the kwok module (copied next to the binaries by
lab/build.sh): nodes become Ready at once and keep a Lease renewed, pods become
Ready as soon as they are bound, and a pod with a deletionTimestamp is removed
straight away, the way a kubelet confirms a graceful deletion.

One Stage is the lab's own (``POD_STATUS_RECONCILE``): a kubelet puts back the status
of the pods it runs when the API server holds another one. When the node-lifecycle
controller sees a node's Lease go stale (an API server restart longer than the grace
period is enough), it marks the node's pods not Ready (kubernetes
pkg/controller/util/node/controller_utils.go, MarkPodsNotReady: Ready False, the
containers untouched); the kubelet, still running, finds the difference in its status
sync (pkg/kubelet/status/status_manager.go, needsReconcile, every 10 s) and writes Ready
back. KubeVirt copies the launcher pod's Ready condition to the VMI
(pkg/virt-controller/watch/vmi/lifecycle.go, syncReadyConditionFromPod), so without
this a VM stays not Ready after such a restart. kwok takes up pod events only for the
nodes whose Lease it holds, so the pods of a node whose machine is dead (``node-fail``) or
that is cut off (``node-partition``) stay not Ready, as a dead or unreachable kubelet's would.
A Stage kwok took up before the death still plays after it (kwok does not look at the Lease
again when the delay ends), and kwok judges the Lease from its own cache: so the API server
itself refuses kwok's status writes for such a node and its pods (lab/dead_machines.py).

With the real virt-controller, virt-launcher pods are left out of that last stage
(``launchers_by_handler``): a real launcher pod lives on after SIGTERM until
virt-handler has shut its guest down, and the virt-handler stand-in
(lab/standins/handler_launcher.py) confirms their deletion once it has.
"""

import yaml

from lab.binaries import stages_dir
from lab.errors import LabError

STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
POD_DELETE_STAGE = "pod/fast/pod-delete.yaml"
# Running, containers ready, yet not Ready: what MarkPodsNotReady leaves. Put back within the
# kubelet's 10 s status sync.
RECONCILE_MAX_DELAY_SECONDS = 10
POD_STATUS_RECONCILE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-status-reconcile
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "ContainersReady" ) | .status'
      operator: 'In'
      values: ['True']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  delay:
    durationMilliseconds: 1000
    jitterDurationMilliseconds: %d
  next:
    statusTemplate: |
      conditions:
      - lastTransitionTime: {{ Now | Quote }}
        status: "True"
        type: Ready
""" % (RECONCILE_MAX_DELAY_SECONDS * 1000)
# kwok's selector keys are jq expressions; NotIn also matches pods without the label.
NOT_A_LAUNCHER = {"key": '.metadata.labels["kubevirt.io"]', "operator": "NotIn", "values": ["virt-launcher"]}


def write_config(path, bin_dir, launchers_by_handler=False):
    stages = stages_dir(bin_dir)
    documents = []
    for relative in STAGE_FILES:
        stage = stages / relative
        if not stage.is_file():
            raise LabError(f"kwok stage {relative} missing in {stages}: re-run lab/build.sh")
        text = stage.read_text().strip() + "\n"
        if launchers_by_handler and relative == POD_DELETE_STAGE:
            text = _without_launchers(text)
        documents.append(text)
    documents.append(POD_STATUS_RECONCILE)
    path.write_text("---\n".join(documents))


def _without_launchers(text):
    stage = yaml.safe_load(text)
    stage["spec"]["selector"]["matchExpressions"].append(dict(NOT_A_LAUNCHER))
    return yaml.safe_dump(stage, sort_keys=False)
