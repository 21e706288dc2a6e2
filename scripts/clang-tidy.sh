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

mapfile -t files < <(python3 - "$db" "$root" <<'PY'
import json, sys, os
db, root = sys.argv[1], os.path.realpath(sys.argv[2])
seen = set()
for entry in json.load(open(db)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.endswith(".cpp") or not path.startswith(root + os.sep):
        continue
    rel = os.path.relpath(path, root)
    if rel.split(os.sep)[0] in ("src", "examples", "tests", "adapters", "benchmarks") and path not in seen:
        seen.add(path)
        print(path)
PY
)
[ "${#files[@]}" -gt 0 ] || { echo "clang-tidy.sh: no C++ sources in $db" >&2; exit 2; }
echo "clang-tidy: ${#files[@]} files"
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 "$tidy" -p "$build" --quiet
echo "clang-tidy: clean"
