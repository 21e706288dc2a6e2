#!/usr/bin/env python3
"""The LibTorch example on a GPU (the GPU runner): the three modes train to the same loss, the
planted leak is named in observe mode's report, the scopes carry PyTorch's deltas.

usage: torch_cnn_test.py TORCH_CNN

Without a GPU the example exits 77 and so does this test (skipped with a reason; under
GPUGUARD_REQUIRE_GPU=1 that is a failure).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, skip  # noqa: E402  (tests/support)

STEPS = "30"


def run(binary, mode, *extra, options=""):
    env = dict(os.environ, GPUGUARD_OPTIONS=options)
    done = subprocess.run([binary, "--mode", mode, "--steps", STEPS, *extra],
                          capture_output=True, text=True, timeout=400, env=env)
    return done


def final_loss(done):
    m = re.search(r"final loss ([0-9.eE+-]+)", done.stdout)
    return float(m.group(1)) if m else None


def main():
    binary = sys.argv[1]

    probe = run(binary, "native", "--no-leak")
    if probe.returncode == 77:
        skip("the example found no CUDA device on this machine; the GPU runner (scripts/gpu-runner.sh) runs it")

    native = final_loss(probe)
    observe = run(binary, "observe", "--side-stream", options="stacks=all:stack_depth=64")
    swap = run(binary, "swap_in", "--side-stream", "--no-leak")
    for name, done in (("native", probe), ("observe", observe), ("swap_in", swap)):
        print(f"--- {name}: status {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}")
        check(done.returncode == 0, f"{name} exits with status 0", f"status {done.returncode}")

    losses = {"native": native, "observe": final_loss(observe), "swap_in": final_loss(swap)}
    print("final losses:", losses)
    if check(None not in losses.values(), "every mode printed a final loss", losses):
        for mode in ("observe", "swap_in"):
            check(abs(losses[mode] - native) <= 1e-4 * max(1.0, abs(native)),
                  f"{mode} trains to native's loss", f"{mode} trained to {losses[mode]}, native to {native}")

    err = observe.stderr
    check("LEAK" in err and "keep_for_debugging" in err, "observe mode's leak report names keep_for_debugging")
    check(re.search(r"\[gpuguard\] forward: .*; torch allocated [+-]", err),
          "the forward scope's line carries PyTorch's deltas")
    check("[gpuguard] no leaks" in swap.stderr,
          "swap-in without the planted leak ends with every allocation freed")
    finish("torch_cnn")


if __name__ == "__main__":
    main()
