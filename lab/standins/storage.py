"""Storage as a real cluster has it: a default StorageClass and a provisioner.

For every pending claim of our class the provisioner creates a PersistentVolume with
the claim's size, access modes and volume mode, pre-bound to the claim; the real
PV controller binds them and the real scheduler's volume binding then applies to
virt-launcher pods. Released volumes of ours are deleted (reclaim policy Delete).
The volumes are hostPath volumes: KWOK nodes never mount anything, and hostPath
keeps the attach/detach controller out of the picture.
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.workqueue import Controller

STORAGE_CLASS = "lab-storage"
PROVISIONER = "lab.kubevirt-ops.io/simulated"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"


def ensure_storage_class(kube):
    kube.apply(
        k.STORAGECLASSES,
        {
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": True,
        },
    )


class Provisioner(Controller):
    name = "provisioner"

    def __init__(self, sim):
        super().__init__(sim)
        sim.pvcs.add_handler(lambda event, pvc, old: self.enqueue("pvc:" + k.key_of(pvc)))
        sim.pvs.add_handler(lambda event, pv, old: self.enqueue("pv:" + o.meta(pv, "name")))

    def all_keys(self):
        return ["pvc:" + key for key in self.sim.pvcs.keys()] + ["pv:" + key for key in self.sim.pvs.keys()]

    def reconcile(self, key):
        kind, _, name = key.partition(":")
        if kind == "pvc":
            return self._provision(name)
        return self._reclaim(name)

    def _ours(self, pvc):
        anns = o.annotations(pvc)
        if (
            anns.get(STORAGE_PROVISIONER) == PROVISIONER
            or anns.get("volume.beta.kubernetes.io/storage-provisioner") == PROVISIONER
        ):
            return True
        return o.spec(pvc).get("storageClassName") == STORAGE_CLASS

    def _provision(self, key):
        pvc = self.sim.pvcs.get(key)
        if pvc is None or o.deleting(pvc) or o.spec(pvc).get("volumeName"):
            return None
        if o.status(pvc).get("phase") not in (None, "Pending") or not self._ours(pvc):
            return None
        uid = o.meta(pvc, "uid")
        pv_name = f"pvc-{uid}"
        if self.sim.pvs.get(pv_name) is not None:
            return None
        spec = o.spec(pvc)
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.get("storageClassName") or STORAGE_CLASS,
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": o.meta(pvc, "namespace"),
                    "name": o.meta(pvc, "name"),
                    "uid": uid,
                },
                "hostPath": {"path": f"/var/lib/lab-storage/{pv_name}", "type": "DirectoryOrCreate"},
            },
        }
        try:
            self.kube.create(k.PVS, pv)
            self.log.info(
                "%s: provisioned %s (%s, %s)", key, pv_name, size, ",".join(pv["spec"]["accessModes"])
            )
        except k.ApiError as e:
            if not e.already_exists:
                raise
        return None

    def _reclaim(self, name):
        pv = self.sim.pvs.get(name)
        if pv is None or o.deleting(pv):
            return None
        if o.annotations(pv).get(PROVISIONED_BY) != PROVISIONER:
            return None
        if (
            o.status(pv).get("phase") == "Released"
            and o.spec(pv).get("persistentVolumeReclaimPolicy") == "Delete"
        ):
            self.kube.delete(k.PVS, name)
        return None
