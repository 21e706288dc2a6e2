#!/usr/bin/env python3
"""A Python program that knows nothing of gpuguard, for sites_test.py and wheel_test.py, run
under `gpuguard run --track` on the stand-in CUDA runtime (tests/preload/fake_cudart.cpp). It
leaves these allocations live at exit, each made from a marked line:
  - 3 MiB from make_leak, through ctypes.PyDLL, which keeps the GIL during the call: the site
    names that line;
  - 5 MiB from make_released, through ctypes.CDLL, which releases the GIL around the call, as
    PyTorch's operators do: the site names that line where gpuguard reads frames without the GIL
    (the Python versions docs/python.md lists), else it has no Python frames;
  - 7 MiB from inside a stand-in "torch" module (code whose globals' __name__ is torch.stand_in and
    whose file lies in site-packages/torch/), called from make_through_torch: with
    python_frames=user the site begins at the user's line that called into it, with
    python_frames=all at the module's own line;
  - 11 MiB (CDLL) from the bottom of a recursion 300 calls deep, 13 MiB (CDLL) from inside a
    generator, 17 MiB (CDLL) from inside a coroutine driven by hand;
  - with --native-thread HOOKS (the test hooks library, python_raw_hooks.cpp), 19 MiB from a
    native thread that Python never ran on: no Python frames.
With --api, it prints gpuguard.sites() as one JSON line (the gpuguard package must be importable).

usage: sites_job.py CUDART [--api] [--native-thread HOOKS]
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


def make_released():
    pointer = ctypes.c_void_p()
    status = without_gil.cudaMalloc(ctypes.byref(pointer), 5 * MIB)  # site: nogil
    kept.append((status, pointer))


def recurse(depth):
    if depth == 0:
        return allocate(without_gil, 11 * MIB)  # site: recursion
    return recurse(depth - 1)  # site: recursion step


def producer():
    yield allocate(without_gil, 13 * MIB)  # site: generator


def make_from_generator():
    kept.extend(producer())  # site: generator caller


async def coroutine():
    return allocate(without_gil, 17 * MIB)  # site: coroutine


def make_from_coroutine():
    running = coroutine()
    try:
        running.send(None)  # site: coroutine caller
    except StopIteration as done:
        kept.append(done.value)


STAND_IN = '''
import ctypes


def grow(lib, size):
    pointer = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(pointer), size)
    return pointer
'''
STAND_IN_LINE = 7  # of `lib.cudaMalloc` in STAND_IN
torch_like = {"__name__": "torch.stand_in"}
STAND_IN_FILE = "/opt/venv/lib/python3/site-packages/torch/_stand_in.py"  # need not exist
exec(compile(STAND_IN, STAND_IN_FILE, "exec"), torch_like)


def make_through_torch():
    kept.append(torch_like["grow"](with_gil, 7 * MIB))  # site: torch caller


make_leak()
make_released()
make_through_torch()
kept.append(recurse(300))
make_from_generator()
make_from_coroutine()
if "--native-thread" in sys.argv[2:]:
    hooks = ctypes.CDLL(sys.argv[sys.argv.index("--native-thread") + 1])
    hooks.gpuguard_test_on_native_thread.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    hooks.gpuguard_test_on_native_thread.restype = ctypes.c_int
    status = hooks.gpuguard_test_on_native_thread(ctypes.cast(without_gil.cudaMalloc, ctypes.c_void_p), 19 * MIB)
    if status != 0:
        raise SystemExit(f"cudaMalloc on a native thread returned {status}")
if "--api" in sys.argv[2:]:
    import gpuguard
    print(json.dumps(gpuguard.sites()), flush=True)
