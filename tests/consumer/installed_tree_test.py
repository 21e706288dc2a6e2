#!/usr/bin/env python3
"""The installed tree works from its prefix, with no LD_LIBRARY_PATH (ctest consumer.installed_tree,
after consumer.install):

  - PREFIX/bin/gpuguard --help, and `gpuguard run --track -- CMD`, which preloads
    PREFIX/lib/libgpuguard_preload.so: CMD's output and status come through, the exit report runs
  - where the LibTorch adapter was installed, Python loads PREFIX/lib/libgpuguard_torch_alloc.so
    by path, as docs/torch.md shows, and finds both allocator entry points

usage: installed_tree_test.py PREFIX
"""
import os
import subprocess
import sys
import textwrap


def main():
    prefix = os.path.abspath(sys.argv[1])
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GPUGUARD_OPTIONS")}
    gpuguard = os.path.join(prefix, "bin", "gpuguard")
    failures = []

    done = subprocess.run([gpuguard, "--help"], capture_output=True, text=True, env=env, timeout=60)
    if done.returncode != 0 or "run" not in done.stdout:
        failures.append(f"gpuguard --help: status {done.returncode}: {done.stderr.strip()[-500:]}")

    done = subprocess.run([gpuguard, "run", "--track", "--", "bash", "-c", "echo from-the-job; exit 3"],
                          capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 3 or "from-the-job" not in done.stdout:
        failures.append(f"gpuguard run --track: status {done.returncode} (want 3), stdout {done.stdout!r}, "
                        f"stderr {done.stderr.strip()[-800:]!r}")
    elif "[gpuguard]" not in done.stderr:
        failures.append(f"gpuguard run --track: the interposer's exit report did not run: {done.stderr[-800:]!r}")

    alloc = os.path.join(prefix, "lib", "libgpuguard_torch_alloc.so")
    if os.path.exists(alloc):
        snippet = textwrap.dedent("""
            import ctypes, sys
            lib = ctypes.CDLL(sys.argv[1])
            assert hasattr(lib, "gpuguard_torch_alloc") and hasattr(lib, "gpuguard_torch_free")
            print("loaded")
        """)
        done = subprocess.run([sys.executable, "-c", snippet, alloc], capture_output=True, text=True,
                              env=dict(env, CUDA_VISIBLE_DEVICES="-1"), timeout=120)
        if done.returncode != 0 or "loaded" not in done.stdout:
            failures.append(f"loading {alloc} from Python: status {done.returncode}: {done.stderr.strip()[-800:]}")
    else:
        print(f"note: {alloc} is not installed (gpuguard was built without Torch)")

    for f in failures:
        print("FAIL:", f)
    print("installed tree:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
