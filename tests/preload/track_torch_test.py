#!/usr/bin/env python3
"""PyTorch under `gpuguard run --track` (track_torch_job.py), with each of PyTorch's three ways
of getting device memory (PYTORCH_CUDA_ALLOC_CONF): the native caching allocator (cudaMalloc),
expandable segments (cuMemCreate and cuMemMap) and the stream-ordered backend (cudaMallocAsync).

At every checkpoint what the interposer's ledger records as PyTorch's caching allocator's must be
exactly what PyTorch holds from the driver: torch.cuda.memory_reserved() for the native allocator
and expandable segments; for the stream-ordered backend the live tensors
(torch.cuda.memory_allocated()), with the pool's reserve, reported beside the ledger, equal to
memory_reserved(). The rest of the ledger is what the libraries PyTorch keeps handles of (cuBLAS)
allocated themselves. NVML's figure for the process and the unattributed rest are reported. At
exit what PyTorch and those libraries hold is said to be held by them, and nothing is a leak.

usage: track_torch_test.py GPUGUARD PRELOAD
Exits 77 (skipped) without torch or a usable GPU, unless GPUGUARD_REQUIRE_GPU=1 (then it fails).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, torch_cuda_or_skip  # noqa: E402  (tests/support)

CLI, PRELOAD = sys.argv[1], sys.argv[2]
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "track_torch_job.py")
torch_cuda_or_skip()


for name, conf in (("native", ""), ("expandable", "expandable_segments:True"), ("async", "backend:cudaMallocAsync")):
    env = dict(os.environ, GPUGUARD_PRELOAD_LIBRARY=PRELOAD, GPUGUARD_OPTIONS="text_log=off")
    env.pop("LD_PRELOAD", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    result = subprocess.run([CLI, "run", "--track", "--", sys.executable, JOB, "20"], env=env,
                            capture_output=True, text=True, timeout=300)
    check(result.returncode == 0, name + ": the job ended with status 0", result.stderr[-3000:])
    points = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    check(len(points) == 5, name + ": five checkpoints", result.stdout + result.stderr[-2000:])
    for p in points:
        cache = p["holders"].get("PyTorch caching allocator")
        others = sum(v for k, v in p["holders"].items() if k != "PyTorch caching allocator")
        print("%s %-15s ledger %11s (PyTorch's cache %11s, libraries %10s) torch reserved %11s allocated %11s "
              "pool reserved %11s nvml %11s unattributed %11s" % (
                  name, p["checkpoint"], p["ledger_live"], cache, others, p["torch_reserved"], p["torch_allocated"],
                  p["pool_reserved"], p["nvml_used"], p["unattributed"]))
        if name == "async":
            check(cache == p["torch_allocated"],
                  "async %s: the ledger's PyTorch part is the live tensors (memory_allocated)" % p["checkpoint"], p)
            check(p["pool_reserved"] == p["torch_reserved"],
                  "async %s: the pool's reserve, reported beside the ledger, is memory_reserved()" % p["checkpoint"], p)
        else:
            check(cache == p["torch_reserved"],
                  "%s %s: the ledger's PyTorch part equals torch.cuda.memory_reserved()" % (name, p["checkpoint"]), p)
        check(p["ledger_live"] == (cache or 0) + others,
              "%s %s: everything in the ledger has its holder" % (name, p["checkpoint"]), p)
        check(p["nvml_used"] is not None and p["unattributed"] is not None,
              "%s %s: NVML's figure and the unattributed rest are reported" % (name, p["checkpoint"]), p)
    if name == "expandable" and points:
        check(points[-1]["vmm_created"] == points[-1]["torch_reserved"],
              "expandable: the physical allocations (cuMemCreate) are what PyTorch reserved", points[-1])
    err = result.stderr
    check("LEAK" not in err, name + ": no LEAK at exit for PyTorch's cache", err[-3000:])
    check("held at exit by PyTorch caching allocator" in err, name + ": what PyTorch's cache holds at exit is said",
          err[-3000:])
    lines = [l for l in err.splitlines() if l.startswith("[gpuguard] --track: pid ")]
    check(len(lines) == 1, name + ": one summary line, for the one process that used CUDA", err[-3000:])
    print("\n".join(l for l in err.splitlines() if l.startswith("[gpuguard]")))

finish("track_torch_test")
