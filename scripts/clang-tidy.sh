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

# The files, one line each: "T path" for a file that includes LibTorch's C++ front end
# (<torch/...>: the torch tests, the example, the evidence job), "- path" for the rest. In the first
# kind, performance-unnecessary-value-param is off: it weighs every parameter of every function
# those headers define (most of the time such a file takes), and LibTorch's own style is to pass
# tensors by value. The adapter's sources (c10 and ATen headers) keep it. The slow
# kind goes first, so that two of them do not end the run alone.
# clang-tidy checks a file once per compile command it has, and many sources are compiled more
# than once (the shared util into the core, the CLI and the fuzzers; the core again for the TSan
# stress test): the database it is given keeps one command per way the file's own text can read,
# that is per set of the -D macros the file names (and, where it asks which, the sanitizer), the
# uninstrumented one where there is a choice. GPUGUARD_LINT_FILES (paths from the source root,
# space-separated) picks files.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mapfile -t files < <(python3 - "$db" "$root" "$tmp" <<'PY'
import json, os, re, shlex, sys
db, root, out = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
only = {os.path.realpath(os.path.join(root, p)) for p in os.environ.get("GPUGUARD_LINT_FILES", "").split()}
front_end = re.compile(r"^\s*#\s*include\s*<torch/(?!csrc/)", re.M)
texts, chosen, order = {}, {}, []
entries = json.load(open(db))
for entry in entries:
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.endswith(".cpp") or not path.startswith(root + os.sep) or (only and path not in only):
        continue
    if os.path.relpath(path, root).split(os.sep)[0] not in ("src", "examples", "tests", "adapters", "benchmarks"):
        continue
    if path not in texts:
        with open(path, errors="replace") as source:
            texts[path] = source.read()
    text = texts[path]
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    sanitized = any(a.startswith("-fsanitize=") for a in args)
    defines = tuple(sorted(a for a in args if a.startswith("-D")
                           and re.search(r"\b%s\b" % re.escape(a[2:].split("=")[0]), text)))
    sanitizer = tuple(sorted(a for a in args if a.startswith("-fsanitize="))) \
        if re.search(r"__SANITIZE|__has_feature", text) else ()
    key = (path, defines, sanitizer)
    if key not in chosen:
        order.append(key)
        chosen[key] = (entry, sanitized)
    elif chosen[key][1] and not sanitized:
        chosen[key] = (entry, sanitized)
with open(os.path.join(out, "compile_commands.json"), "w") as f:
    json.dump([chosen[key][0] for key in order], f)
paths = list(dict.fromkeys(key[0] for key in order))
torch_files = [p for p in paths if front_end.search(texts[p])]
other = [p for p in paths if not front_end.search(texts[p])]
print(f"# {len(paths)} files, {len(order)} of the {len(entries)} compile commands")
print("\n".join(["T " + p for p in torch_files] + ["- " + p for p in other]))
PY
)
summary=${files[0]#\# }
files=("${files[@]:1}")
[ "${#files[@]}" -gt 0 ] && [ -n "${files[0]}" ] || { echo "clang-tidy.sh: no C++ sources in $db" >&2; exit 2; }
echo "clang-tidy: $summary"
# Each file's output is printed whole, without clang-tidy's counts of what it suppressed outside
# the checked code ("N warnings generated.", one per compile command): what remains is a finding.
# shellcheck disable=SC2016  # the script is for the inner bash: $0 clang-tidy, $1 the database's directory (where files with findings are listed), $2 a line
printf '%s\n' "${files[@]}" | xargs -d '\n' -P "$(nproc)" -n 1 bash -c '
  extra=(); [ "${2%% *}" = T ] && extra=(--checks=-performance-unnecessary-value-param)
  status=0
  out=$("$0" -p "$1" --quiet "${extra[@]}" "${2#* }" 2>&1) || status=$?
  findings=$(printf "%s\n" "$out" | grep -v -E "^[0-9]+ (warning|error)s?( and [0-9]+ (warning|error)s?)? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter=|^$" || true)
  if [ "$status" -ne 0 ] && [ -z "$findings" ]; then findings="clang-tidy exited with status $status on ${2#* }"; fi
  [ -z "$findings" ] && exit 0
  printf "%s\n" "$findings"
  echo "${2#* }" >> "$1/failed"
  exit 1' "$tidy" "$tmp" || true
if [ -s "$tmp/failed" ]; then
  echo "clang-tidy: FAIL: findings in $(wc -l < "$tmp/failed") of ${#files[@]} files: $(sed "s|^$root/||" "$tmp/failed" | sort | paste -sd' ')"
  exit 1
fi
echo "clang-tidy: clean (${#files[@]} files)"
