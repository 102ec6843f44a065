#!/usr/bin/env bash
# Fuzzes the scenario loader and the replay engine with libFuzzer under
# ASan+UBSan, in their own build directory (build-fuzz, clang).
#   bash tools/fuzz.sh                 the short fixed-seed runs (meson test --suite fuzz)
#   bash tools/fuzz.sh 3600            a long campaign: each target for 3600 s
# Installs clang-14 and libfuzzer-14-dev when missing (as root). Findings are
# written as crash-*/timeout-*/oom-* files in build-fuzz/; turn each into a
# regression scenario or loader test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-}
build=${FUZZ_BUILD_DIR:-build-fuzz}
missing=()
for package in clang-14 libfuzzer-14-dev; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "fuzz: install ${missing[*]} (needs root)" >&2; exit 2; }
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/tools/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# clang 14 in C++20 mode needs c10::IValue complete before libtorch 1.13's
# ATen/ops headers instantiate vectors of it; GCC builds need no such help.
options=(-Dfuzz=enabled -Dtests=disabled -Dbenchmarks=disabled -Db_sanitize=address,undefined -Db_lundef=false
         -Doptimization=1 "-Dcpp_args=-include ATen/core/ivalue.h")
if [ ! -f "$build/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 meson setup "$build" "${options[@]}" > /dev/null
fi
ninja -C "$build" harness/fuzz/fuzz-loader harness/fuzz/fuzz-replay
if [ -z "$seconds" ]; then
  exec meson test -C "$build" --suite fuzz --print-errorlogs --no-rebuild
fi
status=0
for target in loader replay; do
  corpus="$build/harness/fuzz/$target-corpus"
  mkdir -p "$corpus"
  echo "== fuzz-$target for $seconds s =="
  (cd "$build" && "harness/fuzz/fuzz-$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
     -rss_limit_mb=2048 -dict="../harness/fuzz/scenario.dict" -print_final_stats=1 "harness/fuzz/$target-corpus" \
     ../scenarios/{budgets,faults,lifetimes,plans,primitives,workloads}) || status=1
done
exit $status
