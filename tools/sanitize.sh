#!/usr/bin/env bash
# Builds and tests the project under a sanitizer, in its own build directory.
#   bash tools/sanitize.sh address   ASan + UBSan (leak detection on), every suite  -> build-asan
#   bash tools/sanitize.sh thread    TSan: concurrency, lifetime and parts unit tests and the property suites -> build-tsan
# Extra arguments go to `meson test`. Exit status is meson test's. The gate
# reads BUILD/meson-logs/testlog.json of both directories.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-address}
shift || true
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
case "$kind" in
  address)
    build=${SANITIZE_BUILD_DIR:-build-asan}
    # -O0: instrumented -O2 builds take three times as long to compile here.
    options=(-Db_sanitize=address,undefined -Db_lundef=false -Dbenchmarks=disabled -Dbuildtype=debug)
    # libtorch is not instrumented: its one-time allocations at exit are not ours.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export LSAN_OPTIONS="suppressions=$PWD/tools/sanitizers/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tools/sanitizers/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
    suites=()
    ;;
  thread)
    build=${SANITIZE_BUILD_DIR:-build-tsan}
    options=(-Db_sanitize=thread -Db_lundef=false -Dbenchmarks=disabled -Dbuildtype=debug)
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/sanitizers/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
    suites=(property-manager_model property-records property-concurrency property-linearizability concurrency
            lifetimes crash_safety parts)
    ;;
  *)
    echo "usage: bash tools/sanitize.sh address|thread [meson test arguments]" >&2
    exit 2
    ;;
esac
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "${options[@]}" > /dev/null
else
  meson setup "$build" "${options[@]}" > /dev/null
fi
ninja -C "$build"
meson test -C "$build" --print-errorlogs --timeout-multiplier 4 "${suites[@]}" "$@"
