#!/usr/bin/env bash
# One scenario of the evidence harness on a GPU machine (docs/evidence.md), as one device command:
# builds what it needs (the CLI and evidence_job, reusing $GPUGUARD_GPU_BUILD when the machine
# still has it), runs the scenario's trials, plain and guarded, and writes results.md and the
# plots. Logs and results go to $OUT (default ./evidence-out).
# usage: scripts/evidence-runner.sh kill|abnormal|contention [harness options...]
set -uo pipefail
scenario=${1:?usage: scripts/evidence-runner.sh kill|abnormal|contention [harness options...]}
shift
case "$scenario" in kill|abnormal|contention) ;; *) echo "evidence-runner: unknown scenario: $scenario" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-"$root/evidence-out"}
build=${GPUGUARD_GPU_BUILD:-/tmp/gpuguard-gpu-build}
mkdir -p "$out"
. "$root/scripts/env.sh"
if [ ! -x "$build/benchmarks/evidence_job" ] || [ ! -x "$build/src/cli/gpuguard" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGPUGUARD_WITH_TORCH=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target evidence_job gpuguard_cli >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
fi
python3 "$root/benchmarks/evidence/harness.py" --scenario "$scenario" --job "$build/benchmarks/evidence_job" \
  --gpuguard "$build/src/cli/gpuguard" --out "$out/$scenario" "$@" 2>&1 | tee "$out/$scenario.log"
status=${PIPESTATUS[0]}
python3 "$root/benchmarks/evidence/report.py" "$out/$scenario" --out "$out/results-$scenario.md" --plots "$out/results"
# The device tool brings back few files: the per-trial stderr logs and the build logs travel as one
# archive; trials.jsonl, run-<scenario>.json, the log, results and the two plots come back as they are.
(cd "$out" && tar -czf "$scenario-logs.tar.gz" "$scenario"/*.stderr configure.log build.log 2>/dev/null;
 rm -f "$scenario"/*.stderr configure.log build.log)
exit "$status"
