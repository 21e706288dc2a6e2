#!/usr/bin/env bash
# Builds and runs the gpuguard demo. With a GPU it runs on the GPU; without one it says so and
# runs what it can on host memory.
# usage: scripts/demo.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
"$root/scripts/deps.sh"
. "$root/scripts/env.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target gpuguard_demo
echo
# Stacks on, so the leak report at the end names the line that leaked.
GPUGUARD_OPTIONS=${GPUGUARD_OPTIONS:-stacks=all} "$build/examples/gpuguard_demo"
