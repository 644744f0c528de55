"""Scheduler profiles of the lab: how the real kube-scheduler scores nodes.

The three profiles OpenShift offers (its scheduler operator's ``spec.profile``), written as
a KubeSchedulerConfiguration for the lab's kube-scheduler (``up --scheduler-profile``):

- ``LowNodeUtilization``: spread pods evenly, the least allocated node first. Kubernetes'
  own default scoring, written out (OpenShift's default profile).
- ``HighNodeUtilization``: pack pods onto as few nodes as possible: NodeResourcesFit scores
  with the MostAllocated strategy (weight 5), NodeResourcesBalancedAllocation is off.
- ``NoScoring``: the quickest scheduling cycle: every preScore and score plugin is off, so
  the first feasible node wins and preferences (preferred affinity, PreferNoSchedule
  taints, ScheduleAnyway topology spread) are not looked at.

``default`` passes no configuration at all (the kube-scheduler's built-in defaults).
Plugin names and the ``kubescheduler.config.k8s.io/v1`` schema: kubernetes
pkg/scheduler/apis/config/v1/default_plugins.go and staging/src/k8s.io/kube-scheduler/config/v1/types.go.
"""

import json

DEFAULT = "default"

_HEAD = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
         "leaderElection": {"leaderElect": False}}


def _profile(plugins=None, plugin_config=None):
    profile = {"schedulerName": "default-scheduler"}
    if plugins:
        profile["plugins"] = plugins
    if plugin_config:
        profile["pluginConfig"] = plugin_config
    return profile


def _fit(strategy):
    return [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": strategy,
        "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}}]


PROFILES = {
    "LowNodeUtilization": _profile(plugin_config=_fit("LeastAllocated")),
    "HighNodeUtilization": _profile(
        plugins={"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                           "disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
        plugin_config=_fit("MostAllocated"),
    ),
    "NoScoring": _profile(plugins={"preScore": {"disabled": [{"name": "*"}]},
                                   "score": {"disabled": [{"name": "*"}]}}),
}
NAMES = (DEFAULT,) + tuple(PROFILES)


def configuration(name, kubeconfig):
    """The KubeSchedulerConfiguration of a profile (JSON is YAML), or None for ``default``.

    With ``--config`` the kube-scheduler ignores its deprecated flags (``--kubeconfig``,
    ``--leader-elect``), so the file carries both.
    """
    if name == DEFAULT:
        return None
    return json.dumps(dict(_HEAD, clientConnection={"kubeconfig": str(kubeconfig)},
                           profiles=[PROFILES[name]]), indent=2) + "\n"
