#!/usr/bin/env python3
"""For sites_torch_test.py: a PyTorch script that knows nothing of gpuguard and keeps a CUDA
tensor's storage alive until exit, made from one marked line.

usage: sites_torch_job.py
"""
import torch

kept = []


def leak():
    kept.append(torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda"))  # site: tensor


leak()
torch.cuda.synchronize()
