"""A chaos session spread over several labs side by side (``make chaos CHAOS_LANES=<k>``): the session's seeds
dealt round-robin to k pytest sessions, each on a lab of its own (brought up and taken down by the lab's pytest
plugin), their results merged into one file under the session's output (results.py). The first lane also runs the
observer's sabotage case. Exits non-zero when a lane failed. One lane is one pytest session, as before."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_chaos.py")


def main(lanes):
    seeds = results.seeds()
    lanes = max(1, min(lanes, len(seeds)))
    if lanes == 1:  # one session, on the lab of $KUBEVIRT_OPS_LAB_DIR or one of its own
        os.execv(sys.executable, [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", HERE])
    started = []
    for lane in range(lanes):
        output = os.path.join(results.OUTPUT, "lane-%d" % (lane + 1))
        os.makedirs(output, exist_ok=True)
        env = dict(os.environ, CHAOS_SEED=",".join(str(s) for s in seeds[lane::lanes]), CHAOS_OUTPUT=output)
        env.pop("KUBEVIRT_OPS_LAB_DIR", None)  # a lab of its own
        env.pop("CHAOS_LANES", None)
        argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", HERE]
        if lane:
            argv += ["-k", "test_chaos_run"]
        log = open(os.path.join(output, "pytest.log"), "w")
        print("chaos lane %d: seeds %s (%s)" % (lane + 1, env["CHAOS_SEED"], log.name), flush=True)
        started.append((lane + 1, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    failed = []
    for lane, proc, log in started:
        if proc.wait() != 0:
            failed.append(lane)
        log.close()
    records = []
    for lane, _, _ in started:
        records += results.read(os.path.join(results.OUTPUT, "lane-%d" % lane))
    summary = results.write(records, results.OUTPUT, lanes=lanes)
    print("chaos: %d runs, %d faults, %d violations; lanes failed: %s (results in %s)" % (
        summary["runs"], summary["faults"], summary["violations"], failed or "none", results.OUTPUT), flush=True)
    return 1 if failed or summary["violations"] or len(records) < len(seeds) else 0


if __name__ == "__main__":
    sys.exit(main(int(os.environ.get("CHAOS_LANES") or 1)))
