#!/usr/bin/env python3
"""A PyTorch training step for track_overhead.py: a small convolutional network on random data,
native caching allocator. Prints the median step time over STEPS steps after 10 of warm-up.

usage: track_step.py [STEPS]   (default 110)
"""
import statistics
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 110
if not torch.cuda.is_available():
    sys.exit(77)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
times = []
for step in range(steps):
    images = torch.randn(64, 3, 64, 64, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    if step >= 10:
        times.append(time.perf_counter() - start)
print("median step ms %.4f" % (statistics.median(times) * 1000))
