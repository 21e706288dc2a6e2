#!/usr/bin/env python3
"""A Python program that knows nothing of gpuguard, for run_postmortem_test.py, run under
`gpuguard run --track` on the stand-in CUDA runtime (tests/preload/fake_cudart.cpp): it allocates
3 MiB from a marked line through ctypes.PyDLL (which keeps the GIL during the call, so every Python
gpuguard supports names the line), frees nothing, says so, and SIGKILLs itself while it holds it.

usage: postmortem_python_job.py CUDART
"""
import ctypes
import os
import signal
import sys

MIB = 1024 * 1024
runtime = ctypes.PyDLL(sys.argv[1])
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
runtime.cudaMalloc.restype = ctypes.c_int
kept = []


def load_weights():
    pointer = ctypes.c_void_p()
    status = runtime.cudaMalloc(ctypes.byref(pointer), 3 * MIB)  # site: postmortem
    if status != 0:
        raise SystemExit(f"cudaMalloc returned {status}")
    kept.append(pointer)


load_weights()
print("holding", 3 * MIB, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
