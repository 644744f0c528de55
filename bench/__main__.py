"""``python -m bench``: run the benchmarks, write bench/results/*.json and latest.md.

See bench/README.md. Run through ``make bench`` (it sets PYTHONPATH and the collection
path); every option has a default that reproduces the published table.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import traceback
from pathlib import Path

from bench import bootstrap, labs, peers as peers_mod, report, scale as scale_mod, scenarios as sc
from bench.context import Context
from bench.bootstrap import say

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=3, help="runs per scenario and peer (median reported)")
    p.add_argument("--scenarios", default="1,2,3,4,5,6,7,8", help="comma-separated: 1 to 8 (default all)")
    p.add_argument("--peers", default="kubectl,k8s_drain,ours_drain,ours_cr,nmo,ours_role,ours_role_parallel,"
                                      "ours_role_bmc,kubectl_bmc,ours_role_limits",
                   help="comma-separated peer keys (default: all but ours_role_drain, the role with method drain)")
    p.add_argument("--lab-dir", type=Path, default=Path(os.environ.get("KUBEVIRT_OPS_BENCH_LAB_DIR")
                                                        or labs.default_dir("bench-lab")),
                   help="state dir of the benchmark lab (reused when up; default .build/bench-lab)")
    p.add_argument("--scale-lab-dir", type=Path, default=labs.default_dir("bench-lab-scale"))
    p.add_argument("--parallel-lab-dir", type=Path, default=labs.default_dir("bench-lab-parallel"),
                   help="the lab of scenario 6 (8 workers in 2 zones)")
    # Scenario 5 at OKD's tested maximum: 500 nodes, 10,000 VMs, 30,000 other pods (see README).
    p.add_argument("--scale-nodes", type=int, default=500, help="workers of the scale lab (default 500)")
    p.add_argument("--scale-pods-per-node", type=int, default=60,
                   help="pods per worker besides the VMs', the virt-handler DaemonSet's included (default 60)")
    p.add_argument("--scale-vms-per-node", type=int, default=20,
                   help="running VMs per worker (default 20: 10,000 on 500 workers)")
    p.add_argument("--keep-lab", action="store_true", help="leave the labs running at the end")
    p.add_argument("--timeout", type=int, default=900, help="seconds one drain may take")
    p.add_argument("--noop-iterations", type=int, default=5)
    p.add_argument("--output", type=Path, default=RESULTS, help="directory for the results")
    p.add_argument("--no-nmo-build", action="store_true", help="use the operator only if already built")
    p.add_argument("--render", type=Path, metavar="RESULTS_JSON",
                   help="measure nothing: recompute the summary and tables of a results file into --output")
    return p.parse_args(argv)


def render(path, output):
    """Summaries, verdicts and latest.md again from the raw runs of a results file."""
    result = json.loads(Path(path).read_text())
    labels = {p.key: p.label for p in peers_mod.all_peers()}
    rolling = {p.key: p.label for p in peers_mod.rolling_peers()}
    result["summary"] = report.summarize(result["runs"], labels, rolling)
    result["verdicts"] = report.verdicts(result["summary"], result.get("scale"), result.get("noop"))
    text = report.sanitize(json.dumps(result, indent=1, default=str) + "\n")
    Path(path).write_text(text)
    (output / "latest.json").write_text(text)
    (output / "latest.md").write_text(report.sanitize(report.markdown(result)))
    print((output / "latest.md").read_text())
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.render:
        return render(args.render, args.output)
    wanted = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    wanted_peers = {s.strip() for s in args.peers.split(",") if s.strip()}
    command = "make bench" if argv is None and len(sys.argv) == 1 else \
        "python -m bench " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    result = {
        "meta": {
            "command": command,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
                       f"Python {platform.python_version()}",
            "iterations": args.iterations,
            "versions": {"ansible (peer venv)": bootstrap.ANSIBLE_VERSION,
                         "kubernetes (peer venv)": bootstrap.KUBERNETES_VERSION,
                         "node-maintenance-operator": bootstrap.NMO_VERSION},
        },
        "scenarios": {k: s.title for k, s in sc.SCENARIOS.items()},
        "runs": [],
        "unavailable": {},
    }
    result["scenarios"]["5"] = "scale: node_maintenance_info and preflight"
    args.output.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_json = args.output / f"{stamp}.json"

    def save(final=False):
        labels = {p.key: p.label for p in peers_mod.all_peers()}
        rolling = {p.key: p.label for p in peers_mod.rolling_peers()}
        result["summary"] = report.summarize(result["runs"], labels, rolling)
        result["verdicts"] = report.verdicts(result["summary"], result.get("scale"), result.get("noop"))
        text = report.sanitize(json.dumps(result, indent=1, default=str) + "\n")
        (out_json.with_suffix(".json.tmp")).write_text(text)
        if final:
            out_json.write_text(text)
            (out_json.with_suffix(".json.tmp")).unlink(missing_ok=True)
            (args.output / "latest.json").write_text(text)
            (args.output / "latest.md").write_text(report.sanitize(report.markdown(result)))

    small = wanted & {"1", "2", "3", "4", "7", "8"}
    try:
        if small:
            _on_lab(args, result, save, wanted_peers, args.lab_dir.resolve(), 4, sorted(small), noop=True)
        if "6" in wanted:
            # Its own lab: 8 workers in 2 zones, so that scenario 4's figures stay comparable.
            _on_lab(args, result, save, wanted_peers, args.parallel_lab_dir.resolve(), sc.SCENARIOS["6"].nodes,
                    ["6"], noop=False)
        if "5" in wanted:
            try:
                result["scale"] = scale_mod.run(
                    lambda d, k, kube: peers_mod.Env(d, k, kube, REPO / ".build" / "collections", args.timeout),
                    args.scale_nodes, args.scale_pods_per_node, args.scale_lab_dir.resolve(), args.keep_lab,
                    iterations=args.iterations, vms_per_node=args.scale_vms_per_node)
                result["scale"]["command"] = command
            except Exception as e:  # noqa: BLE001 - recorded: the largest scale that works is reported
                say(f"scale scenario failed: {e}")
                result["scale"] = {"nodes": args.scale_nodes, "pods": None, "vms": None, "error": str(e),
                                   "traceback": traceback.format_exc()}
                if not args.keep_lab:
                    labs.down(args.scale_lab_dir.resolve())
    finally:
        save(final=True)
        say(f"results: {out_json.relative_to(REPO) if out_json.is_relative_to(REPO) else out_json}, "
            f"{(args.output / 'latest.md')}")
    print((args.output / "latest.md").read_text())
    return 0


def _on_lab(args, result, save, wanted_peers, lab_dir, workers, keys, noop):
    """The drain and rolling scenarios ``keys`` on a lab of ``workers`` workers (started if down)."""
    started_lab = False
    if not labs.is_up(lab_dir):
        labs.up(lab_dir, workers)
        started_lab = True
    ctx = Context(lab_dir, args.timeout)
    kube = ctx.kube
    drain_peers = [p for p in peers_mod.all_peers(nmo_build=not args.no_nmo_build) if p.key in wanted_peers] \
        if set(keys) & {"1", "2", "3"} else []
    roll_peers = [p for p in peers_mod.rolling_peers() if p.key in wanted_peers]
    ready = {}
    for peer in drain_peers + roll_peers:
        try:
            peer.prepare(ctx.env)
            ready[(peer.key, type(peer).__name__)] = peer
        except peers_mod.Unavailable as e:
            say(f"{peer.label}: not measured: {e}")
            result["unavailable"][peer.label] = str(e)
    try:
        for key in ("1", "2", "3"):
            if key not in keys:
                continue
            scenario = sc.SCENARIOS[key]
            node = ctx.workers[0]
            for iteration in range(args.iterations):
                for peer in drain_peers:
                    if (peer.key, type(peer).__name__) not in ready or peer.key not in scenario.peers:
                        continue
                    say(f"scenario {key}, {peer.label}, iteration {iteration + 1}/{args.iterations}")
                    record = _guarded(lambda: sc.run_drain(ctx, scenario, peer, iteration, node),
                                      key, peer, iteration)
                    _say_record(record)
                    result["runs"].append(record)
                    save()
        for key in ("4", "6", "7", "8"):
            if key not in keys:
                continue
            scenario = sc.SCENARIOS[key]
            with sc.machines_through_their_bmcs(ctx, scenario), sc.migration_link(ctx, scenario):
                for iteration in range(args.iterations):
                    for peer in roll_peers:
                        if (peer.key, type(peer).__name__) not in ready or peer.key not in scenario.peers:
                            continue
                        say(f"scenario {key}, {peer.label}, iteration {iteration + 1}/{args.iterations}")
                        record = _guarded(lambda: sc.run_rolling(ctx, scenario, peer, iteration),
                                          key, peer, iteration)
                        _say_record(record)
                        result["runs"].append(record)
                        save()
        if noop:
            say("no-op module runs vs ansible.builtin.ping")
            sc.reset(kube, ctx.workers)
            result["noop"] = sc.measure_noop(ctx, args.noop_iterations)
            save()
    finally:
        for peer in ready.values():
            peer.close(ctx.env)
        try:
            sc.reset(kube, ctx.workers)
        except Exception as e:  # noqa: BLE001
            say(f"could not reset the lab: {e}")
        if started_lab and not args.keep_lab:
            labs.down(lab_dir)


def _guarded(fn, scenario, peer, iteration):
    """A run that crashed (preparation, harness) is recorded as such, not lost."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return {"scenario": scenario, "peer": peer.key, "iteration": iteration, "ok": False,
                "error": f"harness: {e}", "traceback": traceback.format_exc(), "wall_seconds": None,
                "requests": None, "correctness": {"correct": False}}


def _say_record(record):
    corr = record.get("correctness", {})
    say(f"  -> ok={record.get('ok')} wall={record.get('wall_seconds')}s requests={record.get('requests')} "
        f"correct={corr.get('correct')}" + (f" error={str(record.get('error'))[:200]}" if record.get("error") else ""))


if __name__ == "__main__":
    sys.exit(main())
