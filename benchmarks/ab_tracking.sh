#!/usr/bin/env bash
# Before and after one change, in one run on one machine: builds gpuguard_tracking_bench and
# gpuguard_ops_bench from the tree as it is ("after") and from the tree with PATCH taken back out
# ("before"), then runs the one-thread host pair, tracked and untracked, where there is a GPU the
# stream-ordered pair tracked and untracked in one loop (BM_cuda_async_pair/alternating), and the
# operation scope's benchmarks (empty body with nvtx on and off, without the outputs, and around a
# tracked host pair; those with outputs also in one loop, BM_op_scope_alternating), the two builds
# interleaved round by round. For changes to the tracking hot path on machines without a profiler
# (the GPU machines): make the patch with `git diff BASE -- src include > change.patch`, leave it
# in the tree, and run this on the GPU machine with the tree.
#
# usage: benchmarks/ab_tracking.sh PATCH [ROUNDS] [WORK_DIR]   (defaults: 3 rounds, /tmp/gpuguard-ab)
# Prints each build's added time per pair (tracked minus untracked) and ratio (tracked /
# untracked), and per scope (scoped minus its baseline), per round and as the median of the
# rounds; the JSON of every run stays in WORK_DIR/results.
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -ge 1 ] && exit 0 || exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
patch_file=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
rounds=${2:-3}
work=${3:-/tmp/gpuguard-ab}
if [ ! -f "$patch_file" ]; then echo "ab_tracking: no patch file '$1'" >&2; exit 2; fi
case "$rounds" in '' | *[!0-9]* | 0) echo "ab_tracking: ROUNDS must be a whole number of at least 1, not '$rounds'" >&2; exit 2 ;; esac
. "$root/scripts/env.sh"
. "$root/benchmarks/tree_variants.sh"
jobs=$(( $(nproc) / 2 )); if [ "$jobs" -lt 1 ]; then jobs=1; fi

prepare() {  # prepare before|after
  local v=$1 dir="$work/$1"
  variant_copy "$dir"
  if [ "$v" = before ]; then
    if ! patch -d "$dir/src" -R -p1 --dry-run -s <"$patch_file" >"$dir/patch.log" 2>&1; then
      echo "ab_tracking: $patch_file does not come back out of this tree (see $dir/patch.log): was it made against it?" >&2
      return 1
    fi
    patch -d "$dir/src" -R -p1 -s <"$patch_file"
  fi
  variant_build "$dir" "$jobs" "" "" gpuguard_tracking_bench gpuguard_ops_bench
}

echo "ab_tracking: building before and after in $work"
mkdir -p "$work/results"
prepare before & before_pid=$!
prepare after & after_pid=$!
failed=0
wait "$before_pid" || failed=1
wait "$after_pid" || failed=1
if [ "$failed" -ne 0 ]; then echo "ab_tracking: a build failed: see $work/*/build.log" >&2; exit 1; fi

filter='BM_host_pair/(un)?tracked/real_time/threads:1$'
if nvidia-smi -L >/dev/null 2>&1; then filter="$filter|BM_cuda_async_pair/alternating"; fi
scope_filter='BM_op_scope/(baseline|scoped|scoped_nvtx_off|scoped_no_outputs)/|BM_op_scope_pair/|BM_op_scope_alternating/'
for ((r = 0; r < rounds; r++)); do
  order=(before after)
  if ((r % 2 == 1)); then order=(after before); fi
  for v in "${order[@]}"; do
    variant_run "$work/$v" "$filter" 5 "$work/results/$v-$r.json"
    "$work/$v/build/benchmarks/gpuguard_ops_bench" --benchmark_filter="$scope_filter" --benchmark_repetitions=3 \
      --benchmark_enable_random_interleaving=true --benchmark_format=json >"$work/results/$v-$r-scope.json" 2>/dev/null
  done
  echo "ab_tracking: round $((r + 1))/$rounds done"
done

python3 - "$work/results" "$rounds" "$root/benchmarks" <<'EOF'
import json, statistics, sys
results, rounds = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from variant_figures import async_pair, host_pair, scope_added, scope_alternating
runs = {v: [json.load(open(f"{results}/{v}-{r}.json")) for r in range(rounds)] for v in ("before", "after")}
scopes = {v: [json.load(open(f"{results}/{v}-{r}-scope.json")) for r in range(rounds)] for v in ("before", "after")}
print("| pair | build | added ns (median of rounds) | rounds | tracked / untracked |")
print("|---|---|---:|---|---:|")
for label, figure in (("host pair, 1 thread", host_pair), ("cudaMallocAsync pair, alternating", async_pair)):
    for v in ("before", "after"):
        found = [figure(run) for run in runs[v]]
        if not found or any(f is None for f in found):
            continue
        added = [f[0] for f in found]
        ratios = [f[1] for f in found]
        print(f"| {label} | {v} | {statistics.median(added):+.1f} | {', '.join(f'{a:+.1f}' for a in added)} "
              f"| {statistics.median(ratios):.3f} |")
print()
print("| scope | build | added ns per scope (median of rounds) | rounds |")
print("|---|---|---:|---|")
for label, scoped, baseline in (("empty body, nvtx on", "BM_op_scope/scoped", "BM_op_scope/baseline"),
                                ("empty body, nvtx off", "BM_op_scope/scoped_nvtx_off", "BM_op_scope/baseline"),
                                ("empty body, no outputs", "BM_op_scope/scoped_no_outputs", "BM_op_scope/baseline"),
                                ("around a tracked host pair", "BM_op_scope_pair/scoped", "BM_op_scope_pair/baseline")):
    for v in ("before", "after"):
        added = [scope_added(run, scoped, baseline) for run in scopes[v]]
        if not added or any(a is None for a in added):
            continue
        print(f"| {label} | {v} | {statistics.median(added):+.1f} | {', '.join(f'{a:+.1f}' for a in added)} |")
for label, body in (("in one loop, empty body, nvtx on", "nvtx_on"), ("in one loop, empty body, nvtx off", "nvtx_off"),
                    ("in one loop, around a tracked host pair", "pair")):
    for v in ("before", "after"):
        added = [scope_alternating(run, body) for run in scopes[v]]
        if not added or any(a is None for a in added):
            continue
        print(f"| {label} | {v} | {statistics.median(added):+.1f} | {', '.join(f'{a:+.1f}' for a in added)} |")
EOF
