#!/usr/bin/env bash
# The release gate's benchmark run: every benchmark of BUILD_DIR's
# residency-bench, BENCH_REPETITIONS (default 3) repetitions of at least
# BENCH_MIN_TIME (default 0.2) seconds each, into BUILD_DIR/bench.json (the
# gate judges each benchmark by the median of its repetitions) and its
# console output into BUILD_DIR/bench-output.txt.
# Usage: bash tools/run-benchmarks.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: bash tools/run-benchmarks.sh BUILD_DIR}
"$build/bench/residency-bench" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" \
  --benchmark_repetitions="${BENCH_REPETITIONS:-3}" --benchmark_out="$build/bench.json" \
  --benchmark_out_format=json > "$build/bench-output.txt" 2>&1
