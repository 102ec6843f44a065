#!/usr/bin/env python3
"""The committed thresholds against the benchmark suite itself: every
benchmark, counter and host reading that bench/thresholds.json names is one
that residency-bench reports, and no benchmark stops with an error. A renamed
benchmark or counter would otherwise show only in a release-gate run, as a
check found missing.

The suite runs once, briefly (--benchmark_min_time=0.001): its times are not
worth judging, so the speed verdicts are ignored and only their inputs'
presence is checked. The gate's other inputs are stand-ins that meet the
thresholds' floors, so that any check found missing is the benchmarks'.

Usage: gate-wiring-test.py RESIDENCY_BENCH RESIDENCY_GATE THRESHOLDS WORK_DIR"""
import json
import pathlib
import shutil
import subprocess
import sys

from gate_test_inputs import run_gate, write_stand_ins


def main():
    bench, gate, thresholds_path, work = sys.argv[1], sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    thresholds = json.loads(pathlib.Path(thresholds_path).read_text())

    run = subprocess.run([bench, "--benchmark_min_time=0.001", f"--benchmark_out={work / 'bench.json'}",
                          "--benchmark_out_format=json"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"residency-bench exited with {run.returncode}:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")

    write_stand_ins(work, thresholds)
    result = run_gate(gate, work, thresholds_path)
    print(result.stdout, result.stderr, sep="\n")
    if result.returncode not in (0, 1):
        sys.exit(f"the gate could not judge the suite's output (status {result.returncode})")
    verdict = json.loads((work / "gate-verdict.json").read_text())
    checks = {}
    for check in verdict["checks"]:
        checks.setdefault(check["name"], []).append(check)

    failures = [f"{check['name']}: {check['measured']}" for check in verdict["checks"]
                if check["measured"].startswith(("missing", "error:"))
                or (check["name"] == "benchmark errors" and not check["passed"])]
    # Every named item was judged (present, whatever its verdict).
    expected = [f"speed {name}" for name in thresholds["speed"]["baseline_ratios"]]
    expected += [f"complexity {name}" for name in thresholds["complexity"]]
    expected += ["contention 4 threads", "data movement 64 MiB"]
    for target in thresholds.get("targets", []):
        expected.append(f"target {target['benchmark']}")
    for name in sorted(set(expected)):
        if expected.count(name) != len(checks.get(name, [])):
            failures.append(f"{name}: judged {len(checks.get(name, []))} time(s), named {expected.count(name)}")
    readings = verdict.get("host", [])
    if len(readings) != len(thresholds.get("host", [])):
        failures.append(f"host: {len(readings)} reading(s) taken, {len(thresholds.get('host', []))} named")
    if failures:
        sys.exit("thresholds that the benchmark suite does not meet as named:\n" + "\n".join(failures))
    print(f"gate wiring: {len(verdict['checks'])} checks and {len(readings)} host readings, every input present")


if __name__ == "__main__":
    main()
