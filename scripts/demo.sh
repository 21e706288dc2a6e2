#!/usr/bin/env bash
# Builds and runs the gpuguard demo: a training-like loop with operation scopes and a planted
# leak, then renders its event log as one HTML page. With a GPU it runs on the GPU; without one it
# says so and runs what it can on host memory. Installs only what the demo needs (scripts/deps.sh
# demo) and builds gpuguard without tests, benchmarks or Torch: the library, the `gpuguard` command,
# its interposer and the examples, the demo among them. That is everything `cmake --install` puts
# in place, so the same tree installs right after: cmake --install BUILD_DIR --prefix PREFIX.
# usage: scripts/demo.sh [BUILD_DIR] [CMAKE_ARGS...]   (default: build)
#   CMAKE_ARGS go to CMake after the script's own, so they win, e.g.
#   scripts/demo.sh build -DCMAKE_CUDA_ARCHITECTURES=80
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
if [ $# -gt 0 ] && [[ $1 != -* ]]; then build=$1; shift; fi
"$root/scripts/deps.sh" demo
. "$root/scripts/env.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUGUARD_BUILD_TESTS=OFF -DGPUGUARD_BUILD_BENCHMARKS=OFF -DGPUGUARD_WITH_TORCH=OFF "$@" >/dev/null
cmake --build "$build"
echo
log="$build/demo-events.jsonl"
trace="$build/demo-trace.json"
html="$build/demo-report.html"
rm -f "$log"
# Stacks on, so the leak report names the line that leaked; GPUGUARD_OPTIONS given by the caller
# comes last and wins.
status=0
GPUGUARD_OPTIONS="stacks=all:jsonl_log=$log:trace_file=$trace${GPUGUARD_OPTIONS:+:$GPUGUARD_OPTIONS}" \
  "$build/examples/gpuguard_demo" || status=$?
echo
if [ -s "$log" ]; then
  "$build/src/cli/gpuguard" report "$log" -o "$html"
  echo "[demo] open the report in a browser: $html"
  echo "[demo] the same run as a trace (Perfetto UI or chrome://tracing): $trace"
fi
exit "$status"
