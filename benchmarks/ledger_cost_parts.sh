#!/usr/bin/env bash
# Where a tracked host pair's time goes, on a machine without a profiler (the GPU machines have no
# perf). Builds gpuguard_tracking_bench from copies of this tree, each with one cost of the ledger's
# hot path taken out, and runs the single-thread host pair (tracked and untracked) in each, the
# variants interleaved round by round. What a variant saves against `base` is what that cost adds
# on this machine's CPU. The variants are measurements only and unsound for real use (no_lock
# is safe for this one-thread benchmark only):
#   base      the tree as it is
#   no_clock  the allocation's clock read (a TSC read where it is invariant) left out
#   no_lock   the live table's shard lock never taken (its locked exchange left out)
#   tls_ie    libgpuguard built with -ftls-model=initial-exec: its thread_local state found
#             without a call to __tls_get_addr (safe only where the library is loaded at start)
#   tls_desc  libgpuguard built with -mtls-dialect=gnu2 (x86-64): TLS descriptors, which find a
#             loaded-at-start library's thread_locals without that call and stay safe for dlopen
#   none      no_clock, no_lock and tls_ie together: what remains
#
# usage: benchmarks/ledger_cost_parts.sh [WORK_DIR] [ROUNDS]   (default /tmp/gpuguard-cost-parts, 3)
# Prints a table: each variant's added ns per pair (tracked minus untracked, medians), and its
# saving against base; the JSON of every run stays in WORK_DIR/results.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/gpuguard-cost-parts}
rounds=${2:-3}
. "$root/scripts/env.sh"
. "$root/benchmarks/tree_variants.sh"
variants=(base no_clock no_lock tls_ie tls_desc none)
jobs=$(( $(nproc) / ${#variants[@]} ))
if [ "$jobs" -lt 1 ]; then jobs=1; fi

# An edit that must change exactly one line of FILE, or the variant would measure nothing.
edit_once() {
  local file=$1 from=$2 to=$3
  local found
  found=$(grep -cF -- "$from" "$file" || true)
  if [ "$found" != 1 ]; then
    echo "ledger_cost_parts: expected one line '$from' in $file, found $found: the ledger changed, update this script" >&2
    exit 1
  fi
  python3 - "$file" "$from" "$to" <<'EOF'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
open(path, "w").write(text.replace(old, new, 1))
EOF
}

prepare() {
  local v=$1 dir="$work/$1"
  variant_copy "$dir"
  local ledger="$dir/src/src/ledger/ledger.cpp"
  local flags=""
  if [ "$v" = no_clock ] || [ "$v" = none ]; then
    edit_once "$ledger" "const std::int64_t ticks = now_ticks();" "const std::int64_t ticks = 0;"
  fi
  if [ "$v" = no_lock ] || [ "$v" = none ]; then
    edit_once "$ledger" "while (locked.exchange(true, std::memory_order_acquire)) {" "while (false) {"
  fi
  if [ "$v" = tls_ie ] || [ "$v" = none ]; then flags="-ftls-model=initial-exec"; fi
  if [ "$v" = tls_desc ]; then flags="-mtls-dialect=gnu2"; fi
  variant_build "$dir" "$jobs" "$flags"
}

echo "ledger_cost_parts: building ${#variants[@]} variants in $work ($jobs jobs each)"
mkdir -p "$work/results"
pids=()
for v in "${variants[@]}"; do
  prepare "$v" &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "ledger_cost_parts: variant ${variants[$i]} did not build: see $work/${variants[$i]}/*.log" >&2
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then exit 1; fi

for ((r = 0; r < rounds; r++)); do
  order=("${variants[@]:r % ${#variants[@]}}" "${variants[@]:0:r % ${#variants[@]}}")
  for v in "${order[@]}"; do
    variant_run "$work/$v" 'BM_host_pair/(un)?tracked/real_time/threads:1$' 3 "$work/results/$v-$r.json"
  done
  echo "ledger_cost_parts: round $((r + 1))/$rounds done"
done

python3 - "$work/results" "$rounds" "${variants[@]}" <<'EOF'
import json, statistics, sys
results, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def median_of(run, arm):
    return next(b["real_time"] for b in run["benchmarks"]
                if b.get("aggregate_name") == "median" and b["run_name"] == f"BM_host_pair/{arm}/real_time/threads:1")
added = {}
for v in variants:
    per_round = []
    for r in range(rounds):
        with open(f"{results}/{v}-{r}.json") as f:
            run = json.load(f)
        per_round.append(median_of(run, "tracked") - median_of(run, "untracked"))
    added[v] = per_round
print("| variant | added ns per pair (median of rounds) | rounds | saving against base |")
print("|---|---:|---|---:|")
base = statistics.median(added["base"])
for v in variants:
    m = statistics.median(added[v])
    rounds_text = ", ".join(f"{x:.1f}" for x in added[v])
    print(f"| {v} | {m:.1f} | {rounds_text} | {base - m:+.1f} |" if v != "base" else f"| {v} | {m:.1f} | {rounds_text} | |")
EOF
