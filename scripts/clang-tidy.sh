#!/usr/bin/env bash
# clang-tidy over gpuguard's own C++ translation units (and, through them, its headers), using the
# build's compile_commands.json. .cu files are left to nvcc's own warnings: clang-tidy cannot
# parse them with nvcc's flags.
# usage: scripts/clang-tidy.sh CLANG_TIDY BUILD_DIR
set -euo pipefail
tidy=${1:?usage: clang-tidy.sh CLANG_TIDY BUILD_DIR}
build=${2:?usage: clang-tidy.sh CLANG_TIDY BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "clang-tidy.sh: $db not found (configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 2; }

# One line per file: "T path" for a file that includes LibTorch's C++ front end (<torch/...>: the
# torch tests, the example, the evidence job), "- path" for the rest. In the first kind,
# performance-unnecessary-value-param is off: it weighs every parameter of every function those
# headers define (most of the time such a file takes), and LibTorch's own style
# is to pass tensors by value. The adapter's sources (c10 and ATen headers) keep it. The slow kind
# goes first, so that two of them do not end the run alone.
mapfile -t files < <(python3 - "$db" "$root" <<'PY'
import json, os, re, sys
db, root = sys.argv[1], os.path.realpath(sys.argv[2])
front_end = re.compile(r"^\s*#\s*include\s*<torch/(?!csrc/)", re.M)
seen, torch_files, other = set(), [], []
for entry in json.load(open(db)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.endswith(".cpp") or not path.startswith(root + os.sep) or path in seen:
        continue
    if os.path.relpath(path, root).split(os.sep)[0] not in ("src", "examples", "tests", "adapters", "benchmarks"):
        continue
    seen.add(path)
    with open(path, errors="replace") as source:
        (torch_files if front_end.search(source.read()) else other).append(path)
print("\n".join(["T " + p for p in torch_files] + ["- " + p for p in other]))
PY
)
[ "${#files[@]}" -gt 0 ] || { echo "clang-tidy.sh: no C++ sources in $db" >&2; exit 2; }
echo "clang-tidy: ${#files[@]} files"
# shellcheck disable=SC2016  # the script is for the inner bash: $0 clang-tidy, $1 the build, $2 a line
printf '%s\n' "${files[@]}" | xargs -d '\n' -P "$(nproc)" -n 1 bash -c '
  extra=(); [ "${2%% *}" = T ] && extra=(--checks=-performance-unnecessary-value-param)
  exec "$0" -p "$1" --quiet "${extra[@]}" "${2#* }"' "$tidy" "$build"
echo "clang-tidy: clean"
