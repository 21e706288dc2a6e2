#!/usr/bin/env python3
"""`gpuguard run --require-clean` on a real GPU: the gate passes for a job that leaves a GPU
holder the boundary ends, and fails for memory the boundary cannot give back.

  clean:     the job's main process starts a worker (multiprocessing, spawn) that holds 1 GiB, and
             exits at once, leaving it behind; the boundary (cgroup or subreaper) ends the worker,
             the driver gives the memory back, and the gate passes: gpuguard run exits 0.
  not clean: a GPU server outside the job (started before it, as an inference server, a Ray actor
             or a data service is) allocates 1 GiB when the job asks it to, and keeps it. It is not
             the job's process, so no boundary ends it, and the device's memory does not return
             to where it was before the job: gpuguard run exits 125 and names the extra memory.

Memory is read through NVML (no CUDA context in this process). Without NVML, a GPU or torch it
exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: run_clean_gpu_test.py GPUGUARD
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

GPUGUARD = sys.argv[1]
GIB = 1 << 30
MIB = 1 << 20
failures = []

WORKER_JOB = textwrap.dedent("""
    import multiprocessing as mp, os, time
    def hold(ready):
        import torch
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ready.set()
        time.sleep(600)
    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        worker = ctx.Process(target=hold, args=(ready,))
        worker.start()
        if not ready.wait(120):
            os._exit(3)
        print(worker.pid, flush=True)
        os._exit(0)  # leaves the worker behind (no join at exit)
""")

SERVER = textwrap.dedent("""
    import os, sys, torch
    fifo, ack = sys.argv[1], sys.argv[2]
    torch.zeros(1, device="cuda")  # its context exists before the job starts
    torch.cuda.synchronize()
    print("ready", flush=True)
    held = []
    with open(fifo) as requests:
        for line in requests:
            if line.strip() == "alloc":
                held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
                torch.cuda.synchronize()
                with open(ack, "w") as f:
                    f.write("done")
    import time
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
if subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                  capture_output=True).returncode != 0:
    skip("torch is not installed, or sees no CUDA device")


def used():
    memory = Memory()
    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
    return memory.used


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


tmp = tempfile.mkdtemp(prefix="gpuguard-run-clean-gpu-")
job_file = os.path.join(tmp, "job.py")  # multiprocessing's spawn imports __main__ from a file
with open(job_file, "w") as f:
    f.write(WORKER_JOB)
server_file = os.path.join(tmp, "server.py")
with open(server_file, "w") as f:
    f.write(SERVER)


def run_guarded(report, *cmd, stdout=subprocess.PIPE):
    started = time.monotonic()
    p = subprocess.run([GPUGUARD, "run", "--require-clean", "--grace", "5", "--report", report, "--", *cmd],
                       stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True, timeout=120)
    with open(report) as f:
        doc = json.load(f)
    line = [l for l in p.stderr.splitlines() if l.startswith("[gpuguard run] ")]
    return p, doc, (line[-1] if line else p.stderr), time.monotonic() - started


# ---- clean: the boundary ends the worker the job left, the memory comes back ----------------------
baseline = used()
p, doc, line, took = run_guarded(os.path.join(tmp, "clean.json"), sys.executable, job_file)
worker = int(p.stdout.split()[0]) if p.stdout.split() else 0
say("clean: %s (%.1f s)" % (line, took))
check(p.returncode == 0, "clean: gpuguard run --require-clean exits 0", line)
check(doc["clean"] is not None and doc["clean"]["clean"], "clean: the report says clean", doc.get("clean"))
check(worker > 0 and any(x["pid"] == worker for x in doc["teardown"]["processes"]),
      "clean: the worker the job left was ended by the boundary", doc["teardown"])
check(not alive(worker), "clean: the worker is gone")
check(used() <= baseline + 128 * MIB, "clean: device 0's memory is back to the baseline", (baseline, used()))
if worker > 0 and alive(worker):
    os.kill(worker, signal.SIGKILL)

# ---- not clean: a server outside the job keeps memory the job asked for --------------------------
fifo = os.path.join(tmp, "requests")
ack = os.path.join(tmp, "ack")
os.mkfifo(fifo)
server = subprocess.Popen([sys.executable, server_file, fifo, ack], stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
try:
    check(server.stdout.readline().strip() == "ready", "not clean: the server started")
    job = 'echo alloc > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done'
    p, doc, line, took = run_guarded(os.path.join(tmp, "unclean.json"), "sh", "-c", job, "job", fifo, ack)
    say("not clean: %s (%.1f s)" % (line, took))
    check(p.returncode == 125, "not clean: gpuguard run --require-clean exits 125", line)
    check(doc["exit_code"] == 0, "not clean: the job itself exited 0 (its status is in the report)", doc["exit_code"])
    c = doc["clean"] or {}
    check(c.get("clean") is False, "not clean: the report says not clean", c)
    grew = [d for d in c.get("devices", []) if d["before_bytes"] is not None and d["after_bytes"] is not None
            and d["after_bytes"] - d["before_bytes"] >= GIB - 64 * MIB]
    check(grew, "not clean: the report shows about 1 GiB more on a device than before the job", c)
    check("GPU NOT CLEAN" in line and "more than before the job" in line, "not clean: the summary line says why", line)
    check(alive(server.pid), "not clean: the server, not the job's, was not signalled")
finally:
    server.kill()
    server.wait()

if failures:
    say("FAILED:\n- " + "\n- ".join(failures))
    sys.exit(1)
say("run_clean_gpu_test: all checks passed")
