#!/usr/bin/env bash
# Copies the header-only libraries the CLI builds with (nlohmann-json and CLI11, Debian's packages
# on this machine) into .gpu-deps/, for a GPU machine that cannot install packages: copy .gpu-deps
# into the tree there, and scripts/gpu-runner.sh finds them (CMAKE_PREFIX_PATH) when
# the machine has none of its own. Headers and CMake package files only: 1.5 MB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/deps.sh" demo >/dev/null
dest="$root/.gpu-deps/usr"
rm -rf "$root/.gpu-deps"
for package in nlohmann-json3-dev libcli11-dev; do
  dpkg -L "$package" | grep -E '^/usr/(include|share/cmake)/' | while read -r path; do
    if [ -f "$path" ]; then
      mkdir -p "$dest$(dirname "${path#/usr}")"
      cp "$path" "$dest${path#/usr}"
    fi
  done
done
echo "gpu-deps: $(du -sh "$root/.gpu-deps" | cut -f1) in .gpu-deps/ (carry it to the GPU machine)"
