#!/usr/bin/env bash
# The evidence harness on a GPU machine (docs/evidence.md), in calls of bounded length (--budget-s):
# builds what it needs (the CLI and evidence_job, reusing $GPUGUARD_GPU_BUILD when the
# machine still has it), then runs the scenarios' trials, all arms, resuming where the last command
# stopped, until --budget-s seconds from its start would pass in the next trial. Run the same
# command again until it prints "evidence: complete". Every call writes the report of what is
# recorded so far (results.md and the plots) and packs everything into $OUT/evidence.tgz.
#
# usage: scripts/evidence-runner.sh [--budget-s S] [--from ARCHIVE] [kill] [abnormal] [contention]
#                                    [-- harness options...]
#   --budget-s S    stop starting trials S seconds after this script started (default 540)
#   --from ARCHIVE  an evidence.tgz of an earlier call, unpacked first when no trial is recorded here
#                   (to go on where an earlier call stopped, on a fresh machine)
#   scenarios       default: all three, in that order; "complete" counts the full size (20 trials
#                   per arm of kill and abnormal, 5 rounds per arm of contention)
# State (trials.jsonl per scenario) is kept in $GPUGUARD_EVIDENCE_DIR (default /tmp/gpuguard-evidence),
# which later calls on the same machine find; the results go to $OUT (default ./evidence-out).
set -uo pipefail
start=$SECONDS
budget=540
from=
scenarios=()
harness_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-s) budget=${2:?--budget-s needs a number of seconds}; shift 2 ;;
    --from) from=${2:?--from needs an archive}; shift 2 ;;
    kill|abnormal|contention) scenarios+=("$1"); shift ;;
    --) shift; harness_args=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "evidence-runner: unknown argument: $1 (expected --budget-s S, kill, abnormal, contention or -- harness options)" >&2
       exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "evidence-runner: --budget-s $budget: expected whole seconds" >&2; exit 2 ;; esac
[ ${#scenarios[@]} -gt 0 ] || scenarios=(kill abnormal contention)
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-"$root/evidence-out"}
state=${GPUGUARD_EVIDENCE_DIR:-/tmp/gpuguard-evidence}
build=${GPUGUARD_GPU_BUILD:-/tmp/gpuguard-gpu-build}
mkdir -p "$out" "$state"
if [ -n "$from" ] && ! ls "$state"/*/trials.jsonl >/dev/null 2>&1; then
  tar -xzf "$from" -C "$state" || { echo "evidence-runner: --from $from: not a readable archive" >&2; exit 2; }
  echo "evidence-runner: went on from $from"
fi
. "$root/scripts/env.sh"
if [ ! -x "$build/benchmarks/evidence_job" ] || [ ! -x "$build/src/cli/gpuguard" ]; then
  echo "evidence-runner: building the CLI and evidence_job in $build"
  prefix=()  # the CLI's header-only libraries, where scripts/gpu-deps.sh carried them
  if [ -d "$root/.gpu-deps/usr" ]; then prefix=("-DCMAKE_PREFIX_PATH=$root/.gpu-deps/usr"); fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGPUGUARD_WITH_TORCH=ON "${prefix[@]}" >"$state/configure.log" 2>&1 || { tail -30 "$state/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target evidence_job gpuguard_cli >"$state/build.log" 2>&1 ||
    { tail -30 "$state/build.log"; exit 1; }
  echo "evidence-runner: built in $((SECONDS - start)) s"
fi
status=0
for scenario in "${scenarios[@]}"; do
  left=$((budget - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then echo "evidence-runner: budget spent before $scenario"; break; fi
  python3 "$root/benchmarks/evidence/harness.py" --scenario "$scenario" --job "$build/benchmarks/evidence_job" \
    --gpuguard "$build/src/cli/gpuguard" --out "$state/$scenario" --resume --deadline-s "$left" \
    "${harness_args[@]}" 2>&1 | tee -a "$state/$scenario.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
# What is recorded so far, and what is left.
dirs=()
complete=1
for scenario in kill abnormal contention; do
  [ -s "$state/$scenario/trials.jsonl" ] && dirs+=("$state/$scenario")
done
python3 - "$state" "${scenarios[@]}" <<'EOF' || complete=0
import json, os, sys
state, wanted = sys.argv[1], sys.argv[2:]
need = {"kill": (20, 3), "abnormal": (20, 3), "contention": (5, 2)}  # default trials/rounds per arm, arms
short = []
for s in wanted:
    path = os.path.join(state, s, "trials.jsonl")
    n = sum(1 for _ in open(path)) if os.path.exists(path) else 0
    print(f"evidence: {s}: {n} of {need[s][0] * need[s][1]} trials recorded")
    if n < need[s][0] * need[s][1]:
        short.append(s)
sys.exit(1 if short else 0)
EOF
if [ ${#dirs[@]} -gt 0 ]; then
  python3 "$root/benchmarks/evidence/report.py" "${dirs[@]}" --out "$state/results.md" --plots "$state/results" || status=1
  cp "$state/results.md" "$out/results.md"
fi
# Everything travels as one archive, which --from takes on a machine without the state.
tar -czf "$out/evidence.tgz" -C "$state" . 2>/dev/null
if [ "$complete" -eq 1 ]; then echo "evidence: complete"; else echo "evidence: not complete: run the same command again"; fi
echo "evidence-runner: $((SECONDS - start)) s"
exit "$status"
