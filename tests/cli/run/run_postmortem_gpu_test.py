#!/usr/bin/env python3
"""A post-mortem on a real GPU (docs/run.md, "Post-mortem"): a PyTorch job under `gpuguard run
--track` holds about 1.5 GiB in tensors and is SIGKILLed in the middle of a step (inside the
operation scopes "train_step" > "forward" where the gpuguard Python package is importable). The post-mortem's device 0 bytes must be at most NVML's
figure for that process just before the kill, and NVML's figure less them at most what the leak
report calls unattributed (the CUDA context, the caching allocator's unused reserve: here under
1 GiB); it names the holders (sites with frames) and the open scopes, and its cause is SIGKILL.
The post-mortem text is printed for docs/run.md. Exits 77 (skipped) without a GPU, NVML or torch,
unless GPUGUARD_REQUIRE_GPU=1, when it fails.

usage: run_postmortem_gpu_test.py GPUGUARD
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import abort, check, finish, nvml_or_skip, say, torch_cuda_or_skip  # noqa: E402

GPUGUARD = sys.argv[1]
MIB = 1024 * 1024
UNATTRIBUTED_LIMIT = 1024 * MIB

nv = nvml_or_skip()
torch_cuda_or_skip()


class _process(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def process_bytes(pid):
    """NVML's used memory of `pid` on device 0 (None if not listed)."""
    count = ctypes.c_uint(64)
    infos = (_process * 64)()
    if nv.lib.nvmlDeviceGetComputeRunningProcesses_v3(nv.handle(0), ctypes.byref(count), infos) != 0:
        abort("nvmlDeviceGetComputeRunningProcesses_v3 failed")
    for i in range(count.value):
        if infos[i].pid == pid:
            return infos[i].usedGpuMemory
    return None


JOB = r'''
import contextlib, os, sys, torch
try:
    import gpuguard  # the Python package (python/), where this interpreter finds it
    scope = gpuguard.op
except ImportError:
    scope = lambda name: contextlib.nullcontext()
    print("no-scopes", file=sys.stderr, flush=True)
torch.cuda.init()
weights = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]  # 1 GiB
with scope("train_step"):
    with scope("forward"):
        activations = [torch.empty(128 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]  # 512 MiB
        torch.cuda.synchronize()
        print(os.getpid(), flush=True)
        sys.stdin.read()  # mid-step until killed
'''

tmp = tempfile.mkdtemp(prefix="gpuguard-postmortem-gpu-")
report = os.path.join(tmp, "run.json")
log = os.path.join(tmp, "job.jsonl")
env = dict(os.environ, GPUGUARD_OPTIONS=f"stacks=all:jsonl_log={log}", GPUGUARD_TRACK_DEFER="0")
env.pop("GPUGUARD_POSTMORTEM_FD", None)
proc = subprocess.Popen([GPUGUARD, "run", "--track", "--report", report, "--", sys.executable, "-c", JOB],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
line = proc.stdout.readline().split()
if len(line) != 1:
    proc.kill()
    abort("the job did not start", proc.stderr.read())
pid = int(line[0])
time.sleep(0.2)
before_kill = process_bytes(pid)
os.kill(pid, signal.SIGKILL)
_, err = proc.communicate(timeout=120)
say(err)
check(before_kill is not None, "NVML lists the job's process before the kill", before_kill)
with open(report) as f:
    doc = json.load(f)
pms = doc["postmortems"]
check(len(pms) == 1, "one post-mortem", json.dumps(pms)[:2000])
pm = pms[0]
check(pm["cause"] == "signal" and pm["signal_name"] == "SIGKILL", "its cause is SIGKILL", pm["cause_text"])
device0 = sum(d["live_bytes"] for d in pm["devices"] if d["device"] == 0)
say("NVML: %d MiB; post-mortem: %d MiB on device 0" % (before_kill // MIB, device0 // MIB))
check(device0 >= 1536 * MIB, "the post-mortem holds at least the 1.5 GiB of tensors", device0)
check(device0 <= before_kill, "the post-mortem's device bytes are within NVML's figure", (device0, before_kill))
check(before_kill - device0 <= UNATTRIBUTED_LIMIT, "NVML's figure less the post-mortem is the unattributed part",
      before_kill - device0)
named = [f for s in pm["sites"] for f in s["frames"] if f["function"] or f["location"]]
check(named, "the holders are named (sites with resolved frames)", pm["sites"])
scopes = [[s["name"] for s in t["scopes"]] for t in pm["threads"]]
if "no-scopes" in err:
    say("NOTE: the gpuguard Python package is not importable here: the open scopes were not checked")
else:
    check(["train_step", "forward"] in scopes, "the open scopes are train_step > forward", scopes)
text = [l for l in err.splitlines() if "post-mortem" in l or l.startswith("[gpuguard run]   ")]
say("post-mortem text for docs/run.md:\n" + "\n".join(text))
finish("gpu.run_postmortem")
