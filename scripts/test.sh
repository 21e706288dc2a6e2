#!/usr/bin/env bash
# Builds gpuguard and runs its whole test suite: unit tests, GPU tests (which skip with a reason
# where there is no GPU), header, compile-fail and consumer checks, and clang-tidy.
# usage: scripts/test.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
"$root/scripts/deps.sh"
. "$root/scripts/env.sh"
jobs=$(nproc)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
