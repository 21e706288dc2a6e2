#!/usr/bin/env python3
"""A Python program that knows nothing of gpuguard, for sites_test.py and wheel_test.py, run
under `gpuguard run --track` on the stand-in CUDA runtime (tests/preload/fake_cudart.cpp). It
leaves three allocations live at exit, each made from a marked line:
  - 3 MiB from make_leak, through ctypes.PyDLL, which keeps the GIL during the call: the site
    names that line;
  - 5 MiB from make_unseen, through ctypes.CDLL, which releases the GIL around the call, as native
    code does when it runs without Python's lock: no Python frames;
  - 7 MiB from inside a stand-in "torch" module (code whose globals' __name__ is torch.stand_in),
    called from make_through_torch: with python_frames=user the site begins at the user's line
    that called into it, with python_frames=all at the module's own line.
With --api, it prints gpuguard.sites() as one JSON line (the gpuguard package must be importable).

usage: sites_job.py CUDART [--api]
"""
import ctypes
import json
import sys

MIB = 1024 * 1024
LIBRARY = sys.argv[1]
with_gil = ctypes.PyDLL(LIBRARY)
without_gil = ctypes.CDLL(LIBRARY)
for lib in (with_gil, without_gil):
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaMalloc.restype = ctypes.c_int

kept = []


def allocate(lib, size):
    pointer = ctypes.c_void_p()
    status = lib.cudaMalloc(ctypes.byref(pointer), size)
    if status != 0:
        raise SystemExit(f"cudaMalloc({size}) returned {status}")
    return pointer


def make_leak():
    pointer = ctypes.c_void_p()
    status = with_gil.cudaMalloc(ctypes.byref(pointer), 3 * MIB)  # site: gil
    kept.append((status, pointer))


def make_unseen():
    kept.append(allocate(without_gil, 5 * MIB))  # site: nogil


STAND_IN = '''
import ctypes


def grow(lib, size):
    pointer = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(pointer), size)
    return pointer
'''
STAND_IN_LINE = 7  # of `lib.cudaMalloc` in STAND_IN
torch_like = {"__name__": "torch.stand_in"}
exec(compile(STAND_IN, "stand_in_torch.py", "exec"), torch_like)


def make_through_torch():
    kept.append(torch_like["grow"](with_gil, 7 * MIB))  # site: torch caller


make_leak()
make_unseen()
make_through_torch()
if "--api" in sys.argv[2:]:
    import gpuguard
    print(json.dumps(gpuguard.sites()), flush=True)
