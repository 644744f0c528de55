"""``python -m lab bmc``: the lab's BMCs from the command line.

- ``bmc list``: every machine's BMC (address, username, password, CA file), as ``bmc.json`` has it;
- ``bmc show NODE``: its power state, BIOS version, BIOS attributes and firmware inventory (the BIOS and BMC
  versions it runs, and those staged for its next power on);
- ``bmc power NODE on|off|graceful-off|cycle``: a ``ComputerSystem.Reset`` (On, ForceOff,
  GracefulShutdown, PowerCycle), waiting until the BMC reports the state unless ``--no-wait``;
- ``bmc fault NODE [--unreachable] [--slow S] [--refuse-power] [--fail-update]``: make its BMC
  misbehave; without a fault, clear them.
"""

import json

from lab.errors import LabError
from lab.machines.bmc import Bmc, load, set_faults
from lab.wait import wait_for

RESETS = {"on": ("On", "On"), "off": ("ForceOff", "Off"), "graceful-off": ("GracefulShutdown", "Off"),
          "cycle": ("PowerCycle", "On")}
POWER_TIMEOUT = 60


def add_parser(commands):
    command = commands.add_parser("bmc", help="the machines' Redfish BMCs: list, show, power")
    actions = command.add_subparsers(dest="bmc_command", required=True, metavar="ACTION")
    actions.add_parser("list", help="every machine's BMC: address, username, password, CA file (JSON)")
    show = actions.add_parser("show", help="a machine's power state, BIOS settings and firmware (running and staged)")
    show.add_argument("node", metavar="NODE")
    power = actions.add_parser("power", help="power a machine on, off or through a cycle")
    power.add_argument("node", metavar="NODE")
    power.add_argument("action", choices=sorted(RESETS))
    power.add_argument("--no-wait", action="store_true", help="return once the BMC took the action")
    fault = actions.add_parser("fault", help="make a machine's BMC misbehave; with no fault, clear its faults")
    fault.add_argument("node", metavar="NODE")
    fault.add_argument("--unreachable", action="store_true", help="no answer at all until cleared")
    fault.add_argument("--slow", type=float, default=0, metavar="S", help="answer after S seconds")
    fault.add_argument("--refuse-power", action="store_true", help="refuse every power action (409)")
    fault.add_argument("--fail-update", action="store_true", help="fail every firmware update (its task ends in Exception)")


def _bmc(paths, node):
    bmcs = load(paths)
    if node not in bmcs:
        raise LabError(f"no machine named {node!r}; the lab's machines: {', '.join(sorted(bmcs))}")
    return Bmc(bmcs[node])


def run(paths, args):
    if args.bmc_command == "list":
        print(json.dumps(load(paths), indent=2, sort_keys=True))
        return 0
    bmc = _bmc(paths, args.node)
    if args.bmc_command == "fault":
        set_faults(paths, args.node, unreachable=args.unreachable, slow=args.slow,
                   refuse_power=args.refuse_power, fail_update=args.fail_update)
        print(f"{args.node}: {'faults set' if any((args.unreachable, args.slow, args.refuse_power, args.fail_update)) else 'faults cleared'}")
        return 0
    if args.bmc_command == "show":
        print(json.dumps(dict(bmc.show(), node=args.node), indent=2, sort_keys=True))
        return 0
    reset_type, final = RESETS[args.action]
    before = bmc.power_state()
    bmc.reset(reset_type)
    if not args.no_wait:
        if reset_type == "PowerCycle":
            wait_for(lambda: bmc.power_state() == "Off" or before == "Off", POWER_TIMEOUT,
                     f"{args.node} to power off")
        wait_for(lambda: bmc.power_state() == final, POWER_TIMEOUT, f"{args.node} to be {final}")
    print(f"{args.node}: {reset_type} ({'now ' + final if not args.no_wait else 'taken'})")
    return 0
