#!/usr/bin/env bash
# Instructions per manager operation under callgrind (bench/instruction_counts.cpp):
# exact and repeatable for one binary, so before/after comparisons of the
# manager's bookkeeping do not depend on how busy the machine is.
# Usage: bash tools/instruction-counts.sh [--cache] [BUILD_DIR]
# --cache adds callgrind's cache simulation (32 KiB 8-way L1s, 4 MiB 16-way
# last level, 64-byte lines): instruction-fetch (I1) and data-read (D1) misses
# per operation beside the instructions. On the 4 KiB workloads the clone's
# own code path fills most of the L1 instruction cache, so every line of
# manager code run between two loads also evicts some of the load's: the I1
# column shows that cost, which the instruction count alone does not.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=0
if [ "${1:-}" = "--cache" ]; then
  cache=1
  shift
fi
case "${1:-}" in
  -*) echo "instruction-counts: unknown option '$1' (usage: bash tools/instruction-counts.sh [--cache] [BUILD_DIR])" >&2; exit 2 ;;
esac
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
simulate=()
[ "$cache" = 1 ] && simulate=(--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=4194304,16,64)
# Two runs of the same deterministic driver: the first counts the
# operations, the second (--baselines) the bare loads and releases they are
# compared with, interleaved with the same operations, so that both sides of
# each difference meet the same heap.
for pass in operations baselines; do
  args=()
  [ "$pass" = baselines ] && args=(--baselines)
  FHELIUM_RESIDENCY_CLOCK=system \
    valgrind --tool=callgrind "${simulate[@]}" --collect-atstart=no --callgrind-out-file="$out/counts.$pass.%p" \
      "$driver" "${args[@]}" > "$out/driver.log" 2> "$out/valgrind.log" || {
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
done
# Each dump names its workload and operation count in its trigger line; the
# baselines' pass first, then the operations', each in the order it dumped.
for dump in $(cd "$out" && ls counts.* | sort -t. -k2,2 -k4,4n); do
  dump="$out/$dump"
  label=$(sed -n 's/^desc: Trigger: Client Request: //p' "$dump")
  [ -n "$label" ] || continue
  total=$(sed -n 's/^totals: //p;s/^summary: //p' "$dump" | head -n 1)
  events=$(sed -n 's/^events: //p' "$dump" | head -n 1 | tr ' ' ',')
  echo "$label $events $total"
done | awk -v cache="$cache" '
  # Fields: label, operations, the dump'"'"'s event names (comma-separated), then
  # their totals in that order.
  {
    order[NR] = $1
    split($3, names, ",")
    for (k in names) total[names[k]] = $(3 + k)
    per[$1] = total["Ir"] / $2
    if (cache) { i1[$1] = total["I1mr"] / $2; d1[$1] = total["D1mr"] / $2 }
  }
  function row(label, ir, im, dm) {
    if (cache) printf "%-28s %14.0f %10.1f %10.1f\n", label, ir, im, dm
    else printf "%-28s %14.0f\n", label, ir
  }
  END {
    if (cache) printf "%-28s %14s %10s %10s\n", "operation", "instructions", "I1 misses", "D1 misses"
    else printf "%-28s %14s\n", "operation", "instructions"
    for (i = 1; i <= NR; ++i) row(order[i], per[order[i]], i1[order[i]], d1[order[i]])
    e = "ensure_from_source"; l = "source_load"; x = "execute_actions"
    row("ensure above the load", per[e] - per[l], i1[e] - i1[l], d1[e] - d1[l])
    d = "drop"; r = "tensor_release"
    row("drop above the release", per[d] - per[r], i1[d] - i1[r], d1[d] - d1[r])
    row("execute above the loads", per[x] - 0.5 * per[l], i1[x] - 0.5 * i1[l], d1[x] - 0.5 * d1[l])
    # Its drops release a value each: the bookkeeping alone, without them.
    row("  and above the releases", per[x] - 0.5 * (per[l] + per[r]), i1[x] - 0.5 * (i1[l] + i1[r]),
        d1[x] - 0.5 * (d1[l] + d1[r]))
    # One push into a full trace ring (the end-to-end workloads run untraced).
    t = "noop_ensure_traced"; u = "noop_ensure"
    row("trace push, ring full", per[t] - per[u], i1[t] - i1[u], d1[t] - d1[u])
  }'
