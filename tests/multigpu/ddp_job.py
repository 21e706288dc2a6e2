#!/usr/bin/env python3
"""A two-rank job as users launch one (torchrun, one process per GPU, NCCL all-reduce in the loop),
each rank holding 2 GiB. Prints "rank R pid P iter I" after each step."""
import os
import time

import torch
import torch.distributed as dist


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # noqa: F841 (held for the job's life)
    grad = torch.ones(1 << 20, device="cuda")
    for i in range(1_000_000):
        dist.all_reduce(grad)
        torch.cuda.synchronize()
        print(f"rank {rank} pid {os.getpid()} iter {i}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
