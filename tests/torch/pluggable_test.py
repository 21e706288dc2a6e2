#!/usr/bin/env python3
"""Python's way into swap-in mode: torch.cuda.memory.CUDAPluggableAllocator loads
libgpuguard_torch_alloc.so by its two documented names (docs/torch.md).

usage: pluggable_test.py LIB [--gpu]

Without --gpu (CI, and the GPU runner with every GPU hidden): the library loads, exports both names, becomes PyTorch's allocator before CUDA
initialises; a CUDA tensor then fails PyTorch's usual way (no driver); the process exits normally
with gpuguard's exit report. With --gpu (the GPU runner): one training step of a small model runs
on the GPU through gpuguard's allocator and the leak report at exit is clean.
"""
import ctypes
import os
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, torch_cuda_or_skip  # noqa: E402  (tests/support)

SNIPPET = textwrap.dedent("""
    import sys, torch
    lib = sys.argv[1]
    allocator = torch.cuda.memory.CUDAPluggableAllocator(lib, "gpuguard_torch_alloc", "gpuguard_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    print("swapped", flush=True)
    if sys.argv[2] == "gpu":
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(256, 64, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print("losses", losses, flush=True)
        assert losses[-1] < losses[0], losses
        del model, opt, x, y, loss
    else:
        try:
            torch.zeros(4, device="cuda")
        except (RuntimeError, AssertionError) as e:
            print("cuda tensor refused:", str(e).splitlines()[0], flush=True)
        else:
            raise SystemExit("a CUDA tensor was made with every GPU hidden")
""")


def main():
    lib = os.path.abspath(sys.argv[1])
    gpu = "--gpu" in sys.argv[2:]
    if gpu:
        torch_cuda_or_skip()

    exported = ctypes.CDLL(lib)
    for name in ("gpuguard_torch_alloc", "gpuguard_torch_free"):
        check(hasattr(exported, name), f"{lib} exports {name}")

    env = dict(os.environ, GPUGUARD_OPTIONS="leak_report=1")
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = "-1"  # no GPU, also on a machine that has one
    run = subprocess.run([sys.executable, "-c", SNIPPET, lib, "gpu" if gpu else "cpu"],
                         capture_output=True, text=True, timeout=300, env=env)
    print(run.stdout)
    print(run.stderr[-4000:], file=sys.stderr)
    check(run.returncode == 0, "the snippet exits with status 0", f"status {run.returncode}")
    check("swapped" in run.stdout, "change_current_allocator takes the library")
    if gpu:
        check("losses" in run.stdout, "the training step runs")
        check("[gpuguard] no leaks" in run.stderr, "gpuguard's exit report says every allocation was freed")
    else:
        check("cuda tensor refused" in run.stdout, "the CUDA tensor is refused PyTorch's usual way")
        check("[gpuguard]" in run.stderr, "gpuguard's exit report runs in the Python process")
    finish("pluggable")


if __name__ == "__main__":
    main()
