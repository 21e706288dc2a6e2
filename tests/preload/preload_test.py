#!/usr/bin/env python3
"""The interposer (libgpuguard_preload.so) on programs that know nothing of gpuguard.

usage: preload_test.py PRELOAD [--fake-driver DIR] [--gpu] [--cli GPUGUARD]
                       [--leaky PROGRAM]... [--kernel PROGRAM]... [--driver-program PROGRAM]
                       [--defer-program PROGRAM] [--rtld-next PROGRAM]

--leaky: leaky_program.cpp (9 MiB in 3 cudaMalloc allocations left live, everything else freed).
--kernel: leaky_kernel.cu (3 + 5 MiB of cudaMalloc, 1 MiB managed and a pitched block left live).
--driver-program: driver_program.cpp (the driver API: 4 MiB of cuMemAlloc and a 2 MiB physical
  allocation left live).
--defer-program: defer_program.cpp (one thread's calls recorded later, then a second thread's).
With --fake-driver the programs run on the stand-in driver in DIR (fake_driver.cpp) and stand-in
runtime (fake_cudart.cpp), so every way of reaching the driver is tested on any machine. With
--gpu they run on the real CUDA libraries, and each leak report must name the same bytes and
count as `compute-sanitizer --leak-check full`; with no usable GPU that case exits 77 (skipped),
unless GPUGUARD_REQUIRE_GPU=1, when it fails. With --cli the tracked runs go through
`gpuguard run --track` (which finds the interposer by GPUGUARD_PRELOAD_LIBRARY here), as a user
would start them, and its summary is checked too.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, scratch, skip  # noqa: E402  (tests/support)

PRELOAD = sys.argv[1]


def values(flag):
    return [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == flag]


def value(flag):
    found = values(flag)
    return found[0] if found else None


GPU = "--gpu" in sys.argv[2:]
CLI = value("--cli")
FAKE_DRIVER = value("--fake-driver")
LEAKY, KERNELS = values("--leaky"), values("--kernel")
DRIVER_PROGRAM, RTLD_NEXT = value("--driver-program"), value("--rtld-next")
DEFER_PROGRAM = value("--defer-program")
MIB = 1024 * 1024
tmp = scratch("gpuguard-preload-")


def environment(preload=True, options="", extra=None):
    env = dict(os.environ, GPUGUARD_OPTIONS=options)
    env.pop("LD_PRELOAD", None)
    env.pop("GPUGUARD_TRACK_DIR", None)
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    if FAKE_DRIVER:
        env["LD_LIBRARY_PATH"] = FAKE_DRIVER + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.update(extra or {})
    return env


def run(argv, preload=True, options="", extra=None):
    return subprocess.run(argv, env=environment(preload, options, extra), capture_output=True, text=True, timeout=300)


def tracked(program, name, extra=None, more_options=""):
    """Runs PROGRAM tracked; returns (result, leak report, per-process records)."""
    leaks = os.path.join(tmp, name + ".leaks.json")
    records = os.path.join(tmp, name + ".records")
    os.makedirs(records)
    options = "text_log=off:leak_json=" + leaks + (":" + more_options if more_options else "")
    if CLI:
        env = environment(False, options, extra)
        env["GPUGUARD_PRELOAD_LIBRARY"] = PRELOAD
        result = subprocess.run([CLI, "run", "--track", "--", program], env=env, capture_output=True, text=True, timeout=300)
    else:
        result = run([program], options=options, extra=dict(extra or {}, GPUGUARD_TRACK_DIR=records))
    report = {}
    try:
        with open(leaks) as f:
            report = json.load(f)
    except (OSError, ValueError) as error:
        check(False, "%s: no leak JSON: %s" % (name, error), result.stderr[-2000:])
    found = []
    for path in glob.glob(os.path.join(records, "*.json")):
        with open(path) as f:
            found.append(json.load(f))
    return result, report, found


def device_totals(report):
    sites = [s for s in report.get("sites", []) if s["device"] >= 0]
    return sum(s["bytes"] for s in sites), sum(s["count"] for s in sites)


def check_summary(name, result, leaked_bytes, leaked_count):
    """Under gpuguard run: one line for the process, and the total."""
    if not CLI:
        return
    lines = [l for l in result.stderr.splitlines() if l.startswith("[gpuguard] --track: pid ")]
    check(len(lines) == 1, name + ": the supervisor writes one line for the one process that used CUDA", result.stderr[-2000:])
    check(re.search(r"--track: 1 process used CUDA; leaked in all: [0-9.]+ [KMG]?i?B in %d allocation" % leaked_count,
                    result.stderr), name + ": the supervisor's total", result.stderr[-2000:])


def gpu_skip_if_unusable(result, marker):
    if result.returncode != 0 and marker in result.stderr:
        skip("the program could not allocate (no usable GPU here; the GPU runner runs this):\n" + result.stderr)


def sanitizer_summary(program):
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    checked = subprocess.run([sanitizer, "--leak-check", "full", program], capture_output=True, text=True, timeout=300)
    text = checked.stdout + checked.stderr
    summary = re.search(r"LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations", text)
    if not summary and re.search(r"ERROR SUMMARY: 0 errors", text):
        return (0, 0), "no leaks"
    check(summary, "compute-sanitizer printed a leak summary for " + program, text[-3000:])
    return ((int(summary.group(1)), int(summary.group(2))) if summary else None), (summary.group(0) if summary else "")


# ---- through the runtime: leaky_program ---------------------------------------------------------
# The line of leaky_program.cpp whose cudaMalloc calls leak.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "leaky_program.cpp")) as source:
    LEAKY_LINE = next(n for n, line in enumerate(source, 1) if "cudaMalloc(&blocks[i]" in line)

for number, program in enumerate(LEAKY):
    name = "leaky%d" % number
    result, report, records = tracked(program, name)
    if GPU:
        gpu_skip_if_unusable(result, "leaky_program: cudaMalloc")
    check(result.returncode == 0, name + ": the program's status is unchanged (0)", result.stderr)
    check("leaving 9 MiB in 3 allocations behind" in result.stdout, name + ": the program ran", result.stdout)
    check(re.search(r"^\[gpuguard\] LEAK: 9\.0 MiB in 3 allocations still live", result.stderr, re.M),
          name + ": the leak report on stderr", result.stderr[-2000:])
    # No stacks option: the default (stacks=all) names the program's line of the leaking cudaMalloc.
    check(re.search(r"^\[gpuguard\] +#\d+ main at \S*leaky_program\.cpp:%d$" % LEAKY_LINE, result.stderr, re.M),
          name + ": the default report names leaky_program.cpp:%d" % LEAKY_LINE, result.stderr[-2000:])
    if report:
        check(report["total_bytes"] == 9 * MIB and report["total_count"] == 3, name + ": 9 MiB in 3 allocations live", report)
        devices = {d["device"]: d for d in report["devices"]}
        check(0 in devices and devices[0]["allocations"] == 7 and devices[0]["frees"] == 4,
              name + ": device 0: 7 allocations (5 cudaMalloc, async, pitch), 4 frees", devices)
        check(-1 in devices and devices[-1]["allocations"] == 1 and devices[-1]["current_bytes"] == 0,
              name + ": the pinned allocation was seen and freed", devices)
        check(report["misuse"]["unknown_pointer"] == 0 and report["misuse"]["double_free"] == 0, name + ": no misuse",
              report["misuse"])
    check_summary(name, result, 9 * MIB, 3)
    if not CLI:
        check(len(records) == 1 and records[0]["leaked_bytes"] == 9 * MIB and records[0]["wrapped_lookups"] > 0,
              name + ": the process's record (GPUGUARD_TRACK_DIR)", records)
        if GPU and records:
            device0 = [d for d in records[0]["devices"] if d["device"] == 0]
            check(device0 and "nvml_used_bytes" in device0[0] and "unattributed_bytes" in device0[0],
                  name + ": NVML's figure and the unattributed rest are in the record", records)
            if device0 and "unattributed_bytes" in device0[0]:
                print("%s: NVML says %d bytes for the process at exit, %d of them unattributed (%s)" % (
                    name, device0[0]["nvml_used_bytes"], device0[0]["unattributed_bytes"], os.path.basename(program)))
    if GPU:
        ours = device_totals(report) if report else None
        theirs, said = sanitizer_summary(program)
        print("%s: compute-sanitizer: %s; gpuguard --track: %s" % (os.path.basename(program), said, ours))
        check(ours == theirs, name + ": gpuguard and compute-sanitizer name the same bytes and count", (ours, said))

# ---- a CUDA program as nvcc builds it: leaky_kernel --------------------------------------------
for number, program in enumerate(KERNELS):
    name = "kernel%d" % number
    result, report, records = tracked(program, name)
    gpu_skip_if_unusable(result, "leaky_kernel: cudaMalloc")
    check(result.returncode == 0, name + ": the program's status is unchanged (0)", result.stderr)
    if report:
        devices = {d["device"]: d for d in report["devices"]}
        check(0 in devices and devices[0]["allocations"] == 7 and devices[0]["frees"] == 3,
              name + ": device 0: 7 allocations (3 cudaMalloc, 2 managed, pitch, async), 3 frees", devices)
        check(report["total_count"] == 4, name + ": 4 allocations live", report.get("sites"))
    ours = device_totals(report) if report else None
    theirs, said = sanitizer_summary(program)
    print("%s: compute-sanitizer: %s; gpuguard --track: %s" % (os.path.basename(program), said, ours))
    check(ours == theirs, name + ": gpuguard and compute-sanitizer name the same bytes and count", (ours, said))
    check_summary(name, result, ours[0] if ours else 0, ours[1] if ours else 0)

# ---- the driver API itself: driver_program ------------------------------------------------------
if DRIVER_PROGRAM:
    result, report, records = tracked(DRIVER_PROGRAM, "driver")
    if GPU:
        gpu_skip_if_unusable(result, "driver_program: cu")
    check(result.returncode == 0 and "leaving 6 MiB in 2 allocations behind" in result.stdout,
          "driver: the program ran and kept its status", result.stdout + result.stderr)
    if report:
        check(report["total_bytes"] == 6 * MIB and report["total_count"] == 2,
              "driver: 6 MiB in 2 allocations live (4 MiB cuMemAlloc, 2 MiB cuMemCreate)", report)
        devices = {d["device"]: d for d in report["devices"]}
        check(0 in devices and devices[0]["allocations"] == 4 and devices[0]["frees"] == 2,
              "driver: device 0: 4 allocations (2 cuMemAlloc, 2 cuMemCreate), 2 frees", devices)
        check(-1 in devices and devices[-1]["allocations"] == 1 and devices[-1]["current_bytes"] == 0,
              "driver: the pinned cuMemHostAlloc was seen and freed", devices)
    if not CLI:
        check(len(records) == 1 and records[0]["vmm_handles"] == 1 and records[0]["vmm_created_bytes"] == 2 * MIB
              and records[0]["vmm_mapped_bytes"] == 2 * MIB,
              "driver: the record counts the live physical allocation and its mapping", records)
    check_summary("driver", result, 6 * MIB, 2)

# ---- recording later, off the calling thread: defer_program -------------------------------------
def phase_figures(stdout, phase):
    """The interposer's figures the program printed after `phase`, as {device: figures}, and the record."""
    for line in stdout.splitlines():
        if line.startswith(phase + " {"):
            record = json.loads(line[len(phase) + 1:])
            return {d["device"]: d for d in record["devices"]}, record
    return {}, {}


if DEFER_PROGRAM:
    for defer in ("1", "0"):
        name = "defer" + defer
        # Deferring needs stacks off (a stack is the calling thread's).
        result, report, records = tracked(DEFER_PROGRAM, name, {"GPUGUARD_TRACK_DEFER": defer}, "stacks=off")
        if GPU:
            gpu_skip_if_unusable(result, "defer_program: cu")
        check(result.returncode == 0 and "leaving 1 MiB in 1 allocation behind" in result.stdout,
              name + ": the program ran and kept its status", result.stdout + result.stderr[-2000:])
        # One thread alone: its calls wait in the ring (unless GPUGUARD_TRACK_DEFER=0), and every one
        # is in the figures when they are read.
        devices, record = phase_figures(result.stdout, "phase 1")
        check(record.get("recording") == ("deferred" if defer == "1" else "at_once"),
              name + ": phase 1 is recorded %s" % ("later" if defer == "1" else "at once"), record)
        check(devices.get(0, {}).get("allocations") == 20003 and devices[0].get("frees") == 20000 and
              devices[0].get("live_bytes") == 3 * MIB,
              name + ": phase 1: 20003 allocations, 20000 frees, 3 MiB live, all read back", devices)
        # A second thread frees three of the first thread's blocks (the last most likely still in the
        # ring) and keeps one of its own: from its first call every call is recorded at once, after
        # what the ring held, so every free finds its allocation.
        devices, record = phase_figures(result.stdout, "phase 2")
        check(record.get("recording") == "at_once", name + ": a second thread ends the deferring", record)
        check(devices.get(0, {}).get("allocations") == 30006 and devices[0].get("frees") == 30003 and
              devices[0].get("live_bytes") == 4 * MIB and record.get("untracked_frees") == 0,
              name + ": phase 2: every cross-thread free known, and the second thread's block", (devices, record))
        if not GPU:
            # The ring is recorded before fork(): the child knows the block it inherited, frees its
            # copy quietly, and counts only its own calls.
            devices, record = phase_figures(result.stdout, "child")
            check(record.get("recording") == "at_once" and devices.get(0, {}).get("allocations") == 1 and
                  devices[0].get("frees") == 1 and devices[0].get("live_bytes") == 0 and
                  record.get("untracked_frees") == 0,
                  name + ": a forked child records its own calls, at once, and none of its parent's",
                  result.stdout[-2000:])
        if report:
            check(report["total_bytes"] == MIB and report["total_count"] == 1 and
                  report["misuse"]["unknown_pointer"] == 0 and report["misuse"]["double_free"] == 0,
                  name + ": 1 MiB in 1 allocation leaked, no misuse", report)
    if not GPU:
        # With two devices the stream-ordered pair's common path (device 0, asked nothing) is not
        # taken: the stand-in's context is device 1's, and every deferred allocation is found there.
        result, report, records = tracked(DEFER_PROGRAM, "defer_two_devices", {"FAKE_DRIVER_CONTEXT_DEVICE": "1"},
                                          "stacks=off")
        devices, record = phase_figures(result.stdout, "phase 1")
        check(record.get("recording") == "deferred" and devices.get(1, {}).get("allocations") == 20003 and
              devices[1].get("frees") == 20000 and devices.get(0, {}).get("allocations", 0) == 0,
              "defer_two_devices: phase 1's deferred allocations are on the context's device (1)",
              (devices, result.stderr[-2000:]))
    # With stacks on (sampled, or all by default), each call's stack is the calling thread's: recorded at once.
    for stacks in ("stacks=sampled", ""):
        result, report, records = tracked(DEFER_PROGRAM, "defer_" + (stacks or "default"), more_options=stacks)
        devices, record = phase_figures(result.stdout, "phase 1")
        check(record.get("recording") == "at_once" and devices.get(0, {}).get("allocations") == 20003,
              "defer_stacks: with %s, calls are recorded at once" % (stacks or "the default stacks"),
              (record, result.stderr[-2000:]))

if CLI and LEAKY:
    # A job whose shells and helpers never load the CUDA driver: only the one process that used it
    # is summarised, and the helpers print nothing.
    env = environment(False, "text_log=off")
    env["GPUGUARD_PRELOAD_LIBRARY"] = PRELOAD
    script = "sh -c true; /bin/true; '%s'; sh -c 'echo helper done'" % LEAKY[0]
    result = subprocess.run([CLI, "run", "--track", "--", "sh", "-c", script], env=env, capture_output=True, text=True,
                            timeout=300)
    lines = [l for l in result.stderr.splitlines() if l.startswith("[gpuguard] --track: pid ")]
    check(result.returncode == 0 and len(lines) == 1 and "(%s)" % os.path.basename(LEAKY[0]) in lines[0] and
          "--track: 1 process used CUDA" in result.stderr and "helper done" in result.stdout,
          "helpers: one line, for the one process of five that used CUDA", result.stderr[-2000:])
    check(not re.search(r"saw no|were not seen|allocated no memory", result.stderr),
          "helpers: the processes that never loaded the driver said nothing", result.stderr[-2000:])
if GPU and CLI and LEAKY:
    # Alongside compute-sanitizer (which injects through CUDA_INJECTION64_PATH): both reports, agreeing.
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    env = environment(False, "text_log=off")
    env["GPUGUARD_PRELOAD_LIBRARY"] = PRELOAD
    result = subprocess.run([CLI, "run", "--track", "--", sanitizer, "--leak-check", "full", LEAKY[-1]], env=env,
                            capture_output=True, text=True, timeout=300)
    text = result.stdout + result.stderr
    check("LEAK SUMMARY: 9437184 bytes leaked in 3 allocations" in text and
          re.search(r"^\[gpuguard\] LEAK: 9\.0 MiB in 3 allocations", text, re.M),
          "with compute-sanitizer: both report the same 3 allocations", text[-3000:])
    print("with compute-sanitizer: %s" % ", ".join(
        l.strip() for l in text.splitlines() if "LEAK SUMMARY" in l or l.startswith("[gpuguard] LEAK")))
if FAKE_DRIVER and not CLI:
    # The CUDA 11.3-11.8 runtimes' lookup (cuGetProcAddress version 1) is followed as well.
    result, report, records = tracked(LEAKY[0], "v1", {"FAKE_CUDART_VERSION": "11030"})
    check(report and report["total_bytes"] == 9 * MIB and report["total_count"] == 3,
          "v1: the version-1 lookup is wrapped too", result.stderr[-2000:])
    # With two devices the interposer asks the driver which device the context is on (with one it
    # need not): the stand-in's context is device 1's, so the 2 cuMemAlloc blocks are found there,
    # and the 2 cuMemCreate allocations on the device their properties name (0).
    if DRIVER_PROGRAM:
        result, report, records = tracked(DRIVER_PROGRAM, "two_devices", {"FAKE_DRIVER_CONTEXT_DEVICE": "1"})
        devices = {d["device"]: d for d in report.get("devices", [])} if report else {}
        check(result.returncode == 0 and devices.get(1, {}).get("allocations") == 2 and
              devices.get(0, {}).get("allocations") == 2,
              "two_devices: cuMemAlloc on the context's device (1), cuMemCreate on its own (0)",
              (devices, result.stderr[-2000:]))
    # An entry point the driver hands out that is none of its exported ones is not guessed at: it is
    # passed through unwrapped, and counted.
    result, report, records = tracked(LEAKY[0], "hidden", {"FAKE_DRIVER_HIDE_ALLOC": "1"})
    check(result.returncode == 0 and report and report["total_count"] == 0 and records and
          records[0]["unidentified_lookups"] >= 1,
          "hidden: an unknown address for cuMemAlloc is passed through and counted", (report, records))
    # The control: without the interposer, gpuguard says nothing.
    plain = run([LEAKY[0]], preload=False, options="leak_json=" + os.path.join(tmp, "plain.json"))
    check(plain.returncode == 0 and "[gpuguard]" not in plain.stderr and not os.path.exists(os.path.join(tmp, "plain.json")),
          "without the interposer nothing is tracked", plain.stderr)
    # A process that never loads the CUDA driver (a shell, a launcher's helper) says nothing at all.
    nothing = run(["/bin/sh", "-c", "true"], options="text_log=off")
    check(nothing.returncode == 0 and "[gpuguard]" not in nothing.stderr,
          "a process that never loads the CUDA driver prints nothing", nothing.stderr)
if RTLD_NEXT:
    # gpuguard's dlsym leaves dlsym(RTLD_NEXT, ...) of other code resolving relative to that code.
    for preload in (False, True):
        result = run([RTLD_NEXT], preload=preload)
        check(result.stdout.strip() == "rtld_next: 1",
              "RTLD_NEXT resolves after the calling library (%s the interposer)" % ("with" if preload else "without"),
              result.stdout + result.stderr)

finish("preload_test")
