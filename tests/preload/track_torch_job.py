#!/usr/bin/env python3
"""A small PyTorch training loop for track_torch_test.py, run under `gpuguard run --track` with
PYTORCH_CUDA_ALLOC_CONF set by the test. At checkpoints it prints one JSON line comparing what
gpuguard's interposer records in this process (gpuguard_track_figures, exported by the preloaded
library) with what PyTorch says it holds. It leaves its model and optimizer alive at exit, as
training scripts do, so their memory is in PyTorch's cache when the process ends.

usage: track_torch_job.py STEPS
"""
import ctypes
import json
import sys

import torch


def figures():
    lookup = ctypes.CDLL(None).gpuguard_track_figures
    lookup.restype = ctypes.c_long
    lookup.argtypes = [ctypes.c_char_p, ctypes.c_ulong]
    buffer = ctypes.create_string_buffer(1 << 16)
    length = lookup(buffer, len(buffer))
    return json.loads(buffer.value.decode()) if 0 <= length < len(buffer) else None


def checkpoint(name):
    torch.cuda.synchronize()
    ours = figures()
    device = next((d for d in ours["devices"] if d["device"] == 0), {}) if ours else {}
    print(json.dumps({
        "checkpoint": name,
        "ledger_live": device.get("live_bytes"),
        "pool_reserved": device.get("pool_reserved_bytes"),
        "pool_used": device.get("pool_used_bytes"),
        "nvml_used": device.get("nvml_used_bytes"),
        "unattributed": device.get("unattributed_bytes"),
        "torch_reserved": torch.cuda.memory_reserved(0),
        "torch_allocated": torch.cuda.memory_allocated(0),
        "vmm_created": ours.get("vmm_created_bytes") if ours else None,
        "holders": {h["holder"]: h["live_bytes"] for h in ours.get("holders", [])} if ours else {},
    }), flush=True)


MODEL = None
OPTIMIZER = None


def main(steps):
    global MODEL, OPTIMIZER  # pylint: disable=global-statement (kept alive to the end, on purpose)
    torch.manual_seed(0)
    MODEL = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    OPTIMIZER = torch.optim.Adam(MODEL.parameters())
    checkpoint("model")
    for step in range(steps):
        batch = torch.randn(512, 1024, device="cuda")
        loss = (MODEL(batch) - batch).pow(2).mean()
        OPTIMIZER.zero_grad()
        loss.backward()
        OPTIMIZER.step()
        if step == 0:
            checkpoint("first step")
    big = torch.empty(300 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    checkpoint("300 MiB tensor")
    del big
    checkpoint("tensor freed")
    torch.cuda.empty_cache()
    checkpoint("cache emptied")


main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
