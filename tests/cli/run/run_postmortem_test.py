#!/usr/bin/env python3
"""Post-mortems of `gpuguard run` (docs/run.md, "Post-mortem"), in real processes: a tracked program
(postmortem_child.cpp, linked with the library) that SIGKILLs itself gets a post-mortem in the
summary, in --report and as an `end` line in its JSONL log that `gpuguard report` reads; one that
exits gets none; one the OOM killer ends inside a memory-limited cgroup of the test's own (cgroup v2
where its hierarchy has the memory controller, else cgroup v1's) gets the cause "oom_kill" (needs
root and a memory controller it can write: skipped with the reason otherwise);
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


def run(mode, tmp, extra_env=None, preexec=None, timeout=60):
    log = os.path.join(tmp, f"{mode}.jsonl")
    report = os.path.join(tmp, f"{mode}.json")
    env = dict(os.environ, GPUGUARD_OPTIONS=f"stacks=all:jsonl_log={log}:leak_report=0")
    env.pop("GPUGUARD_POSTMORTEM_FD", None)
    env.update(extra_env or {})
    p = subprocess.run([GPUGUARD, "run", "--grace", "1", "--report", report, "--", CHILD, mode], env=env,
                       capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)
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
        if not all(os.path.exists(path) for path in STAND_INS.values()):
            # The sanitizer builds leave the interposer out: an instrumented library preloaded into
            # an uninstrumented Python cannot start. The plain build runs this test.
            self.skipTest("the interposer or the stand-ins are not built in this build: "
                          + ", ".join(p for p in STAND_INS.values() if not os.path.exists(p)))
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
        if os.geteuid() != 0:
            self.skipTest("needs root to make a memory-limited cgroup")
        cgroup = LimitedCgroup(f"gpuguard-postmortem-test.{os.getpid()}", 128 << 20)
        try:
            if not cgroup.make():
                self.skipTest(cgroup.reason)

            def join():  # in the child, before gpuguard run starts: the job inherits it
                with open(cgroup.procs, "w") as f:
                    f.write(str(os.getpid()))

            # The OOM killer's victim: the child raises its own oom_score_adj to 1000 (any process
            # may), which outweighs any size in the cgroup. gpuguard run's is left as inherited:
            # lowering it needs CAP_SYS_RESOURCE, which a sandbox may deny even to root.

            before = cgroup.oom_kills()
            try:
                p, doc, log = run("oom", self.tmp, preexec=join, timeout=OOM_WITHIN_S)
            except subprocess.TimeoutExpired:
                self.fail(f"no OOM kill within {OOM_WITHIN_S} s in {cgroup.text}: {cgroup.state()}")
            self.assertGreater(cgroup.oom_kills(), before, f"the kernel counted no OOM kill in {cgroup.text}")
            self.assertEqual(p.returncode, 137, p.stderr)
            self.assertEqual(len(doc["postmortems"]), 1, p.stderr)
            pm = doc["postmortems"][0]
            self.assertEqual(pm["cause"], "oom_kill", pm["cause_text"])
            self.assertEqual(pm["signal_name"], "SIGKILL")
            self.assertEqual(pm["pid"], doc["command_pid"])
            self.assertIn(cgroup.name, pm["cause_text"])  # where the count was read
            self.assertIn("1 OOM kill", pm["cause_text"])
            functions = " ".join(f["function"] for s in pm["sites"] for f in s["frames"])
            self.assertIn("allocate_hog", functions)  # the blocks it touched until the limit
            self.assertIn("OOM kill", p.stderr)
            self.assertIn(cgroup.name, p.stderr)
            with open(log) as f:
                lines = [json.loads(l) for l in f if l.strip()]
            self.assertEqual(lines[-1]["reason"], "postmortem")
            self.assertEqual(lines[-1]["postmortem"]["cause"], "oom_kill")
            validate(lines)
            print(f"\n[test_oom_kill] {cgroup.text}: {pm['cause_text']}", file=sys.stderr)
        finally:
            cgroup.remove()


OOM_WITHIN_S = 20


def mount_of(fstype, option=None):
    """(mount point, root) of the first mount of `fstype` whose super options hold `option`."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, tail = line.partition(" - ")
            tail = tail.split()
            if len(tail) < 3 or tail[0] != fstype or (option and option not in tail[2].split(",")):
                continue
            fields = fields.split()
            return fields[4], fields[3]
    return None


def own_cgroup(controller):
    """This process's cgroup path in `controller`'s v1 hierarchy, or ("" for) cgroup v2's."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
            if (hierarchy == "0" and controllers == "") if not controller else controller in controllers.split(","):
                return path
    return None


def directory_of(mount, path):
    point, root = mount
    if root != "/":
        if not (path + "/").startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root.rstrip("/")):] or "/"
    return point.rstrip("/") + ("" if path == "/" else path)


class LimitedCgroup:
    """A memory-limited cgroup of the test's own, below this process's: cgroup v2 where its hierarchy
    offers the memory controller (the limit on a parent, `gpuguard run` in a leaf below it, as the
    rule that only leaves hold processes wants), else the cgroup v1 memory hierarchy. `reason` says
    why neither could be made."""

    def __init__(self, leaf, limit):
        self.leaf, self.limit = leaf, limit
        self.made = []  # directories made, outermost first
        self.reason = ""
        self.version = 0

    def _write(self, name, text, directory=None):
        with open(os.path.join(directory or self.made[0], name), "w") as f:
            f.write(text)

    def make(self):
        reasons = []
        for make in (self._make_v2, self._make_v1):
            try:
                if make(reasons):
                    return True
            except OSError as e:
                reasons.append(f"cgroup v{2 if make == self._make_v2 else 1}: {e}")
            self.remove()
        self.reason = "no memory controller this test can write: " + "; ".join(reasons)
        return False

    def _make_v2(self, reasons):
        mount, own = mount_of("cgroup2"), own_cgroup("")
        parent = directory_of(mount, own) if mount and own else None
        if parent is None:
            reasons.append("no cgroup v2 hierarchy holds this process")
            return False
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            if "memory" not in f.read().split():
                reasons.append(f"cgroup v2 {own} has no memory controller")
                return False
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if "memory" not in f.read().split():
                self._write("cgroup.subtree_control", "+memory", parent)  # EBUSY while it holds processes
        limited = os.path.join(parent, self.leaf)
        os.mkdir(limited)
        self.made.append(limited)
        self._write("memory.max", str(self.limit))
        if os.path.exists(os.path.join(limited, "memory.swap.max")):
            self._write("memory.swap.max", "0")
        self._write("cgroup.subtree_control", "+memory")
        os.mkdir(os.path.join(limited, "run"))
        self.made.append(os.path.join(limited, "run"))
        self.version, self.name = 2, (own.rstrip("/") + "/" + self.leaf + "/run")
        self.procs = os.path.join(self.made[-1], "cgroup.procs")
        self.counter = os.path.join(self.made[-1], "memory.events")
        self.text = f"cgroup v2 {self.name}"
        return True

    def _make_v1(self, reasons):
        mount, own = mount_of("cgroup", "memory"), own_cgroup("memory")
        parent = directory_of(mount, own) if mount and own else None
        if parent is None:
            reasons.append("no cgroup v1 memory hierarchy holds this process")
            return False
        limited = os.path.join(parent, self.leaf)
        os.mkdir(limited)
        self.made.append(limited)
        self._write("memory.limit_in_bytes", str(self.limit))
        if os.path.exists(os.path.join(limited, "memory.memsw.limit_in_bytes")):
            self._write("memory.memsw.limit_in_bytes", str(self.limit))  # no swapping instead of the kill
        self.version, self.name = 1, own.rstrip("/") + "/" + self.leaf
        self.procs = os.path.join(limited, "cgroup.procs")
        self.counter = os.path.join(limited, "memory.oom_control")
        self.text = f"cgroup v1 memory:{self.name}"
        with open(self.counter) as f:
            if "oom_kill " not in f.read():
                reasons.append("cgroup v1 memory.oom_control has no oom_kill count (Linux 4.13+)")
                return False
        return True

    def oom_kills(self):
        with open(self.counter) as f:
            return int([l.split()[1] for l in f if l.startswith("oom_kill ")][0])

    def state(self):
        usage = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            with open(os.path.join(self.made[-1], usage)) as f:
                return f"{usage} {f.read().strip()}, oom_kill {self.oom_kills()}"
        except OSError as e:
            return str(e)

    def remove(self):
        """SIGKILL to whatever is left in it (only the test's processes can be), then rmdir, deepest
        first: bounded, about 5 s at most."""
        import signal
        import time
        deadline = time.monotonic() + 5
        while self.made:
            directories = []
            for top, subdirs, _ in os.walk(self.made[0]):
                directories += [os.path.join(top, d) for d in subdirs]
            for directory in reversed(directories):  # deepest first: gpuguard run's job cgroup, if left
                try:
                    os.rmdir(directory)
                except OSError:
                    pass
            for directory in list(reversed(self.made)):
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            try:
                                os.kill(int(pid), signal.SIGKILL)
                            except OSError:
                                pass
                    os.rmdir(directory)
                    self.made.remove(directory)
                except FileNotFoundError:
                    self.made.remove(directory)
                except OSError:
                    break
            if self.made and time.monotonic() > deadline:
                print(f"cannot remove {self.made}", file=sys.stderr)
                return
            if self.made:
                time.sleep(0.05)

if __name__ == "__main__":
    unittest.main()
