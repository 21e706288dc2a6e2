#!/usr/bin/env bash
# The GPU runner: on a machine with a GPU (one H100 or H200), builds what the chosen
# slices need and runs the tests that need a GPU or behave differently with one, with GPU tests
# required (a GPU test that skips fails), then prints a summary with the time of each step. The
# CPU-only suite (lint, sanitizers, consumer builds, the browser) is CI's, not the runner's.
#
# usage: scripts/gpu-runner.sh [SLICE...]      (default: all)
#   core     guards, tracking, operation scopes, exit paths, the leak report and the demo on the GPU
#   torch    the LibTorch adapter and the pytest plugin: their GPU tests, and the CPU tests with every GPU hidden
#   process  gpuguard run (post-mortems included), gpuguard doctor and the interposer (--track, Python sites) on real GPU processes
#   bench    the benchmarks (benchmarks.md and .json) and the LibTorch step-time ratios
#   all      every slice above, after building everything; also checks that every test labelled
#            gpu belongs to a slice
# Logs and results go to $OUT (default ./gpu-runner-out); the build to $GPUGUARD_GPU_BUILD
# (default ./build-gpu, kept between runs, so a second run builds only what changed). The
# benchmarks take GPUGUARD_BENCH_REPETITIONS repetitions (default 3), the --track comparison
# GPUGUARD_BENCH_ROUNDS rounds (default 7; at least 6, what a 95% interval needs) and the LibTorch
# step-time comparison GPUGUARD_TORCH_BENCH_ROUNDS rounds of 300 steps (default 7), which keep the
# bench slice near 7 minutes; GPUGUARD_TRACK_PARTS=1 adds track_overhead.py's --parts --at-once
# arms, GPUGUARD_TORCH_BENCH_INSIDE=1 torch_bench.py's inside-process judgement of observe
# (--inside). The slice ends with summary.md and summary.json: every judged target with its
# interval and verdict, and each baseline's spread against itself.
# docs/testing.md says which slice to run after which change.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-"$root/gpu-runner-out"}
build=${GPUGUARD_GPU_BUILD:-"$root/build-gpu"}
. "$root/scripts/env.sh"
jobs=$(nproc)

usage() { awk 'NR >= 7 && /^#/ { sub(/^# ?/, ""); print; next } NR > 7 { exit }' "$0"; }

# ---- the slices: what each builds and which ctest names it runs ---------------------------------
# (multigpu.* run only on a machine with two GPUs; elsewhere they are left out and the summary says so.)
targets_core="gpuguard_gpu_tests gpuguard_multi_gpu_tests gpuguard_no_gpu_tests gpuguard_leak_child gpuguard_hooks_child gpuguard_demo gpuguard_cli"
tests_core='^(gpu\.|multigpu\.|no_gpu\.|examples\.demo$)'
exclude_core='^(gpu\.(torch\.|run$|run_clean$|run_postmortem$|doctor$|preload$|preload_torch$|python_sites_torch$)|multigpu\.torch\.)'
targets_torch="gpuguard_torch_cpu_tests gpuguard_torch_gpu_tests gpuguard_torch_multi_gpu_tests gpuguard_torch_alloc torch_cnn"
tests_torch='^(gpu\.torch\.|multigpu\.torch\.|torch\.)'
exclude_torch='^$'
targets_process="gpuguard_cli gpuguard_preload gpuguard_leaky_program gpuguard_leaky_program_static gpuguard_leaky_kernel gpuguard_leaky_kernel_shared gpuguard_driver_program gpuguard_defer_program"
tests_process='^gpu\.(run|run_clean|run_postmortem|doctor|preload|preload_torch|python_sites_torch)$'
exclude_process='^$'
targets_bench="gpuguard_tracking_bench gpuguard_ops_bench torch_cnn gpuguard_track_bench gpuguard_cli gpuguard_preload"
test_slices="core torch process"

slices=()
for arg in "$@"; do
  case "$arg" in
    core|torch|process|bench) slices+=("$arg") ;;
    all) slices+=(core torch process bench) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-runner: unknown slice '$arg' (expected core, torch, process, bench or all)" >&2; usage >&2; exit 2 ;;
  esac
done
all=0
if [ "${#slices[@]}" -eq 0 ] || [[ " $* " == *" all "* ]]; then
  all=1
  slices=(core torch process bench)
fi
# Each slice once, in the order given.
mapfile -t slices < <(printf '%s\n' "${slices[@]}" | awk '!seen[$0]++')

mkdir -p "$out/logs"
summary=()
status=0
run_start=$SECONDS

step() {  # step NAME COMMAND...: runs COMMAND, logs to $out/logs/NAME.log, records pass/fail and time
  local name=$1; shift
  local start=$SECONDS
  if "$@" >"$out/logs/$name.log" 2>&1; then
    summary+=("$name: ok ($((SECONDS - start)) s)")
  else
    summary+=("$name: FAILED ($((SECONDS - start)) s, see logs/$name.log)")
    status=1
    tail -40 "$out/logs/$name.log"
  fi
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "slices: ${slices[*]}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version | tail -1
  cmake --version | head -1
  g++ --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The CLI's header-only libraries, carried by scripts/gpu-deps.sh where the machine cannot install them.
prefix=()
if [ -d "$root/.gpu-deps/usr" ]; then prefix=("-DCMAKE_PREFIX_PATH=$root/.gpu-deps/usr"); fi
step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUGUARD_TSAN_TESTS=OFF "${prefix[@]}"
if [ "$all" -eq 1 ]; then
  step build cmake --build "$build" -j "$jobs"
else
  wanted=()
  for s in "${slices[@]}"; do
    var="targets_$s"
    for t in ${!var}; do wanted+=("$t"); done
  done
  mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | sort -u)
  step build cmake --build "$build" -j "$jobs" --target "${wanted[@]}"
fi

export GPUGUARD_REQUIRE_GPU=1
# Tests labelled multigpu need two GPUs: required where there are two, left out (and said so in
# the summary) where there is one.
gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
gpus=$(printf '%s' "$gpu_names" | grep -c .)
# The benchmark sections are named after the GPU that ran them ("H200 machine", "H100 machine"),
# so results of the two kinds are never read as one.
gpu_model=$(printf '%s\n' "$gpu_names" | head -1 | awk '{ sub(/^NVIDIA /, ""); print $1 }')
machine="${gpu_model:-GPU} machine"
if [ "${gpus:-0}" -ge 2 ]; then
  export GPUGUARD_REQUIRE_GPUS=2
  leave_out='^browser\.'
else
  leave_out='^(browser\.|multigpu\.)'
  summary+=("multi-GPU tests (label multigpu): not run, this machine has ${gpus:-0} GPU(s)")
fi

total_passed=0
total_failed=0
total_skipped=0
ctest_slice() {  # ctest_slice SLICE: runs the slice's tests, counts passed, failed and skipped
  local s=$1 include exclude xml
  include="tests_$s"; exclude="exclude_$s"
  xml="$out/logs/ctest-$s.xml"
  step "ctest-$s" ctest --test-dir "$build" -j "$jobs" -R "${!include}" -E "${!exclude}|$leave_out" \
    --no-tests=error --output-on-failure --output-junit "$xml"
  local n f k
  n=$(grep -o '<testcase ' "$xml" 2>/dev/null | wc -l)
  f=$(grep -c '<failure' "$xml" 2>/dev/null || true)
  k=$(grep -c '<skipped' "$xml" 2>/dev/null || true)
  total_passed=$((total_passed + n - ${f:-0} - ${k:-0}))
  total_failed=$((total_failed + ${f:-0}))
  total_skipped=$((total_skipped + ${k:-0}))
  if [ "${k:-0}" -ne 0 ]; then
    summary+=("ctest-$s: $k skipped (a skipped test on a GPU machine is a failure)"); status=1
    grep -B1 -A2 '<skipped' "$xml" | head -20
  fi
}

for s in "${slices[@]}"; do
  slice_start=$SECONDS
  case "$s" in
    core)
      ctest_slice core
      GPUGUARD_OPTIONS="stacks=all:jsonl_log=$out/logs/demo-events.jsonl:trace_file=$out/logs/demo-trace.json" \
        step demo "$build/examples/gpuguard_demo"
      step report "$build/src/cli/gpuguard" report "$out/logs/demo-events.jsonl" -o "$out/demo-report.html"
      ;;
    torch|process)
      ctest_slice "$s"
      ;;
    bench)
      step benchmarks python3 "$root/benchmarks/run_benchmarks.py" --bench "$build/benchmarks/gpuguard_tracking_bench" \
        --bench "$build/benchmarks/gpuguard_ops_bench" --repetitions "${GPUGUARD_BENCH_REPETITIONS:-3}" \
        --append-section "$machine (GPU runner)" --out "$out/benchmarks.md" --json-out "$out/benchmarks.json"
      parts=()
      if [ "${GPUGUARD_TRACK_PARTS:-0}" = 1 ]; then parts=(--parts --at-once); fi
      step track_overhead python3 "$root/benchmarks/track_overhead.py" "$build/src/cli/gpuguard" \
        "$build/src/preload/libgpuguard_preload.so" "$build/benchmarks/gpuguard_track_bench" --rounds "${GPUGUARD_BENCH_ROUNDS:-7}" "${parts[@]}" \
        --out "$out/benchmarks.md" --append-section "$machine: --track" --json-out "$out/track_overhead.json"
      if [ -x "$build/examples/torch_cnn" ]; then
        # Rounds of 300 timed steps: one process's step time differs from the next one's by more
        # than a longer run of steps narrows, so the rounds, not the steps, buy the interval.
        inside=()
        if [ "${GPUGUARD_TORCH_BENCH_INSIDE:-0}" = 1 ]; then inside=(--inside); fi
        step torch_bench python3 "$root/benchmarks/torch_bench.py" "$build/examples/torch_cnn" \
          --rounds "${GPUGUARD_TORCH_BENCH_ROUNDS:-7}" --steps 310 "${inside[@]}" \
          --out "$out/benchmarks.md" --append-section "$machine: LibTorch adapter" --json-out "$out/torch_bench.json"
      else
        summary+=("torch_bench: NOT built (see logs/configure.log: was torch found?)"); status=1
      fi
      # The judged targets and the baselines' spread, on the card's name, as Markdown and JSON.
      step bench_summary python3 "$root/benchmarks/run_benchmarks.py" summary "$out"
      ;;
  esac
  summary+=("slice $s: $((SECONDS - slice_start)) s")
done

if [ "$all" -eq 1 ]; then
  # Every test labelled gpu must belong to a slice, or `all` would pass without running it.
  missing=()
  while read -r name; do
    covered=0
    for s in $test_slices; do
      include="tests_$s"; exclude="exclude_$s"
      if [[ "$name" =~ ${!include} ]] && ! [[ "$name" =~ ${!exclude} ]]; then covered=1; fi
    done
    [[ "$name" =~ $leave_out ]] && covered=1
    [ "$covered" -eq 1 ] || missing+=("$name")
  # -FA: not the fixtures a gpu test pulls in (python.wheel builds the wheel the Python GPU tests install).
  done < <(ctest --test-dir "$build" -N -L gpu -FA '.*' 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
  if [ "${#missing[@]}" -ne 0 ]; then
    summary+=("tests labelled gpu in no slice: ${missing[*]}"); status=1
  fi
fi

cat "$out/logs/demo.log" "$out/logs/report.log" "$out/benchmarks.md" "$out/summary.md" 2>/dev/null

echo
echo "=== gpu-runner summary ==="
printf '%s\n' "${summary[@]}"
echo "tests: $total_passed passed, $total_failed failed, $total_skipped skipped (slices: ${slices[*]})"
echo "total: $((SECONDS - run_start)) s"
echo "result: $([ "$status" -eq 0 ] && echo PASS || echo FAIL)"

# The logs travel as one archive, so that a copy of $OUT is a handful of files.
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
exit "$status"
