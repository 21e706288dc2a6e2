#!/usr/bin/env python3
"""The installed tree works from its prefix, with no LD_LIBRARY_PATH (ctest consumer.installed_tree,
after consumer.install):

  - the docs are installed under PREFIX/share/doc/gpuguard, and `gpuguard --help` and each
    command's --help name a file there that exists (run.md, doctor.md, report.md, hooks.md)
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


DOCS = ("run.md", "doctor.md", "report.md", "hooks.md", "formats.md", "options.md", "guards.md", "torch.md")


def check_docs(prefix, gpuguard, env):
    """The installed docs, and the installed file each --help names on its "Docs:" line."""
    failures = []
    docdir = os.path.join(prefix, "share", "doc", "gpuguard")
    missing = [name for name in DOCS if not os.path.isfile(os.path.join(docdir, name))]
    if missing:
        failures.append(f"not installed under {docdir}: {missing}")
    if not os.path.isfile(os.path.join(docdir, "schemas", "events-v1.schema.json")):
        failures.append(f"the JSON schemas the docs link to are not installed under {docdir}/schemas")
    for command, doc in ((None, None), ("run", "run.md"), ("doctor", "doctor.md"), ("report", "report.md"),
                         ("symbolize", "hooks.md")):
        argv = [gpuguard] + ([command] if command else []) + ["--help"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        said = [line[len("Docs: "):] for line in done.stdout.splitlines() if line.startswith("Docs: ")]
        name = " ".join(argv[1:])
        if done.returncode != 0 or len(said) != 1:
            failures.append(f"gpuguard {name}: status {done.returncode}, want one 'Docs:' line, got {said}")
            continue
        # The top-level help names the directory and the files in it; each command's, its own file.
        path = said[0].split(" (")[0] if command is None else said[0]
        want = docdir if command is None else os.path.join(docdir, doc)
        if os.path.realpath(path) != os.path.realpath(want) or not os.path.exists(path):
            failures.append(f"gpuguard {name}: names {said[0]!r}, want the installed {want}")
        else:
            print(f"gpuguard {name}: Docs: {said[0]}")
    return failures


def main():
    prefix = os.path.abspath(sys.argv[1])
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GPUGUARD_OPTIONS")}
    gpuguard = os.path.join(prefix, "bin", "gpuguard")
    failures = []

    done = subprocess.run([gpuguard, "--help"], capture_output=True, text=True, env=env, timeout=60)
    if done.returncode != 0 or "run" not in done.stdout:
        failures.append(f"gpuguard --help: status {done.returncode}: {done.stderr.strip()[-500:]}")
    failures += check_docs(prefix, gpuguard, env)

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
