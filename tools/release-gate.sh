#!/usr/bin/env bash
# Runs every invariant suite, the scenario replay, the benchmarks, the
# swarm runs (residency-swarm), the sanitizer builds (ASan/UBSan, TSan), the
# short fuzz runs and the coverage build (tools/coverage.sh), then the release
# gate over their results. Usage: bash tools/release-gate.sh [BUILD_DIR] [gate options]
# Exit status is the gate's: 0 only when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bash tools/setup.sh "$build" || exit 2
meson test -C "$build" --print-errorlogs --no-rebuild > "$build/test-output.txt" 2>&1
echo "invariant suites: $(tail -n 12 "$build/test-output.txt" | grep -E '^(Ok|Fail):' | tr -s ' ' | paste -sd ' ')"
"$build/tools/residency-replay" --json "$build/replay.json" scenarios/ > "$build/replay-output.txt" 2>&1
tail -n 1 "$build/replay-output.txt"
"$build/tools/residency-swarm" --seed "${SWARM_SEED:-1}" --runs "${SWARM_RUNS:-1000}" --steps 200 --quiet \
  --out "$build/swarm-failures" --json "$build/swarm.json" > "$build/swarm-output.txt" 2>&1
head -n 1 "$build/swarm-output.txt"
# Repetitions: the gate judges each benchmark by the median of its runs.
"$build/bench/residency-bench" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" \
  --benchmark_repetitions="${BENCH_REPETITIONS:-3}" --benchmark_out="$build/bench.json" --benchmark_out_format=json > "$build/bench-output.txt" 2>&1 || exit 2
parent=$(dirname "$build")
for kind in address thread; do
  SANITIZE_BUILD_DIR="$parent/build-$([ $kind = address ] && echo asan || echo tsan)" \
    bash tools/sanitize.sh "$kind" > "$build/sanitize-$kind-output.txt" 2>&1
  echo "sanitizer $kind: $(grep -E '^(Ok|Fail):' "$build/sanitize-$kind-output.txt" | tr -s ' ' | paste -sd ' ')"
done
FUZZ_BUILD_DIR="$parent/build-fuzz" bash tools/fuzz.sh > "$build/fuzz-output.txt" 2>&1
echo "fuzz: $(grep -E '^(Ok|Fail):' "$build/fuzz-output.txt" | tr -s ' ' | paste -sd ' ')"
COVERAGE_BUILD_DIR="$parent/build-cov" bash tools/coverage.sh > "$build/coverage-output.txt" 2>&1
echo "coverage: $(grep -E '^(lines|branches):' "$build/coverage-output.txt" | paste -sd ' ')"
exec "$build/tools/residency-gate" --build-dir "$build" "${@:2}"
