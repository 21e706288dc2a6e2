#!/usr/bin/env bash
# clang-tidy (.clang-tidy) over gpuguard's own C++ sources, through a build's compile database.
# Installs clang-tidy if missing (scripts/deps.sh lint). Run after scripts/test.sh, on its build.
# usage: scripts/lint.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
"$root/scripts/deps.sh" lint
[ -f "$build/compile_commands.json" ] || {
  echo "lint: $build has no compile_commands.json: run scripts/test.sh $build first" >&2; exit 2; }
exec "$root/scripts/clang-tidy.sh" "$(command -v clang-tidy)" "$build"
