#!/usr/bin/env python3
"""Python lines as allocation sites on a real GPU: sites_torch_job.py keeps a 64 MiB CUDA tensor
from a marked line until exit, run under `gpuguard run --track` with default options. PyTorch's
caching allocator holds the tensor's segment at exit, so the report lists it as held at exit by
PyTorch's cache, and names the marked line as the site, in the text on stderr and in the JSON
leak report (its `held` sites).

usage: sites_torch_test.py GPUGUARD PRELOAD
Exits 77 (skipped) without torch or a usable GPU, unless GPUGUARD_REQUIRE_GPU=1 (then it fails).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import check, finish, line_of, scratch, torch_cuda_or_skip  # noqa: E402  (tests/support)

CLI, PRELOAD = sys.argv[1], sys.argv[2]
JOB = os.path.join(HERE, "sites_torch_job.py")
LINE = line_of(JOB, "# site: tensor")
torch_cuda_or_skip()
tmp = scratch("gpuguard-sites-torch-")

leaks = os.path.join(tmp, "leaks.json")
env = dict(os.environ, GPUGUARD_PRELOAD_LIBRARY=PRELOAD, GPUGUARD_OPTIONS="text_log=off:leak_json=" + leaks)
for variable in ("LD_PRELOAD", "GPUGUARD_RUN_OPTIONS", "PYTORCH_CUDA_ALLOC_CONF"):
    env.pop(variable, None)
result = subprocess.run([CLI, "run", "--track", "--", sys.executable, JOB], env=env, capture_output=True, text=True,
                        timeout=300)
check(result.returncode == 0, "the job ran under gpuguard run --track", result.stderr[-3000:])
check("held at exit by PyTorch caching allocator" in result.stderr and f"at {JOB}:{LINE}" in result.stderr,
      "the text report names the tensor's line under what PyTorch's cache holds", result.stderr[-3000:])
try:
    with open(leaks) as f:
        report = json.load(f)
except (OSError, ValueError) as error:
    report = {}
    check(False, "the JSON leak report is written", error)
named = [s for s in report.get("held", []) if any(f["file"] == JOB and f["line"] == LINE for f in s["frames"])]
check(len(named) == 1 and named[0]["tag"] == "PyTorch caching allocator" and named[0]["bytes"] >= 64 * 1024 * 1024,
      "the JSON leak report's held sites name the tensor's line", report.get("held"))
print("\n".join(line for line in result.stderr.splitlines() if line.startswith("[gpuguard]")))
finish("gpu.python_sites_torch")
