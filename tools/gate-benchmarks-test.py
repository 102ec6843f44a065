#!/usr/bin/env python3
"""The gate's reading of benchmark results: with repetitions the median of
each run is what the targets and the complexity fits see (not the last
repetition, not the mean); a benchmark that stopped with an error fails the
gate by name and measures nothing; `above` subtracts a share of another benchmark,
`or_within_ns_of` passes a target missed outright when the benchmark is
close enough to its reference, `above_counter` and `or_within_counter` read
the median of a counter the benchmark reports (a baseline it timed in the
same iterations), `ratio_to` bounds a benchmark by a multiple of another
and `ratio_counter` by the median of its ratio counter. Also: a required
"suite/test" finds its test in a log that names tests without their suite
(meson does so in a build with one suite, such as the fuzz build), and the
host's own benchmark marks a failure of timed checks alone on a slow host
inconclusive, and nothing else (host_cases).

Usage: gate-benchmarks-test.py RESIDENCY_GATE WORK_DIR"""
import json
import pathlib
import shutil
import sys

from gate_test_inputs import run_gate, write_stand_ins


def run(name, ns_per_item, repetition=None, aggregate=None):
    """One Google Benchmark JSON row measuring `ns_per_item`."""
    row = {"name": name if aggregate is None else f"{name}_{aggregate}", "run_name": name,
           "run_type": "iteration" if aggregate is None else "aggregate",
           "real_time": ns_per_item, "cpu_time": ns_per_item, "time_unit": "ns",
           "items_per_second": 1e9 / ns_per_item}
    if repetition is not None:
        row["repetition_index"] = repetition
    if aggregate is not None:
        row["aggregate_name"] = aggregate
    return row


def errored(name, message, repetition):
    """A repetition of a benchmark that stopped with SkipWithError, as Google
    Benchmark writes it: a time of 0, no rate, no aggregates."""
    return {"name": name, "run_name": name, "run_type": "iteration", "repetition_index": repetition,
            "error_occurred": True, "error_message": message, "iterations": 1,
            "real_time": 0.0, "cpu_time": 0.0, "time_unit": "ns"}


def repeated(name, samples):
    """Rows of a benchmark run with --benchmark_repetitions: each repetition,
    then the aggregates Google Benchmark appends (mean, then median)."""
    rows = [run(name, value, index) for index, value in enumerate(samples)]
    rows.append(run(name, sum(samples) / len(samples), aggregate="mean"))
    rows.append(run(name, sorted(samples)[len(samples) // 2], aggregate="median"))
    return rows


def paired(name, ns_per_item, counter, samples):
    """A benchmark timed against an in-run baseline: every repetition and
    aggregate carries `counter`, the aggregates its mean and median."""
    rows = repeated(name, [ns_per_item] * len(samples))
    for row, value in zip(rows, samples + [sum(samples) / len(samples), sorted(samples)[len(samples) // 2]]):
        row[counter] = value
    return rows


def host_cases(gate, work):
    """The host's own speed (thresholds "host": a benchmark's time, or a
    paired benchmark's baseline counter, each with its usual time): a run
    whose every failure is timed, with some reading above its usual time, is
    inconclusive (and still fails); a failure no slow host explains, a usual
    host, or a missing reading leaves a plain failure; a pass stays a pass."""
    thresholds = {
        "required_suites": [], "min_scenarios": 1,
        "sanitizers": {kind: {"required_suites": []} for kind in ("address", "thread", "fuzz")},
        "coverage": {"min_line_percent": 0, "min_branch_percent": 0},
        "swarm": {"min_steps": 0, "fault_kinds": []},
        "speed": {"baseline_ratios": {}, "tolerance": 2.0},
        "complexity": {},
        "contention": {"min_efficiency": 0.8},
        "data_movement": {"max_ratio": 1.15, "min_bytes": 67108864},
        "host": [{"benchmark": "BM_HostLoad", "usual_max_ns": 1100},
                 {"benchmark": "BM_Paired/manual_time", "counter": "base_ns", "usual_max_ns": 100}],
        "targets": [{"benchmark": "BM_Op", "max_ns": 100}],
    }
    common = [run("BM_Reference", 10.0), run("BM_Contention/real_time/threads:1", 100.0),
              run("BM_Contention/real_time/threads:4", 100.0 / 1.1),
              run("BM_ManagerMove/67108864/real_time", 100.0), run("BM_RawCopy/67108864/real_time", 100.0)]
    cases = [
        # name, host load and paired baseline (None: absent), BM_Op time, extra target, passed, inconclusive
        ("slow load, only a timed miss", 1500.0, 90.0, 150.0, None, False, True),
        ("slow paired baseline, only a timed miss", 1000.0, 130.0, 150.0, None, False, True),
        ("slow host, a missing benchmark too", 1500.0, 90.0, 150.0, {"benchmark": "BM_Absent", "max_ns": 100},
         False, False),
        ("usual host, a timed miss", 1000.0, 90.0, 150.0, None, False, False),
        ("slow host, every target met", 1500.0, 130.0, 90.0, None, True, False),
        ("no host benchmark", None, 130.0, 150.0, None, False, False),
        ("no paired baseline", 1500.0, None, 150.0, None, False, False),
    ]
    failures = []
    for name, load, base, op, extra, want_passed, want_inconclusive in cases:
        case = work / name.replace(" ", "-").replace(",", "")
        case.mkdir(parents=True)
        write_stand_ins(case, thresholds)
        rows = common + [run("BM_Op", op)] + ([run("BM_HostLoad", load)] if load is not None else [])
        paired_row = run("BM_Paired/manual_time", 500.0)
        if base is not None:
            paired_row["base_ns"] = base
        rows.append(paired_row)
        (case / "bench.json").write_text(json.dumps({"benchmarks": rows}))
        (case / "thresholds.json").write_text(json.dumps(
            thresholds | {"targets": thresholds["targets"] + ([extra] if extra else [])}))
        result = run_gate(gate, case)
        verdict = json.loads((case / "gate-verdict.json").read_text())
        got = (result.returncode, verdict["passed"], verdict["inconclusive"])
        want = (0 if want_passed else 1, want_passed, want_inconclusive)
        if got != want:
            failures.append(f"{name}: expected (status, passed, inconclusive) {want}, got {got}\n{result.stdout}")
            continue
        said = "inconclusive: the host ran slow" in result.stdout
        if said != want_inconclusive:
            failures.append(f"{name}: the summary {'does not say' if want_inconclusive else 'says'} inconclusive\n"
                            f"{result.stdout}")
        checks = {check["name"]: (check["passed"], check["measured"]) for check in verdict["checks"]}
        readings = []
        if load is None:
            if checks.get("host BM_HostLoad") != (False, "missing"):
                failures.append(f"{name}: expected a failed 'host BM_HostLoad' check, got "
                                f"{checks.get('host BM_HostLoad')}")
        else:
            readings.append({"benchmark": "BM_HostLoad", "measured_ns": load, "usual_max_ns": 1100,
                             "slow": load > 1100})
        if base is None:
            if checks.get("host BM_Paired/manual_time base_ns") != (False, "missing"):
                failures.append(f"{name}: expected a failed 'host BM_Paired/manual_time base_ns' check, got "
                                f"{checks.get('host BM_Paired/manual_time base_ns')}")
        else:
            readings.append({"benchmark": "BM_Paired/manual_time", "counter": "base_ns", "measured_ns": base,
                             "usual_max_ns": 100, "slow": base > 100})
        if verdict.get("host") != readings:
            failures.append(f"{name}: host readings {verdict.get('host')}, expected {readings}")
    # A malformed host entry is unreadable input (status 2), named as such.
    for name, host in [("host without a usual time", [{"benchmark": "BM_HostLoad"}]),
                       ("host with a usual time of 0", [{"benchmark": "BM_HostLoad", "usual_max_ns": 0}]),
                       ("host with a numeric counter", [{"benchmark": "BM_HostLoad", "counter": 1,
                                                         "usual_max_ns": 10}]),
                       ("host as one entry, not a list", {"benchmark": "BM_HostLoad", "usual_max_ns": 1100}),
                       ("host as an empty list", [])]:
        case = work / name.replace(" ", "-").replace(",", "")
        case.mkdir(parents=True)
        write_stand_ins(case, thresholds)
        (case / "bench.json").write_text(json.dumps({"benchmarks": common + [run("BM_Op", 90.0),
                                                                             run("BM_HostLoad", 900.0)]}))
        (case / "thresholds.json").write_text(json.dumps(thresholds | {"host": host}))
        result = run_gate(gate, case)
        if result.returncode != 2 or 'thresholds "host" must be a non-empty list' not in result.stderr:
            failures.append(f"{name}: expected status 2 naming the host entry, got {result.returncode}\n"
                            f"{result.stderr}")
    return failures


def main():
    gate, work = sys.argv[1], pathlib.Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    benchmarks = [run("BM_Reference", 10.0), run("BM_Contention/real_time/threads:1", 100.0),
                  run("BM_Contention/real_time/threads:4", 100.0 / 1.1)]
    # Median 200, last repetition 100, mean 233: only the median misses 150.
    benchmarks += repeated("BM_MedianMisses", [200.0, 400.0, 100.0])
    # Median 120, last repetition 400: only the median meets 150.
    benchmarks += repeated("BM_MedianMeets", [120.0, 100.0, 400.0])
    # 1000 above a 900 load is 100; above half of it, 550.
    benchmarks += repeated("BM_Ensure", [1000.0, 1000.0, 1000.0]) + repeated("BM_Load", [900.0, 900.0, 900.0])
    # 300 is above 100 outright, but within 50 of 260 and not of 200.
    benchmarks += [run("BM_Drop", 300.0), run("BM_CloseRelease", 260.0), run("BM_FarRelease", 200.0)]
    # Counters: medians 120 and 45 meet 150 and 50; the means (173, 65) and
    # the last repetitions (120, 100) would not both.
    benchmarks += paired("BM_PairedEnsure/manual_time", 1000.0, "above_load_ns", [300.0, 100.0, 120.0])
    benchmarks += paired("BM_PairedDrop/manual_time", 300.0, "above_release_ns", [40.0, 110.0, 45.0])
    benchmarks += paired("BM_PairedFar/manual_time", 300.0, "above_release_ns", [90.0, 60.0, 55.0])
    # Ratio counters: median 1.005 meets 1.01, median 1.02 does not.
    benchmarks += paired("BM_PairedLarge/manual_time", 3e7, "ratio_to_clone", [1.005, 1.2, 0.99])
    benchmarks += paired("BM_PairedSlow/manual_time", 3e7, "ratio_to_clone", [1.0, 1.02, 1.03])
    # 1.02x and 1.00x the raw clone.
    benchmarks += [run("BM_Large/real_time", 102.0), run("BM_Fair/real_time", 100.0),
                   run("BM_Clone/real_time", 100.0)]
    # Linear in the medians; the last repetitions alone would fit N^2.
    for size, samples in [(1000, [1e3, 1e4, 1e2]), (10000, [1e4, 1e3, 1e5]), (100000, [1e5, 1e4, 1e6])]:
        benchmarks += repeated(f"BM_Scan/{size}", samples)
    # Runs that stopped with an error, in every repetition: one that no
    # threshold names, and one a target names (its rows read 0 ns, which
    # must not pass for fast).
    benchmarks += [errored("BM_Broken", "model and manager disagree", index) for index in range(3)]
    benchmarks += [errored("BM_BrokenTarget", "workload check failed", index) for index in range(3)]
    (work / "bench.json").write_text(json.dumps({"benchmarks": benchmarks}))

    thresholds = {
        "required_suites": [], "min_scenarios": 1,
        "sanitizers": {kind: {"required_suites": []} for kind in ("address", "thread")} | {
            "fuzz": {"required_suites": ["fuzz/fuzz-loader", "fuzz/fuzz-replay", "fuzz/fuzz-absent"]}},
        "coverage": {"min_line_percent": 0, "min_branch_percent": 0},
        "swarm": {"min_steps": 0, "fault_kinds": []},
        "speed": {"baseline_ratios": {}, "tolerance": 2.0},
        "complexity": {"BM_Scan": {"class": "N", "max_exponent": 1.1}},
        "contention": {"min_efficiency": 0.8},
        "data_movement": {"max_ratio": 1.15, "min_bytes": 67108864},
        "targets": [
            {"benchmark": "BM_MedianMisses", "max_ns": 150},
            {"benchmark": "BM_MedianMeets", "max_ns": 150},
            {"benchmark": "BM_Ensure", "above": "BM_Load", "max_ns": 150},
            {"benchmark": "BM_Ensure", "above": "BM_Load", "above_share": 0.5, "max_ns": 500},
            {"benchmark": "BM_Drop", "max_ns": 100, "or_within_ns_of": "BM_CloseRelease", "within_ns": 50},
            {"benchmark": "BM_Drop", "max_ns": 100, "or_within_ns_of": "BM_FarRelease", "within_ns": 50},
            {"benchmark": "BM_PairedEnsure/manual_time", "above_counter": "above_load_ns", "max_ns": 150},
            {"benchmark": "BM_PairedEnsure/manual_time", "above_counter": "absent_ns", "max_ns": 150},
            {"benchmark": "BM_PairedDrop/manual_time", "max_ns": 100, "or_within_counter": "above_release_ns",
             "within_ns": 50},
            {"benchmark": "BM_PairedFar/manual_time", "max_ns": 100, "or_within_counter": "above_release_ns",
             "within_ns": 50},
            {"benchmark": "BM_PairedLarge/manual_time", "max_ratio": 1.01, "ratio_counter": "ratio_to_clone"},
            {"benchmark": "BM_PairedSlow/manual_time", "max_ratio": 1.01, "ratio_counter": "ratio_to_clone"},
            {"benchmark": "BM_Large/real_time", "max_ratio": 1.01, "ratio_to": "BM_Clone/real_time"},
            {"benchmark": "BM_Fair/real_time", "max_ratio": 1.01, "ratio_to": "BM_Clone/real_time"},
            {"benchmark": "BM_BrokenTarget", "max_ns": 100},
        ],
    }
    (work / "thresholds.json").write_text(json.dumps(thresholds))
    write_stand_ins(work, thresholds)

    # A build whose tests are all of one suite: meson names them without it.
    (work / "fuzz-testlog.json").write_text("\n".join(json.dumps({"name": name, "result": result}) for name, result in
                                                       [("fuzz-loader", "OK"), ("fuzz-replay", "FAIL")]) + "\n")
    result = run_gate(gate, work)
    print(result.stdout, result.stderr, sep="\n")
    if result.returncode != 1:
        sys.exit(f"expected exit status 1 (some targets fail), got {result.returncode}")
    verdict = json.loads((work / "gate-verdict.json").read_text())
    outcomes = {}
    for check in verdict["checks"]:
        outcomes.setdefault(check["name"], []).append((check["passed"], check["measured"]))

    expected = {
        "target BM_MedianMisses": [(False, "200.0 ns/item")],
        "target BM_MedianMeets": [(True, "120.0 ns/item")],
        "target BM_Ensure": [(True, "1000.0 ns/item, 100.0 ns above BM_Load"),
                             (False, "1000.0 ns/item, 550.0 ns above 0.50 x BM_Load")],
        "target BM_Drop": [(True, "300.0 ns/item, 40.0 ns above BM_CloseRelease"),
                           (False, "300.0 ns/item, 100.0 ns above BM_FarRelease")],
        "target BM_PairedEnsure/manual_time": [(True, "1000.0 ns/item, above_load_ns 120.0"),
                                               (False, "missing counter absent_ns")],
        "target BM_PairedDrop/manual_time": [(True, "300.0 ns/item, above_release_ns 45.0")],
        "target BM_PairedFar/manual_time": [(False, "300.0 ns/item, above_release_ns 60.0")],
        "target BM_PairedLarge/manual_time": [(True, "30000000.0 ns/item, ratio_to_clone 1.005")],
        "target BM_PairedSlow/manual_time": [(False, "30000000.0 ns/item, ratio_to_clone 1.020")],
        "target BM_Large/real_time": [(False, "102.0 ns/item = 1.020x BM_Clone/real_time")],
        "target BM_Fair/real_time": [(True, "100.0 ns/item = 1.000x BM_Clone/real_time")],
        "complexity BM_Scan": [(True, "O(N^1.00)")],
        "contention 4 threads": [(True, "1.10x one thread's throughput")],
        "fuzz suite fuzz/fuzz-loader": [(True, "1 passed, 0 failed")],
        "fuzz suite fuzz/fuzz-replay": [(False, "0 passed, 1 failed")],
        "fuzz suite fuzz/fuzz-absent": [(False, "missing")],
        "benchmark BM_Broken": [(False, "error: model and manager disagree")],
        "benchmark BM_BrokenTarget": [(False, "error: workload check failed")],
        "benchmark errors": [(False, "2 benchmark(s) stopped with an error")],
        "target BM_BrokenTarget": [(False, "missing")],
        # No BM_ManagerMove at all: nothing judged is not a pass.
        "data movement": [(False, "missing")],
    }
    failures = [f"{name}: expected {want}, got {outcomes.get(name)}" for name, want in expected.items()
                if outcomes.get(name) != want]
    # Thresholds that name no host benchmark: no host record, never inconclusive.
    if "host" in verdict or verdict["inconclusive"]:
        failures.append(f"no host in the thresholds, yet host {verdict.get('host')}, "
                        f"inconclusive {verdict['inconclusive']}")
    failures += host_cases(gate, work / "host")
    if failures:
        sys.exit("\n".join(failures))
    print("gate benchmark checks: as expected")


if __name__ == "__main__":
    main()
