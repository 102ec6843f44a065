#!/usr/bin/env bash
# Instructions per manager operation under callgrind (bench/instruction_counts.cpp):
# exact and repeatable for one binary, so before/after comparisons of the
# manager's bookkeeping do not depend on how busy the machine is.
# Usage: bash tools/instruction-counts.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
driver="$build/bench/residency-instruction-counts"
if [ ! -x "$driver" ]; then
  echo "instruction-counts: $driver is missing (needs -Dbenchmarks and valgrind's callgrind.h)" >&2
  exit 2
fi
command -v valgrind > /dev/null || { echo "instruction-counts: valgrind is not installed" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The system clock, not the counter clock: the counter clock re-anchors once a
# second of real time, which under valgrind falls at a varying operation and
# moves the counts by tens of instructions from run to run. (Valgrind does not
# count the system clock's kernel time either, so neither clock's cost shows.)
FHELIUM_RESIDENCY_CLOCK=system \
  valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out/counts.%p" "$driver" > "$out/driver.log" 2> "$out/valgrind.log" || {
    cat "$out/valgrind.log" >&2
    # Valgrind 3.19 cannot decode rdtscp on some CPUs; libhwy (a dependency
    # of libtorch's image libraries) executes it while the driver loads.
    if grep -q "Unrecognised instruction" "$out/valgrind.log"; then
      where=$(grep -m1 -A1 "Unrecognised instruction" "$out/valgrind.log" | sed -n 's/.*at 0x[0-9A-F]*: //p')
      echo "instruction-counts: valgrind could not decode an instruction the driver runs (in ${where:-a library it loads})," \
        "so nothing was counted; a newer valgrind, or a machine where that library does not execute it, can count" >&2
    fi
    exit 1
  }
# Each dump names its workload and operation count in its trigger line.
for dump in $(cd "$out" && ls counts.* | sort -t. -k3 -n); do
  dump="$out/$dump"
  label=$(sed -n 's/^desc: Trigger: Client Request: //p' "$dump")
  [ -n "$label" ] || continue
  total=$(sed -n 's/^totals: //p;s/^summary: //p' "$dump" | head -n 1)
  echo "$label $total"
done | awk '
  { name[NR] = $1; per[$1] = $3 / $2; order[NR] = $1 }
  END {
    printf "%-28s %14s\n", "operation", "instructions"
    for (i = 1; i <= NR; ++i) printf "%-28s %14.0f\n", order[i], per[order[i]]
    printf "%-28s %14.0f\n", "ensure above the load", per["ensure_from_source"] - per["source_load"]
    printf "%-28s %14.0f\n", "execute above the loads", per["execute_actions"] - 0.5 * per["source_load"]
  }'
