#!/usr/bin/env python3
"""The interposer (libgpuguard_preload.so) on a program that knows nothing of gpuguard
(leaky_program.cpp: 9 MiB in 3 cudaMalloc allocations left live, everything else freed).

usage: preload_test.py PRELOAD PROGRAM [--gpu] [--cli GPUGUARD]
Without --gpu the program runs on a stand-in CUDA runtime (fake_cudart.cpp), so real dynamic
linking and interposition are tested on any machine. With --gpu it runs on the real runtime and
its leak report must name the same bytes and count as `compute-sanitizer --leak-check full`; with
no usable GPU that case exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PRELOAD, PROGRAM = sys.argv[1], sys.argv[2]
GPU = "--gpu" in sys.argv[3:]
# With --cli the tracked run goes through `gpuguard run --track` (which finds the interposer by
# GPUGUARD_PRELOAD_LIBRARY here), as a user would start it.
CLI = sys.argv[sys.argv.index("--cli") + 1] if "--cli" in sys.argv else None
MIB = 1024 * 1024
failures = []
tmp = tempfile.mkdtemp(prefix="gpuguard-preload-")


def check(condition, what, detail=""):
    if not condition:
        failures.append(what + (("\n" + str(detail)) if detail else ""))
    return condition


def run(argv, preload=True, options=""):
    env = dict(os.environ, GPUGUARD_OPTIONS=options)
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    else:
        env.pop("LD_PRELOAD", None)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


leaks = os.path.join(tmp, "leaks.json")
if CLI:
    os.environ["GPUGUARD_PRELOAD_LIBRARY"] = PRELOAD
    tracked = run([CLI, "run", "--track", "--", PROGRAM], preload=False, options="text_log=off:leak_json=" + leaks)
else:
    tracked = run([PROGRAM], options="text_log=off:leak_json=" + leaks)
if GPU and tracked.returncode != 0 and "leaky_program: cudaMalloc" in tracked.stderr:
    if os.environ.get("GPUGUARD_REQUIRE_GPU") == "1":
        print("FAILED: GPUGUARD_REQUIRE_GPU=1 but the program could not allocate:\n" + tracked.stderr)
        sys.exit(1)
    print("skipped: no usable GPU here; the GPU runner runs this")
    sys.exit(77)
check(tracked.returncode == 0, "the program's status is unchanged (0)", tracked.stderr)
check("leaving 9 MiB in 3 allocations behind" in tracked.stdout, "the program ran", tracked.stdout)
check(re.search(r"^\[gpuguard\] LEAK: 9\.0 MiB in 3 allocations still live", tracked.stderr, re.M),
      "the leak report on stderr", tracked.stderr[-2000:])
report = {}
try:
    with open(leaks) as f:
        report = json.load(f)
except (OSError, ValueError) as error:
    failures.append("no leak JSON: %s" % error)
if report:
    check(report["total_bytes"] == 9 * MIB and report["total_count"] == 3, "9 MiB in 3 allocations live", report)
    devices = {d["device"]: d for d in report["devices"]}
    check(0 in devices and devices[0]["allocations"] == 7 and devices[0]["frees"] == 4,
          "device 0: 7 allocations (5 cudaMalloc, async, pitch), 4 frees", devices)
    check(-1 in devices and devices[-1]["allocations"] == 1 and devices[-1]["current_bytes"] == 0,
          "the pinned allocation was seen and freed", devices)
    check(report["misuse"]["unknown_pointer"] == 0 and report["misuse"]["double_free"] == 0, "no misuse", report["misuse"])

if not GPU:
    # The control: without the interposer, gpuguard says nothing.
    plain = run([PROGRAM], preload=False, options="leak_json=" + leaks + ".plain")
    check(plain.returncode == 0 and "[gpuguard]" not in plain.stderr and not os.path.exists(leaks + ".plain"),
          "without the interposer nothing is tracked", plain.stderr)
    # A program without the CUDA runtime: the interposer says what it could not see.
    nothing = run(["/bin/true"], options="text_log=off")
    check(nothing.returncode == 0 and "--track saw no CUDA runtime allocation" in nothing.stderr,
          "a program with no runtime calls is told so", nothing.stderr)
else:
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    checked = subprocess.run([sanitizer, "--leak-check", "full", PROGRAM], capture_output=True, text=True, timeout=300)
    summary = re.search(r"LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations", checked.stdout + checked.stderr)
    print("compute-sanitizer: %s" % (summary.group(0) if summary else "no leak summary"))
    if check(summary, "compute-sanitizer printed a leak summary", (checked.stdout + checked.stderr)[-3000:]) and report:
        device_leaks = [s for s in report["sites"] if s["device"] >= 0]
        ours = (sum(s["bytes"] for s in device_leaks), sum(s["count"] for s in device_leaks))
        print("gpuguard --track: %d bytes leaked in %d allocations" % ours)
        check(ours == (int(summary.group(1)), int(summary.group(2))),
              "gpuguard and compute-sanitizer name the same bytes and count", (ours, summary.group(0)))

if failures:
    print("FAILED (files kept in %s):\n- " % tmp + "\n- ".join(failures))
    sys.exit(1)
shutil.rmtree(tmp)
print("preload_test: all checks passed")
