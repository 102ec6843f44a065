#!/usr/bin/env bash
# Line and branch coverage of lib/ from the whole default test suite, in its
# own build directory (b_coverage, unoptimized). Writes BUILD/coverage.json
# (gcovr's summary, which the release gate reads) and BUILD/coverage.txt (per
# file), and prints the totals. Extra arguments go to `meson test`.
#   bash tools/coverage.sh            -> build-cov (or $COVERAGE_BUILD_DIR)
# Exit status: meson test's, or 2 when gcovr is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${COVERAGE_BUILD_DIR:-build-cov}
if ! command -v gcovr > /dev/null; then
  echo "coverage: gcovr is not installed (Debian: apt-get install gcovr)" >&2
  exit 2
fi
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
options=(-Db_coverage=true -Dbenchmarks=disabled -Dbuildtype=debug)
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "${options[@]}" > /dev/null
else
  meson setup "$build" "${options[@]}" > /dev/null
fi
ninja -C "$build"
find "$build" -name '*.gcda' -delete
rc=0
meson test -C "$build" --print-errorlogs --timeout-multiplier 3 "$@" || rc=$?
# Throw branches and the branches the compiler adds for exception cleanup
# are not decisions of the code; they are left out of the branch figure.
gcovr --root . --filter 'lib/' --exclude-unreachable-branches --exclude-throw-branches \
  --json-summary "$build/coverage.json" --txt "$build/coverage.txt" --print-summary "$build"
exit $rc
