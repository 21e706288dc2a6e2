#!/usr/bin/env python3
"""The wheel (pyproject.toml, docs/python.md): built from the source tree as pip builds it,
installed into a fresh venv, and used there as a Python user would.

usage: wheel_test.py SOURCE_DIR WORK_DIR --fake-driver DIR --fake-cudart LIBRARY

The wheel is built by this Python (`pip wheel --no-build-isolation`, so scikit-build-core and
nanobind must be installed in it; without them the test is skipped, and fails under CI=true), in
WORK_DIR/build, which is kept between runs so that a second build only compiles what changed.
Then, in a new venv with nothing but the wheel: `gpuguard --help`, `python -m gpuguard --help`,
`gpuguard run -- true`; Python scopes (scopes_job.py plain): nesting, an exception marked, the
decorator, a thread, PyTorch's deltas from a stand-in `torch`, and the JSONL log's op lines; and
under `gpuguard run --track`, with the interposer found where the wheel put it, a Python process
that allocates through the stand-in CUDA runtime and driver (tests/preload/) inside its scopes
(scopes_job.py track): the scopes and figures() see what the interposer recorded, and the text
log has the scopes' lines.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import abort, check, finish, say, scratch, skip  # noqa: E402  (tests/support)

SOURCE, WORK = sys.argv[1], sys.argv[2]
FAKE_DRIVER = sys.argv[sys.argv.index("--fake-driver") + 1]
FAKE_CUDART = sys.argv[sys.argv.index("--fake-cudart") + 1]
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scopes_job.py")
MIB = 1024 * 1024

for module in ("scikit_build_core", "nanobind", "pip"):
    if subprocess.run([sys.executable, "-c", "import " + module], capture_output=True).returncode != 0:
        skip(f"{sys.executable} has no {module} (pip install scikit-build-core nanobind)", variable="CI", value="true")

tmp = scratch("gpuguard-wheel-")


def run(argv, timeout=120, env=None, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


# ---- build and install ---------------------------------------------------------------------------
dist = os.path.join(WORK, "dist")
shutil.rmtree(dist, ignore_errors=True)
build_env = dict(os.environ)
build_env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
started = time.monotonic()
built = run([sys.executable, "-m", "pip", "wheel", SOURCE, "-w", dist, "--no-build-isolation", "--no-deps",
             "-C", "build-dir=" + os.path.join(WORK, "build")], timeout=1500, env=build_env)
say(f"pip wheel took {time.monotonic() - started:.0f} s")
wheels = glob.glob(os.path.join(dist, "gpuguard-*.whl"))
if built.returncode != 0 or len(wheels) != 1:
    abort("pip wheel builds one gpuguard wheel", built.stdout[-4000:] + built.stderr[-4000:])

venv = os.path.join(tmp, "venv")
made = run([sys.executable, "-m", "venv", venv])
if made.returncode != 0:
    abort("python -m venv makes the venv to install into", made.stderr)
bindir = os.path.join(venv, "bin")
python = os.path.join(bindir, "python")
installed = run([python, "-m", "pip", "install", "--no-index", "--no-deps", wheels[0]])
if installed.returncode != 0:
    abort("pip installs the wheel into a fresh venv", installed.stdout + installed.stderr)

# The venv as its user has it: its bin/ first on PATH, no build tree, no interposer named.
env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), VIRTUAL_ENV=venv)
for name in ("GPUGUARD_PRELOAD_LIBRARY", "GPUGUARD_OPTIONS", "GPUGUARD_RUN_OPTIONS", "LD_PRELOAD", "PYTHONPATH"):
    env.pop(name, None)
program = shutil.which("gpuguard", path=env["PATH"])
check(program == os.path.join(bindir, "gpuguard"), "the gpuguard command is the venv's bin/gpuguard", program)
version = run([python, "-c", "import gpuguard; print(gpuguard.__version__)"], env=env)
check(version.returncode == 0 and version.stdout.strip().count(".") == 2,
      "gpuguard.__version__ is the project's version", version.stdout + version.stderr)
files = sorted(os.path.relpath(p, venv) for p in glob.glob(os.path.join(venv, "lib", "libgpuguard*")))
check(files == ["lib/libgpuguard.so.0", "lib/libgpuguard_preload.so"],
      "the core and the interposer are in the venv's lib/, one file each", files)

# ---- the command ---------------------------------------------------------------------------------
helped = run(["gpuguard", "--help"], env=env)
check(helped.returncode == 0 and "run" in helped.stdout and "doctor" in helped.stdout,
      "gpuguard --help lists the commands", helped.stdout + helped.stderr)
helped_m = run([python, "-m", "gpuguard", "--help"], env=env)
check(helped_m.returncode == 0 and helped_m.stdout == helped.stdout,
      "python -m gpuguard --help is the same program's help", helped_m.stdout + helped_m.stderr)
run_help = run([python, "-m", "gpuguard", "run", "--help"], env=env)
check(run_help.returncode == 0 and os.path.realpath(os.path.join(venv, "share", "doc", "gpuguard")) in run_help.stdout,
      "gpuguard run --help names the docs the wheel installed", run_help.stdout[-600:] + run_help.stderr)
ran = run(["gpuguard", "run", "--", "true"], env=env)
check(ran.returncode == 0 and "[gpuguard run] true exited with status 0" in ran.stderr,
      "gpuguard run -- true", ran.stderr)

# ---- scopes and figures, without --track ---------------------------------------------------------
log = os.path.join(tmp, "plain.jsonl")
plain = run([python, JOB, "plain"], env=dict(env, GPUGUARD_OPTIONS="text_log=off:jsonl_log=" + log))
if plain.returncode != 0:
    abort("scopes_job.py plain runs", plain.stdout + plain.stderr)
got = json.loads(plain.stdout.strip().splitlines()[-1])
check(got["figures_at_start"] == {}, "figures() of a process that recorded nothing is empty", got["figures_at_start"])
inner, outer = got["inner"], got["outer"]
check(inner["name"] == "inner" and inner["depth"] == 1 and outer["name"] == "outer" and outer["depth"] == 0,
      "nested scopes: inner at depth 1 inside outer at depth 0", (inner, outer))
check(outer["duration_ns"] >= inner["duration_ns"] > 0 and not outer["exception"],
      "the outer scope lasts at least as long as the inner one", (inner, outer))
check(got["boom"]["exception"] is True and got.get("raised_through") == "inside boom",
      "a scope left by an exception is marked, and the exception goes on", got["boom"])
check(got["step_returned"] == 2 and got["step_name"] == "step" and got["step"]["depth"] == 0
      and got["step"]["name"] == "step", "the decorator: the function's result and name, its scope's record",
      (got["step_returned"], got["step_name"], got["step"]))
check(got["threaded"]["thread"] != outer["thread"] and got["threaded"]["depth"] == 0,
      "a scope on another thread is that thread's", (got["threaded"], outer["thread"]))
check("generator_refused" in got, "decorating a generator function is refused", got.get("generator_refused"))
check(len(got["around_warnings"]) == 1 and "'around'" in got["around_warnings"][0]
      and "'held'" in got["around_warnings"][0], "a scope exited before one opened inside it: one warning naming both",
      got["around_warnings"])
check(got["after"]["depth"] == 0, "after the held scope ended, the enclosing one did too: the next is at depth 0",
      got["after"])
check("framework" not in got["torch_cold"], "no PyTorch figures before its CUDA state is up", got["torch_cold"])
step = got["torch_step"]
check(step.get("framework") == "torch" and step.get("framework_allocated_delta") == 3 * MIB
      and step.get("framework_reserved_delta") == 4 * MIB,
      "PyTorch's allocated and reserved deltas are in the scope's record", step)
check(got["figures"] == {}, "without --track nothing of the job's went through gpuguard's ledger", got["figures"])

ops = {}
try:
    with open(log) as f:
        for line in f:
            event = json.loads(line)
            if event.get("type") == "op":
                ops.setdefault(event["name"], []).append(event)
except OSError as error:
    check(False, "the JSONL log is written", error)
check(sorted(ops) == ["after", "around", "boom", "held", "inner", "outer", "step", "threaded", "torch_cold", "torch_step"],
      "the JSONL log has an op line for each scope", sorted(ops))
held, around = (ops.get("held") or [{}])[0], (ops.get("around") or [{}])[0]
check(held.get("depth") == 1 and held.get("exception") is True and around.get("depth") == 0
      and around.get("dur", 0) >= held.get("dur", 1),
      "the held scope (closed by GeneratorExit) inside the enclosing one, which ended after it", (held, around))
check([e["exception"] for e in ops.get("boom", [])] == [True] and [e["depth"] for e in ops.get("inner", [])] == [1],
      "the JSONL op lines say the exception and the depth", (ops.get("boom"), ops.get("inner")))
check(sorted(e["depth"] for e in ops.get("step", [])) == [0, 1, 2], "the recursive decorated call: three nested lines",
      ops.get("step"))
torch_line = (ops.get("torch_step") or [{}])[0]
check(torch_line.get("framework") == "torch" and torch_line.get("framework_allocated_delta") == 3 * MIB,
      "the JSONL op line has PyTorch's deltas", torch_line)

# ---- under gpuguard run --track ------------------------------------------------------------------
tracked_env = dict(env, LD_LIBRARY_PATH=FAKE_DRIVER + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""))
tracked = run(["gpuguard", "run", "--track", "--", python, JOB, "track", FAKE_CUDART], env=tracked_env)
if tracked.returncode != 0:
    abort("gpuguard run --track -- python scopes_job.py track", tracked.stdout + tracked.stderr)
got = json.loads(tracked.stdout.strip().splitlines()[-1])
check(got["malloc_inner"] == 0 and got["malloc_outer"] == 0 and got["free"] == 0 and got["free_kept"] == 0,
      "the stand-in runtime allocates and frees", got)
inner, outer = got["py.inner"], got["py.alloc"]
check(inner["alloc_bytes"] == 2 * MIB and inner["allocs"] == 1 and inner["depth"] == 1,
      "a Python scope sees the allocation the interposer recorded inside it", inner)
check(outer["alloc_bytes"] == 5 * MIB and outer["free_bytes"] == 2 * MIB and outer["net_bytes"] == 3 * MIB
      and outer["peak_bytes"] == 5 * MIB and outer["allocs"] == 2 and outer["frees"] == 1,
      "the enclosing decorated scope covers its inner scope's allocation too", outer)
device = got["figures"].get("0", {})
check(device.get("live_bytes") == 3 * MIB and device.get("peak_bytes") == 5 * MIB and device.get("allocations") == 2
      and device.get("frees") == 1, "figures() are the interposer's ledger: device 0's live, peak and counts", got["figures"])
after = got["figures_after_free"].get("0", {})
check(after.get("live_bytes") == 0 and after.get("frees") == 2, "figures() after the last free", after)
check("py.alloc" in tracked.stderr and "py.inner" in tracked.stderr,
      "the text log (stderr) has the Python scopes' lines", tracked.stderr[-2000:])
check("no leaks: all 2 tracked allocations were freed" in tracked.stderr,
      "the interposer's leak report: both allocations freed", tracked.stderr[-2000:])
check(len(got["cores_mapped"]) == 1 and got["cores_mapped"][0] == os.path.realpath(os.path.join(venv, "lib", "libgpuguard.so.0")),
      "one core library in the process, the venv's: the interposer's and the module's", got["cores_mapped"])

# ---- gpuguard.sites() under --track: the Python line of each live allocation ---------------------
SITES_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sites_job.py")
sited = run(["gpuguard", "run", "--track", "--", python, SITES_JOB, FAKE_CUDART, "--api"],
            env=dict(tracked_env, GPUGUARD_OPTIONS="text_log=off"))
listed = [line for line in sited.stdout.splitlines() if line.startswith("[")]
live = {s["bytes"]: s for s in json.loads(listed[-1])} if listed else {}
with open(SITES_JOB) as f:
    job_lines = f.read().splitlines()
gil_line = next(n for n, line in enumerate(job_lines, 1) if "# site: gil" in line)
released_line = next(n for n, line in enumerate(job_lines, 1) if "# site: nogil" in line)
released = live.get(5 * MIB, {}).get("frames", [None])
check(sited.returncode == 0 and live.get(3 * MIB, {}).get("frames", [None])[0]
      == {"function": "make_leak", "file": SITES_JOB, "line": gil_line}
      and (released[:1] == [{"function": "make_released", "file": SITES_JOB, "line": released_line}]
           if sys.version_info[:2] in {(3, 11), (3, 12)} else released == []),
      "gpuguard.sites() of the installed package: the Python line of the allocation made with the GIL held, "
      "and of the one made without it where gpuguard reads frames without the GIL (3.11, 3.12)",
      sited.stdout[-2000:] + sited.stderr[-2000:])

finish("python.wheel", f"({os.path.basename(wheels[0])})")
