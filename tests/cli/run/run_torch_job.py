#!/usr/bin/env python3
"""A training-like PyTorch job for run_torch_test.py: a DataLoader with two worker processes and a
multiprocessing helper (spawn, as a CUDA program must use), each holding DEVICE open the way a
CUDA process holds /dev/nvidia*. Every process appends "PID ROLE" to PIDFILE once it holds the
device; the main process does so after the first batch, then loops until it is killed.

usage: run_torch_job.py PIDFILE DEVICE
"""
import multiprocessing
import os
import sys
import time

from run_helper import append  # one O_APPEND write a line, so that the processes' lines never mix

HELD = []  # what each process keeps open


def helper(pidfile, device):
    """The multiprocessing helper: holds the device and waits for work that never comes."""
    HELD.append(open(device, "rb"))  # pylint: disable=consider-using-with
    append(pidfile, f"{os.getpid()} helper\n")
    while True:
        time.sleep(1)


def main(pidfile, device):
    import torch  # pylint: disable=import-outside-toplevel (the spawned helper need not import it)
    from torch.utils.data import DataLoader, Dataset  # pylint: disable=import-outside-toplevel

    class slow_numbers(Dataset):
        def __len__(self):
            return 1 << 30

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.full((4,), float(index))

    def worker_init(worker_id):
        HELD.append(open(device, "rb"))  # pylint: disable=consider-using-with
        append(pidfile, f"{os.getpid()} worker{worker_id}\n")

    spawn = multiprocessing.get_context("spawn")
    spawn.Process(target=helper, args=(pidfile, device)).start()
    HELD.append(open(device, "rb"))  # pylint: disable=consider-using-with
    loader = DataLoader(slow_numbers(), batch_size=8, num_workers=2, worker_init_fn=worker_init)
    batches = iter(loader)
    total = next(batches).sum()
    append(pidfile, f"{os.getpid()} main\n")
    for batch in batches:  # until killed
        total += batch.sum()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
