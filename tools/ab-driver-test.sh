#!/usr/bin/env bash
# residency-ab against its own modules: a build compared with a copy of
# itself, with a module 1 us per operation slower (which it must find, with
# the right sign and size), and with bad input (which it must refuse by name).
# Usage: ab-driver-test.sh RESIDENCY_AB MODULE SLOWED_MODULE NEXT_VERSION_MODULE INCOMPLETE_MODULE
# (the last two export only an interface version: the next one, and this one)
set -euo pipefail
driver=$(realpath "$1") module=$(realpath "$2") slowed=$(realpath "$3")
next_version=$(realpath "$4") incomplete=$(realpath "$5")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "ab-driver-test: $*" >&2; exit 1; }

# A build against a copy of itself: every workload runs and is reported.
cp "$module" "$work/copy.so"
"$driver" --rounds 6 --workloads drop,release,ensure,load,execute,explain,adopt,register_source,acquire_release,snapshot \
  --json "$work/same.json" "$module" "$work/copy.so" > "$work/same.txt"
for workload in drop release ensure load execute explain adopt register_source acquire_release snapshot; do
  grep -qE "^$workload +[0-9.]+ +[0-9.]+ +-?[0-9.]+ +\[-?[0-9.]+, -?[0-9.]+\] +[0-9.]+  (no difference shown|B faster|B slower)$" \
    "$work/same.txt" || { cat "$work/same.txt"; fail "no result row for $workload"; }
done
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" - "$work/same.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["rounds"] == 6, report["rounds"]
assert len(report["workloads"]) == 10, len(report["workloads"])
for entry in report["workloads"]:
    assert len(entry["a_rounds_ns"]) == 6 and len(entry["b_rounds_ns"]) == 6, entry["workload"]
    assert all(ns > 0 for ns in entry["a_rounds_ns"] + entry["b_rounds_ns"]), entry["workload"]
    low, high = entry["interval_ns"]
    assert low <= entry["difference_ns"] <= high, entry
    # The floor is 2% of A's median by default, and a verdict clears it.
    assert abs(entry["floor_ns"] - 0.02 * entry["a_ns"]) < 1e-6 * entry["a_ns"], entry
    if entry["verdict"] == "B faster":
        assert high < -entry["floor_ns"], entry
    elif entry["verdict"] == "B slower":
        assert low > entry["floor_ns"], entry
    else:
        assert entry["verdict"] == "no difference shown" and low <= entry["floor_ns"] and high >= -entry["floor_ns"], entry
PY

# 1 us per operation slower: found, as B slower, by about that much. The
# workload is one that allocates nothing and takes far less than that (under
# meson test's MALLOC_PERTURB_, every allocation fills its block, and the
# rounds of workloads that allocate spread over microseconds), and the
# difference is far above what other tests running beside this one can add
# to a median of 20 rounds.
"$driver" --rounds 20 --workloads acquire_release "$module" "$slowed" > "$work/slowed.txt"
line=$(grep -E "^acquire_release " "$work/slowed.txt") || { cat "$work/slowed.txt"; fail "no row for acquire_release"; }
case "$line" in *"B slower") ;; *) cat "$work/slowed.txt"; fail "the slowed module was not found slower" ;; esac
difference=$(echo "$line" | awk '{print $4}')
# At least most of the wait; at most 100 times it, however the waiting
# process is preempted on a loaded machine (a wait that spins attracts the
# scheduler's preemptions into its timed part), but far below what a
# difference per round instead of per operation would read (1000 times).
awk -v d="$difference" 'BEGIN { exit !(d >= 700 && d <= 100000) }' ||
  fail "B - A = $difference ns on acquire_release, expected about 1000 per operation"
# The other way round, the sign turns.
"$driver" --rounds 20 --workloads acquire_release "$slowed" "$module" | grep -E "^acquire_release .*B faster$" > /dev/null ||
  fail "the plain module was not found faster than the slowed one"

# Bad input is refused by name, with a nonzero exit.
expect_refusal() {
  local pattern=$1
  shift
  if "$driver" "$@" > "$work/out.txt" 2> "$work/err.txt"; then fail "accepted: $*"; fi
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "refusal of '$*' does not say '$pattern'"; }
}
expect_refusal "are the same file" --rounds 6 "$module" "$module"
# A module named without a directory is the file in the current one, not a
# library on the search path.
(cd "$work" && "$driver" --rounds 6 --copies 1 --workloads acquire_release copy.so "$module" > /dev/null) ||
  fail "a module named without a directory was not loaded from the current one"
expect_refusal "has no workload 'nope' (it has: acquire_release, adopt" --rounds 6 --workloads nope "$module" "$work/copy.so"
echo "not a module" > "$work/text.so"
expect_refusal "cannot load $work/text.so" --rounds 6 "$module" "$work/text.so"
expect_refusal "$next_version: module interface version [0-9]*, this driver reads [0-9]*; rebuild it" \
  --rounds 6 "$module" "$next_version"
expect_refusal "$incomplete: not a residency-ab module (no fhelium_ab_round)" --rounds 6 "$incomplete" "$module"
expect_refusal "rounds" --rounds 2 "$module" "$work/copy.so"
expect_refusal "copies" --rounds 6 --copies 0 "$module" "$work/copy.so"
expect_refusal "floor" --rounds 6 --floor -1 "$module" "$work/copy.so"
# A floor above the difference hides it: with the slowed module as A, the
# 1 us it loses is about 94% of A's median, below a floor of 100%.
"$driver" --rounds 12 --floor 100 --workloads acquire_release "$slowed" "$module" |
  grep -E "^acquire_release .*no difference shown$" > /dev/null || fail "a floor of 100% did not hide a difference of 94%"
expect_refusal "names no workload" --rounds 6 --workloads , "$module" "$work/copy.so"
echo "ab-driver-test: ok"
