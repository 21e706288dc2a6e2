#!/usr/bin/env bash
# What `gpuguard run --track` adds to a stream-ordered pair, measured inside each process, for
# this tree's interposer and for variants of it. gpuguard_track_bench times the pair through its
# own calls (under --track, the interposer's wrappers) and through the driver's entry points, in
# alternating batches, and prints their ratio: a process's fast or slow state (docs/benchmarks.md)
# falls on both sides, where the plain-against-tracked comparison of track_overhead.py compares
# two processes. The arms, each round in a rotated order, all running this tree's benchmark:
#   plain   no interposer: what the method reads when both sides are the driver's
#   base    this tree's interposer
#   bare    this tree with the stream-ordered wrappers recording nothing: the real call alone, so
#           what any interposer of these calls pays (a measurement only: it loses every record)
#   nopush  this tree with the push to the ring left out (everything else a deferred call does):
#           with base and bare, where the recording path's time goes (a measurement only)
#   REV     the interposer of a git revision (commit, tag, branch), for a before-and-after; or
#           of a folder holding a source tree (`git archive REV | tar -x -C FOLDER`), where the
#           machine's copy of the repository lacks the revision
# Needs a GPU; run it on the GPU machine after scripts/gpu-deps.sh (it builds as the GPU
# runner does, carried packages included).
#
# usage: benchmarks/track_variants.sh [WORK_DIR] [ROUNDS] [REV...]
#   (defaults /tmp/gpuguard-track-variants and 6 rounds)
# Prints each arm's ratio (median of its rounds), the rounds' range and its difference from base.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/gpuguard-track-variants}
rounds=${2:-6}
revisions=("${@:3}")
. "$root/scripts/env.sh"
. "$root/benchmarks/tree_variants.sh"
case "$rounds" in '' | *[!0-9]* | 0) echo "track_variants: ROUNDS must be a whole number of at least 1, not '$rounds'" >&2; exit 2 ;; esac
for rev in "${revisions[@]}"; do
  if [ -d "$rev" ]; then
    if [ ! -f "$rev/src/preload/deferred.cpp" ]; then
      echo "track_variants: folder '$rev' holds no gpuguard source tree (no src/preload/deferred.cpp)" >&2
      exit 2
    fi
  elif ! git -C "$root" rev-parse --verify --quiet "$rev^{commit}" >/dev/null; then
    echo "track_variants: '$rev' is neither a revision of this repository nor a folder" >&2
    exit 2
  fi
done
variants=(base bare nopush "${revisions[@]}")
jobs=$(( $(nproc) / ${#variants[@]} ))
if [ "$jobs" -lt 1 ]; then jobs=1; fi

prepare() {  # prepare VARIANT INDEX
  local v=$1 index=$2 dir="$work/v$2"
  if [ "$index" -lt 3 ]; then
    variant_copy "$dir"
  else
    rm -rf "$dir"
    mkdir -p "$dir/src"
    if [ -d "$v" ]; then
      cp -R "$v/." "$dir/src/"
    else
      git -C "$root" archive "$v" | tar -C "$dir/src" -xf -
    fi
  fi
  local measured=""
  if [ "$v" = bare ] || [ "$v" = nopush ]; then measured=$v; fi  # measurement builds (src/CMakeLists.txt)
  variant_build "$dir" "$jobs" "" "$measured" gpuguard_cli gpuguard_preload gpuguard_track_bench
}

echo "track_variants: building ${#variants[@]} variants in $work ($jobs jobs each)"
mkdir -p "$work"
variants_prepare_all "$work" prepare "${variants[@]}"

bench="$work/v0/build/benchmarks/gpuguard_track_bench"
arms=(plain "${variants[@]}")
results="$work/results.txt"
: >"$results"
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#arms[@]}; k++)); do
    i=$(( (k + r) % ${#arms[@]} ))
    status=0
    if [ "$i" -eq 0 ]; then
      out=$(GPUGUARD_OPTIONS=text_log=off:leak_report=0 "$bench" 31 200) || status=$?
    else
      dir="$work/v$((i - 1))/build"
      out=$(GPUGUARD_OPTIONS=text_log=off:leak_report=0 GPUGUARD_PRELOAD_LIBRARY="$dir/src/preload/libgpuguard_preload.so" \
        "$dir/src/cli/gpuguard" run --track -- "$bench" 31 200 2>/dev/null) || status=$?
    fi
    if [ "$status" -eq 77 ]; then
      echo "track_variants: no usable GPU here (gpuguard_track_bench exited 77)" >&2
      exit 77
    fi
    ratio=$(sed -n 's/^cuMemAllocAsync pair in one process ratio \([0-9.]*\)$/\1/p' <<<"$out")
    if [ -z "$ratio" ]; then
      echo "track_variants: arm ${arms[$i]} printed no in-process ratio:" >&2
      echo "$out" >&2
      exit 1
    fi
    echo "${arms[$i]} $ratio" >>"$results"
  done
  echo "track_variants: round $((r + 1))/$rounds done"
done

python3 - "$results" "${arms[@]}" <<'PY'
import statistics, sys
path, arms = sys.argv[1], sys.argv[2:]
ratios = {arm: [] for arm in arms}
for line in open(path):
    arm, value = line.split()
    ratios[arm].append(float(value))
base = statistics.median(ratios["base"])
print("| arm | own / direct (median of rounds) | rounds | against base |")
print("|---|---:|---|---:|")
for arm in arms:
    values = ratios[arm]
    median = statistics.median(values)
    print(f"| {arm} | {median:.4f} | {min(values):.4f} to {max(values):.4f} | {median - base:+.4f} |")
PY
