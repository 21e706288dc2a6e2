#!/usr/bin/env python3
"""Post-mortems of `gpuguard run` (docs/run.md, "Post-mortem"), in real processes: a tracked program
(postmortem_child.cpp, linked with the library) that SIGKILLs itself gets a post-mortem in the
summary, in --report and as an `end` line in its JSONL log that `gpuguard report` reads; one that
exits gets none; one the OOM killer ends inside a memory-limited cgroup of the test's own gets the
cause "oom_kill" (needs root and a cgroup v2 memory controller: skipped with the reason otherwise);
one whose allocations are under an exit holder's tag has them told as held by that holder, apart
from the leaked ones. With the stand-in CUDA runtime and driver, a Python job under `--track`
(postmortem_python_job.py) SIGKILLed while it holds memory allocated from a marked line: its
post-mortem names that file, line and function first, then the native frames.

usage: run_postmortem_test.py GPUGUARD POSTMORTEM_CHILD EVENTS_SCHEMA
                              [--preload LIBRARY --fake-driver DIR --fake-cudart LIBRARY]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUGUARD, CHILD, SCHEMA = sys.argv[1:4]
del sys.argv[1:4]
STAND_INS = {}
while len(sys.argv) > 2 and sys.argv[1] in ("--preload", "--fake-driver", "--fake-cudart"):
    STAND_INS[sys.argv[1]] = sys.argv[2]
    del sys.argv[1:3]
PYTHON_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "postmortem_python_job.py")


def validate(lines):
    """Every JSONL line against the events schema, where jsonschema is installed."""
    try:
        import jsonschema
    except ImportError:
        return
    with open(SCHEMA) as f:
        schema = json.load(f)
    for line in lines:
        jsonschema.validate(line, schema)


def run(mode, tmp, extra_env=None, preexec=None):
    log = os.path.join(tmp, f"{mode}.jsonl")
    report = os.path.join(tmp, f"{mode}.json")
    env = dict(os.environ, GPUGUARD_OPTIONS=f"stacks=all:jsonl_log={log}:leak_report=0")
    env.pop("GPUGUARD_POSTMORTEM_FD", None)
    env.update(extra_env or {})
    p = subprocess.run([GPUGUARD, "run", "--grace", "1", "--report", report, "--", CHILD, mode], env=env,
                       capture_output=True, text=True, timeout=60, preexec_fn=preexec)
    with open(report) as f:
        doc = json.load(f)
    return p, doc, log


class Postmortem(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuguard-postmortem-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_sigkill(self):
        p, doc, log = run("kill", self.tmp)
        self.assertEqual(p.returncode, 137, p.stderr)
        live = int(p.stdout.split()[1])  # what the child had recorded, as it said before the kill
        self.assertIsNone(doc["postmortem_note"])
        self.assertEqual(len(doc["postmortems"]), 1, p.stderr)
        pm = doc["postmortems"][0]
        self.assertEqual(pm["cause"], "signal")
        self.assertEqual(pm["signal_name"], "SIGKILL")
        self.assertEqual(pm["pid"], doc["command_pid"])
        self.assertTrue(pm["program"].endswith("postmortem_child"), pm["program"])
        host = [d for d in pm["devices"] if d["device"] == -1]
        self.assertEqual(len(host), 1)
        self.assertEqual(host[0]["live_bytes"], live)
        self.assertEqual(host[0]["live_count"], 6)
        self.assertEqual(host[0]["allocations"], 7)
        self.assertEqual(host[0]["frees"], 1)
        self.assertEqual(sum(s["bytes"] for s in pm["sites"]), live)
        functions = " ".join(f["function"] for s in pm["sites"] for f in s["frames"])
        self.assertIn("allocate_weights", functions)
        self.assertIn("allocate_activations", functions)
        self.assertEqual([[s["name"] for s in t["scopes"]] for t in pm["threads"]], [["step", "forward"]])
        self.assertEqual(pm["events_total"], 8)
        self.assertEqual([e["type"] for e in pm["events"]], ["alloc"] * 7 + ["free"])
        self.assertEqual(pm["log"], os.path.realpath(log))
        self.assertIsNone(pm["log_error"])
        # The summary.
        self.assertIn("post-mortem of pid", p.stderr)
        self.assertIn("killed by SIGKILL", p.stderr)
        self.assertIn("open scopes of thread", p.stderr)
        self.assertIn("step > forward", p.stderr)
        # The log: its last line is the end the supervisor wrote, valid against the schema.
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        end = lines[-1]
        self.assertEqual(end["type"], "end")
        self.assertEqual(end["reason"], "postmortem")
        self.assertEqual([d["current_bytes"] for d in end["devices"] if d["device"] == -1], [live])
        self.assertEqual(end["postmortem"]["cause"], "signal")
        validate(lines)
        r = subprocess.run([GPUGUARD, "report", log, "-o", os.path.join(self.tmp, "page.html")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_held_by_exit_holder(self):
        p, doc, log = run("held", self.tmp)
        self.assertEqual(p.returncode, 137, p.stderr)
        live = int(p.stdout.split()[1])
        self.assertEqual(len(doc["postmortems"]), 1, p.stderr)
        pm = doc["postmortems"][0]
        host = [d for d in pm["devices"] if d["device"] == -1][0]
        self.assertEqual(host["live_bytes"], live)
        self.assertEqual(host["held_bytes"], 2 << 20)
        held = [s for s in pm["sites"] if s["held"]]
        self.assertEqual([(s["tag"], s["bytes"], s["count"]) for s in held], [("stand-in cache", 2 << 20, 1)])
        self.assertIn("allocate_weights", " ".join(f["function"] for f in held[0]["frames"]))
        leaked = [s for s in pm["sites"] if not s["held"]]
        self.assertEqual({s["tag"] for s in leaked}, {""})
        self.assertEqual(sum(s["bytes"] for s in leaked), live - (2 << 20))
        self.assertIn("2.0 MiB in 1 on host held by stand-in cache at", p.stderr)
        self.assertIn("2.0 MiB of it held by caches until exit", p.stderr)
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        self.assertTrue(any(s["held"] for s in lines[-1]["postmortem"]["sites"]))
        validate(lines)

    def test_python_lines(self):
        if len(STAND_INS) != 3:
            self.skipTest("no stand-in CUDA runtime and driver in this build (tests/preload)")
        log = os.path.join(self.tmp, "python.jsonl")
        report = os.path.join(self.tmp, "python.json")
        driver = STAND_INS["--fake-driver"]
        env = dict(os.environ, GPUGUARD_PRELOAD_LIBRARY=STAND_INS["--preload"],
                   GPUGUARD_OPTIONS=f"text_log=off:jsonl_log={log}:leak_report=0:stacks=all",
                   LD_LIBRARY_PATH=driver + (os.pathsep + os.environ["LD_LIBRARY_PATH"]
                                             if os.environ.get("LD_LIBRARY_PATH") else ""))
        for variable in ("LD_PRELOAD", "GPUGUARD_RUN_OPTIONS", "PYTHONPATH", "GPUGUARD_POSTMORTEM_FD"):
            env.pop(variable, None)
        p = subprocess.run([GPUGUARD, "run", "--track", "--grace", "1", "--report", report, "--", sys.executable,
                            PYTHON_JOB, STAND_INS["--fake-cudart"]],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 137, p.stderr)
        self.assertIn("holding", p.stdout)
        with open(PYTHON_JOB) as f:
            line = [i for i, text in enumerate(f, 1) if "# site: postmortem" in text][0]
        with open(report) as f:
            doc = json.load(f)
        self.assertEqual(len(doc["postmortems"]), 1, p.stderr)
        pm = doc["postmortems"][0]
        self.assertEqual(pm["cause"], "signal")
        sites = [s for s in pm["sites"] if s["device"] >= 0 and s["bytes"] == 3 << 20]
        self.assertEqual(len(sites), 1, pm["sites"])
        frames = sites[0]["frames"]
        self.assertGreater(len(frames), 1, frames)
        first = frames[0]
        self.assertEqual(first["kind"], "python", frames)
        self.assertEqual(first["location"], f"{PYTHON_JOB}:{line}")
        self.assertEqual(first["function"], "load_weights")
        kinds = [f["kind"] for f in frames]
        self.assertEqual(kinds, sorted(kinds, key=lambda k: k != "python"), "Python frames first, then native")
        self.assertIn("native", kinds)
        self.assertFalse(sites[0]["held"])
        self.assertIn(f"load_weights ({PYTHON_JOB}:{line})", p.stderr)
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        self.assertEqual(lines[-1]["reason"], "postmortem")
        end_frames = [s["frames"] for s in lines[-1]["postmortem"]["sites"] if s["bytes"] == 3 << 20]
        self.assertEqual(end_frames[0][0]["location"], f"{PYTHON_JOB}:{line}")
        validate(lines)

    def test_normal_exit_has_none(self):
        p, doc, log = run("exit", self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["postmortems"], [])
        self.assertNotIn("post-mortem", p.stderr)
        with open(log) as f:
            self.assertEqual(json.loads(f.read().splitlines()[-1])["reason"], "exit")

    def test_oom_kill(self):
        root = "/sys/fs/cgroup"
        if os.geteuid() != 0:
            self.skipTest("needs root to make a memory-limited cgroup")
        try:
            with open("/proc/self/cgroup") as f:
                own = [l.split(":", 2)[2].strip() for l in f if l.startswith("0::")][0]
            with open(os.path.join(root, own.lstrip("/"), "cgroup.controllers")) as f:
                controllers = f.read().split()
        except (OSError, IndexError):
            self.skipTest(f"no cgroup v2 hierarchy at {root} (cgroup v1 or hybrid)")
        if "memory" not in controllers:
            self.skipTest("the cgroup v2 memory controller is not delegated to this process's cgroup")
        # A cgroup of the test's own with 128 MiB and no swap; `gpuguard run` makes the job's below it.
        parent = os.path.join(root, own.lstrip("/"))
        limited = os.path.join(parent, f"gpuguard-postmortem-test.{os.getpid()}")
        try:
            os.mkdir(limited)
            with open(os.path.join(limited, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
        except OSError as e:
            self.skipTest(f"cannot make a memory-limited cgroup under {parent}: {e}")
        try:
            with open(os.path.join(limited, "memory.max"), "w") as f:
                f.write(str(128 << 20))
            if os.path.exists(os.path.join(limited, "memory.swap.max")):
                with open(os.path.join(limited, "memory.swap.max"), "w") as f:
                    f.write("0")
            procs = os.path.join(limited, "cgroup.procs")

            def join():
                with open(procs, "w") as f:
                    f.write("0")

            p, doc, log = run("oom", self.tmp, preexec=join)
            self.assertEqual(p.returncode, 137, p.stderr)
            self.assertEqual(len(doc["postmortems"]), 1, p.stderr)
            self.assertEqual(doc["postmortems"][0]["cause"], "oom_kill")
            self.assertIn("OOM kill", p.stderr)
        finally:
            for _ in range(50):
                try:
                    os.rmdir(limited)
                    break
                except OSError:
                    import time
                    time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
