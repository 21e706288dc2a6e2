#!/usr/bin/env python3
"""gpuguard's GoogleTest listener (include/gpuguard/core/testing.hpp) in a real test program
(tests/testing/testing_child.cpp), on host memory (device=host): each TEST's verdict through
--gtest_filter and the exit status, and the failure text: the leak's file:line and sizes, the
peak and the budget, the fixture's memory not counted, and every test failing without tracking.

usage: testing_test.py TESTING_CHILD
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, line_of  # noqa: E402  (tests/support)

CHILD = sys.argv[1]
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing_child.cpp")
MIB = 1024 * 1024
# The exit report is off, so that every leak text checked below is the listener's.
OPTIONS = "device=host:leak_report=0"  # stacks=all is the default: no option names the sites

PASSING = ["listener.clean_test_passes", "listener.allowed_leak_passes",
           "listener.within_peak_budget_passes", "listener.device_budget_overrides_every_device_budget",
           "suite_with_memory.first_test_passes", "suite_with_memory.second_test_passes",
           "suite_with_memory.budget_counts_from_the_test_start", "listener.allowed_misuse_passes"]
FAILING = ["listener.leaking_test_fails_naming_the_site", "listener.over_peak_budget_fails",
           "suite_with_memory.remade_suite_memory_is_a_leak", "listener.double_free_fails"]


def run(gtest_filter=None, options=OPTIONS, extra=()):
    args = [CHILD] + (["--gtest_filter=" + gtest_filter] if gtest_filter else []) + list(extra)
    env = dict(os.environ, GPUGUARD_OPTIONS=options)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)


def failed_tests(result):
    """The tests gtest's summary lists as failed."""
    summary = result.stdout.split("tests ran.")[-1]
    return sorted(set(re.findall(r"^\[  FAILED  \] (\S+\.\S+)$", summary, re.M)))


def test_line(name):
    return line_of(SOURCE, "(%s, %s)" % tuple(name.split(".")))


# Each test alone: its verdict is the program's status.
for name in PASSING + FAILING:
    result = run(name)
    expected = 1 if name in FAILING else 0
    check(result.returncode == expected, "%s alone exits %d, got %d" % (name, expected, result.returncode),
          result.stdout + result.stderr)

# The leak: failure at the TEST's line, the library's leak text with the marked site and sizes;
# the buffer the test freed is not in it.
leak = run("listener.leaking_test_fails_naming_the_site")
out = leak.stdout
check("testing_child.cpp:%d: Failure" % test_line("listener.leaking_test_fails_naming_the_site") in out,
      "the leak failure is at the TEST's file:line", out)
check("LEAK: 3.0 MiB in 3 allocations still live, from 1 site" in out, "leak headline with the sizes", out)
check("#1 3.0 MiB in 3 allocations on host" in out, "the site's bytes, count and device", out)
site_line = line_of(SOURCE, "TEST-LEAK-SITE")
check(re.search(r"leak_blocks.* at \S*testing_child\.cpp:%d\b" % site_line, out),
      "the leak names testing_child.cpp:%d" % site_line, out)
check("2.0 MiB" not in out.split("LEAK:")[-1], "the 2 MiB the test freed is not reported", out)

# With stacks turned off the same failure says how to get them (the library's text).
nostack = run("listener.leaking_test_fails_naming_the_site", options="device=host:stacks=off:leak_report=0")
check(nostack.returncode == 1 and "no stack: run with GPUGUARD_OPTIONS=stacks=all" in nostack.stdout,
      "without stacks the failure says how to get them", nostack.stdout)

# The budget: the rise, what was live at the start, the peak and the budget, in bytes.
budget = run("listener.over_peak_budget_fails")
check("peak over budget on host: live bytes rose %d bytes above the 0 live at the test's start "
      "(peak %d bytes), over the budget of %d bytes" % (3 * MIB, 3 * MIB, 2 * MIB) in budget.stdout,
      "the budget failure names the peak and the budget", budget.stdout)
check("LEAK" not in budget.stdout, "the over-budget test leaked nothing", budget.stdout)

# The suite's memory remade in a test: 8 MiB leaked, one allocation.
remade = run("suite_with_memory.remade_suite_memory_is_a_leak")
check("LEAK: 8.0 MiB in 1 allocation still live, from 1 site" in remade.stdout,
      "memory remade in place of the suite's is a leak", remade.stdout)

# A double free: the failure counts it and says how to allow it; nothing leaked.
misused = run("listener.double_free_fails")
check("testing_child.cpp:%d: Failure" % test_line("listener.double_free_fails") in misused.stdout
      and "gpuguard: the test misused tracked memory: 1 double free(s), 0 free(s) of a pointer" in misused.stdout
      and "allow_misuse() allows it" in misused.stdout,
      "the double free fails the test at its line", misused.stdout)
check("LEAK" not in misused.stdout, "the double-freeing test leaked nothing", misused.stdout)

# The whole program: exactly the failing tests fail; memory earlier tests kept is not counted
# again, and the budget counts from what they left live (4 MiB).
whole = run()
check(whole.returncode == 1, "the whole program exits 1, got %d" % whole.returncode, whole.stdout)
check(failed_tests(whole) == sorted(FAILING), "exactly the failing tests fail",
      "%s\n%s" % (failed_tests(whole), whole.stdout))
check("[  PASSED  ] %d tests." % len(PASSING) in whole.stdout, "the others pass", whole.stdout)
check("live bytes rose %d bytes above the %d live at the test's start (peak %d bytes)"
      % (3 * MIB, 4 * MIB, 7 * MIB) in whole.stdout,
      "after two leaking tests the budget counts from the 4 MiB they left", whole.stdout)

# Without tracking: every test fails and says why, none passes silently.
untracked = run(extra=["--no-tracking"])
check(untracked.returncode == 1, "without tracking the program exits 1", untracked.stdout)
check(len(failed_tests(untracked)) == len(PASSING) + len(FAILING), "without tracking every test fails",
      untracked.stdout)
check(untracked.stdout.count("gpuguard: tracking is not enabled") == len(PASSING) + len(FAILING),
      "each failure says tracking is not enabled", untracked.stdout)

finish("core.testing")
