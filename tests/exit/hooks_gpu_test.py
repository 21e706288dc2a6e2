#!/usr/bin/env python3
"""Exit paths on a real GPU: a child holding 4 GiB is ended by SIGTERM in the middle of an
allocation loop, or by an uncaught exception mid-training. Measured from this parent through NVML
(no CUDA context here): the device's used memory is back to the baseline within 1 s of the signal
or the throw, the status is the one the child would have had, and the leak report lists what was
live. Without a GPU (or NVML) it exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: hooks_gpu_test.py HOOKS_CHILD
"""
import ctypes
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CHILD = sys.argv[1]
MIB = 1024 * 1024
SLACK = 64 * MIB
failures = []


def say(text):
    print(text, flush=True)


def check(condition, what, detail=""):
    if not condition:
        failures.append(what + (("\n" + str(detail)) if detail else ""))
    return condition


def skip(reason):
    if os.environ.get("GPUGUARD_REQUIRE_GPU") == "1":
        print("FAILED: GPUGUARD_REQUIRE_GPU=1 but " + reason)
        sys.exit(1)
    print("skipped: " + reason)
    sys.exit(77)


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
except OSError:
    skip("no NVML (libnvidia-ml.so.1) on this machine, so no GPU to measure")
if nvml.nvmlInit_v2() != 0:
    skip("NVML found no driver")
handle = ctypes.c_void_p()
if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
    skip("NVML found no device 0")


def used():
    memory = Memory()
    if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
        raise SystemExit("nvmlDeviceGetMemoryInfo failed")
    return memory.used


tmp = tempfile.mkdtemp(prefix="gpuguard-hooks-gpu-")


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0]
    except OSError:
        return "gone"



def scenario(mode, end):
    leaks = os.path.join(tmp, mode + ".leaks.json")
    env = dict(os.environ, GPUGUARD_OPTIONS="device=cuda:text_log=off:leak_json=" + leaks)
    baseline = used()
    say("%s: starting, baseline %d MiB" % (mode, baseline // MIB))
    proc = subprocess.Popen([CHILD, mode, os.path.join(tmp, mode + ".marker")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    ready, _, _ = select.select([proc.stdout], [], [], 40)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("ready"):
        state = proc_state(proc.pid)
        proc.kill()
        say("FAILED: %s: the child did not get ready within 40 s (state %s)" % (mode, state))
        sys.exit(1)
    during = used()
    say("%s: ready, %d MiB used" % (mode, during // MIB))
    check(during - baseline >= 4096 * MIB, "%s: the child holds its 4 GiB" % mode, (baseline, during))
    if end == "signal":
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
    else:
        start = None  # the child throws about 500 ms after ready: timed from its end, below
    back_at = None
    exited_at = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if used() <= baseline + SLACK:
            back_at = time.monotonic()
            if exited_at is not None or proc.poll() is not None:
                break
        time.sleep(0.005)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        failures.append("%s: the child did not end within 30 s of its end (state: %s)" % (mode, proc_state(proc.pid)))
        say("FAILED:\n- " + "\n- ".join(failures))
        sys.exit(1)
    if exited_at is None:
        exited_at = time.monotonic()
    if end != "signal":
        start = exited_at  # for the throw: from the moment the process ended
    elapsed = None if back_at is None else max(back_at - start, 0.0)
    say("%s: baseline %d MiB, during %d MiB, back to baseline %s s after %s; status %s" % (
        mode, baseline // MIB, during // MIB, "never" if elapsed is None else "%.3f" % elapsed,
        "SIGTERM" if end == "signal" else "the process ended", proc.returncode))
    check(elapsed is not None and elapsed <= 1.0, "%s: device memory back to the baseline within 1 s" % mode, elapsed)
    expected = -signal.SIGTERM if end == "signal" else -signal.SIGABRT
    check(proc.returncode == expected, "%s: status %d" % (mode, expected), "status %s\n%s" % (proc.returncode, err[-3000:]))
    try:
        with open(leaks) as f:
            report = json.load(f)
        gpu = [d for d in report["devices"] if d["device"] == 0]
        check(report["total_bytes"] >= 4096 * MIB and gpu and gpu[0]["current_bytes"] >= 4096 * MIB,
              "%s: the report lists the 4 GiB live on device 0" % mode, report)
    except (OSError, ValueError) as error:
        failures.append("%s: no leak report: %s\n%s" % (mode, error, err[-2000:]))
    return err


# Normal exit with a cleanup that frees device memory: it runs before the runtime's teardown.
leaks = os.path.join(tmp, "gpu_exit.leaks.json")
say("gpu_exit: starting")
exit_proc = subprocess.Popen([CHILD, "gpu_exit", os.path.join(tmp, "gpu_exit.marker")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, GPUGUARD_OPTIONS="device=cuda:text_log=off:leak_json=" + leaks))
try:
    out, err = exit_proc.communicate(timeout=40)
except subprocess.TimeoutExpired:
    state = proc_state(exit_proc.pid)
    exit_proc.kill()
    say("FAILED: gpu_exit did not end within 40 s (state %s); its stderr follows" % state)
    try:
        say(exit_proc.communicate(timeout=5)[1][-3000:])
    except subprocess.TimeoutExpired:
        say("(cannot read it)")
    sys.exit(1)
exit_run = subprocess.CompletedProcess(exit_proc.args, exit_proc.returncode, out, err)
say("gpu_exit: status %d" % exit_run.returncode)
check(exit_run.returncode == 0, "gpu_exit: exit status 0", exit_run.stderr[-2000:])
check("unloading" not in exit_run.stderr.lower() and "cudaError" not in exit_run.stderr,
      "gpu_exit: no CUDA teardown errors surface", exit_run.stderr[-2000:])
try:
    with open(leaks) as f:
        report = json.load(f)
    check(report["total_bytes"] == 0, "gpu_exit: the cleanup freed the 4 GiB before the report", report)
except (OSError, ValueError) as error:
    failures.append("gpu_exit: no leak report: %s" % error)

scenario("gpu_loop", "signal")
err = scenario("gpu_throw", "throw")
check("uncaught exception of type std::runtime_error: CUDA kernel reported an illegal loss value" in err,
      "gpu_throw: the exception is logged", err[-2000:])

if failures:
    say("FAILED (files kept in %s):\n- " % tmp + "\n- ".join(failures))
    sys.exit(1)
shutil.rmtree(tmp)
print("hooks_gpu_test: all checks passed")
