#!/usr/bin/env python3
"""The case gpuguard run exists for, with real PyTorch: a job whose DataLoader workers and
multiprocessing helper hold the (fake) GPU device, its main process killed with SIGKILL mid-loop.
Without gpuguard, the helper keeps running and keeps the device (the GPU memory would stay taken),
and busy workers run on until they next check on their parent. Under `gpuguard run`, none of them survives the grace period, and the
report names them as the holders when the job ended.

Needs torch: without it this test FAILS (it never skips on a CPU machine); scripts/deps.sh test
installs it.

usage: run_torch_test.py GPUGUARD
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from procfs import alive, wait_until  # noqa: E402  (tests/support)

GPUGUARD = None
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_torch_job.py")
ROLES = {"main", "helper", "worker0", "worker1"}
GRACE = 2.0


def holds(pid, device):
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == device for fd in os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return False


class torch_job(unittest.TestCase):
    def setUp(self):
        if importlib.util.find_spec("torch") is None:
            self.fail(f"torch cannot be imported by {sys.executable}: this test needs it. scripts/deps.sh test installs "
                      "it (python3 -m pip install torch==2.11.0)")
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-run-torch-")
        self.device = os.path.join(self.tmp.name, "nvidia0")
        with open(self.device, "wb"):
            pass
        self.pids = {}

    def tearDown(self):
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.tmp.cleanup()

    def start(self, name, prefix):
        pidfile = os.path.join(self.tmp.name, name + ".pids")
        log = open(os.path.join(self.tmp.name, name + ".log"), "w+b")  # pylint: disable=consider-using-with
        self.addCleanup(log.close)
        p = subprocess.Popen([*prefix, sys.executable, JOB, pidfile, self.device], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, start_new_session=True)
        self.pids[name] = p.pid

        def listed():
            try:
                with open(pidfile) as f:
                    return {role: int(pid) for pid, role in (line.split() for line in f)}
            except FileNotFoundError:
                return {}

        ok = wait_until(lambda: set(listed()) == ROLES or p.poll() is not None, 120)
        log.seek(0)
        self.assertTrue(ok and p.poll() is None, f"the job did not start: {listed()}\n{log.read().decode()}")
        pids = listed()
        self.pids.update({f"{name}.{role}": pid for role, pid in pids.items()})
        return p, pids, log

    def test_plain_job_leaves_holders_behind(self):
        p, pids, _ = self.start("plain", [])
        os.kill(pids["main"], signal.SIGKILL)
        p.wait(timeout=10)
        time.sleep(1.0)
        survivors = {role for role, pid in pids.items() if alive(pid)}
        holding = {role for role in survivors if holds(pids[role], self.device)}
        print(f"\nwithout gpuguard, 1 s after the main process was killed: alive {sorted(survivors)}, "
              f"holding the device {sorted(holding)}", file=sys.stderr)
        # The helper never learns that its parent died, and keeps the device (GPU memory, on a GPU)
        # until someone kills it. DataLoader workers check on their parent after each batch (and
        # every 5 s when idle), so busy ones end on their own soon: they are listed, not required.
        self.assertIn("helper", holding)

    def test_gpuguard_run_ends_them_within_the_grace_period(self):
        report = os.path.join(self.tmp.name, "report.json")
        prefix = os.path.join(self.tmp.name, "nvidia")
        p, pids, log = self.start("guarded", [GPUGUARD, "run", "--grace", str(GRACE), "--device-prefix", prefix,
                                              "--report", report, "--"])
        start = time.monotonic()
        os.kill(pids["main"], signal.SIGKILL)
        status = p.wait(timeout=GRACE + 20)
        elapsed = time.monotonic() - start
        log.seek(0)
        output = log.read().decode()
        self.assertEqual(status, 128 + signal.SIGKILL, output)
        survivors = {role for role, pid in pids.items() if alive(pid)}
        self.assertEqual(survivors, set(), output)
        self.assertLess(elapsed, GRACE + 1.5)
        with open(report) as f:
            doc = json.load(f)
        holders = {h["pid"] for h in doc["residue"]["at_end"]["holders"]}
        self.assertIn(pids["helper"], holders, (holders, pids))
        self.assertEqual(doc["residue"]["after_teardown"]["holders"], [])
        self.assertEqual(doc["teardown"]["survived"], 0)
        ended = {x["pid"] for x in doc["teardown"]["processes"] if x["ended"]}
        self.assertIn(pids["helper"], ended)
        line = [l for l in output.splitlines() if l.startswith("[gpuguard run] ")][-1]
        print(f"\n{line}", file=sys.stderr)
        self.assertIn("was killed by SIGKILL (status 137)", line)
        self.assertIn("held a GPU when it ended", line)
        self.assertIn("none holds one now", line)


if __name__ == "__main__":
    GPUGUARD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0], "-v"])
