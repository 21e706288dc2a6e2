#!/usr/bin/env bash
# Builds gpuguard and runs its test suite: unit tests, GPU tests (which skip with a reason where
# there is no GPU), header, compile-fail, consumer and process tests. Installs what the tests need
# (scripts/deps.sh test). Lint is its own step: scripts/lint.sh.
# usage: scripts/test.sh [BUILD_DIR] [CMAKE_ARGS...]   (default: build)
#   CMAKE_ARGS go to CMake after the script's own, so they win, e.g.
#   scripts/test.sh build -DCMAKE_CUDA_ARCHITECTURES=80
# The tests' Python modules (torch among them) go into the virtual environment BUILD_DIR/venv, or
# GPUGUARD_VENV when it is set (a venv that already has them: nothing is installed again); CMake is
# given its python, for the tests and to find torch's LibTorch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
if [ $# -gt 0 ] && [[ $1 != -* ]]; then build=$1; shift; fi
build=$(realpath -m "$build")
venv=$(realpath -m "${GPUGUARD_VENV:-$build/venv}")
"$root/scripts/deps.sh" test "$venv"
. "$root/scripts/env.sh"
jobs=$(nproc)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUGUARD_BUILD_TESTS=ON -DGPUGUARD_BUILD_BENCHMARKS=ON -DGPUGUARD_WITH_TORCH=AUTO \
  -DPython3_EXECUTABLE="$venv/bin/python" "$@"
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
