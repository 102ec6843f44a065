"""Stand-in inputs for the tests of residency-gate: everything the gate reads
but the benchmarks (test logs, replay, coverage and swarm reports), each
meeting the floors of a thresholds document, so that a test sees only the
checks of the benchmarks it gives."""
import json
import subprocess


def write_stand_ins(work, thresholds):
    """Writes the stand-ins into `work`: every suite `thresholds` requires
    passing, as many scenarios and swarm steps as it asks for, every swarm
    fault kind fired and full coverage."""
    suites = set(thresholds["required_suites"])
    for kind in ("address", "thread"):
        suites |= set(thresholds["sanitizers"][kind]["required_suites"])
    with open(work / "testlog.json", "w") as log:
        for suite in sorted(suites):
            name, _, test = suite.partition("/")
            log.write(json.dumps({"name": f"fhelium-residency:{name} / {test or 'stand-in'}", "result": "OK"}) + "\n")
    # A build of one suite (the fuzz build): meson names its tests without it.
    with open(work / "fuzz-testlog.json", "w") as log:
        for suite in thresholds["sanitizers"]["fuzz"]["required_suites"]:
            log.write(json.dumps({"name": suite.partition("/")[2], "result": "OK"}) + "\n")
    (work / "replay.json").write_text(json.dumps({
        "passed": thresholds["min_scenarios"], "failed": 0,
        "fault_coverage": {"never_fired": [], "pairs": [], "never_reached": [], "error_paths": []}}))
    (work / "coverage.json").write_text(json.dumps({f"{kind}_{field}": value for kind in ("line", "branch")
                                                     for field, value in (("percent", 100), ("covered", 1),
                                                                          ("total", 1))}))
    (work / "swarm.json").write_text(json.dumps({
        "steps": thresholds["swarm"]["min_steps"], "runs": 1, "failures": [],
        "faults_by_kind": {kind: 1 for kind in thresholds["swarm"]["fault_kinds"]}}))


def run_gate(gate, work, thresholds_path=None, bench_path=None):
    """The gate over `work`'s stand-ins and benchmarks (`bench_path`, else
    work/bench.json) with `thresholds_path` (else work/thresholds.json); its
    verdict goes to work/gate-verdict.json."""
    log = str(work / "testlog.json")
    return subprocess.run([gate, "--build-dir", str(work),
                           "--thresholds", str(thresholds_path or work / "thresholds.json"),
                           "--bench", str(bench_path or work / "bench.json"),
                           "--tests", log, "--asan-tests", log, "--tsan-tests", log,
                           "--fuzz-tests", str(work / "fuzz-testlog.json"), "--replay", str(work / "replay.json"),
                           "--coverage", str(work / "coverage.json"), "--swarm", str(work / "swarm.json")],
                          capture_output=True, text=True)
