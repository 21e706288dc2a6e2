#!/usr/bin/env python3
"""`gpuguard run` on a real GPU, the case docs/design.md measured: a Python parent whose
multiprocessing child (spawn) holds 2 GiB on the GPU is killed with SIGKILL.

  plain:   the child is reparented and keeps its 2 GiB (measured, then cleaned up by hand)
  guarded: under `gpuguard run --grace 0.5`, the memory is back to the baseline within 1 s of the kill

Memory is read through NVML from this process (no CUDA context here). Without a GPU, NVML or
torch it exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: run_gpu_test.py GPUGUARD
"""
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

GPUGUARD = sys.argv[1]
MIB = 1024 * 1024
SLACK = 128 * MIB
failures = []

TRAINER = textwrap.dedent("""
    import multiprocessing as mp, os, sys, time
    def hold(ready):
        import torch
        x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ready.set()
        time.sleep(600)
    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        child = ctx.Process(target=hold, args=(ready,))
        child.start()
        ready.wait(120)
        print(os.getpid(), child.pid, flush=True)
        time.sleep(600)
""")


def say(text):
    print(text, flush=True)


def check(condition, what, detail=""):
    if not condition:
        failures.append(what + (("\n" + str(detail)) if detail else ""))
    return condition


def skip(reason):
    if os.environ.get("GPUGUARD_REQUIRE_GPU") == "1":
        say("FAILED: GPUGUARD_REQUIRE_GPU=1 but " + reason)
        sys.exit(1)
    say("skipped: " + reason)
    sys.exit(77)


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
except OSError:
    skip("no NVML (libnvidia-ml.so.1), so no GPU to measure")
handle = ctypes.c_void_p()
if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
    skip("NVML found no device")
if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0:
    skip("torch is not installed")


def used():
    memory = Memory()
    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
    return memory.used


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


# multiprocessing's spawn imports the parent's __main__ in the child: the trainer must be a file.
TRAINER_FILE = os.path.join(tempfile.mkdtemp(prefix="gpuguard-run-gpu-"), "trainer.py")
with open(TRAINER_FILE, "w") as f:
    f.write(TRAINER)


def start(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline().split()
    if len(line) != 2:
        proc.kill()
        say("FAILED: the trainer did not start: %r" % line)
        sys.exit(1)
    return proc, int(line[0]), int(line[1])


def back_within(baseline, seconds):
    start_at = time.monotonic()
    while time.monotonic() - start_at < seconds:
        if used() <= baseline + SLACK:
            return time.monotonic() - start_at
        time.sleep(0.005)
    return None


# ---- plain: the orphan keeps the memory ----------------------------------------------------------
baseline = used()
proc, parent, child = start([sys.executable, TRAINER_FILE])
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
proc, parent, child = start([GPUGUARD, "run", "--grace", "0.5", "--", sys.executable, TRAINER_FILE])
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

if failures:
    say("FAILED:\n- " + "\n- ".join(failures))
    sys.exit(1)
say("run_gpu_test: all checks passed")
