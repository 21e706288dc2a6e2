#!/usr/bin/env python3
"""A PyTorch training step for track_overhead.py: a small convolutional network on random data,
native caching allocator. After 10 steps of warm-up it runs blocks of steps in pairs, one block
plain and one under PyTorch's own allocation history, `torch.cuda.memory._record_memory_history()`
with its default arguments (enabled="all", context="all", stacks="all", max_entries=sys.maxsize:
every allocation and free recorded with its Python and C++ stack), switched on for the block and
off (enabled=None) after it. The pairs alternate which block runs first (plain first, then
recording first, ...), so a drift of the process falls on both. The first 2 steps of each block
are dropped (the switch's own cost). Prints:

    median step ms X                        the plain blocks' steps (what track_overhead.py compares
                                            across arms)
    record_memory_history step ms Y         the recording blocks' steps
    record_memory_history ratio in one process R   the median of the pairs' own ratios
                                            (recording block's median / plain block's median)

usage: track_step.py [--pairs 8] [--block-steps 12]
Exits 77 without a GPU (or without torch), 2 on a bad argument.
"""
import argparse
import statistics
import sys
import time

WARM_UP = 10
DROPPED = 2  # of each block, after the switch


def block_order(pairs):
    """Which block of each pair runs first: plain, recording, plain, ...: [(first, second), ...]."""
    return [(False, True) if p % 2 == 0 else (True, False) for p in range(pairs)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8, help="pairs of blocks (default %(default)s)")
    parser.add_argument("--block-steps", type=int, default=12, help="steps a block (default %(default)s)")
    args = parser.parse_args()
    if args.pairs < 1 or args.block_steps <= DROPPED:
        parser.error("--pairs must be at least 1 and --block-steps more than %d (the steps dropped after "
                     "each switch)" % DROPPED)
    try:
        import torch  # after the arguments: --help and a bad argument need no GPU
    except ImportError as error:
        print("track_step.py: cannot import torch (%s): skipped" % error, file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("track_step.py: no CUDA device: skipped", file=sys.stderr)
        return 77
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        images = torch.randn(64, 3, 64, 64, device="cuda")
        labels = torch.randint(0, 10, (64,), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1000

    def block(recording):
        if recording:
            torch.cuda.memory._record_memory_history()
        times = [step() for _ in range(args.block_steps)][DROPPED:]
        if recording:
            torch.cuda.memory._record_memory_history(enabled=None)
        return times

    for _ in range(WARM_UP):
        step()
    plain, recorded, ratios = [], [], []
    for order in block_order(args.pairs):
        medians = {}
        for recording in order:
            times = block(recording)
            (recorded if recording else plain).extend(times)
            medians[recording] = statistics.median(times)
        ratios.append(medians[True] / medians[False])
    print("median step ms %.4f" % statistics.median(plain))
    print("record_memory_history step ms %.4f" % statistics.median(recorded))
    print("record_memory_history ratio in one process %.4f" % statistics.median(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
