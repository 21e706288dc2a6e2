#!/usr/bin/env python3
"""The shared test harness (harness.py) and /proc helpers (procfs.py), in real child scripts judged
by their exit status and what they print: the verdict and the scratch folder, the skip rule and
GPUGUARD_REQUIRE_GPU(S), NVML's readings and the skips before them on the stand-in NVML
(tests/cli/fake_nvml.cpp loaded as libnvidia-ml.so.1), the torch probe, polling with its time,
process states, line markers and schema checks.

usage: harness_test.py FAKE_NVML_SO
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import procfs  # noqa: E402  (tests/support)

FAKE_NVML = None
VARIABLES = ("GPUGUARD_REQUIRE_GPU", "GPUGUARD_REQUIRE_GPUS", "GPUGUARD_FAKE_NVML", "LD_LIBRARY_PATH")


class harness_test(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-harness-test-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def script(self, body, env=None):
        """Runs `body` (after `from harness import *`) in a child Python: (status, stdout)."""
        code = f"import sys\nsys.path.insert(0, {HERE!r})\nfrom harness import *\n" + textwrap.dedent(body)
        full_env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
        full_env.update(env or {})
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full_env)
        self.assertNotIn("Traceback", done.stderr, done.stderr)
        self.stderr = done.stderr
        return done.returncode, done.stdout

    def fake_nvml(self, spec):
        """The environment that makes the stand-in NVML answer from `spec` as libnvidia-ml.so.1."""
        lib = os.path.join(self.dir, "lib")
        os.makedirs(lib, exist_ok=True)
        if not os.path.exists(os.path.join(lib, "libnvidia-ml.so.1")):
            os.symlink(FAKE_NVML, os.path.join(lib, "libnvidia-ml.so.1"))
        path = os.path.join(self.dir, "nvml.spec")
        with open(path, "w") as f:
            f.write(spec)
        return {"LD_LIBRARY_PATH": lib, "GPUGUARD_FAKE_NVML": path}

    # ---- checks and the verdict -----------------------------------------------------------------

    def test_every_check_passed_is_status_0_and_the_scratch_folder_goes(self):
        status, out = self.script("""
            tmp = scratch("gpuguard-harness-child-")
            print(tmp)
            print(check(1 == 1, "one is one"))
            finish("child", "(1 check)")
            print("not reached")
        """)
        self.assertEqual(status, 0, out)
        tmp, returned, verdict = out.splitlines()
        self.assertEqual(returned, "True")
        self.assertEqual(verdict, "child: all checks passed (1 check)")
        self.assertFalse(os.path.exists(tmp))

    def test_a_failed_check_is_status_1_listing_each_failure_and_keeping_the_files(self):
        status, out = self.script("""
            tmp = scratch("gpuguard-harness-child-")
            print(tmp)
            print(check(False, "first", {"a": 1}))
            check(True, "passes")
            check(0, "second")
            print("still running")
            finish("child")
        """)
        self.assertEqual(status, 1, out)
        tmp = out.splitlines()[0]
        self.addCleanup(lambda: os.path.isdir(tmp) and __import__("shutil").rmtree(tmp))
        self.assertTrue(os.path.isdir(tmp), "the files of a failed test are kept")
        self.assertEqual(out.splitlines()[1:], ["False", "still running", f"FAILED (files kept in {tmp}):",
                                                "- first", "{'a': 1}", "- second"])

    def test_abort_ends_at_once_with_status_1(self):
        status, out = self.script("""
            check(False, "earlier")
            abort("the child never got ready", "its stderr")
            print("not reached")
        """)
        self.assertEqual(status, 1, out)
        self.assertEqual(out.splitlines(), ["FAILED:", "- earlier", "- the child never got ready", "its stderr"])

    def test_echoed_checks_print_as_they_are_made(self):
        status, out = self.script("""
            echo_checks()
            check(True, "fine", "not shown")
            check(False, "broken", "why")
            finish("child")
        """)
        self.assertEqual(status, 1, out)
        self.assertEqual(out.splitlines()[:2], ["PASS fine", "FAIL broken: why"])

    # ---- the skip rule ------------------------------------------------------------------------------

    def test_skip_is_77_with_the_reason_and_removes_the_scratch_folder(self):
        body = """
            print(scratch("gpuguard-harness-child-"))
            skip("no widget here")
            print("not reached")
        """
        for env in ({}, {"GPUGUARD_REQUIRE_GPU": "0"}, {"GPUGUARD_REQUIRE_GPUS": "2"}):
            with self.subTest(env=env):
                status, out = self.script(body, env)
                self.assertEqual(status, 77, out)
                tmp, line = out.splitlines()
                self.assertEqual(line, "skipped: no widget here")
                self.assertFalse(os.path.exists(tmp))

    def test_skip_fails_where_a_gpu_is_required(self):
        status, out = self.script('print(scratch("gpuguard-harness-child-"))\nskip("no widget here")',
                                  {"GPUGUARD_REQUIRE_GPU": "1"})
        self.assertEqual(status, 1, out)
        tmp, line = out.splitlines()
        self.assertEqual(line, "FAILED: GPUGUARD_REQUIRE_GPU=1 but no widget here")
        self.assertFalse(os.path.exists(tmp))
        body = 'skip("one GPU only", "GPUGUARD_REQUIRE_GPUS", "2")'
        self.assertEqual(self.script(body, {"GPUGUARD_REQUIRE_GPU": "1"})[0], 77)
        status, out = self.script(body, {"GPUGUARD_REQUIRE_GPUS": "2"})
        self.assertEqual(status, 1, out)
        self.assertEqual(out.splitlines(), ["FAILED: GPUGUARD_REQUIRE_GPUS=2 but one GPU only"])

    def test_nvml_or_skip_names_what_is_missing(self):
        cases = [
            ("init_error 9\n", 1, "NVML found no driver (nvmlInit_v2 failed)"),
            ("driver 580.00\n", 1, "this machine has 0 GPU(s), the test needs 1"),
            ("device 0 1000 0 10 Fake GPU\n", 2, "this machine has 1 GPU(s), the test needs 2"),
        ]
        for spec, devices, reason in cases:
            with self.subTest(spec=spec, devices=devices):
                env = self.fake_nvml(spec)
                body = f"nvml_or_skip({devices})\nprint('not reached')"
                status, out = self.script(body, env)
                self.assertEqual((status, out.splitlines()), (77, ["skipped: " + reason]))
                variable, value = ("GPUGUARD_REQUIRE_GPU", "1") if devices == 1 else ("GPUGUARD_REQUIRE_GPUS", "2")
                status, out = self.script(body, dict(env, **{variable: value}))
                self.assertEqual((status, out.splitlines()), (1, [f"FAILED: {variable}={value} but {reason}"]))

    def test_nvml_or_skip_without_the_library(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        status, out = self.script("""
            import ctypes
            try:
                ctypes.CDLL("libnvidia-ml.so.1")
                print("this machine has NVML")
            except OSError:
                nvml_or_skip()
        """, {"LD_LIBRARY_PATH": empty})
        if out.strip() == "this machine has NVML":
            self.skipTest("libnvidia-ml.so.1 is installed here: the case without it runs on machines without it")
        self.assertEqual((status, out.strip()), (77, "skipped: no NVML (libnvidia-ml.so.1) on this machine, so no GPU to measure"))

    def test_nvml_reads_each_devices_used_bytes(self):
        env = self.fake_nvml("device 0 1000 5 100,200,300 Fake GPU\ndevice 1 2000 0 7 Other GPU\n")
        status, out = self.script("""
            nvml = nvml_or_skip(2)
            print(nvml.count(), nvml.used(), nvml.used(0), nvml.used(), nvml.used(), nvml.used(1))
            try:
                nvml.used(2)
            except RuntimeError as error:
                print(error)
        """, env)
        self.assertEqual(status, 0, out)
        self.assertEqual(out.splitlines(), ["2 105 205 305 305 7", "NVML found no device 2"])

    def test_torch_probe_skips_when_torch_sees_no_device(self):
        status, out = self.script("torch_cuda_or_skip()\nprint('not reached')", {"CUDA_VISIBLE_DEVICES": "-1"})
        self.assertEqual(status, 77, out)
        self.assertIn(out.strip(), ("skipped: torch sees no CUDA device here",
                                    f"skipped: torch cannot be imported by {sys.executable}"))

    # ---- polling, /proc, files ----------------------------------------------------------------------

    def test_seconds_until_times_the_condition_from_since(self):
        env = self.fake_nvml("device 0 1000 0 900,900,900,900,900,10 Fake GPU\n")
        status, out = self.script("""
            import time
            from procfs import seconds_until
            nvml = nvml_or_skip()
            since = time.monotonic() - 5
            print(seconds_until(lambda: nvml.used() <= 100, 10, step=0.001, since=since))
            print(seconds_until(lambda: nvml.used() > 100, 0.05, step=0.001))
        """, env)
        self.assertEqual(status, 0, out)
        back, never = out.splitlines()
        self.assertGreaterEqual(float(back), 5.0)  # counted from `since`, not from the call
        self.assertLess(float(back), 10.0)
        self.assertEqual(never, "None")
        started = time.monotonic()
        self.assertIsNone(procfs.seconds_until(lambda: False, 0.1, step=0.01))
        self.assertGreaterEqual(time.monotonic() - started, 0.1)
        self.assertEqual(procfs.seconds_until(lambda: True, 5, since=time.monotonic() + 1), 0.0)
        self.assertTrue(procfs.wait_until(lambda: True, 0))
        self.assertFalse(procfs.wait_until(lambda: False, 0.02))

    def test_process_states(self):
        self.assertIn(procfs.state(os.getpid()), ("R", "S"))
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        self.assertTrue(procfs.wait_until(lambda: procfs.state(child.pid) == "Z", 30))
        self.assertFalse(procfs.alive(child.pid))
        child.wait()
        self.assertEqual(procfs.state(child.pid), "gone")

    def test_line_of_finds_the_marker_or_names_both(self):
        path = os.path.join(self.dir, "source.cpp")
        with open(path, "w") as f:
            f.write("int a;\nint b;  // MARKER\nint c;  // MARKER\n")
        status, out = self.script(f"print(line_of({path!r}, 'MARKER'))\nline_of({path!r}, 'ABSENT')")
        self.assertEqual(status, 1)
        self.assertEqual(out.strip(), "2")
        self.assertEqual(self.stderr.strip(), f"marker ABSENT not in {path}")

    def test_schema_checks(self):
        status, out = self.script("""
            schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
            print(check_schema({"n": 1}, schema, "good"))
            print(check_schema({"n": "x"}, schema, "bad"))
            finish("child")
        """)
        if "note: jsonschema is not installed here" in out:
            self.assertEqual(status, 0, out)
        else:
            self.assertEqual(status, 1, out)
            self.assertEqual(out.splitlines()[:3], ["True", "False", "FAILED:"])
            self.assertIn("- bad does not match its schema: 'x' is not of type 'integer'", out)


if __name__ == "__main__":
    FAKE_NVML = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0], "-v"])
