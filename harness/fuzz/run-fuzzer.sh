#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed number of inputs with a fixed seed.
# Usage: run-fuzzer.sh FUZZER WORK_CORPUS DICT RUNS SEED_DIR...
# New inputs go to WORK_CORPUS (in the build directory), never to the seeds.
set -euo pipefail
fuzzer=$1 work=$2 dict=$3 runs=$4
shift 4
mkdir -p "$work"
exec "$fuzzer" -seed=1 -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -dict="$dict" \
  -print_final_stats=1 "$work" "$@"
