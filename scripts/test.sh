#!/usr/bin/env bash
# Builds gpuguard and runs its test suite: unit tests, GPU tests (which skip with a reason where
# there is no GPU), header, compile-fail, consumer and process tests. Installs what the tests need
# (scripts/deps.sh test). Lint is its own step: scripts/lint.sh.
# usage: scripts/test.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
"$root/scripts/deps.sh" test
. "$root/scripts/env.sh"
jobs=$(nproc)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUGUARD_BUILD_TESTS=ON -DGPUGUARD_BUILD_BENCHMARKS=ON -DGPUGUARD_WITH_TORCH=AUTO
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
