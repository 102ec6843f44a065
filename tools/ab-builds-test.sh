#!/usr/bin/env bash
# tools/ab-builds.sh's refusals of bad input, each with status 2 and a
# message naming what was wrong; nothing is checked out or built for them.
# (A comparison itself builds a library per revision, minutes: run by hand.)
# Usage: ab-builds-test.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
script="$(realpath "$(dirname "$0")")/ab-builds.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "ab-builds-test: $*" >&2; exit 1; }

expect_refusal() {
  local pattern=$1 status
  shift
  status=0
  bash "$script" "$@" > "$work/out.txt" 2> "$work/err.txt" || status=$?
  [ "$status" = 2 ] || { cat "$work/err.txt"; fail "'$*' exited with $status, not 2"; }
  grep -qF -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "refusal of '$*' does not say '$pattern'"; }
}
expect_refusal "unknown option '--bogus'" --bogus HEAD
expect_refusal "give one or two revisions" --build "$build"
expect_refusal "give one or two revisions" --build "$build" HEAD HEAD HEAD
expect_refusal "--rounds needs a value" HEAD --rounds
expect_refusal "$work/absent is not a configured build directory" --build "$work/absent" HEAD
# A relative --build is the caller's, not the repository's.
(cd "$work" && expect_refusal "$work/elsewhere is not a configured build directory" --build elsewhere HEAD)
expect_refusal "'no-such-revision-here' is not a revision of this repository" --build "$build" no-such-revision-here
# A configured build without the benchmarks has no module target to build
# a revision's module with: a build file of one unrelated target stands in.
mkdir "$work/no-benchmarks"
printf 'rule stamp\n  command = touch $out\nbuild stamp: stamp\n' > "$work/no-benchmarks/build.ninja"
expect_refusal "$work/no-benchmarks has no bench/residency-ab-rounds.so target" --build "$work/no-benchmarks" HEAD
echo "ab-builds-test: ok"
