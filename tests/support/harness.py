"""What the Python test scripts share, in one place: recording checks and ending with a verdict,
the skip rule of the tests that need a GPU, device memory read through NVML, and the small parts
of starting children. A process's state, whether it is alive, and polling until something holds
(with the time it took) are in procfs.py beside it. Imported by tests that put this folder on
sys.path:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    from harness import check, finish  # noqa: E402  (tests/support)

Exit statuses ctest sees
  0   every check passed (finish)
  1   a check failed (finish, abort), a GPU test could not run under GPUGUARD_REQUIRE_GPU=1 (skip),
      or the script raised (a Python traceback)
  77  skipped: a GPU test on a machine without what it needs (skip); each such test is registered
      with ctest's SKIP_RETURN_CODE 77

Checks and the verdict
  check(condition, what, detail="")
      records `what` as a failure when `condition` is false, with `detail` (any value) printed
      under it; returns `condition`, so a check can guard the checks that need what it checked.
      A check never stops the script: every failure is listed at the end.
  check_schema(document, schema, where)
      check() that `document` matches the JSON schema `schema` (a dict) with the jsonschema
      package; where it is not installed, a note (once), and only the test's own checks run.
  echo_checks()
      from then on each check also prints "PASS what" or "FAIL what: detail" as it is made.
  say(text)
      prints a line at once (flushed, so that it lands in order with the children's output).
  scratch(prefix)
      a new temporary folder for the script's files: removed when every check passed or at a
      skip (also one that fails), kept and named when a check failed.
  finish(name, note="")
      the verdict, last: "FAILED:" and the failures, one a line, status 1; or
      "NAME: all checks passed NOTE", status 0.
  abort(what, detail="")
      a failure after which the script cannot go on (a child that never got ready): recorded,
      then finish() at once, status 1.

The skip rule
  skip(reason, variable="GPUGUARD_REQUIRE_GPU", value="1")
      for a test that needs a GPU, on a machine without what it needs: prints "skipped: REASON"
      and exits 77. Where the variable has the value (the GPU runner, scripts/gpu-runner.sh, sets
      GPUGUARD_REQUIRE_GPU=1, and GPUGUARD_REQUIRE_GPUS=2 on a two-GPU machine) the same call
      prints "FAILED: GPUGUARD_REQUIRE_GPU=1 but REASON" and exits 1: a machine that should run
      a GPU test never passes it by skipping.
  nvml_or_skip(devices=1)
      an nvml() that sees at least `devices` devices, or skip() naming what is missing (NVML, its
      driver, or a device); for more than one device the variable is GPUGUARD_REQUIRE_GPUS.
  torch_cuda_or_skip()
      skip() unless this Python imports torch and torch sees a CUDA device; probed in a child, so
      this process opens no device.

Device memory
  nvml()
      NVML through ctypes (libnvidia-ml.so.1): count() devices, used(index) bytes as nvidia-smi
      shows them. The test process makes no CUDA context, so it holds nothing it measures.
      Raises OSError without the library, RuntimeError naming the call that failed.

Children
  SPAWNED_HOLDER_JOB
      spawned_holder_job.py beside this file: the job whose spawned worker holds GPU memory
      (`python SPAWNED_HOLDER_JOB BYTES wait|exit`; its top says what it prints).
  no_core_dumps()
      a preexec_fn: the child writes no core file when a test ends it by a fatal signal.
  write_text(path, text)
      writes a script for a child; returns `path` (multiprocessing's spawn imports the parent's
      __main__ from a file, so a job that spawns workers cannot be `python -c`).
  line_of(path, marker)
      the number of the first line of a source file that holds `marker`: the line a report must
      name; SystemExit naming both when none does.
"""
import ctypes
import os
import resource
import shutil
import subprocess
import sys
import tempfile

SPAWNED_HOLDER_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spawned_holder_job.py")
failures = []
_echo = False
_scratch = None
_jsonschema = None  # the module once imported; False where it is not installed


# ---- checks and the verdict ---------------------------------------------------------------------

def say(text):
    print(text, flush=True)


def check(condition, what, detail=""):
    if _echo:
        say(("PASS " if condition else "FAIL ") + what + (f": {detail}" if detail and not condition else ""))
    if not condition:
        failures.append(what + (("\n" + str(detail)) if detail else ""))
    return condition


def echo_checks():
    global _echo
    _echo = True


def scratch(prefix):
    global _scratch
    _scratch = tempfile.mkdtemp(prefix=prefix)
    return _scratch


def finish(name, note=""):
    if failures:
        kept = f" (files kept in {_scratch})" if _scratch else ""
        say(f"FAILED{kept}:\n- " + "\n- ".join(failures))
        sys.exit(1)
    if _scratch:
        shutil.rmtree(_scratch, ignore_errors=True)
    say(f"{name}: all checks passed" + (f" {note}" if note else ""))
    sys.exit(0)


def abort(what, detail=""):
    check(False, what, detail)
    finish(None)


def check_schema(document, schema, where):
    global _jsonschema
    if _jsonschema is None:
        try:
            import jsonschema
            _jsonschema = jsonschema
        except ImportError:  # scripts/deps.sh test installs it
            _jsonschema = False
            say("note: jsonschema is not installed here; structural checks only")
    if not _jsonschema:
        return True
    try:
        _jsonschema.validate(document, schema)
    except _jsonschema.ValidationError as error:
        return check(False, f"{where} does not match its schema: {error.message}")
    return True


# ---- the skip rule ------------------------------------------------------------------------------

def skip(reason, variable="GPUGUARD_REQUIRE_GPU", value="1"):
    if _scratch:  # what the test wrote before it found it cannot run: the reason says enough
        shutil.rmtree(_scratch, ignore_errors=True)
    if os.environ.get(variable) == value:
        say(f"FAILED: {variable}={value} but {reason}")
        sys.exit(1)
    say("skipped: " + reason)
    sys.exit(77)


class nvml:
    """NVML through ctypes (see the top of this file)."""

    class _memory(ctypes.Structure):  # nvmlMemory_t
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("NVML found no driver (nvmlInit_v2 failed)")
        self.handles = {}

    def count(self):
        count = ctypes.c_uint()
        return count.value if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else 0

    def handle(self, index):
        if index not in self.handles:
            h = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) != 0:
                raise RuntimeError(f"NVML found no device {index}")
            self.handles[index] = h
        return self.handles[index]

    def used(self, index=0):
        memory = self._memory()
        if self.lib.nvmlDeviceGetMemoryInfo(self.handle(index), ctypes.byref(memory)) != 0:
            raise RuntimeError(f"nvmlDeviceGetMemoryInfo failed for device {index}")
        return memory.used


def nvml_or_skip(devices=1):
    variable, value = ("GPUGUARD_REQUIRE_GPU", "1") if devices == 1 else ("GPUGUARD_REQUIRE_GPUS", str(devices))
    try:
        found = nvml()
        count = found.count()
        if count < devices:
            skip(f"this machine has {count} GPU(s), the test needs {devices}", variable, value)
        for index in range(devices):
            found.handle(index)
    except OSError:
        skip("no NVML (libnvidia-ml.so.1) on this machine, so no GPU to measure", variable, value)
    except RuntimeError as error:
        skip(str(error), variable, value)
    return found


def torch_cuda_or_skip():
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        skip(f"torch cannot be imported by {sys.executable}")
    if probe.stdout.strip().splitlines()[-1:] != ["True"]:
        skip("torch sees no CUDA device here")


# ---- children -----------------------------------------------------------------------------------

def no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def line_of(path, marker):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number
    raise SystemExit(f"marker {marker} not in {path}")
