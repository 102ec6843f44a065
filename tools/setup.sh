#!/usr/bin/env bash
# Installs the Debian packages this project needs (only those missing), then
# configures and builds it with meson. Usage: bash tools/setup.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ meson ninja-build pkg-config ccache libtorch-dev libyaml-cpp-dev libgtest-dev
          librapidcheck-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev python3-yaml python3-jsonschema
          chromium gcovr)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: installing packages needs root; run as root or install them yourself" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# Let ccache share results between checkouts in different folders.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true

build_dir=${1:-build}
if [ -f "$build_dir/build.ninja" ]; then
  meson setup --reconfigure "$build_dir"
else
  meson setup "$build_dir"
fi
ninja -C "$build_dir"
