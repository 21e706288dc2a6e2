#!/usr/bin/env python3
"""`gpuguard run` on a real GPU, the case docs/design.md measured: a Python parent whose
multiprocessing child (spawn) holds 2 GiB on the GPU is killed with SIGKILL.

  plain:   the child is reparented and keeps its 2 GiB (measured, then cleaned up by hand)
  guarded: under `gpuguard run --grace 0.5`, the memory is back to the baseline within 1 s of the kill,
           on each boundary: the default (the job's cgroup, as root), the job's PID namespace
           (`--no-cgroup`) and the subreaper path alone (`--no-cgroup --no-namespace`)

Memory is read through NVML from this process (no CUDA context here). Without a GPU, NVML or
torch it exits 77 (skipped), unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: run_gpu_test.py GPUGUARD
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import SPAWNED_HOLDER_JOB, abort, check, finish, nvml_or_skip, say, torch_cuda_or_skip  # noqa: E402
from procfs import alive, outer_pid, seconds_until  # noqa: E402  (tests/support)

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

# ---- guarded: gpuguard run ends the orphan, on each boundary -------------------------------------
def namespaces_why():
    """"" where util-linux's unshare can make a PID namespace here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    user = ["--user", "--map-current-user"] if os.geteuid() != 0 else []
    r = subprocess.run(["unshare", *user, "--pid", "--mount", "--fork", "true"], capture_output=True, text=True)
    return "" if r.returncode == 0 else r.stderr.strip()


scratch = tempfile.mkdtemp(prefix="gpuguard-run-gpu-")
ns_why = namespaces_why()
for name, options, kind in (("default", [], None), ("PID namespace", ["--no-cgroup"], "pid_namespace"),
                            ("subreaper", ["--no-cgroup", "--no-namespace"], "subreaper")):
    if kind == "pid_namespace" and ns_why:
        check(False, "guarded, %s: the kernel makes PID namespaces here" % name, ns_why)
        continue
    report = os.path.join(scratch, "%s.json" % (kind or "default"))
    baseline = used()
    proc, parent, child = start([GPUGUARD, "run", "--grace", "0.5", "--report", report, *options, "--", *TRAINER])
    if kind == "pid_namespace":  # the trainer said its PIDs as its namespace sees them
        parent, child = outer_pid(parent, proc.pid), outer_pid(child, proc.pid)
        if parent is None or child is None:
            proc.kill()
            abort("guarded, %s: the trainer's processes were not found outside its namespace" % name)
    held = used() - baseline
    os.kill(parent, signal.SIGKILL)
    elapsed = back_within(baseline, 10)
    status = proc.wait(timeout=30)
    with open(report) as f:
        boundary = json.load(f)["boundary"]["kind"]
    say("guarded, %s (boundary %s): the child held %d MiB; back to the baseline %s s after the parent's SIGKILL; "
        "gpuguard run exited %d; child alive: %s"
        % (name, boundary, held // MIB, "never" if elapsed is None else "%.3f" % elapsed, status, alive(child)))
    if kind is not None:
        check(boundary == kind, "guarded, %s: the report names the boundary" % name, boundary)
    check(held >= 2048 * MIB, "guarded, %s: the child holds its 2 GiB" % name, held)
    check(elapsed is not None and elapsed <= 1.0, "guarded, %s: memory back to the baseline within 1 s" % name, elapsed)
    check(status == 128 + signal.SIGKILL, "guarded, %s: gpuguard run exits 137 (its child died by SIGKILL)" % name,
          status)
    check(not alive(child), "guarded, %s: no process of the job survives" % name)
    if alive(child):
        os.kill(child, signal.SIGKILL)
shutil.rmtree(scratch, ignore_errors=True)

finish("run_gpu_test")
