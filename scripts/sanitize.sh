#!/usr/bin/env bash
# The CPU suite again under sanitizers (docs/testing.md, "Sanitizer builds"): configures a build
# of its own with -DGPUGUARD_SANITIZE, builds only the programs the chosen tests run, runs those
# tests, and fails if any sanitizer reported an error, even in a child a test judged only by its
# exit status.
#   asan  AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer: the guards'
#         and the core's unit tests, the exit paths, the outputs and the leak report in real
#         children, and the `gpuguard` command (report, symbolize, doctor, run) with its tests
#   tsan  ThreadSanitizer: the core's unit tests, the exit paths (the signal watcher thread, the
#         exit watchdog, fork), the outputs' writer thread, the ledger under 8 threads, the
#         interposer's deferred recording (its producer, drainer and readers)
# usage: scripts/sanitize.sh asan|tsan [BUILD_DIR] [CMAKE_ARGS...]   (default: build-asan or build-tsan)
#   CMAKE_ARGS go to CMake after the script's own, so they win.
# Extra ctest arguments can be given in GPUGUARD_SANITIZE_CTEST_ARGS (e.g. "-R core.hooks").
# The tests' Python modules (jsonschema, prometheus-client; no torch) go into the virtual
# environment BUILD_DIR/venv, or GPUGUARD_VENV when it is set (CI passes the test step's, which
# has them already).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-}
case "$kind" in
  asan) sanitize=address,undefined ;;
  tsan) sanitize=thread ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [BUILD_DIR] [CMAKE_ARGS...]" >&2; exit 2 ;;
esac
shift
build="$root/build-$kind"
if [ $# -gt 0 ] && [[ $1 != -* ]]; then build=$1; shift; fi
build=$(realpath -m "$build")
venv=$(realpath -m "${GPUGUARD_VENV:-$build/venv}")
"$root/scripts/deps.sh" sanitize "$venv"
. "$root/scripts/env.sh"
jobs=$(nproc)

# What each build compiles and runs. Left out, and why (also in docs/testing.md):
#  - GPU tests, the LibTorch adapter, benchmarks, examples, consumer, header and compile-fail
#    tests: no GPU here, Torch's libraries are not instrumented, and the rest runs no code of ours;
#  - the fuzzers: the plain build runs them, already under ASan and UBSan;
#  - the interposer (core.preload*, cli.run.track): an instrumented library preloaded into an
#    uninstrumented program (sh, python) cannot start, as the sanitizer's runtime must come first;
#  - the malloc-trapping hooks child: it replaces malloc, which the sanitizer's runtime owns;
#  - cli.run.torch and evidence.harness: PyTorch jobs and a Python harness around the same CLI
#    that cli.run.* and cli.doctor drive;
#  - core.layout: it reads the plain build's objects, and runs no code of ours;
#  - under asan, cli.run.failures: it runs gpuguard under a pids limit, which stops LeakSanitizer's
#    own tracer thread at exit;
#  - under tsan, the CLI's, the leak report's and the GoogleTest listener's tests, and the symlink
#    test, which runs the leak child: one thread each.
case "$kind" in
  asan)
    targets=(gpuguard_cpu_tests gpuguard_core_tests gpuguard_leak_child gpuguard_testing_child gpuguard_ops_child gpuguard_hooks_child
             gpuguard_cli gpuguard_cli_json_tests gpuguard_cli_doctor_tests gpuguard_fake_nvml
             gpuguard_run_fake_preload gpuguard_stacks_tests gpuguard_util_tests gpuguard_util_nvml_tests
             gpuguard_defer_tests gpuguard_ledger_parts_tests gpuguard_pool_tests gpuguard_postmortem_tests
             gpuguard_postmortem_child)
    tests='^(cpu|core|cli)\.'
    excluded='_NOT_BUILT|^(core\.preload|core\.layout$|cli\.run\.(track|torch|failures)$)'
    ;;
  tsan)
    targets=(gpuguard_core_tests gpuguard_stacks_tests gpuguard_util_tests gpuguard_util_nvml_tests gpuguard_fake_nvml
             gpuguard_ops_child gpuguard_hooks_child gpuguard_cli gpuguard_defer_tests gpuguard_ledger_parts_tests
             gpuguard_pool_tests gpuguard_postmortem_tests)
    tests='^core\.'
    excluded='_NOT_BUILT|^(core\.preload|core\.layout$|core\.leak_report$|core\.testing$|core\.write_file\.symlinks$)'
    ;;
esac
# The ledger's 8-thread stress with a tenth of its pairs: whole, it is the slowest test under a
# sanitizer, and
# the plain build runs it whole (and under TSan as tsan.ledger_stress).
export GPUGUARD_STRESS_PAIRS=${GPUGUARD_STRESS_PAIRS:-100000}

# Sanitizer reports go to files under the build (one per process), so that a report from a child
# is seen even when its test looked only at its exit status.
logs="$build/sanitizer-logs"
common="log_path=$logs/$kind:log_exe_name=1"
export ASAN_OPTIONS="$common:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="$common:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="$common:halt_on_error=1:second_deadlock_stack=1"

start=$SECONDS
# -O1 -g1: half the compile time of -O2 -g, and the line tables the reports (and the tests that
# read file:line) need.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DGPUGUARD_SANITIZE="$sanitize" -DGPUGUARD_BUILD_TESTS=ON -DGPUGUARD_BUILD_BENCHMARKS=OFF \
  -DGPUGUARD_BUILD_EXAMPLES=OFF -DGPUGUARD_FUZZ_TESTS=OFF -DGPUGUARD_WITH_TORCH=OFF -DGPUGUARD_ENABLE_CUDA=OFF \
  -DPython3_EXECUTABLE="$venv/bin/python" "$@" >/dev/null
echo "sanitize $kind: configured in $((SECONDS - start)) s"
build_start=$SECONDS
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
echo "sanitize $kind: built ${#targets[@]} targets in $((SECONDS - build_start)) s"
rm -rf "$logs"
mkdir -p "$logs"
test_start=$SECONDS
status=0
# shellcheck disable=SC2086  # word splitting of the extra arguments is wanted
ctest --test-dir "$build" -j "$jobs" --output-on-failure -R "$tests" -E "$excluded" \
  ${GPUGUARD_SANITIZE_CTEST_ARGS:-} || status=$?
echo "sanitize $kind: tests took $((SECONDS - test_start)) s"
# Anything a sanitizer wrote is an error, but LeakSanitizer's note in a forked child that the
# parent's threads (which do not exist there) "were not suspended".
reports=$(grep -l -v -E '^$|Running thread [0-9]+ was not suspended\. False leaks are possible\.' "$logs"/* 2>/dev/null || true)
if [ -n "$reports" ]; then
  echo "sanitize $kind: sanitizers reported errors (files in $logs):"
  for report in $reports; do
    echo "==== $report"
    head -c 20000 "$report"
  done
  status=1
fi
echo "sanitize $kind: $([ "$status" -eq 0 ] && echo PASS || echo FAIL) in $((SECONDS - start)) s"
exit "$status"
