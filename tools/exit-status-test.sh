#!/usr/bin/env bash
# Every tool: --version exits 0; a usage error exits 2; residency-replay exits
# 2 for a scenario file that does not load and 1 for one that fails.
# Usage: exit-status-test.sh REPLAY GATE DEMO SCENARIO_DIR
set -u
replay=$1 gate=$2 demo=$3 scenarios=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
expect() {
  local want=$1
  shift
  "$@" > "$work/out" 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: '$*' exited $got, expected $want"; sed 's/^/    /' "$work/out"
    failures=$((failures + 1))
  else
    echo "ok: '$*' -> $got"
  fi
}
for tool in "$replay" "$gate" "$demo"; do
  expect 0 "$tool" --version
  expect 0 "$tool" --help
  expect 2 "$tool" --no-such-option
done
expect 2 "$replay"                                  # missing required input
expect 2 "$replay" --runtime quantum "$scenarios"   # invalid option value
printf 'name: broken\nsteps: 3\n' > "$work/broken.yaml"
expect 2 "$replay" "$work/broken.yaml"
cat > "$work/failing.yaml" <<'YAML'
name: failing
values:
  v: {bytes: 1KiB, adopt_at: pageable-host}
steps:
  - move: {value: v, to: pinned-host}
    expect: {error: budget}
YAML
expect 1 "$replay" "$work/failing.yaml"
expect 0 "$replay" "$scenarios/primitives/ensure-and-copy.yaml"
# Saved snapshots and --diff: equal 0, different 1, unreadable 2.
expect 1 "$replay" "$work/failing.yaml" --snapshots "$work/snapshots"
expect 0 "$replay" "$scenarios/primitives/ensure-and-copy.yaml" --snapshots "$work/snapshots"
expect 0 "$replay" --diff "$work/snapshots/failing.json" "$work/snapshots/failing.json"
expect 1 "$replay" --diff "$work/snapshots/failing.json" "$work/snapshots/ensure-and-copy.json"
expect 2 "$replay" --diff "$work/snapshots/failing.json" "$work/missing.json"
expect 2 "$replay" --diff "$work/snapshots/failing.json"
# --shrink: a failing scenario shrinks to one that fails the same way; a
# passing one, a missing -o or an unreadable file is refused.
expect 0 "$replay" --shrink "$work/failing.yaml" -o "$work/shrunk.yaml"
expect 1 "$replay" "$work/shrunk.yaml"
grep -q "it fails with: step move: expected error budget" "$work/shrunk.yaml" || {
  echo "FAIL: the shrunk scenario does not name its failure"; failures=$((failures + 1)); }
expect 2 "$replay" --shrink "$scenarios/primitives/ensure-and-copy.yaml" -o "$work/never.yaml"
grep -q "there is no failure to shrink" "$work/out" || { echo "FAIL: no reason for refusing"; failures=$((failures + 1)); }
expect 2 "$replay" --shrink "$work/failing.yaml"
expect 2 "$replay" --shrink "$work/missing.yaml" -o "$work/never.yaml"
expect 2 "$gate" --build-dir "$work" --thresholds "$work/missing.json"
expect 2 "$gate" --update-baseline --build-dir "$work"
exit $((failures > 0))
