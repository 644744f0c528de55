"""VMs for the rolling_maintenance scenario: create (and wait until they run), check, delete.

Usage: workload.py create|check|delete KUBECONFIG NAMESPACE [LOCK]
"""

import sys
import time

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "kubevirt.io", "v1"
VMS = [("web-1", "LiveMigrate", None), ("web-2", "LiveMigrate", None), ("web-3", "LiveMigrate", None),
       ("db-legacy", "LiveMigrate", "ReadWriteOnce"), ("batch", "None", None)]
TIMEOUT = 240


def vm(namespace, name, eviction, access_mode):
    spec = {"domain": {"devices": {}, "resources": {"requests": {"memory": "512Mi", "cpu": "100m"}}},
            "evictionStrategy": eviction}
    if access_mode:
        spec["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": name + "-root"}}]
        spec["domain"]["devices"]["disks"] = [{"name": "root", "disk": {"bus": "virtio"}}]
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runStrategy": "Always", "template": {"spec": spec}}}


def running(api, namespace):
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "virtualmachineinstances").get("items") or []
    return sorted(v["metadata"]["name"] for v in items if (v.get("status") or {}).get("phase") == "Running")


def wait_running(api, namespace):
    wanted = sorted(name for name, _e, _a in VMS)
    deadline = time.monotonic() + TIMEOUT
    while running(api, namespace) != wanted:
        if time.monotonic() > deadline:
            sys.exit("VMs not running after %ds: %s" % (TIMEOUT, sorted(set(wanted) - set(running(api, namespace)))))
        time.sleep(1)


def ignore(status, call):
    try:
        call()
        return True
    except ApiException as exc:
        if exc.status != status:
            raise
        return False


def main(action, kubeconfig, namespace, lock=None):
    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    if action == "create":
        if ignore(409, lambda: core.create_namespace({"metadata": {"name": namespace}})):
            print("created namespace %s" % namespace)
        deadline = time.monotonic() + 120
        while not ignore(404, lambda: core.read_namespaced_service_account("default", namespace)):
            if time.monotonic() > deadline:
                sys.exit("no default ServiceAccount in %s" % namespace)
            time.sleep(0.5)
        for name, eviction, access_mode in VMS:
            if access_mode:
                ignore(409, lambda: core.create_namespaced_persistent_volume_claim(namespace, {
                    "metadata": {"name": name + "-root"},
                    "spec": {"accessModes": [access_mode], "resources": {"requests": {"storage": "1Gi"}}}}))
            if ignore(409, lambda: client.CustomObjectsApi(api).create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "virtualmachines", vm(namespace, name, eviction, access_mode))):
                print("created VM %s/%s" % (namespace, name))
        wait_running(api, namespace)
    elif action == "check":
        wait_running(api, namespace)
        print("all %d VMs run" % len(VMS))
    elif action == "delete":
        if ignore(404, lambda: core.delete_namespace(namespace)):
            print("deleted namespace %s" % namespace)
        if lock and ignore(404, lambda: client.CoordinationV1Api(api).delete_namespaced_lease(lock, "kube-system")):
            print("deleted lease kube-system/%s" % lock)


if __name__ == "__main__":
    main(*sys.argv[1:])
