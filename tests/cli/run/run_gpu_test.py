#!/usr/bin/env python3
"""`gpuguard run` on a real GPU, the case docs/design.md measured: a Python parent whose
multiprocessing child (spawn) holds 2 GiB on the GPU is killed with SIGKILL.

  plain:   the child is reparented and keeps its 2 GiB (measured, then cleaned up by hand)
  guarded: under `gpuguard run --grace 0.5`, the memory is back to the baseline within 1 s of the kill

Memory is read through NVML from this process (no CUDA context here). Without a GPU, NVML or
torch it exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: run_gpu_test.py GPUGUARD
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import SPAWNED_HOLDER_JOB, abort, check, finish, nvml_or_skip, say, torch_cuda_or_skip  # noqa: E402
from procfs import alive, seconds_until  # noqa: E402  (tests/support)

GPUGUARD = sys.argv[1]
MIB = 1024 * 1024
SLACK = 128 * MIB
used = nvml_or_skip().used  # device 0's used bytes
torch_cuda_or_skip()
TRAINER = [sys.executable, SPAWNED_HOLDER_JOB, str(2 << 30), "wait"]  # its worker holds 2 GiB


def start(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline().split()
    if len(line) != 2:
        proc.kill()
        abort("the trainer did not start: %r" % line)
    return proc, int(line[0]), int(line[1])


def back_within(baseline, seconds):
    """Seconds until device 0's memory is back within SLACK of `baseline`, or None."""
    return seconds_until(lambda: used() <= baseline + SLACK, seconds, step=0.005)


# ---- plain: the orphan keeps the memory ----------------------------------------------------------
baseline = used()
proc, parent, child = start(TRAINER)
held = used() - baseline
os.kill(parent, signal.SIGKILL)
proc.wait()
time.sleep(2.0)
residue = used() - baseline
say("plain: the child held %d MiB; 2 s after the parent's SIGKILL %d MiB are still used, child alive: %s"
    % (held // MIB, residue // MIB, alive(child)))
check(held >= 2048 * MIB, "plain: the child holds its 2 GiB", held)
check(alive(child) and residue >= 2048 * MIB, "plain: without gpuguard run the orphan keeps the memory", residue)
if alive(child):
    os.kill(child, signal.SIGKILL)
check(back_within(baseline, 10) is not None, "plain: memory back after killing the orphan by hand")

# ---- guarded: gpuguard run ends the orphan -------------------------------------------------------
baseline = used()
proc, parent, child = start([GPUGUARD, "run", "--grace", "0.5", "--", *TRAINER])
held = used() - baseline
killed_at = time.monotonic()
os.kill(parent, signal.SIGKILL)
elapsed = back_within(baseline, 10)
status = proc.wait(timeout=30)
say("guarded: the child held %d MiB; back to the baseline %s s after the parent's SIGKILL; "
    "gpuguard run exited %d; child alive: %s"
    % (held // MIB, "never" if elapsed is None else "%.3f" % elapsed, status, alive(child)))
check(held >= 2048 * MIB, "guarded: the child holds its 2 GiB", held)
check(elapsed is not None and elapsed <= 1.0, "guarded: memory back to the baseline within 1 s", elapsed)
check(status == 128 + signal.SIGKILL, "guarded: gpuguard run exits 137 (its child died by SIGKILL)", status)
check(not alive(child), "guarded: no process of the job survives")
if alive(child):
    os.kill(child, signal.SIGKILL)

finish("run_gpu_test")
