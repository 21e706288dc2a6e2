#!/usr/bin/env python3
"""A stand-in for benchmarks/evidence/job.cpp with its command line, for the harness's CPU tests:
"device memory" is a file GPUGUARD_EVIDENCE_FAKE_DEVICE/<pid> holding MiB, which the harness's
fake source counts while the process is alive (the driver's rule). Workers are plain child
processes, with no parent-death signal, in both arms: under gpuguard run it is the supervisor
alone that must end them. Each process also keeps GPUGUARD_EVIDENCE_FAKE_DEVICE/nvidia0 open, as a
CUDA process keeps /dev/nvidia0, so that `gpuguard doctor --device-prefix DIR/nvidia` finds it."""
import argparse
import os
import subprocess
import sys
import time


DEVICE_FILES = []  # kept open for the process's life


def hold(mib):
    directory = os.environ["GPUGUARD_EVIDENCE_FAKE_DEVICE"]
    DEVICE_FILES.append(open(os.path.join(directory, "nvidia0"), "a"))
    with open(os.path.join(directory, str(os.getpid())), "w") as f:
        f.write(str(mib))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--main-mib", type=int, default=100)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--worker-mib", type=int, default=50)
    p.add_argument("--fail", default="none", choices=["none", "throw", "oom"])
    p.add_argument("--fail-at", type=int, default=-1)
    p.add_argument("--guarded", action="store_true")
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        hold(a.worker_mib)
        while True:
            time.sleep(1)
    print("pid", os.getpid(), flush=True)
    hold(a.main_mib)
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", "--worker-mib", str(a.worker_mib)])
               for _ in range(a.workers)]
    # Training starts once the workers are up (holding their memory), as with a real data loader.
    directory = os.environ["GPUGUARD_EVIDENCE_FAKE_DEVICE"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(os.path.exists(os.path.join(directory, str(w.pid))) for w in workers):
        time.sleep(0.01)
    for i in range(a.iters):
        if i == a.fail_at and a.fail != "none":
            print("fault", a.fail, flush=True)
        if i == a.fail_at and a.fail == "throw":
            raise RuntimeError(f"loss is NaN at iteration {i}")
        if i == a.fail_at and a.fail == "oom":
            raise MemoryError("CUDA out of memory. Tried to allocate 1.00 TiB")
        print("iter", i, flush=True)
        time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
