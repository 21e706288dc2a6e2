#!/usr/bin/env bash
# clang-tidy (.clang-tidy) over gpuguard's own C++ sources, through a build's compile database.
# Installs clang-tidy if missing (scripts/deps.sh lint). Run after scripts/test.sh, on its build.
# Prints the findings only (clang-tidy's "N warnings generated." counts of what it suppressed in
# other code are left out), then one line: "clang-tidy: clean (N files)" or the files with findings.
# usage: scripts/lint.sh [BUILD_DIR] [CMAKE_ARGS...]   (default: build)
#   with CMAKE_ARGS, BUILD_DIR is configured again with them first (its compile database changes).
# GPUGUARD_LINT_FILES="src/a.cpp tests/b.cpp" lints only those files (paths from the source root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
if [ $# -gt 0 ] && [[ $1 != -* ]]; then build=$1; shift; fi
"$root/scripts/deps.sh" lint
if [ $# -gt 0 ]; then
  . "$root/scripts/env.sh"
  cmake -S "$root" -B "$build" "$@" >/dev/null
fi
[ -f "$build/compile_commands.json" ] || {
  echo "lint: $build has no compile_commands.json: run scripts/test.sh $build first" >&2; exit 2; }
exec "$root/scripts/clang-tidy.sh" "$(command -v clang-tidy)" "$build"
