#!/usr/bin/env bash
# Compares the library of two git revisions in one process (residency-ab,
# bench/ab_driver.cpp): each revision's library is built and linked with this
# tree's bench/ab_rounds.cpp into a module, so both run the same workloads,
# and the driver runs the two modules in alternating rounds.
#
# Usage: bash tools/ab-builds.sh [--build DIR] [--rounds N] [--workloads LIST] [--copies K]
#                                [--floor PERCENT] [--malloc-defaults] [--json FILE] REV_A [REV_B]
#   REV_A, REV_B  git revisions; "." (REV_B's default) is the working tree as
#                 built in DIR
#   --build DIR   this tree's build directory (default: the repository's build); it needs the
#                 benchmarks (the residency-ab targets)
#   --rounds, --workloads, --copies, --floor, --malloc-defaults, --json:
#                 passed to residency-ab
# A revision is checked out into a temporary worktree and its library built
# there with DIR's build type; the module is compiled with DIR's own compile
# and link commands for bench/residency-ab-rounds.so, pointed at that
# revision's headers and library. A revision whose public headers this tree's
# ab_rounds.cpp does not compile against cannot be compared this way.
set -euo pipefail
caller=$(pwd)
# A relative path given on the command line is the caller's.
from_caller() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
cd "$(dirname "$0")/.."
usage="usage: bash tools/ab-builds.sh [--build DIR] [--rounds N] [--workloads LIST] [--copies K] [--floor PERCENT] [--malloc-defaults] [--json FILE] REV_A [REV_B]"
build=$(pwd)/build
driver_args=()
revisions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) [ $# -ge 2 ] || { echo "ab-builds: --build needs a directory ($usage)" >&2; exit 2; }; build=$(from_caller "$2"); shift 2 ;;
    --json) [ $# -ge 2 ] || { echo "ab-builds: --json needs a file ($usage)" >&2; exit 2; }; driver_args+=(--json "$(from_caller "$2")"); shift 2 ;;
    --malloc-defaults) driver_args+=("$1"); shift ;;
    --rounds | --workloads | --copies | --floor)
      [ $# -ge 2 ] || { echo "ab-builds: $1 needs a value ($usage)" >&2; exit 2; }
      driver_args+=("$1" "$2")
      shift 2
      ;;
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "ab-builds: unknown option '$1' ($usage)" >&2; exit 2 ;;
    *) revisions+=("$1"); shift ;;
  esac
done
case ${#revisions[@]} in
  1) revisions+=(".") ;;
  2) ;;
  *) echo "ab-builds: give one or two revisions ($usage)" >&2; exit 2 ;;
esac
[ -f "$build/build.ninja" ] || { echo "ab-builds: $build is not a configured build directory" >&2; exit 2; }
module_target=bench/residency-ab-rounds.so
# The whole listing is read (no grep -q): under pipefail, a grep that quits at
# the first match can leave ninja to die of SIGPIPE and fail the pipeline.
if ! ninja -C "$build" -t targets all 2> /dev/null | grep "^$module_target:" > /dev/null; then
  echo "ab-builds: $build has no $module_target target (configure it with -Dbenchmarks=enabled and google-benchmark installed)" >&2
  exit 2
fi
for revision in "${revisions[@]}"; do
  [ "$revision" = . ] || git rev-parse --verify --quiet "$revision^{commit}" > /dev/null ||
    { echo "ab-builds: '$revision' is not a revision of this repository" >&2; exit 2; }
done

work=$(mktemp -d)
worktrees=()
cleanup() {
  for tree in "${worktrees[@]}"; do git worktree remove --force "$tree" > /dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

ninja -C "$build" bench/residency-ab "$module_target" > "$work/ninja.log" || { cat "$work/ninja.log" >&2; exit 1; }
# This build's own commands for the module: the compile of ab_rounds.cpp and
# the link, run from the build directory.
commands=$(ninja -C "$build" -t commands "$module_target")
compile=$(grep -F -- "-c ../bench/ab_rounds.cpp" <<< "$commands" | tail -n 1)
link=$(grep -F -- "-o $module_target " <<< "$commands" | tail -n 1)
[ -n "$compile" ] && [ -n "$link" ] || { echo "ab-builds: cannot find the module's build commands in $build" >&2; exit 1; }
buildtype=$(meson introspect --buildoptions "$build" | python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))')

# The module of `revision` at `out`.
module_of() {
  local revision=$1 out=$2
  if [ "$revision" = . ]; then
    cp "$build/$module_target" "$out"
    return
  fi
  local tree="$work/tree-$(git rev-parse --short "$revision")-$RANDOM"
  git worktree add --detach --quiet "$tree" "$revision"
  worktrees+=("$tree")
  echo "ab-builds: building the library of $revision ($buildtype) in $tree/build" >&2
  meson setup --buildtype="$buildtype" "$tree/build" "$tree" > "$work/setup.log" 2>&1 ||
    { cat "$work/setup.log" >&2; exit 1; }
  ninja -C "$tree/build" lib/libfhelium_residency.a > "$work/lib.log" 2>&1 || { tail -n 30 "$work/lib.log" >&2; exit 1; }
  local object="$work/ab_rounds.$RANDOM.o"
  # The same commands, with the revision's headers and library; the
  # dependency-file options dropped.
  local compile_here link_here
  compile_here=$(sed -e "s| -I../lib/include | -I$tree/lib/include |" -e 's| -MD -MQ [^ ]* -MF [^ ]*||' \
    -e "s| -o [^ ]*ab_rounds.cpp.o | -o $object |" <<< "$compile")
  link_here=$(sed -e "s| -o $module_target [^ ]*ab_rounds.cpp.o | -o $out $object |" \
    -e "s| lib/libfhelium_residency.a | $tree/build/lib/libfhelium_residency.a |" <<< "$link")
  (cd "$build" && eval "$compile_here" && eval "$link_here") > "$work/module.log" 2>&1 || {
    cat "$work/module.log" >&2
    echo "ab-builds: this tree's bench/ab_rounds.cpp does not build against $revision's library" >&2
    exit 1
  }
}

module_of "${revisions[0]}" "$work/A.so"
module_of "${revisions[1]}" "$work/B.so"
echo "ab-builds: A = ${revisions[0]}, B = ${revisions[1]}" >&2
"$build/bench/residency-ab" "${driver_args[@]}" "$work/A.so" "$work/B.so"
