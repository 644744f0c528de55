"""The virtctl actions on a VM: start, stop, restart, migrate (upstream virt-api's logic).

They change the VM the way upstream's subresource handlers do, so the VM controller
carries them out through the same paths a real cluster uses:

  before \\ action | start                 | stop                   | restart
  Always          | 409 (not supported)   | runStrategy Halted     | Stop+Start requests (new VMI)
  RerunOnFailure  | Start request         | runStrategy Halted     | Stop+Start requests
  Manual          | Start request         | Stop request           | Stop+Start requests
  Halted          | runStrategy Always    | 409 (VM is not running)| 409 (not supported)
  Once            | 409 (not supported)   | runStrategy Halted     | 409 (not supported)

Requests go into ``status.stateChangeRequests`` guarded by the VM's resourceVersion,
so two concurrent actions never overwrite each other. A VM using the deprecated
``spec.running`` keeps using it (``running: true/false``).
"""

from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.vm_controller import run_strategy


class ActionError(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self):
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _conflict(name, message):
    return ActionError(
        409, "Conflict", f'Operation cannot be fulfilled on virtualmachine.kubevirt.io "{name}": {message}'
    )


def _internal(message):
    return ActionError(500, "InternalError", f"Internal error occurred: {message}")


class VMActions:
    def __init__(self, kube):
        self.kube = kube

    def run(self, action, namespace, name, options):
        handler = {"start": self.start, "stop": self.stop, "restart": self.restart, "migrate": self.migrate}[
            action
        ]
        dry_run = "All" in (options.get("dryRun") or [])
        try:
            handler(namespace, name, options, dry_run)
        except k.ApiError as e:
            if e.conflict:
                raise _conflict(name, e.message) from None
            raise _internal(e.message) from None

    # -- lookups --------------------------------------------------------------------------

    def _vm(self, namespace, name):
        vm = self.kube.get_or_none(k.VMS, name, namespace)
        if vm is None:
            raise ActionError(404, "NotFound", f'virtualmachine.kubevirt.io "{name}" not found')
        return vm

    def _vmi(self, namespace, name):
        return self.kube.get_or_none(k.VMIS, name, namespace)

    # -- writes ---------------------------------------------------------------------------

    def _request(self, vm, changes, dry_run):
        current = o.status(vm).get("stateChangeRequests") or []
        if not current:
            requests = changes
        elif len(changes) == 1 and changes[0]["action"] == "Stop":
            requests = changes  # a stop replaces whatever was pending
        else:
            raise _internal("unable to complete request: stop/start already underway")
        body = {
            "metadata": {"resourceVersion": o.meta(vm, "resourceVersion")},
            "status": {"stateChangeRequests": requests},
        }
        self.kube.patch(
            k.VMS, o.meta(vm, "name"), body, o.meta(vm, "namespace"), subresource="status", dry_run=dry_run
        )

    def _set_running(self, vm, running, dry_run):
        spec = o.spec(vm)
        if spec.get("runStrategy") is None and spec.get("running") is not None:
            patch = {"spec": {"running": running}}
        else:
            patch = {"spec": {"runStrategy": "Always" if running else "Halted"}}
        patch["metadata"] = {"resourceVersion": o.meta(vm, "resourceVersion")}
        self.kube.patch(k.VMS, o.meta(vm, "name"), patch, o.meta(vm, "namespace"), dry_run=dry_run)

    # -- actions --------------------------------------------------------------------------

    def start(self, namespace, name, options, dry_run):
        vm = self._vm(namespace, name)
        vmi = self._vmi(namespace, name)
        phase = o.status(vmi).get("phase") if vmi else None
        if vmi is not None and phase not in o.FINAL_VMI_PHASES and phase not in (None, "", "Unknown"):
            raise _conflict(name, "VM is already running")
        strategy = run_strategy(vm)
        if strategy == "Halted":
            self._set_running(vm, True, dry_run)
        elif strategy in ("RerunOnFailure", "Manual"):
            if strategy == "RerunOnFailure" and phase == "Failed":
                raise _conflict(name, "RerunOnFailure does not support starting VM from failed state")
            restart = (strategy == "RerunOnFailure" and phase == "Succeeded") or (
                strategy == "Manual" and phase in o.FINAL_VMI_PHASES
            )
            changes = [{"action": "Start"}]
            if restart:
                changes.insert(0, {"action": "Stop", "uid": o.meta(vmi, "uid")})
            self._request(vm, changes, dry_run)
        else:
            raise _conflict(name, f"{strategy} does not support manual start requests")

    def stop(self, namespace, name, options, dry_run):
        vm = self._vm(namespace, name)
        vmi = self._vmi(namespace, name)
        running = vmi is not None and not o.vmi_is_final(vmi)
        strategy = run_strategy(vm)
        if strategy == "Halted":
            if not running:
                raise _conflict(name, "VM is not running")
            raise _conflict(name, "Halted only supports manual stop requests with a shorter graceperiod")
        if strategy == "Manual":
            if not running:
                raise _conflict(name, "VM is not running")
            self._request(vm, [{"action": "Stop", "uid": o.meta(vmi, "uid")}], dry_run)
        else:  # Always, RerunOnFailure, Once
            self._set_running(vm, False, dry_run)

    def restart(self, namespace, name, options, dry_run):
        vm = self._vm(namespace, name)
        strategy = run_strategy(vm)
        if strategy in ("Halted", "Once"):
            raise _conflict(name, f"RunStategy {strategy} does not support manual restart requests")
        vmi = self._vmi(namespace, name)
        if vmi is None:
            raise _conflict(name, "VM is not running: Halted")
        self._request(vm, [{"action": "Stop", "uid": o.meta(vmi, "uid")}, {"action": "Start"}], dry_run)

    def migrate(self, namespace, name, options, dry_run):
        self._vm(namespace, name)
        vmi = self._vmi(namespace, name)
        if vmi is None:
            raise ActionError(404, "NotFound", f'virtualmachineinstance.kubevirt.io "{name}" not found')
        if o.status(vmi).get("phase") != "Running":
            raise _conflict(name, "VM is not running")
        migration = {
            "apiVersion": k.VMIMS.api_version,
            "kind": k.VMIMS.kind,
            "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": namespace},
            "spec": {"vmiName": name},
        }
        if options.get("addedNodeSelector"):
            migration["spec"]["addedNodeSelector"] = options["addedNodeSelector"]
        self.kube.create(k.VMIMS, migration, dry_run=dry_run)
