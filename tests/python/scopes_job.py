"""A Python job of wheel_test.py, run by the Python of the venv the wheel was installed into.

usage: scopes_job.py plain      scopes nested, raising, as a decorator, in a thread; figures();
                                PyTorch's figures from a stand-in `torch` module
       scopes_job.py track LIB  the same process allocates through the stand-in CUDA runtime LIB
                                (fake_cudart.cpp) inside scopes, under `gpuguard run --track`

Prints one JSON object, what wheel_test.py checks, as its last line of stdout.
"""
import ctypes
import json
import os
import sys
import threading
import types
import warnings

import gpuguard

MIB = 1024 * 1024
out = {"figures_at_start": gpuguard.figures()}


def plain():
    with gpuguard.op("outer") as outer:
        with gpuguard.op("inner") as inner:
            pass
        out["inner"] = inner.result
    out["outer"] = outer.result

    boom = gpuguard.op("boom")
    try:
        with boom:
            raise ValueError("inside boom")
    except ValueError as error:
        out["raised_through"] = str(error)
    out["boom"] = boom.result

    step_op = gpuguard.op("step")

    @step_op
    def step(n):
        return n * 2 if n <= 1 else step(n - 1)  # the same op object entered inside itself

    out["step_returned"] = step(3)
    out["step_name"] = step.__name__
    out["step"] = step_op.result  # the outermost of the three, which ended last

    threads = {}

    def in_thread():
        with gpuguard.op("threaded") as scope:
            pass
        threads["threaded"] = scope.result

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    out.update(threads)

    try:
        @gpuguard.op("gen")
        def generator():
            yield 1
        out["generator_decorated"] = True
    except TypeError as error:
        out["generator_refused"] = str(error)

    # A generator suspended inside its own scope: the enclosing scope exits first.
    def holder():
        with gpuguard.op("held"):
            yield

    suspended = holder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuguard.op("around"):
            next(suspended)
        out["around_warnings"] = [str(w.message) for w in caught]
        suspended.close()
    with gpuguard.op("after") as after:
        pass
    out["after"] = after.result

    # PyTorch's figures, from a stand-in `torch`: none until its CUDA state is up.
    class cuda:
        initialized = False
        allocated = 0
        reserved = 0

        @classmethod
        def is_initialized(cls):
            return cls.initialized

        @classmethod
        def memory_stats_as_nested_dict(cls, device):
            return {"allocated_bytes": {"all": {"current": cls.allocated}},
                    "reserved_bytes": {"all": {"current": cls.reserved}}}

    torch = types.ModuleType("torch")
    torch.cuda = cuda
    sys.modules["torch"] = torch
    with gpuguard.op("torch_cold") as cold:
        cuda.allocated += 4096
    out["torch_cold"] = cold.result
    cuda.initialized = True
    with gpuguard.op("torch_step") as warm:
        cuda.allocated += 3 * MIB
        cuda.reserved += 4 * MIB
    out["torch_step"] = warm.result
    out["figures"] = gpuguard.figures()


def track(library):
    cudart = ctypes.CDLL(library)
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    kept = ctypes.c_void_p()

    alloc_op = gpuguard.op("py.alloc")

    @alloc_op
    def allocate():
        pointer = ctypes.c_void_p()
        with gpuguard.op("py.inner") as inner:
            out["malloc_inner"] = cudart.cudaMalloc(ctypes.byref(pointer), 2 * MIB)
        out["py.inner"] = inner.result
        out["malloc_outer"] = cudart.cudaMalloc(ctypes.byref(kept), 3 * MIB)
        out["free"] = cudart.cudaFree(pointer)

    allocate()
    out["py.alloc"] = alloc_op.result
    out["figures"] = gpuguard.figures()
    out["free_kept"] = cudart.cudaFree(kept)
    out["figures_after_free"] = gpuguard.figures()
    with open("/proc/self/maps") as maps:
        out["cores_mapped"] = sorted({os.path.realpath(line.split()[-1]) for line in maps
                                      if os.path.basename(line.split()[-1]).startswith("libgpuguard.so")})


if sys.argv[1] == "plain":
    plain()
else:
    track(sys.argv[2])
print(json.dumps(out), flush=True)
