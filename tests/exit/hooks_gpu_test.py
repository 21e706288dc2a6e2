#!/usr/bin/env python3
"""Exit paths on a real GPU: a child holding 4 GiB is ended by SIGTERM in the middle of an
allocation loop, or by an uncaught exception mid-training. Measured from this parent through NVML
(no CUDA context here): the device's used memory is back to the baseline within 1 s of the signal
or the throw, the status is the one the child would have had, and the leak report lists what was
live. Without a GPU (or NVML) it exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: hooks_gpu_test.py HOOKS_CHILD
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import abort, check, finish, no_core_dumps, nvml_or_skip, say, scratch  # noqa: E402  (tests/support)
from procfs import state as proc_state  # noqa: E402

CHILD = sys.argv[1]
MIB = 1024 * 1024
SLACK = 64 * MIB
used = nvml_or_skip().used  # device 0's used bytes
tmp = scratch("gpuguard-hooks-gpu-")


def scenario(mode, end):
    leaks = os.path.join(tmp, mode + ".leaks.json")
    env = dict(os.environ, GPUGUARD_OPTIONS="device=cuda:text_log=off:leak_json=" + leaks)
    baseline = used()
    say("%s: starting, baseline %d MiB" % (mode, baseline // MIB))
    proc = subprocess.Popen([CHILD, mode, os.path.join(tmp, mode + ".marker")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=no_core_dumps)
    ready, _, _ = select.select([proc.stdout], [], [], 40)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("ready"):
        state = proc_state(proc.pid)
        proc.kill()
        abort("%s: the child did not get ready within 40 s (state %s)" % (mode, state))
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
        state = proc_state(proc.pid)
        proc.kill()
        abort("%s: the child did not end within 30 s of its end (state: %s)" % (mode, state))
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
        check(False, "%s: no leak report: %s" % (mode, error), err[-2000:])
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
    try:
        stderr = exit_proc.communicate(timeout=5)[1][-3000:]
    except subprocess.TimeoutExpired:
        stderr = "(cannot read it)"
    abort("gpu_exit did not end within 40 s (state %s); its stderr follows" % state, stderr)
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
    check(False, "gpu_exit: no leak report: %s" % error)

scenario("gpu_loop", "signal")
err = scenario("gpu_throw", "throw")
check("uncaught exception of type std::runtime_error: CUDA kernel reported an illegal loss value" in err,
      "gpu_throw: the exception is logged", err[-2000:])

finish("hooks_gpu_test")
