#!/usr/bin/env bash
# Packaging check: installs BUILD_DIR into a temporary staging root, then
# builds and runs examples/consumer against the installed files only, with
# pkg-config (a plain c++ one-liner) and as a meson project, and runs the
# installed tools from another directory. Usage: bash tools/consumer-test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
source_root=$PWD
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"

meson install -C "$build" --destdir "$root" --no-rebuild --quiet
echo "consumer-test: installed files:"
(cd "$root" && find . -type f -o -type l | sed 's|^\./|  /|' | LC_ALL=C sort)

pc=$(find "$root" -name fhelium-residency.pc | head -n 1)
[ -n "$pc" ] || { echo "consumer-test: fhelium-residency.pc was not installed" >&2; exit 1; }
[ -n "$(find "$root" -name fhelium-residency-harness.pc)" ] || { echo "consumer-test: no harness .pc" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root"
libdir=$(dirname "$(dirname "$pc")")
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # for shared builds
bindir=$(dirname "$(find "$root" -name residency-gate -type f | head -n 1)")

echo "consumer-test: c++ main.cpp \$(pkg-config --cflags --libs fhelium-residency-harness)"
# shellcheck disable=SC2046
c++ "$source_root/examples/consumer/main.cpp" $(pkg-config --cflags --libs fhelium-residency-harness) \
  -o "$stage/one-liner"
"$stage/one-liner"

echo "consumer-test: meson project examples/consumer"
meson setup "$stage/consumer-build" "$source_root/examples/consumer" > "$stage/consumer-setup.log" ||
  { cat "$stage/consumer-setup.log"; exit 1; }
ninja -C "$stage/consumer-build" > /dev/null
"$stage/consumer-build/consumer"

echo "consumer-test: as a meson subproject (configured, not built)"
parent="$stage/parent"
mkdir -p "$parent/subprojects"
ln -s "$source_root" "$parent/subprojects/fhelium-residency"
cp "$source_root/examples/consumer/main.cpp" "$parent/"
cat > "$parent/meson.build" <<'MESON'
project('parent', 'cpp', default_options : ['cpp_std=c++20'])
subproject('fhelium-residency')
executable('parent', 'main.cpp', dependencies : [dependency('fhelium-residency-harness')])
test('parent-test', find_program('true'))
MESON
count_tests() {
  meson introspect "$1" --tests --benchmarks | python3 -c 'import json, sys
data = json.load(sys.stdin)
print(len(data["tests"]) + len(data["benchmarks"]))'
}
meson setup "$parent/default" "$parent" > "$stage/parent.log" || { cat "$stage/parent.log"; exit 1; }
registered=$(count_tests "$parent/default")
[ "$registered" = 1 ] || { echo "consumer-test: a subproject registered $((registered - 1)) of its tests" >&2; exit 1; }
meson setup "$parent/with-tests" "$parent" -Dfhelium-residency:tests=enabled > "$stage/parent.log" ||
  { cat "$stage/parent.log"; exit 1; }
registered=$(count_tests "$parent/with-tests")
[ "$registered" -gt 10 ] || { echo "consumer-test: tests=enabled registered only $registered" >&2; exit 1; }
echo "consumer-test: subproject registers no tests by default, $((registered - 1)) with tests=enabled"

echo "consumer-test: installed tools from another directory"
cd "$stage"
"$bindir/residency-replay" --version
"$bindir/residency-gate" --version
scenarios=$(find "$root" -type d -name scenarios -path '*fhelium-residency*' | head -n 1)
"$bindir/residency-replay" "$scenarios/primitives" | tail -n 1
# With no build directory here, the gate must find the installed thresholds
# and then stop only because there are no results to judge.
set +e
"$bindir/residency-gate" --build-dir "$stage/no-build" > "$stage/gate.out" 2>&1
status=$?
set -e
if [ "$status" -ne 2 ] || grep -q "no thresholds file" "$stage/gate.out" ||
   ! grep -q "cannot read $stage/no-build/meson-logs/testlog.json" "$stage/gate.out"; then
  echo "consumer-test: installed residency-gate did not find its thresholds (status $status):" >&2
  cat "$stage/gate.out" >&2
  exit 1
fi
echo "consumer-test: installed residency-gate found its thresholds"
echo "consumer-test: ok"
