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
    failures = []

    probe = run(binary, "native", "--no-leak")
    if probe.returncode == 77:
        if os.environ.get("GPUGUARD_REQUIRE_GPU") == "1":
            print("FAIL: GPUGUARD_REQUIRE_GPU=1 but the example found no CUDA device")
            return 1
        print("SKIP: no CUDA device on this machine; the GPU runner (scripts/gpu-runner.sh) runs it")
        return 77

    native = final_loss(probe)
    observe = run(binary, "observe", "--side-stream", options="stacks=all:stack_depth=64")
    swap = run(binary, "swap_in", "--side-stream", "--no-leak")
    for name, done in (("native", probe), ("observe", observe), ("swap_in", swap)):
        print(f"--- {name}: status {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}")
        if done.returncode != 0:
            failures.append(f"{name} exited with status {done.returncode}")

    losses = {"native": native, "observe": final_loss(observe), "swap_in": final_loss(swap)}
    print("final losses:", losses)
    if None in losses.values():
        failures.append(f"a mode printed no final loss: {losses}")
    else:
        for mode in ("observe", "swap_in"):
            if abs(losses[mode] - native) > 1e-4 * max(1.0, abs(native)):
                failures.append(f"{mode} trained to {losses[mode]}, native to {native}")

    err = observe.stderr
    if "LEAK" not in err or "keep_for_debugging" not in err:
        failures.append("observe mode's leak report does not name keep_for_debugging")
    if not re.search(r"\[gpuguard\] forward: .*; torch allocated [+-]", err):
        failures.append("the forward scope's line carries no PyTorch deltas")
    if "[gpuguard] no leaks" not in swap.stderr:
        failures.append("swap-in without the planted leak did not end with every allocation freed")

    for f in failures:
        print("FAIL:", f)
    print("torch_cnn:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
