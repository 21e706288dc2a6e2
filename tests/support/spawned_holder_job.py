#!/usr/bin/env python3
"""The job the GPU tests of `gpuguard run` and `gpuguard doctor` kill: its main process starts one
worker (multiprocessing, spawn, as a CUDA program must) that allocates BYTES on the GPU through
torch and keeps them. Once the worker holds them the main process prints "MAIN_PID WORKER_PID",
then sleeps (`wait`) or exits at once without joining, leaving the worker behind (`exit`). Exits 3
when the worker does not hold its memory within 120 s. Only the worker imports torch: the main
process has no CUDA context.

usage: spawned_holder_job.py BYTES wait|exit
"""
import multiprocessing
import os
import sys
import time

HELD = []


def hold(size, ready):
    import torch
    HELD.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    ready.set()
    time.sleep(600)


if __name__ == "__main__":
    size, then = int(sys.argv[1]), sys.argv[2]
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    worker = context.Process(target=hold, args=(size, ready))
    worker.start()
    if not ready.wait(120):
        os._exit(3)
    print(os.getpid(), worker.pid, flush=True)
    if then == "exit":
        os._exit(0)  # no join at exit: the worker is left behind
    time.sleep(600)
