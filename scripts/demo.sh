#!/usr/bin/env bash
# Builds and runs the gpuguard demo: a training-like loop with operation scopes and a planted
# leak, then renders its event log as one HTML page. With a GPU it runs on the GPU; without one it
# says so and runs what it can on host memory. Installs only what the demo needs (scripts/deps.sh
# demo) and builds only the demo and the `gpuguard` command: no tests, benchmarks or Torch.
# usage: scripts/demo.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
"$root/scripts/deps.sh" demo
. "$root/scripts/env.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUGUARD_BUILD_TESTS=OFF -DGPUGUARD_BUILD_BENCHMARKS=OFF -DGPUGUARD_WITH_TORCH=OFF >/dev/null
cmake --build "$build" --target gpuguard_demo gpuguard_cli
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
