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
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import (SPAWNED_HOLDER_JOB, check, finish, nvml_or_skip, say, scratch,  # noqa: E402  (tests/support)
                     torch_cuda_or_skip, write_text)
from procfs import alive  # noqa: E402

GPUGUARD = sys.argv[1]
GIB = 1 << 30
MIB = 1 << 20

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


used = nvml_or_skip().used  # device 0's used bytes
torch_cuda_or_skip()
tmp = scratch("gpuguard-run-clean-gpu-")
server_file = write_text(os.path.join(tmp, "server.py"), SERVER)


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
# The job's main process exits at once, leaving its worker holding 1 GiB.
p, doc, line, took = run_guarded(os.path.join(tmp, "clean.json"), sys.executable, SPAWNED_HOLDER_JOB, str(GIB), "exit")
worker = int(p.stdout.split()[1]) if len(p.stdout.split()) == 2 else 0
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

finish("run_clean_gpu_test")
