#!/usr/bin/env bash
# tools/gate-runs.sh against a stand-in gate and benchmark binary: it runs
# the benchmarks again only while the verdict is inconclusive, at most
# BENCH_TRIES runs in all, reads the verdict where --json puts it, runs
# nothing again for a gate given another benchmark file, and stops with
# status 2 when a benchmark run fails.
# Usage: gate-runs-test.sh
set -euo pipefail
script="$(realpath "$(dirname "$0")")/gate-runs.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "gate-runs-test: $*" >&2; exit 1; }

build="$work/build"
mkdir -p "$build/tools" "$build/bench"
# The stand-in gate takes its Nth verdict from line N of $build/verdicts
# ("pass", "fail" or "inconclusive"), writes it where --json says (else
# BUILD/gate-verdict.json) and counts its calls.
cat > "$build/tools/residency-gate" <<'GATE'
#!/usr/bin/env bash
build=$(dirname "$(dirname "$0")")
verdict="$build/gate-verdict.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --json) verdict=$2; shift ;;
    --json=*) verdict=${1#--json=} ;;
  esac
  shift
done
echo x >> "$build/gate-calls"
outcome=$(sed -n "$(wc -l < "$build/gate-calls")p" "$build/verdicts")
case "$outcome" in
  pass) printf '{\n  "inconclusive": false,\n  "passed": true\n}\n' > "$verdict"; exit 0 ;;
  fail) printf '{\n  "inconclusive": false,\n  "passed": false\n}\n' > "$verdict"; exit 1 ;;
  inconclusive) printf '{\n  "inconclusive": true,\n  "passed": false\n}\n' > "$verdict"; exit 1 ;;
esac
exit 2
GATE
# The stand-in benchmarks count their runs and fail when $build/bench-fails exists.
cat > "$build/bench/residency-bench" <<'BENCH'
#!/usr/bin/env bash
build=$(dirname "$(dirname "$0")")
echo x >> "$build/bench-calls"
[ ! -e "$build/bench-fails" ]
BENCH
chmod +x "$build/tools/residency-gate" "$build/bench/residency-bench"

# expect STATUS GATE_CALLS BENCH_CALLS VERDICTS... -- [gate options]
expect() {
  local status=$1 gate_calls=$2 bench_calls=$3 got
  shift 3
  rm -f "$build/gate-calls" "$build/bench-calls" "$build/verdicts" "$work"/*.json "$build"/*.json
  touch "$build/gate-calls" "$build/bench-calls"
  while [ "$1" != -- ]; do echo "$1" >> "$build/verdicts"; shift; done
  shift
  got=0
  bash "$script" "$build" "$@" > "$work/out.txt" 2>&1 || got=$?
  local calls benches
  calls=$(wc -l < "$build/gate-calls")
  benches=$(wc -l < "$build/bench-calls")
  [ "$got $calls $benches" = "$status $gate_calls $bench_calls" ] || {
    cat "$work/out.txt"
    fail "verdicts '$(paste -sd ' ' "$build/verdicts")' with '$*': expected status, gate runs, benchmark runs" \
      "$status $gate_calls $bench_calls, got $got $calls $benches"
  }
}

expect 0 1 0 pass --
expect 1 1 0 fail --
# Inconclusive twice, then a pass: the last run's verdict is the gate's.
expect 0 3 2 inconclusive inconclusive pass --
expect 1 2 1 inconclusive fail --
# Never conclusive: BENCH_TRIES runs in all, and the verdict stays a failure.
expect 1 3 2 inconclusive inconclusive inconclusive inconclusive --
grep -qF "still inconclusive after 3 benchmark run(s)" "$work/out.txt" || {
  cat "$work/out.txt"
  fail "no message when every run was inconclusive"
}
BENCH_TRIES=2 expect 1 2 1 inconclusive inconclusive inconclusive --
BENCH_TRIES=1 expect 1 1 0 inconclusive pass --
# The verdict where --json puts it, in either spelling.
expect 0 2 1 inconclusive pass -- --json "$work/elsewhere.json"
expect 0 2 1 inconclusive pass -- "--json=$work/elsewhere.json"
# The gate judging another benchmark file: nothing of this build to run again.
expect 1 1 0 inconclusive pass -- --bench "$work/other.json"
expect 1 1 0 inconclusive pass -- "--bench=$work/other.json"
# A benchmark run that fails ends it with status 2, and says so.
touch "$build/bench-fails"
expect 2 1 1 inconclusive pass --
grep -qF "the benchmarks failed on run 2" "$work/out.txt" || { cat "$work/out.txt"; fail "no message for a failed benchmark run"; }
rm "$build/bench-fails"
# A bad BENCH_TRIES is refused before the gate runs.
for bad in 0 x -1 2.5; do
  BENCH_TRIES=$bad expect 2 0 0 pass --
  grep -qF "BENCH_TRIES must be a positive whole number, not '$bad'" "$work/out.txt" || {
    cat "$work/out.txt"
    fail "no message refusing BENCH_TRIES=$bad"
  }
done
echo "gate-runs-test: as expected"
