#!/usr/bin/env bash
# One-command check of TorchRuntime on a real GPU: builds the library against
# the PyTorch installation's libtorch (with CUDA), then runs the runtime
# contract on real pinned host and cuda:0, the GPU program (lease protection
# behind a long kernel, allocator statistics, 1 GiB pinned -> cuda:0 against
# the raw copy_), and, when yaml-cpp, nlohmann-json and CLI11 are available,
# the host-only and workload scenarios with --runtime torch.
#
# Needs: an NVIDIA GPU, PyTorch with CUDA importable by $PYTHON (default
# python3), meson, ninja and a C++20 compiler; no Debian packages, no network.
# Usage: bash tools/gpu-check.sh [BUILD_DIR]   (default build-gpu)
# Prints a table last and writes BUILD_DIR/gpu-check.json. Exit 1 on a failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
python=${PYTHON:-python3}
start=$(date +%s)

torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
version=$("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())')
echo "gpu-check: torch $version at $torch_dir (C++11 ABI $abi)"
# CUDA runtime headers: the toolkit when installed, else the wheel's nvidia package.
cudart=""
for candidate in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [ -n "$candidate" ] && [ -f "$candidate/include/cuda_runtime_api.h" ]; then cudart=$candidate; break; fi
done
if [ -z "$cudart" ]; then
  cudart=$("$python" - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for sub in ("cuda_runtime", "cu13", "cu12"):
        path = os.path.join(root, sub)
        if os.path.isfile(os.path.join(path, "include", "cuda_runtime_api.h")):
            print(path)
            raise SystemExit
PY
)
fi
[ -n "$cudart" ] || { echo "gpu-check: no cuda_runtime_api.h (set CUDA_HOME)" >&2; exit 1; }
echo "gpu-check: CUDA headers from $cudart"

options=(-Dtorch_root="$torch_dir" -Dcudart_headers="$cudart" -Dcuda=enabled -Dtests=disabled
         -Dbenchmarks=disabled -Dbuildtype=release -Db_ndebug=false -Dcpp_args="-D_GLIBCXX_USE_CXX11_ABI=$abi")
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "${options[@]}" > "$build.setup.log"
else
  meson setup "$build" "${options[@]}" > "$build.setup.log" || { cat "$build.setup.log"; exit 1; }
fi
ninja -C "$build" harness/runtime-contract harness/residency-gpu-check

status=0
echo
echo "== runtime contract (real TorchRuntime) =="
"$build/harness/runtime-contract" --torch || status=1

if [ -x "$build/tools/residency-replay" ] || ninja -C "$build" tools/residency-replay > /dev/null 2>&1; then
  echo
  echo "== scenarios with --runtime torch =="
  "$build/tools/residency-replay" --runtime torch --json "$build/gpu-scenarios.json" \
    scenarios/primitives/host-only-any-runtime.yaml scenarios/workloads || status=1
else
  echo
  echo "== scenarios skipped: yaml-cpp, nlohmann-json or CLI11 not found (the harness was not built) =="
fi

echo
echo "== GPU program =="
"$build/harness/residency-gpu-check" --json "$build/gpu-check.json" || status=1
echo "gpu-check: $(( $(date +%s) - start )) s; report in $build/gpu-check.json"
exit $status
