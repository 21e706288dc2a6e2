#!/usr/bin/env bash
# Instructions the ledger runs per tracked host allocate+free pair, counted by callgrind (exact for
# a given build, where times vary from machine to machine): the one-thread tracked host pair of
# gpuguard_tracking_bench runs under valgrind, and each of the ledger's two entry points'
# instructions (inclusive: with what they call) are divided by its calls. The free is counted at
# record_free_impl, under the record_free that the tracking resource calls.
#
# usage: benchmarks/ledger_instructions.sh [BUILD_DIR]   (default: build; needs valgrind)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
bench="$build/benchmarks/gpuguard_tracking_bench"
if [ ! -x "$bench" ]; then echo "ledger_instructions: no $bench: build gpuguard_tracking_bench first" >&2; exit 2; fi
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "ledger_instructions: needs valgrind and callgrind_annotate (apt-get install valgrind)" >&2; exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" "$bench" \
  --benchmark_filter='BM_host_pair/tracked/real_time/threads:1$' --benchmark_min_time=0.05 >/dev/null 2>"$out/valgrind.log" ||
  { echo "ledger_instructions: valgrind failed: $(tail -3 "$out/valgrind.log")" >&2; exit 1; }
callgrind_annotate --inclusive=yes --tree=caller "$out/callgrind.out" >"$out/tree.txt" 2>/dev/null
python3 - "$out/tree.txt" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
def per_call(function):
    """Inclusive instructions of `function` over its calls: its '*' line, and the '<' caller lines
    just above it, each with a call count."""
    for i, line in enumerate(lines):
        m = re.match(r"\s*([\d,]+) \(.*\)\s+\*\s+[^:\s]*:(.*)", line)
        if not m or not m.group(2).startswith(function):
            continue
        calls, j = 0, i - 1
        while j >= 0 and "<" in lines[j]:
            c = re.search(r"\(([\d,]+)x\)", lines[j])
            calls += int(c.group(1).replace(",", "")) if c else 0
            j -= 1
        if calls:
            return int(m.group(1).replace(",", "")) / calls, calls
    sys.exit(f"ledger_instructions: no calls of {function} in callgrind's output")
record, calls = per_call("gpuguard::record_allocation(")
free, _ = per_call("gpuguard::(anonymous namespace)::record_free_impl(")
print(f"record_allocation: {record:.1f} instructions per call ({calls} calls)")
print(f"record_free_impl:  {free:.1f} instructions per call")
print(f"ledger, per pair:  {record + free:.1f}")
EOF
