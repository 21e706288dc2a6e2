#!/usr/bin/env python3
"""The pytest plugin (python/gpuguard/pytest_plugin.py, docs/python.md "pytest"): child pytests in a
fresh venv with the wheel python.wheel built, judged by their exit statuses and output.

usage: pytest_plugin_test.py DIST --fake-driver DIR --fake-cudart LIBRARY     (CPU)
       pytest_plugin_test.py DIST --gpu                                      (real CUDA tensors)
       pytest_plugin_test.py DIST --gpu-scopes           (Python scopes against PyTorch's figures)

DIST holds the one gpuguard wheel python.wheel built (a ctest fixture: it is not built again
here). The venv gets that wheel, and pytest (and, for --gpu, torch) from this Python's
site-packages through a .pth file, since nothing is downloaded. Without pytest here, or without
the wheel (python.wheel skipped), the test is skipped; it fails instead under CI=true (CPU) or
GPUGUARD_REQUIRE_GPU=1 (--gpu).

CPU: the child tests allocate through the stand-in CUDA runtime and driver (tests/preload/), so
every allocation goes through the interposer. Each marker, within its limit and over it, in a
pytest that the plugin starts again with the interposer preloaded, and in one already under
`gpuguard run --track`; what was live before a test never counts; the markers without --gpuguard
(a no-op, one notice, --strict-markers passes); a bad size (a usage error naming the test and the
size); pytest.main() inside another program (refused, with the command to run); the size parser.
GPU: the markers on PyTorch tensors: a freed tensor is no leak (its cache is told apart), a kept
one is, named as PyTorch's (at the test's line where gpuguard reads Python frames without the GIL);
a peak within and over its limit. --gpu-scopes: the wheel's Python scopes under `gpuguard run
--track` around PyTorch allocations: each scope's PyTorch deltas equal memory_allocated() and
memory_reserved() read around it, and its ledger net (the driver's allocations) equals the reserved
delta: what PyTorch's cache took from the driver.
"""
import glob
import json
import os
import re
import site
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import abort, check, finish, line_of, scratch, skip, torch_cuda_or_skip, write_text  # noqa: E402

DIST = sys.argv[1]
SCOPES = "--gpu-scopes" in sys.argv
GPU = "--gpu" in sys.argv or SCOPES
SKIP_RULE = {} if GPU else {"variable": "CI", "value": "true"}
MIB = 1 << 20

try:
    import pytest  # noqa: F401  (what the children run, from this Python's site-packages)
except ImportError:
    skip(f"{sys.executable} has no pytest (pip install pytest)", **SKIP_RULE)
wheels = glob.glob(os.path.join(DIST, "gpuguard-*.whl"))
if len(wheels) != 1:
    skip(f"no gpuguard wheel in {DIST} (the python.wheel test builds it: {wheels})", **SKIP_RULE)
if GPU:
    torch_cuda_or_skip()

tmp = scratch("gpuguard-pytest-")


def run(argv, timeout=240, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


# ---- the venv: the wheel, and this Python's pytest beside it --------------------------------------
venv = os.path.join(tmp, "venv")
bindir = os.path.join(venv, "bin")
python = os.path.join(bindir, "python")
for what, argv in (("python -m venv makes the venv", [sys.executable, "-m", "venv", venv]),
                   ("pip installs the wheel into the venv",
                    [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheels[0]])):
    done = run(argv)
    if done.returncode != 0:
        abort(what, done.stdout + done.stderr)
purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
write_text(os.path.join(purelib, "outer-site-packages.pth"),
           "\n".join(site.getsitepackages() + [os.path.dirname(os.path.dirname(pytest.__file__))]) + "\n")

env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), VIRTUAL_ENV=venv)
for name in ("GPUGUARD_PRELOAD_LIBRARY", "GPUGUARD_OPTIONS", "GPUGUARD_RUN_OPTIONS", "LD_PRELOAD", "PYTHONPATH",
             "GPUGUARD_PYTEST_REEXEC", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
    env.pop(name, None)
if not GPU:
    fake_driver = sys.argv[sys.argv.index("--fake-driver") + 1]
    env["LD_LIBRARY_PATH"] = fake_driver + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["FAKE_CUDART"] = sys.argv[sys.argv.index("--fake-cudart") + 1]

project = os.path.join(tmp, "project")
os.makedirs(project)


def pytest_child(*args, under=(), extra_env=None):
    """`[under...] python -m pytest -v ARGS` in the project folder."""
    argv = list(under) + [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args]
    return run(argv, cwd=project, env=dict(env, **(extra_env or {})))


def outcomes(result):
    """{test name: PASSED|FAILED|ERROR} from pytest -v's lines."""
    return dict(re.findall(r"::(\w+) (PASSED|FAILED|ERROR)", result.stdout))


def failure_text(result, test):
    """The text of `test`'s failure section in pytest's output."""
    match = re.search(r"_{3,} " + test + r" _{3,}\n(.*?)(?=\n_{3,} |\n={3,} )", result.stdout, re.S)
    return match.group(1) if match else ""


if SCOPES:
    # ---- Python scopes around PyTorch allocations, under --track --------------------------------------
    job = os.path.join(project, "scopes_torch_job.py")
    write_text(job, f"""\
import json

import torch

import gpuguard

MIB = {MIB}
torch.ones(1, device="cuda").sum().item()  # CUDA's start and PyTorch's first block, before the scopes
torch.cuda.synchronize()
kept, rows = [], []
for size in (1, 8, 64, 300):  # small and large pools, a new segment or not
    before = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    scope = gpuguard.op(f"make_{{size}}")
    with scope:
        kept.append(torch.empty(size * MIB, dtype=torch.uint8, device="cuda"))
    after = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    rows.append(dict(scope.result, torch_allocated=after[0] - before[0], torch_reserved=after[1] - before[1]))
print("ROWS " + json.dumps(rows))
""")
    done = run([os.path.join(bindir, "gpuguard"), "run", "--track", "--", python, job], env=env, timeout=300)
    check(done.returncode == 0, "the scopes job ran under the wheel's gpuguard run --track", done.stderr[-3000:])
    found = [line[5:] for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    rows = json.loads(found[0]) if found else []
    check(len(rows) == 4, "the job printed its four scopes", done.stdout[-2000:])
    for row in rows:
        name = row.get("name")
        check(row.get("framework") == "torch" and row.get("framework_allocated_delta") == row["torch_allocated"]
              and row["torch_allocated"] >= int(name.split("_")[1]) * MIB,
              f"{name}: the scope's PyTorch allocated delta is memory_allocated()'s", row)
        check(row.get("framework_reserved_delta") == row["torch_reserved"],
              f"{name}: the scope's PyTorch reserved delta is memory_reserved()'s", row)
        check(row.get("net_bytes") == row["torch_reserved"],
              f"{name}: the scope's ledger net under --track is what PyTorch's cache took from the driver", row)
    check(any(row["torch_reserved"] > 0 for row in rows), "at least one scope took a new segment", rows)
    finish("gpu.torch.python_scopes")

if GPU:
    # ---- PyTorch tensors on the GPU -----------------------------------------------------------------
    write_text(os.path.join(project, "test_torch_gpu.py"), f"""\
import pytest
import torch

MIB = {MIB}
kept = []


def test_warm_up():  # CUDA's start and PyTorch's first block, outside the marked tests
    torch.ones(1, device="cuda").sum().item()


@pytest.mark.gpu_limit_leaks("0 B")
def test_freed_tensor():
    x = torch.ones(64 * MIB, dtype=torch.uint8, device="cuda")
    assert int(x.sum().item()) == 64 * MIB


@pytest.mark.gpu_limit_leaks("0 B")
def test_kept_tensor():
    kept.append(torch.ones(16 * MIB, dtype=torch.uint8, device="cuda"))  # KEPT


@pytest.mark.gpu_limit_memory("128 MiB")
def test_peak_within():
    x = torch.ones(64 * MIB, dtype=torch.uint8, device="cuda")
    assert int(x.sum().item()) == 64 * MIB


@pytest.mark.gpu_limit_memory("128 MiB", device=0)
def test_peak_over():
    x = torch.ones(256 * MIB, dtype=torch.uint8, device="cuda")
    assert int(x.sum().item()) == 256 * MIB
""")
    ran = pytest_child("--gpuguard", "--strict-markers", "test_torch_gpu.py")
    got = outcomes(ran)
    check(ran.returncode == 1 and got == {"test_warm_up": "PASSED", "test_freed_tensor": "PASSED",
                                          "test_kept_tensor": "FAILED", "test_peak_within": "PASSED",
                                          "test_peak_over": "FAILED"},
          "pytest --gpuguard on CUDA tensors: exit 1, the kept tensor and the peak over its limit fail",
          (ran.returncode, got, ran.stdout[-3000:], ran.stderr[-2000:]))
    kept = failure_text(ran, "test_kept_tensor")
    check("gpuguard: the test left 16.0 MiB" in kept and "PyTorch: its tensors hold 16.0 MiB (16777216 bytes) more "
          "on device 0" in kept, "the kept tensor's failure: 16 MiB left live, PyTorch's tensors on device 0", kept)
    check("PyTorch's cache took from the driver during the test" in kept and "[gpuguard] #1 " in kept,
          "the kept tensor's failure names the site of the block PyTorch took for it", kept)
    if sys.version_info[:2] in {(3, 11), (3, 12)}:  # frames read without the GIL: the test's own line
        kept_line = line_of(os.path.join(project, "test_torch_gpu.py"), "# KEPT")
        check(f"test_torch_gpu.py:{kept_line}" in kept, "the kept tensor's site is its line in the test", kept)
    over = failure_text(ran, "test_peak_over")
    check(re.search(r"peak on device 0 rose 2\d\d\.\d MiB .* over the limit of 128\.0 MiB", over) is not None
          and "gpu_limit_memory('128 MiB', device=0)" in over, "the peak's failure: device 0, over 128 MiB", over)
    finish("gpu.torch.pytest_markers")

# ---- CPU: the stand-in driver --------------------------------------------------------------------
tests = write_text(os.path.join(project, "test_markers.py"), f"""\
import ctypes
import os

import pytest

MIB = {MIB}
cudart = ctypes.CDLL(os.environ["FAKE_CUDART"])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]


def malloc(size):
    pointer = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(pointer), size) == 0
    return pointer


def free(pointer):
    assert cudart.cudaFree(pointer) == 0


kept = [malloc(8 * MIB)]  # live before every test: never a test's leak nor part of its peak


@pytest.mark.gpu_limit_memory("4 MiB")
def test_peak_within():
    free(malloc(3 * MIB))
    free(malloc(4 * MIB))


@pytest.mark.gpu_limit_memory("4 MiB")
def test_peak_over():
    first = malloc(3 * MIB)
    second = malloc(2 * MIB)
    free(first)
    free(second)


@pytest.mark.gpu_limit_leaks("0 B")
def test_no_leak():
    free(malloc(1 * MIB))


@pytest.mark.gpu_limit_leaks(1 * MIB)
def test_leak_within():
    kept.append(malloc(1 * MIB))


@pytest.mark.gpu_limit_leaks("0 B")
def test_leak_over():
    kept.append(malloc(2 * MIB))  # LEAKED HERE


@pytest.mark.gpu_limit_leaks("0 B")
def test_frees_what_was_live_before():
    free(kept.pop(0))  # the module's 8 MiB: freeing memory of before is no leak of this test
    kept.append(malloc(1 * MIB))
    free(kept.pop())


def test_unmarked_leak():
    kept.append(malloc(1 * MIB))  # no marker: not judged
""")
EXPECTED = {"test_peak_within": "PASSED", "test_peak_over": "FAILED", "test_no_leak": "PASSED",
            "test_leak_within": "PASSED", "test_leak_over": "FAILED", "test_frees_what_was_live_before": "PASSED",
            "test_unmarked_leak": "PASSED"}
leak_line = line_of(tests, "# LEAKED HERE")


def check_judged(result, how):
    got = outcomes(result)
    check(result.returncode == 1 and got == EXPECTED,
          f"{how}: exit 1; the peak over 4 MiB and the 2 MiB leak fail, the rest pass",
          (result.returncode, got, result.stdout[-3000:], result.stderr[-3000:]))
    over = failure_text(result, "test_peak_over")
    check("gpuguard: the test's device memory peak on device 0 rose 5.0 MiB (5242880 bytes) above the "
          "8.0 MiB (8388608 bytes) live at its start" in over and "over the limit of 4.0 MiB (4194304 bytes) "
          "(gpu_limit_memory('4 MiB'))" in over, f"{how}: the peak's failure: device, rise, start, limit", over)
    leak = failure_text(result, "test_leak_over")
    check("gpuguard: the test left 2.0 MiB (2097152 bytes) of device memory live, over the limit of 0 B "
          "(gpu_limit_leaks('0 B'))" in leak, f"{how}: the leak's failure: what was left and the limit", leak)
    check("[gpuguard] LEAK: 2.0 MiB in 1 allocation still live, from 1 site" in leak
          and "[gpuguard] #1 2.0 MiB in 1 allocation on device 0" in leak,
          f"{how}: the leak's failure has the leak report's text: its headline and its site", leak)
    # The stand-in runtime is called through ctypes.CDLL, which releases the GIL: where gpuguard reads
    # frames without it (Python 3.11 and 3.12, src/ledger/python_raw.cpp), the site names the test's line;
    # elsewhere its frames are native (stacks=all), the stand-in's cudaMalloc among them.
    if sys.version_info[:2] in {(3, 11), (3, 12)}:
        check(f"test_markers.py:{leak_line}" in leak,
              f"{how}: the leak's site names the test's line ({leak_line})", leak)
    else:
        check(re.search(r"\[gpuguard\]     #\d+ cudaMalloc", leak) is not None,
              f"{how}: the leak's site has its frames (stacks=all): the call into the runtime", (leak_line, leak))
    return got


# pytest --gpuguard, started without the interposer: the plugin starts it again with it.
again = pytest_child("--gpuguard", "--strict-markers", "test_markers.py")
check_judged(again, "pytest --gpuguard")
check(again.stderr.count("gpuguard: starting pytest again with ") == 1
      and os.path.join(venv, "lib", "libgpuguard_preload.so") in again.stderr,
      "pytest --gpuguard says once that it starts pytest again with the wheel's interposer", again.stderr[-2000:])
check("gpuguard: device memory from the CUDA driver, tracked by libgpuguard_preload.so" in again.stdout,
      "the report header says where the figures come from", again.stdout[:1500])

# Already under gpuguard run --track: judged in that process, and run exits with pytest's status.
tracked = pytest_child("--gpuguard", "test_markers.py", under=["gpuguard", "run", "--track", "--"],
                       extra_env={"GPUGUARD_OPTIONS": "stacks=all"})
check_judged(tracked, "gpuguard run --track -- pytest --gpuguard")
check("starting pytest again" not in tracked.stderr and "[gpuguard run]" in tracked.stderr
      and "exited with status 1" in tracked.stderr,
      "under gpuguard run --track pytest is not started again; run exits with its status 1", tracked.stderr[-2000:])

# A clean file through the restart exits 0: the status is pytest's own.
write_text(os.path.join(project, "test_clean.py"), """\
import pytest


@pytest.mark.gpu_limit_leaks("0 B")
@pytest.mark.gpu_limit_memory("1 GiB")
def test_nothing_on_the_device():
    assert sum(range(10)) == 45
""")
clean = pytest_child("--gpuguard", "test_clean.py")
check(clean.returncode == 0 and outcomes(clean) == {"test_nothing_on_the_device": "PASSED"}
      and "starting pytest again" in clean.stderr, "a passing file through the restart: exit 0",
      (clean.returncode, clean.stdout[-1500:], clean.stderr[-1500:]))

# Without --gpuguard: the markers change nothing; one line says they were not checked.
plain = pytest_child("--strict-markers", "test_markers.py")
check(plain.returncode == 0 and set(outcomes(plain).values()) == {"PASSED"} and len(outcomes(plain)) == 7,
      "without --gpuguard every test passes (the markers are registered: --strict-markers)",
      (plain.returncode, plain.stdout[-2000:], plain.stderr[-1000:]))
check(plain.stdout.count("gpuguard: 6 test(s) carry gpu_limit_memory or gpu_limit_leaks markers, not checked: "
                         "run pytest with --gpuguard") == 1 and "starting pytest again" not in plain.stderr,
      "without --gpuguard: one notice, no restart", (plain.stdout[-1000:], plain.stderr[-1000:]))

# A bad size: a usage error before any test runs, naming the test and the size.
write_text(os.path.join(project, "test_bad.py"), """\
import pytest


@pytest.mark.gpu_limit_leaks("2 GB ohno")
def test_bad_size():
    pass
""")
bad = pytest_child("--gpuguard", "test_bad.py")
check(bad.returncode == 4 and "test_bad.py::test_bad_size: gpu_limit_leaks('2 GB ohno'): bad size '2 GB ohno': "
      "expected a number and a unit" in bad.stderr and "PASSED" not in bad.stdout,
      "a bad size: exit 4 (usage error) naming the test, the marker and the size",
      (bad.returncode, bad.stdout[-1000:], bad.stderr[-1000:]))

# PyTorch's part, from a stand-in `torch` whose CUDA state is up: its cache is emptied at the body's
# start and end (after a synchronize), and a rise of its allocated bytes is the test's leak.
write_text(os.path.join(project, "test_torch_stand_in.py"), f"""\
import sys
import types

import pytest

MIB = {MIB}
calls = []


class cuda:
    allocated = 0

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def device_count():
        return 2

    @staticmethod
    def memory_reserved(device):
        return 64 * MIB if device == 0 else 0  # device 1: none of PyTorch's memory, left alone

    @staticmethod
    def synchronize(device):
        calls.append(f"synchronize({{device}})")

    @staticmethod
    def empty_cache():
        calls.append("empty_cache")

    @classmethod
    def memory_allocated(cls, device):
        assert device == 0
        return cls.allocated


sys.modules["torch"] = types.ModuleType("torch")
sys.modules["torch"].cuda = cuda


@pytest.mark.gpu_limit_leaks("0 B")
def test_tensor_freed():
    cuda.allocated += 4 * MIB
    cuda.allocated -= 4 * MIB


@pytest.mark.gpu_limit_leaks("1 MiB")
def test_tensor_kept():
    cuda.allocated += 4 * MIB


def test_settled_around_each_marked_body():
    assert calls == ["synchronize(0)", "empty_cache"] * 4
""")
torch_run = pytest_child("--gpuguard", "test_torch_stand_in.py")
check(torch_run.returncode == 1 and outcomes(torch_run) == {
          "test_tensor_freed": "PASSED", "test_tensor_kept": "FAILED", "test_settled_around_each_marked_body": "PASSED"},
      "a stand-in torch: the kept tensor fails, the freed one passes; synchronize and empty_cache around each body",
      (torch_run.returncode, outcomes(torch_run), torch_run.stdout[-3000:], torch_run.stderr[-1500:]))
kept_text = failure_text(torch_run, "test_tensor_kept")
check("gpuguard: the test left 4.0 MiB (4194304 bytes) of device memory live, over the limit of 1.0 MiB (1048576 "
      "bytes) (gpu_limit_leaks('1 MiB'))" in kept_text and "PyTorch: its tensors hold 4.0 MiB (4194304 bytes) more on "
      "device 0 than at the test's start" in kept_text, "the kept tensor's failure: PyTorch's tensors on device 0",
      kept_text)

# pytest.main() inside another program: not restarted, refused with what to run.
inside = run([python, "-c", "import sys, pytest; sys.exit(pytest.main(['--gpuguard', 'test_clean.py']))"],
             cwd=project, env=env)
check(inside.returncode == 4 and "this pytest runs inside another program (pytest.main)" in inside.stderr
      and "gpuguard run --track -- ..." in inside.stderr,
      "pytest.main(['--gpuguard']) in another program: exit 4, telling the command to run",
      (inside.returncode, inside.stdout[-1000:], inside.stderr[-1000:]))

# The size parser.
parsed = run([python, "-c", """\
from gpuguard.pytest_plugin import parse_size
good = {"2 GiB": 2 << 30, "24 MB": 24_000_000, "512 KiB": 512 << 10, "0 B": 0, 1234: 1234, "1.5GiB": 3 << 29,
        " 3 mib ": 3 << 20, "7": 7, "2 kb": 2000}
for text, size in good.items():
    assert parse_size(text) == size, (text, parse_size(text), size)
for bad in ("2 GB ohno", "GiB", "", "-1 MiB", "1e3 B", "2 XB", -5, True, 2.5, None):
    try:
        parse_size(bad)
    except ValueError as error:
        assert repr(bad) in str(error), (bad, str(error))
    else:
        raise AssertionError(f"{bad!r} parsed")
print("ok")
"""], env=env)
check(parsed.returncode == 0 and parsed.stdout.strip() == "ok",
      "parse_size: IEC and SI units, ints as bytes; a bad size is a ValueError naming it", parsed.stdout + parsed.stderr)

finish("python.pytest")
