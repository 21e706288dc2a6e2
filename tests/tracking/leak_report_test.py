#!/usr/bin/env python3
"""Leak report tests, in real child processes (tests/tracking/leak_child.cpp), judged by exit status,
stderr and the JSON file they leave.

usage: leak_report_test.py LEAK_CHILD SCHEMA [--gpu]
With --gpu the child leaks on the GPU (device=cuda); without a GPU that case exits 77 (skipped),
unless GPUGUARD_REQUIRE_GPU=1, when it fails.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, line_of, skip  # noqa: E402  (tests/support)

CHILD, SCHEMA = sys.argv[1], sys.argv[2]
GPU = "--gpu" in sys.argv[3:]
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "leak_child.cpp")
MIB = 1024 * 1024


def marker_line(marker):
    return line_of(SOURCE, marker)


def run(mode, options):
    env = dict(os.environ, GPUGUARD_OPTIONS=options)
    return subprocess.run([CHILD, mode], env=env, capture_output=True, text=True, timeout=120)


def validate(document):
    """Validates against docs/schemas/leaks-v1.schema.json with jsonschema where it is installed;
    the structural checks below run everywhere."""
    try:
        import jsonschema
    except ImportError:
        print("note: jsonschema is not installed here; structural checks only")
        return
    with open(SCHEMA) as f:
        jsonschema.validate(document, json.load(f))


def gpu_usable():
    probe = run("clean", "device=cuda:leak_report=0")
    return probe.returncode == 0 and "no CUDA device is usable" not in probe.stderr


device_option = "device=cuda" if GPU else "device=host"
if GPU and not gpu_usable():
    skip("no CUDA device is usable on this machine")

with tempfile.TemporaryDirectory() as tmp:
    json_path = os.path.join(tmp, "leaks.json")
    # No stacks option: the default (stacks=all) names each site's file:line.
    leaked = run("leak" if not GPU else "gpu", "%s:leak_json=%s:leak_exitcode=23" % (device_option, json_path))
    err = leaked.stderr
    check(leaked.returncode == 23, "leak_exitcode=23 gives status 23, got %d" % leaked.returncode, err)
    check("LEAK: 7.0 MiB in 4 allocations still live, from 2 sites" in err, "headline", err)
    device_name = "device 0" if GPU else "host"
    big = err.find("#1 4.0 MiB in 1 allocation on %s (tag \"checkpoint\")" % device_name)
    small = err.find("#2 3.0 MiB in 3 allocations on %s" % device_name)
    check(big >= 0 and small > big, "sites largest first, with device and tag", err)
    big_line, small_line = marker_line("LEAK-SITE-BIG"), marker_line("LEAK-SITE-SMALL")
    check(re.search(r"leak_big_block.* at \S*leak_child\.cpp:%d\b" % big_line, err),
          "big site names leak_child.cpp:%d" % big_line, err)
    check(re.search(r"leak_small_blocks.* at \S*leak_child\.cpp:%d\b" % small_line, err),
          "small site names leak_child.cpp:%d" % small_line, err)
    check("2.0 MiB" not in err.split("LEAK:")[1], "the freed 2 MiB buffer is not reported", err)
    check("no stack" not in err, "stacks are on by default: no hint", err)
    check("leak_child: %s done" % ("gpu" if GPU else "leak") in leaked.stdout, "stdout flushed", leaked.stdout)

    with open(json_path) as f:
        document = json.load(f)
    validate(document)
    check(document["schema"] == "gpuguard.leaks" and document["version"] == 1, "schema and version")
    check(document["total_bytes"] == 7 * MIB and document["total_count"] == 4, "json totals", str(document))
    sites = document["sites"]
    check([s["bytes"] for s in sites] == [4 * MIB, 3 * MIB], "json sites largest first", str(sites))
    check(sites[0]["tag"] == "checkpoint" and sites[0]["device"] == (0 if GPU else -1), "json tag/device")
    check(any(fr["file"].endswith("leak_child.cpp") and fr["line"] == big_line for fr in sites[0]["frames"]),
          "json frame names leak_child.cpp:%d" % big_line, json.dumps(sites[0]["frames"], indent=1))

    if not GPU:
        clean = run("clean", "device=host:leak_exitcode=23")
        check(clean.returncode == 0, "no leaks: status unchanged (0), got %d" % clean.returncode, clean.stderr)
        check("[gpuguard] no leaks" in clean.stderr, "no-leak summary line", clean.stderr)

        # Stacks turned off: each site says how to get its stack.
        nostack = run("leak", "device=host:stacks=off")
        check("LEAK: 7.0 MiB in 4 allocations still live" in nostack.stderr and
              nostack.stderr.count("(no stack: run with GPUGUARD_OPTIONS=stacks=all") >= 1 and
              "leak_child.cpp" not in nostack.stderr,
              "stacks=off: the sites name no line, and say how to get them", nostack.stderr)

        quiet = run("leak", "device=host:leak_report=0")
        check(quiet.returncode == 0, "leaks without leak_exitcode keep status 0")
        check("LEAK" not in quiet.stderr, "leak_report=0 prints no report", quiet.stderr)

        bad_json = run("leak", "device=host:leak_json=%s/no/such/dir/x.json" % tmp)
        check("[gpuguard] leak_json: cannot create" in bad_json.stderr and "no/such/dir" in bad_json.stderr,
              "unwritable leak_json is named in one line", bad_json.stderr)
        check("LEAK: 7.0 MiB" in bad_json.stderr, "text report still written when the JSON fails")

        # Four raw stacks on one source line are one site, in the text and in the JSON.
        unrolled_json = os.path.join(tmp, "unrolled.json")
        unrolled = run("unrolled", "device=host:stacks=all:leak_json=" + unrolled_json)
        check("LEAK: 4.0 MiB in 4 allocations still live, from 1 site" in unrolled.stderr,
              "an unrolled loop's four stacks are one site", unrolled.stderr)
        with open(unrolled_json) as f:
            unrolled_sites = json.load(f)["sites"]
        check(len(unrolled_sites) == 1 and unrolled_sites[0]["count"] == 4 and len(set(unrolled_sites[0]["raw_sites"])) == 4
              and unrolled_sites[0]["site"] == unrolled_sites[0]["raw_sites"][0],
              "one JSON site, with its four raw stack ids", json.dumps(unrolled_sites))

        double = run("double_free", "device=host:stacks=all")
        check(double.returncode == 0, "misuse does not end the program by default", double.stderr)
        check("error: double free" in double.stderr and "first freed at" in double.stderr,
              "double free reported with the first free's stack", double.stderr)
        check(re.search(r"this free at:\n(\[gpuguard\] .*\n)*?.*leak_child\.cpp:%d" % marker_line("DOUBLE-FREE-SITE"),
                        double.stderr), "double free names the line of the second free", double.stderr)
        fatal = run("double_free", "device=host:abort_on_error=1")
        check(fatal.returncode == -6, "abort_on_error=1 ends by SIGABRT, got %d" % fatal.returncode, fatal.stderr)

finish("leak report (%s)" % ("gpu" if GPU else "host"))
