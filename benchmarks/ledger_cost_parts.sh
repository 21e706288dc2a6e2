#!/usr/bin/env bash
# Where a tracked host pair's time goes, on a machine without a profiler (the GPU machines have no
# perf). Builds gpuguard_tracking_bench from copies of this tree, each a measurement build with one
# cost of the ledger's hot path taken out (GPUGUARD_MEASUREMENT_VARIANTS, src/CMakeLists.txt), and runs the single-thread host pair (tracked and untracked) in each, and,
# where there is a GPU, the stream-ordered pair timed tracked and untracked in one loop
# (BM_cuda_async_pair/alternating: there the ledger's lines are no longer in the core's caches
# after each driver call), the variants interleaved round by round. What a variant saves against
# `base` is what that cost adds on this machine's CPU. The variants are measurements only and
# unsound for real use (no_lock is safe for these one-thread benchmarks only):
#   base      the tree as it is
#   no_clock  the allocation's clock read (the kernel's coarse clock) left out
#   no_lock   the live table's shard lock never taken (its locked exchange left out)
#   tls_ie    libgpuguard built with -ftls-model=initial-exec: every thread_local found without a
#             call to __tls_get_addr (the ledger's thread state is initial-exec in every build;
#             this variant adds the stacks' caches)
#   tls_desc  libgpuguard built with -mtls-dialect=gnu2 (x86-64): TLS descriptors, which find a
#             loaded-at-start library's thread_locals without that call and stay safe for dlopen
#   none      no_clock, no_lock and tls_ie together: what remains
#   no_ctx    the tracking resource's free of device memory without its question for the current
#             device (cuCtxGetDevice): it passes the resource's own device, which in the benchmark
#             is the current one (on a one-GPU machine the same as base, which asks nothing
#             there)
#   no_ledger the tracking resource without the ledger: no record and no free recorded (the
#             question for the current device stays), so what the whole ledger adds
#
# usage: benchmarks/ledger_cost_parts.sh [WORK_DIR] [ROUNDS] [VARIANT...]
#   (defaults /tmp/gpuguard-cost-parts, 3 rounds, every variant; base is always built)
# Prints a table: each variant's added ns per pair (tracked minus untracked, medians) and its
# saving against base, for the host pair and, with a GPU, the stream-ordered pair; the JSON of
# every run stays in WORK_DIR/results.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/gpuguard-cost-parts}
rounds=${2:-3}
. "$root/scripts/env.sh"
. "$root/benchmarks/tree_variants.sh"
all_variants=(base no_clock no_lock tls_ie tls_desc none no_ctx no_ledger)
variants=(base)
for v in "${@:3}"; do
  case " ${all_variants[*]} " in
    *" $v "*) [ "$v" = base ] || variants+=("$v") ;;
    *) echo "ledger_cost_parts: unknown variant '$v' (expected one of: ${all_variants[*]})" >&2; exit 2 ;;
  esac
done
if [ $# -le 2 ]; then variants=("${all_variants[@]}"); fi
case "$rounds" in '' | *[!0-9]* | 0) echo "ledger_cost_parts: ROUNDS must be a whole number of at least 1, not '$rounds'" >&2; exit 2 ;; esac
jobs=$(( $(nproc) / ${#variants[@]} ))
if [ "$jobs" -lt 1 ]; then jobs=1; fi

prepare() {  # prepare VARIANT INDEX: a measurement build of this tree (src/CMakeLists.txt)
  local v=$1 dir="$work/$1" flags="" measured=""
  variant_copy "$dir"
  case "$v" in
    no_clock | no_lock | no_ctx | no_ledger) measured=$v ;;
    none) measured="no_clock;no_lock"; flags="-ftls-model=initial-exec" ;;
    tls_ie) flags="-ftls-model=initial-exec" ;;
    tls_desc) flags="-mtls-dialect=gnu2" ;;
  esac
  variant_build "$dir" "$jobs" "$flags" "$measured"
}

echo "ledger_cost_parts: building ${#variants[@]} variants in $work ($jobs jobs each)"
mkdir -p "$work/results"
variants_prepare_all "$work" prepare "${variants[@]}"

for ((r = 0; r < rounds; r++)); do
  order=("${variants[@]:r % ${#variants[@]}}" "${variants[@]:0:r % ${#variants[@]}}")
  for v in "${order[@]}"; do
    variant_run "$work/$v" 'BM_host_pair/(un)?tracked/real_time/threads:1$|BM_cuda_async_pair/alternating' 3 \
      "$work/results/$v-$r.json"
  done
  echo "ledger_cost_parts: round $((r + 1))/$rounds done"
done

python3 - "$work/results" "$rounds" "$root/benchmarks" "${variants[@]}" <<'EOF'
import json, statistics, sys
results, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.path.insert(0, sys.argv[3])
from variant_figures import async_pair, host_pair
added = {"host pair": {}, "stream-ordered pair": {}}
for v in variants:
    runs = []
    for r in range(rounds):
        with open(f"{results}/{v}-{r}.json") as f:
            runs.append(json.load(f))
    host = [host_pair(run) for run in runs]
    if None in host:
        sys.exit(f"ledger_cost_parts: {results}/{v}-{host.index(None)}.json has no one-thread BM_host_pair figures "
                 "(did that run fail? its benchmark's output is in the file)")
    added["host pair"][v] = [x[0] for x in host]
    in_loop = [async_pair(run) for run in runs]
    if all(x is not None for x in in_loop):
        added["stream-ordered pair"][v] = [x[0] for x in in_loop]
print("| pair | variant | added ns per pair (median of rounds) | rounds | saving against base |")
print("|---|---|---:|---|---:|")
for pair, by_variant in added.items():
    if "base" not in by_variant:
        print(f"| {pair} | - | not run (no GPU on this machine) | | |")
        continue
    base = statistics.median(by_variant["base"])
    for v in (v for v in variants if v in by_variant):
        m = statistics.median(by_variant[v])
        rounds_text = ", ".join(f"{x:.1f}" for x in by_variant[v])
        saving = "" if v == "base" else f"{base - m:+.1f}"
        print(f"| {pair} | {v} | {m:.1f} | {rounds_text} | {saving} |")
EOF
