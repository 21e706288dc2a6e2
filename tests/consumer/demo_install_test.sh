#!/usr/bin/env bash
# The install recipe right after the README's demo: `scripts/demo.sh BUILD_DIR` builds and runs the
# demo, then `cmake --install BUILD_DIR --prefix PREFIX` must succeed with nothing more built, and
# the installed tree must work from PREFIX (installed_tree_test.py: the command, the interposer it
# preloads, the docs each --help names).
# usage: tests/consumer/demo_install_test.sh BUILD_DIR PREFIX [CMAKE_ARGS...]
#   CMAKE_ARGS go on to scripts/demo.sh (and so to CMake). .ci/run runs this on its own build
#   first, which scripts/test.sh then builds on; ctest consumer.demo_install
#   (-DGPUGUARD_DEMO_INSTALL_TEST=ON) runs it in a tree of its own.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: demo_install_test.sh BUILD_DIR PREFIX [CMAKE_ARGS...]}
prefix=${2:?usage: demo_install_test.sh BUILD_DIR PREFIX [CMAKE_ARGS...]}
shift 2
"$root/scripts/demo.sh" "$build" "$@"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null || {
  echo "demo install: cmake --install $build failed right after scripts/demo.sh"; exit 1; }
echo "demo install: cmake --install $build --prefix $prefix: ok"
python3 "$root/tests/consumer/installed_tree_test.py" "$prefix"
