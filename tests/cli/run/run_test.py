#!/usr/bin/env python3
"""`gpuguard run` as a process, judged by its exit status, what it writes, and what is left running:
usage errors, exit statuses, signal forwarding, reaping, the teardown of what CMD leaves behind
(however CMD or the supervisor ends), the residue check with a fake device and a fake NVML,
--track's environment, and the terminal.

The `escape` group runs jobs that try to outrun the teardown (a PID hopper, fast fork bombs) in a
few trials each, inside a cgroup of the test's own; GPUGUARD_RUN_ESCAPE_TRIALS=N runs N trials of
each on each path instead of 3 (50 for the long form: about ten minutes on two cores).

usage: run_test.py GPUGUARD FAKE_NVML_SO FAKE_PRELOAD_SO [GROUP...]
GROUP is one of the test classes below (default: all).
"""
import concurrent.futures
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import no_core_dumps  # noqa: E402  (tests/support)
from procfs import alive, stat as proc_stat, wait_until  # noqa: E402

GPUGUARD = FAKE_NVML = FAKE_PRELOAD = None
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_helper.py")
PYTHON = sys.executable
RECORDED = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH"]


# ---- processes, from /proc --------------------------------------------------------------------

def all_processes():
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = proc_stat(int(name))
            if s is not None:
                yield int(name), s


def children_of(pid):
    return [p for p, s in all_processes() if s[1] == pid]


class base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-run-test-")
        self.dir = self.tmp.name
        self.to_kill = []  # pids a failed test might leave: ended in tearDown

    def tearDown(self):
        for pid in self.to_kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def start(self, *args, env=None, preexec_fn=no_core_dumps, **kwargs):
        """`gpuguard run ARGS...` in a session of its own (so no signal of ours reaches its job).
        Without a cgroup the job runs on the subreaper path (`namespace=0`) unless `env` names
        GPUGUARD_RUN_OPTIONS: the helpers' PIDs, written from inside the job, must be this
        process's. The `boundary` and `escape` groups test the PID namespace."""
        full_env = dict(os.environ)
        full_env.pop("GPUGUARD_DEVICE_PREFIX", None)
        full_env["GPUGUARD_RUN_OPTIONS"] = "namespace=0"
        full_env.update(env or {})
        p = subprocess.Popen([GPUGUARD, "run", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=full_env, start_new_session=True, preexec_fn=preexec_fn,
                             **kwargs)
        self.to_kill.append(p.pid)
        return p

    def run_gpuguard(self, *args, env=None, timeout=30):
        p = self.start(*args, env=env)
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(), err.decode()

    def wait_file(self, path, timeout=20):
        self.assertTrue(wait_until(lambda: os.path.exists(path), timeout), f"{path} never appeared")

    def read_pids(self, pidfile):
        pids = {}
        with open(pidfile) as f:
            for line in f:
                pid, role = line.split()
                pids[role] = int(pid)
        self.to_kill.extend(pids.values())
        return pids

    def anchor_of(self, supervisor):
        found = [p for p in children_of(supervisor) if proc_stat(p).comm == "gpuguard-anchor"]
        self.assertEqual(len(found), 1, f"the supervisor {supervisor} should have one anchor child: {found}")
        self.to_kill.append(found[0])
        return found[0]

    def read_report(self, path):
        with open(path) as f:
            doc = json.load(f)
        check_report(self, doc)
        return doc

    def summary(self, err):
        lines = [l for l in err.splitlines() if l.startswith("[gpuguard run] ")]
        self.assertTrue(lines, f"no summary line on stderr: {err!r}")
        return lines[-1]


def check_report(test, doc):
    """The report's shape, as docs/run.md documents schema gpuguard.run version 1."""
    t = test
    t.assertEqual(doc["schema"], "gpuguard.run")
    t.assertEqual(doc["version"], 1)
    t.assertIsInstance(doc["command"], list)
    for key in ("supervisor_pid", "anchor_pid", "start_unix_ns", "exit_status"):
        t.assertIsInstance(doc[key], int, key)
    t.assertIn(doc["end"], ("exited", "signaled", "not_started", "unknown"))
    t.assertEqual(doc["exit_code"] is not None, doc["end"] == "exited")
    t.assertEqual(doc["signal"] is not None, doc["end"] == "signaled")
    t.assertEqual(doc["exec_error"] is not None, doc["end"] == "not_started")
    not_clean = doc["clean"] is not None and not doc["clean"]["clean"]
    if doc["end"] == "exited" and not not_clean:
        t.assertEqual(doc["exit_status"], doc["exit_code"])
    if doc["end"] == "signaled" and not not_clean:
        t.assertEqual(doc["exit_status"], 128 + doc["signal"])
        t.assertEqual(doc["signal_name"], signal.Signals(doc["signal"]).name)
    t.assertIsInstance(doc["duration_s"], (int, float))
    t.assertIsInstance(doc["grace_s"], (int, float))
    for s in doc["signals_forwarded"]:
        t.assertEqual(set(s), {"signal", "name", "count"})
        t.assertEqual(s["name"], signal.Signals(s["signal"]).name)
    td = doc["teardown"]
    t.assertEqual(set(td), {"duration_s", "cut_short_by", "terminated", "killed", "survived", "job_empty",
                            "unseen_ended_by_cgroup_kill", "unseen_ended_by_namespace_end", "not_empty_why",
                            "processes"})
    t.assertEqual(td["not_empty_why"] is None, td["job_empty"])
    t.assertEqual(td["terminated"] + td["killed"] + td["survived"], len(td["processes"]))
    for p in td["processes"]:
        t.assertEqual(set(p), {"pid", "ppid", "pgid", "sid", "comm", "cmdline", "left_group", "sigterm", "sigkill",
                               "ended", "found_late", "ended_after_s", "signal_error"})
    t.assertEqual(td["killed"], sum(1 for p in td["processes"] if p["ended"] and p["sigkill"]))
    t.assertEqual(td["survived"], sum(1 for p in td["processes"] if not p["ended"]))
    r = doc["residue"]
    t.assertIsInstance(r["device_prefix"], str)
    for when in ("at_end", "after_teardown"):
        c = r[when]
        t.assertEqual(set(c), {"checked", "holders", "not_inspected", "nvml"})
        t.assertEqual(set(c["nvml"]), {"queried", "available", "note"})
        for h in c["holders"]:
            t.assertEqual(set(h), {"pid", "comm", "cmdline", "files", "gpu_memory_bytes", "gpus"})
            t.assertTrue(all(f.startswith(r["device_prefix"]) for f in h["files"]))
    t.assertIsInstance(doc["notes"], list)
    b = doc["boundary"]
    t.assertEqual(set(b), {"kind", "cgroup", "user_namespace", "note", "namespace_note"})
    t.assertIn(b["kind"], ("cgroup", "pid_namespace", "subreaper"))
    t.assertEqual(b["cgroup"] is not None, b["kind"] == "cgroup")
    t.assertEqual(b["note"] == "", b["kind"] == "cgroup")
    t.assertEqual(b["namespace_note"] != "", b["kind"] == "subreaper")
    if b["user_namespace"]:
        t.assertEqual(b["kind"], "pid_namespace")
    if doc["clean"] is not None:
        c = doc["clean"]
        t.assertEqual(set(c), {"clean", "waited_s", "tolerance_bytes", "devices", "holders", "listed_by_nvml", "note"})
        for d in c["devices"]:
            t.assertEqual(set(d), {"device", "before_bytes", "after_bytes"})
        if c["clean"]:
            t.assertEqual((c["holders"], c["listed_by_nvml"]), ([], []))
        elif doc["end"] != "not_started":
            t.assertEqual(doc["exit_status"], 125)


# ---- the command line ---------------------------------------------------------------------------

class usage(base):
    def test_help(self):
        rc, out, err = self.run_gpuguard("--help")
        self.assertEqual(rc, 0, err)
        self.assertIn("usage: gpuguard run [OPTIONS] [--] CMD [ARGS...]", out)
        for option in ("--grace", "--report", "--device-prefix", "--track", "--options", "GPUGUARD_RUN_OPTIONS"):
            self.assertIn(option, out)

    def test_usage_errors_exit_2_naming_the_problem(self):
        cases = [
            ([], "no command given"),
            (["--grace", "1"], "no command given"),
            (["--bogus", "true"], "unknown option '--bogus'"),
            (["-x", "true"], "unknown option '-x'"),
            (["--grace"], "--grace needs a value"),
            (["--report", "", "true"], "--report needs a path"),
            (["--device-prefix", "", "true"], "--device-prefix needs a path"),
            (["--report", "/nonexistent-dir/r.json", "true"], "cannot write the report '/nonexistent-dir/r.json'"),
        ]
        for bad in ("abc", "-1", "1e3", "", ".5", "5.", "nan", "inf", "86401", "0x10", "1,5", " 1"):
            cases.append((["--grace", bad, "true"], f"bad --grace value '{bad}'"))
            cases.append(([f"--grace={bad}", "true"], f"bad --grace value '{bad}'"))
        for args, message in cases:
            with self.subTest(args=args):
                rc, out, err = self.run_gpuguard(*args)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(message, err)
                self.assertTrue(err.startswith("gpuguard run: "), err)

    def test_good_grace_values(self):
        for good in ("0", "5", "0.5", "10.25", "86400"):
            with self.subTest(grace=good):
                rc, _, err = self.run_gpuguard("--grace", good, "--", "true")
                self.assertEqual(rc, 0, err)
                rc, _, err = self.run_gpuguard(f"--grace={good}", "true")
                self.assertEqual(rc, 0, err)

    def test_command_that_cannot_be_started(self):
        script = self.path("not-executable.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(script, 0o644)
        report = self.path("r.json")
        for cmd, status, words in [(["no-such-command-gpuguard"], 127, "No such file or directory"),
                                   ([self.path("missing/x")], 127, "No such file or directory"),
                                   ([script], 126, "Permission denied"),
                                   ([self.dir], 126, "Permission denied")]:
            with self.subTest(cmd=cmd):
                rc, _, err = self.run_gpuguard("--report", report, "--", *cmd)
                self.assertEqual(rc, status, err)
                self.assertIn(f"gpuguard run: cannot start '{cmd[0]}': {words}", err)
                doc = self.read_report(report)
                self.assertEqual(doc["end"], "not_started")
                self.assertEqual(doc["exit_status"], status)
                self.assertEqual(doc["exec_error"], words)

    def test_options_after_the_command_are_the_commands(self):
        rc, out, err = self.run_gpuguard("sh", "-c", "echo $0 $1", "--grace", "--bogus")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "--grace --bogus")

    def test_environment_options(self):
        report = self.path("env-report.json")
        rc, _, err = self.run_gpuguard("true", env={"GPUGUARD_RUN_OPTIONS": f"grace=0.25:report={report}"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.read_report(report)["grace_s"], 0.25)
        # The command line wins; a bad item is named and ignored; the variable is not passed on.
        rc, out, err = self.run_gpuguard("--grace", "2", "--report", report, PYTHON, HELPER, "env",
                                         env={"GPUGUARD_RUN_OPTIONS": "grace=zz:colour=blue:grace=1"})
        self.assertEqual(rc, 0, err)
        self.assertIn("GPUGUARD_RUN_OPTIONS: bad value 'zz' for key 'grace': expected seconds", err)
        self.assertIn("GPUGUARD_RUN_OPTIONS: unknown key 'colour'", err)
        self.assertEqual(self.read_report(report)["grace_s"], 2)
        self.assertIsNone(json.loads(out)["GPUGUARD_RUN_OPTIONS"])
        # The GPUGUARD_OPTIONS reader's bounds: a huge value is cut, and many bad items are counted.
        rc, _, err = self.run_gpuguard("true", env={"GPUGUARD_RUN_OPTIONS": "grace=" + "9" * 100000 + ":" + "x:" * 50})
        self.assertEqual(rc, 0, err)
        lines = [line for line in err.splitlines() if "GPUGUARD_RUN_OPTIONS" in line]
        self.assertEqual(len(lines), 11, err[:2000])
        self.assertIn("... (100000 bytes) for key 'grace'", lines[0])
        self.assertTrue(all(len(line) < 300 for line in lines), lines)
        self.assertIn("GPUGUARD_RUN_OPTIONS: 41 more bad items, not shown (each was ignored)", lines[-1])


# ---- exit statuses ------------------------------------------------------------------------------

class exit_status(base):
    def test_every_exit_code(self):
        def one(code):
            p = subprocess.run([GPUGUARD, "run", "--", "sh", "-c", f"exit {code}"], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=30)
            return code, p.returncode, p.stderr.decode()

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            for code, rc, err in pool.map(one, range(256)):
                self.assertEqual(rc, code, err)
                self.assertIn(f"[gpuguard run] sh exited with status {code} after ", err)

    def test_death_by_signal_is_128_plus_n(self):
        report = self.path("r.json")
        for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGSEGV", "SIGABRT", "SIGUSR1"):
            number = getattr(signal, name)
            with self.subTest(signal=name):
                rc, _, err = self.run_gpuguard("--report", report, "--", PYTHON, HELPER, "die", name)
                self.assertEqual(rc, 128 + number, err)
                self.assertIn(f"was killed by {name} (status {128 + number})", self.summary(err))
                doc = self.read_report(report)
                self.assertEqual((doc["end"], doc["signal"], doc["signal_name"]), ("signaled", number, name))

    def test_report_of_a_plain_run(self):
        p = self.start("--grace", "0.5", "--report", self.path("r-%p.json"), "--", "sh", "-c", "exit 7")
        _, err = p.communicate(timeout=30)
        err = err.decode()
        self.assertEqual(p.returncode, 7, err)
        self.assertEqual(os.listdir(self.dir), [f"r-{p.pid}.json"])  # %p: gpuguard's pid; no temporary left
        doc = self.read_report(self.path(f"r-{p.pid}.json"))
        self.assertEqual(doc["supervisor_pid"], p.pid)
        self.assertEqual(doc["command"], ["sh", "-c", "exit 7"])
        self.assertEqual((doc["end"], doc["exit_code"], doc["exit_status"]), ("exited", 7, 7))
        self.assertEqual(doc["grace_s"], 0.5)
        self.assertEqual(doc["teardown"]["processes"], [])
        self.assertEqual(doc["residue"]["device_prefix"], "/dev/nvidia")
        self.assertEqual(doc["residue"]["at_end"]["holders"], [])
        self.assertEqual(doc["signals_forwarded"], [])
        self.assertLess(doc["duration_s"], 5)
        self.assertTrue(self.summary(err).endswith("no process outlived it; no process of it holds a GPU"), err)


# ---- signals and reaping ------------------------------------------------------------------------

class signals(base):
    def test_forwarded_to_the_whole_group_and_only_to_it(self):
        a, b, c = self.path("child"), self.path("grandchild"), self.path("setsid")
        report = self.path("r.json")
        p = self.start("--report", report, "--", PYTHON, HELPER, "record", a, "--spawn", b, "--setsid-spawn", c)
        self.wait_file(a + ".ready")

        def lines(path):
            try:
                with open(path) as f:
                    return f.read().split()
            except FileNotFoundError:
                return []

        for name in RECORDED:
            os.kill(p.pid, getattr(signal, name))
            self.assertTrue(wait_until(lambda: name in lines(a) and name in lines(b), 10),
                            f"{name} did not reach both: child {lines(a)}, grandchild {lines(b)}")
        _, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 0, err.decode())
        self.assertEqual(lines(a), RECORDED)
        self.assertEqual(lines(b), RECORDED)
        # The process that left the group got nothing forwarded, only the teardown's SIGTERM.
        self.assertEqual(lines(c), ["SIGTERM"])
        doc = self.read_report(report)
        self.assertEqual({s["name"]: s["count"] for s in doc["signals_forwarded"]}, {n: 1 for n in RECORDED})
        self.assertEqual([(x["left_group"], x["sigterm"], x["ended"]) for x in doc["teardown"]["processes"]],
                         [(True, True, True)])

    def test_inherited_ignored_signals_stay_ignored(self):
        # nohup's SIGHUP stays ignored (not forwarded); an ignored SIGCHLD must not make the kernel
        # reap CMD before gpuguard learns its status. CMD inherits the dispositions it would have had.
        def ignoring():
            no_core_dumps()
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

        # What CMD inherits (grep itself, not a shell or Python: both set some dispositions).
        p = subprocess.run([GPUGUARD, "run", "--", "grep", "^SigIgn:", "/proc/self/status"], stdin=subprocess.DEVNULL,
                           capture_output=True, preexec_fn=ignoring, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        ignored = int(p.stdout.split()[1], 16)
        self.assertEqual({s.name for s in signal.Signals if s < 64 and ignored & (1 << (s - 1))},
                         {"SIGCHLD", "SIGHUP"})
        go, report = self.path("go"), self.path("r.json")
        script = f"echo started; while [ ! -e {go} ]; do sleep 0.01; done; exit 5"
        p = subprocess.Popen([GPUGUARD, "run", "--report", report, "--", "sh", "-c", script],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=ignoring)
        self.to_kill.append(p.pid)
        self.assertEqual(p.stdout.readline(), b"started\n")
        os.kill(p.pid, signal.SIGHUP)
        time.sleep(0.2)
        with open(go, "w"):
            pass
        _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 5, err.decode())
        self.assertEqual(self.read_report(report)["signals_forwarded"], [])

    def test_orphaned_zombies_are_reaped(self):
        marker = self.path("orphans")
        p = self.start("--", PYTHON, HELPER, "orphans", "12", marker)
        self.wait_file(marker)
        anchor = self.anchor_of(p.pid)
        with open(marker) as f:
            orphans = [int(x) for x in f.read().split()]
        self.assertEqual(len(orphans), 12)

        def unreaped():
            found = []
            for pid in orphans:
                s = proc_stat(pid)
                if s is not None and s[1] in (p.pid, anchor):
                    found.append((pid, s[0]))
            return found

        # Every orphan was reparented to the anchor (a subreaper) and exited; none may stay a zombie.
        self.assertTrue(wait_until(lambda: not unreaped(), 2.0), f"not reaped: {unreaped()}")
        zombies = [(pid, s) for pid, s in all_processes() if s[1] in (p.pid, anchor) and s[0] == "Z"]
        time.sleep(0.5)
        persistent = [(pid, s) for pid, s in zombies if proc_stat(pid) == s]
        self.assertEqual(persistent, [], "zombies under the supervisor")
        _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 0, err.decode())


# ---- the teardown -------------------------------------------------------------------------------

class teardown(base):
    GRACE = 1.0

    def start_tree(self, *options):
        self.trees = getattr(self, "trees", 0) + 1
        pidfile = self.path(f"pids{self.trees}")
        report = self.path(f"r{self.trees}.json")
        p = self.start("--grace", str(self.GRACE), "--report", report, *options, "--", PYTHON, HELPER, "tree", pidfile)
        self.wait_file(pidfile + ".ready")
        pids = self.read_pids(pidfile)
        self.assertEqual(set(pids), {"main", "child", "grandchild", "term_ignorer", "session_leader",
                                     "session_grandchild", "daemon"})
        for role, pid in pids.items():
            self.assertTrue(alive(pid), role)
        self.assertNotEqual(proc_stat(pids["session_leader"]).sid, proc_stat(pids["main"]).sid, "setsid did not happen")
        return p, pids, report

    def assert_all_gone(self, pids, roles=None):
        left = {role: pid for role, pid in pids.items() if (roles is None or role in roles) and alive(pid)}
        self.assertEqual(left, {}, "still running")

    def test_main_child_killed_everything_gone_within_the_grace_period(self):
        p, pids, report = self.start_tree()
        start = time.monotonic()
        os.kill(pids["main"], signal.SIGKILL)
        _, err = p.communicate(timeout=10)  # returns once every holder of its stderr pipe is gone
        elapsed = time.monotonic() - start
        self.assertEqual(p.returncode, 128 + signal.SIGKILL, err.decode())
        self.assert_all_gone(pids)
        # The SIGTERM-ignoring ones had the whole grace period, and not much more.
        self.assertGreaterEqual(elapsed, self.GRACE * 0.9)
        self.assertLess(elapsed, self.GRACE + 1.5)
        doc = self.read_report(report)
        by_pid = {x["pid"]: x for x in doc["teardown"]["processes"]}
        expected = {role: pid for role, pid in pids.items() if role != "main"}
        self.assertEqual(set(by_pid), set(expected.values()))
        killed = {role for role, pid in expected.items() if by_pid[pid]["sigkill"]}
        self.assertEqual(killed, {"term_ignorer", "session_grandchild"})
        left_group = {role for role, pid in expected.items() if by_pid[pid]["left_group"]}
        self.assertEqual(left_group, {"session_leader", "session_grandchild", "daemon"})
        self.assertEqual((doc["teardown"]["terminated"], doc["teardown"]["killed"], doc["teardown"]["survived"]),
                         (4, 2, 0))
        self.assertIn("6 processes outlived it: 4 ended after SIGTERM, 2 killed with SIGKILL after the 1 s grace",
                      self.summary(err.decode()))

    def test_main_child_exits_normally_leaving_a_tree(self):
        pidfile = self.path("pids")
        p = self.start("--grace", "0.3", "--", PYTHON, HELPER, "tree", pidfile, "--exit")
        _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 0, err.decode())
        self.assert_all_gone(self.read_pids(pidfile))

    def test_second_signal_cuts_the_grace_period_short(self):
        for name in ("SIGTERM", "SIGINT"):
            with self.subTest(signal=name):
                self.GRACE = 30
                p, pids, report = self.start_tree()
                os.kill(pids["main"], signal.SIGKILL)
                # Wait until the teardown has started and every process that obeys SIGTERM is gone
                # (waiting for one of them let a slow one count as killed under load).
                obeying = [pid for name, pid in pids.items() if name not in ("term_ignorer", "session_grandchild")]
                self.assertTrue(wait_until(lambda: not any(alive(pid) for pid in obeying), 10))
                self.assertTrue(alive(pids["term_ignorer"]))
                start = time.monotonic()
                os.kill(p.pid, getattr(signal, name))
                _, err = p.communicate(timeout=10)
                self.assertLess(time.monotonic() - start, 2.0)
                self.assertEqual(p.returncode, 128 + signal.SIGKILL, err.decode())
                self.assert_all_gone(pids)
                doc = self.read_report(report)
                self.assertEqual(doc["teardown"]["cut_short_by"], name)
                self.assertEqual(doc["teardown"]["killed"], 2)
                self.assertIn(f"(grace cut short by {name})", self.summary(err.decode()))

    def test_supervisor_killed_its_anchor_ends_everything(self):
        p, pids, _ = self.start_tree()
        anchor = self.anchor_of(p.pid)
        start = time.monotonic()
        os.kill(p.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=10)  # the anchor and every process of the job hold the pipe
        elapsed = time.monotonic() - start
        err = err.decode()
        self.assert_all_gone(pids)
        self.assertLess(elapsed, self.GRACE + 1.5)
        # (its descriptors close as it exits, a moment before it is a zombie)
        self.assertTrue(wait_until(lambda: not alive(anchor), 2), "the anchor stayed")
        self.assertIn(f"the supervisor (pid {p.pid}) is gone: ending the processes of {os.path.basename(PYTHON)}", err)
        self.assertIn("ended 7 processes", err)

    def test_anchor_killed_cmd_dies_with_it_and_the_supervisor_ends_the_rest(self):
        p, pids, report = self.start_tree()
        anchor = self.anchor_of(p.pid)
        os.kill(anchor, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: not alive(pids["main"]), 1.0), "CMD outlived its parent")
        _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 128 + signal.SIGKILL, err.decode())
        self.assert_all_gone(pids)
        doc = self.read_report(report)
        self.assertTrue(any(f"the anchor process (pid {anchor}) was ended by SIGKILL" in n for n in doc["notes"]))

    def test_both_killed_cmd_still_dies(self):
        # The documented limit: with the supervisor and its anchor both killed at once, CMD dies by
        # its parent-death signal, but what it started has nobody left to end it.
        p, pids, _ = self.start_tree()
        anchor = self.anchor_of(p.pid)
        os.kill(anchor, signal.SIGKILL)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=5)
        self.assertTrue(wait_until(lambda: not alive(pids["main"]), 1.0), "CMD outlived both")
        survivors = sorted(role for role, pid in pids.items() if alive(pid))
        print(f"\nboth killed: survivors (expected, see docs/run.md): {survivors}", file=sys.stderr)


# ---- the boundary: the job's cgroup, or the subreaper path --------------------------------------

def cgroup_v2_writable():
    """"" when this process may make a child of its own cgroup v2 (what `gpuguard run` needs for its
    cgroup boundary), else why not: the test of the cgroup path skips with that reason."""
    if os.geteuid() != 0:
        return "not root: the cgroup boundary needs a writable cgroup v2 (root, or a delegated cgroup)"
    mount = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 "):
                fields = left.split()
                mount = (fields[4], fields[3])
                break
    if mount is None:
        return "no cgroup v2 hierarchy is mounted"
    with open("/proc/self/cgroup") as f:
        own = next((l[3:].strip() for l in f if l.startswith("0::")), None)
    if own is None:
        return "no cgroup v2 line in /proc/self/cgroup"
    probe = os.path.join(mount[0] + own[len(mount[1]) if mount[1] != "/" else 0:].rstrip("/"), f"gpuguard-probe.{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError as e:
        return f"cannot create {probe}: {e.strerror}"
    ok = os.access(os.path.join(probe, "cgroup.kill"), os.W_OK)
    os.rmdir(probe)
    return "" if ok else "no cgroup.kill (Linux 5.14+ needed)"


def pid_namespace_why(as_nobody=False):
    """"" when the kernel lets this process (or, `as_nobody`, the user nobody) make a PID namespace
    as `gpuguard run` does (with a user namespace unless root), else why not: util-linux's unshare
    is the probe, so that gpuguard's own refusal cannot turn a test into a skip."""
    if shutil.which("unshare") is None:
        return "no unshare command to probe for namespaces"
    user = as_nobody or os.geteuid() != 0
    probe = ["unshare", *(["--user", "--map-current-user"] if user else []), "--pid", "--mount", "--fork", "true"]
    if as_nobody:
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            return "running as nobody needs root and setpriv"
        probe = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *probe]
    r = subprocess.run(probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=10)
    return "" if r.returncode == 0 else "the kernel makes no " + ("user and " if user else "") + \
        "PID namespace here: " + r.stderr.decode().strip()


def processes_naming(marker):
    """PIDs (as this process sees them) whose command line contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


# A job that leaves a SIGTERM-ignoring, setsid'd writer behind (it appends to ACT every 50 ms for
# at most 20 s), after writing its user id and how many processes its /proc shows to OUT.
LEFTOVER_JOB = ("id -u > {out}; ls /proc | grep -c '^[0-9]' >> {out}; "
                "(setsid sh -c 'trap \"\" TERM; i=0; while [ $i -lt 400 ]; do echo x >> {act}; sleep 0.05; i=$((i+1)); done' &); "
                "sleep 0.2")


class boundary(base):
    def run_daemon_job(self, *options, env=None):
        out = self.path("daemon")
        report = self.path("r.json")
        rc, _, err = self.run_gpuguard("--grace", "0.3", "--report", report, *options, "--", PYTHON, HELPER, "daemon",
                                       out, env=env)
        self.assertEqual(rc, 0, err)
        with open(out) as f:
            pid, cgroup = f.read().split()
        pid = int(pid)
        self.to_kill.append(pid)
        return pid, cgroup, self.read_report(report), self.summary(err)

    def test_cgroup_ends_a_double_forked_setsid_daemon(self):
        why = cgroup_v2_writable()
        if why:
            self.skipTest(why)
        daemon, cgroup, doc, line = self.run_daemon_job()
        # The daemon was born in the job's cgroup, below this process's own, and is gone.
        self.assertEqual(doc["boundary"], {"kind": "cgroup", "cgroup": cgroup, "user_namespace": False, "note": "",
                                           "namespace_note": ""})
        pid_ns = os.readlink("/proc/self/ns/pid")[5:-1]  # "pid:[INODE]"
        self.assertTrue(cgroup.endswith(f"/gpuguard-run.{doc['supervisor_pid']}.{pid_ns}"), cgroup)
        self.assertFalse(alive(daemon), "the daemon outlived the job")
        self.assertIn(f"boundary: cgroup {cgroup}", line)
        by_pid = {p["pid"]: p for p in doc["teardown"]["processes"]}
        self.assertTrue(by_pid[daemon]["sigkill"] and by_pid[daemon]["ended"] and by_pid[daemon]["left_group"])
        # The cgroup itself is removed once the job is over.
        with open("/proc/self/mountinfo") as f:
            mounts = [l.split(" - ")[0].split()[4] for l in f if " - cgroup2 " in l]
        self.assertFalse(any(os.path.exists(m + cgroup) for m in mounts), "the job's cgroup was left behind")

    def test_fallback_forced_by_option_or_environment_still_ends_the_daemon(self):
        for options, env in ((("--no-cgroup", "--no-namespace"), {"GPUGUARD_RUN_OPTIONS": ""}),
                             ((), {"GPUGUARD_RUN_OPTIONS": "cgroup=0:namespace=0"})):
            with self.subTest(options=options, env=env):
                daemon, cgroup, doc, line = self.run_daemon_job(*options, env=env)
                self.assertEqual(doc["boundary"], {"kind": "subreaper", "cgroup": None, "user_namespace": False,
                                                   "note": "--no-cgroup was given",
                                                   "namespace_note": "--no-namespace was given"})
                self.assertNotIn("gpuguard-run.", cgroup)
                # Reparented to the anchor (a subreaper), so the walk of descendants finds it.
                self.assertFalse(alive(daemon), "the daemon outlived the job")
                self.assertIn("boundary: subreaper (no cgroup: --no-cgroup was given; no PID namespace: "
                              "--no-namespace was given)", line)
                os.unlink(self.path("daemon"))

    def run_leftover_job(self, *options, env=None, user=None):
        """LEFTOVER_JOB under `gpuguard run OPTIONS`, as `user` (a uid) if given; returns the report,
        the summary line, and what the job wrote (its uid, the count of its /proc's processes).
        Asserts that the writer it left stopped writing once `gpuguard run` had exited."""
        out, act, report = self.path("job.out"), self.path("job.act"), self.path("r.json")
        preexec = no_core_dumps
        if user is not None:
            os.chmod(self.dir, 0o777)

            def preexec():
                no_core_dumps()
                os.setgroups([])
                os.setgid(user)
                os.setuid(user)
        p = self.start("--grace", "0.3", "--report", report, *options, "--", "sh", "-c",
                       LEFTOVER_JOB.format(out=out, act=act), env=env, preexec_fn=preexec)
        _, err = p.communicate(timeout=30)
        err = err.decode()
        self.assertEqual(p.returncode, 0, err)
        before = activity(act)
        time.sleep(0.3)
        self.assertEqual(activity(act), before, "the setsid'd writer outlived the job")
        self.assertEqual(processes_naming(act), [], "the writer is still running")
        with open(out) as f:
            uid, seen = (int(x) for x in f.read().split())
        return self.read_report(report), self.summary(err), uid, seen

    def test_without_a_cgroup_the_job_gets_a_pid_namespace(self):
        why = pid_namespace_why()
        if why:
            self.skipTest(why)
        for options, env in ((("--no-cgroup",), {"GPUGUARD_RUN_OPTIONS": ""}),
                             ((), {"GPUGUARD_RUN_OPTIONS": "cgroup=0"})):
            with self.subTest(options=options, env=env):
                doc, line, uid, seen = self.run_leftover_job(*options, env=env)
                b = doc["boundary"]
                self.assertEqual((b["kind"], b["cgroup"], b["note"], b["namespace_note"]),
                                 ("pid_namespace", None, "--no-cgroup was given", ""))
                self.assertEqual(b["user_namespace"], os.geteuid() != 0)
                self.assertIn("boundary: PID namespace", line)
                self.assertEqual(uid, os.geteuid())
                # Its own /proc: the anchor, the shell, ls and the grep's shell at the most.
                self.assertLessEqual(seen, 5, "the job's /proc shows the host's processes")
                self.assertTrue(doc["teardown"]["job_empty"], line)
                os.unlink(self.path("job.act"))

    def test_an_ordinary_user_gets_a_user_and_pid_namespace(self):
        why = pid_namespace_why(as_nobody=True)
        if why:
            self.skipTest(why)
        nobody = 65534
        doc, line, uid, seen = self.run_leftover_job(env={"GPUGUARD_RUN_OPTIONS": ""}, user=nobody)
        b = doc["boundary"]
        self.assertEqual((b["kind"], b["user_namespace"], b["namespace_note"]), ("pid_namespace", True, ""), line)
        self.assertIn("cannot create", b["note"])  # nobody may not make a cgroup
        self.assertIn("boundary: PID namespace in a user namespace (no cgroup: ", line)
        self.assertEqual(uid, nobody, "CMD must run as the same user inside its user namespace")
        self.assertLessEqual(seen, 5, "the job's /proc shows the host's processes")

    def kill_supervisor_of_leftover_job(self, mask_proc):
        """Starts a job that leaves a SIGTERM-ignoring writer, as nobody in its user and PID
        namespace (`mask_proc`: with a part of /proc masked, as many containers have it, so that
        the namespace's own /proc cannot be mounted), SIGKILLs the supervisor, and returns its
        stderr once the anchor has ended the job; asserts the writer stopped and that a process of
        this test outside the job lived on."""
        os.chmod(self.dir, 0o777)
        act = self.path("job.act")
        job = ("(setsid sh -c 'trap \"\" TERM; while :; do echo x >> %s; sleep 0.05; done' &); sleep 30" % act)
        inner = (f"{'mount --make-rprivate / && mount -t tmpfs none /proc/acpi || exit 9; ' if mask_proc else ''}"
                 f"exec setpriv --reuid=65534 --regid=65534 --clear-groups {GPUGUARD} run --grace 0.5 -- sh -c \"$0\"")
        canary = subprocess.Popen(["sleep", "60"])
        self.to_kill.append(canary.pid)
        env = dict(os.environ, GPUGUARD_RUN_OPTIONS="")
        p = subprocess.Popen(["unshare", "--mount", "sh", "-c", inner, job], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True,
                             preexec_fn=no_core_dumps)
        self.to_kill.append(p.pid)
        self.assertTrue(wait_until(lambda: activity(act) > 0, 10), "the writer never started")
        os.kill(p.pid, signal.SIGKILL)  # unshare exec'd setpriv, which exec'd gpuguard: the supervisor
        _, err = p.communicate(timeout=10)  # returns once the anchor and the job let go of stderr
        err = err.decode()
        before = activity(act)
        time.sleep(0.3)
        self.assertEqual(activity(act), before, "the writer outlived the job: " + err)
        self.assertIsNone(canary.poll(), "a process outside the job was ended")
        canary.kill()
        canary.wait()
        return err

    def test_in_a_pid_namespace_the_anchor_ends_the_job_when_the_supervisor_is_killed(self):
        why = pid_namespace_why(as_nobody=True) or ("" if shutil.which("unshare") else "no unshare")
        if why:
            self.skipTest(why)
        err = self.kill_supervisor_of_leftover_job(mask_proc=False)
        self.assertIn("is gone: ending the processes of sh", err)
        # The writer and its short-lived sleeps, the SIGTERM-ignoring writer by SIGKILL.
        self.assertRegex(err, r"ended [1-9][0-9]* processes of sh \([1-9][0-9]* needed SIGKILL\)")

    def test_with_the_hosts_proc_the_anchor_ends_only_its_namespace(self):
        """Where the namespace's own /proc cannot be mounted, the anchor's /proc is the host's, where
        PID 1 is the host's init: it must end the job through its namespace (kill(-1) from its PID 1,
        then its own exit), never by walking that /proc."""
        why = pid_namespace_why(as_nobody=True) or ("" if os.path.isdir("/proc/acpi") else "no /proc/acpi to mask")
        if why:
            self.skipTest(why)
        err = self.kill_supervisor_of_leftover_job(mask_proc=True)
        self.assertIn("is gone: ending the processes of sh", err)
        self.assertIn("ended the processes of sh with its PID namespace (SIGKILL after the grace period)", err)

    def test_in_a_pid_namespace_killing_both_gpuguard_processes_ends_the_job(self):
        why = pid_namespace_why()
        if why:
            self.skipTest(why)
        act = self.path("job.act")
        p = self.start("--grace", "5", "--no-cgroup", "--", "sh", "-c",
                       LEFTOVER_JOB.format(out=self.path("job.out"), act=act) + "; sleep 30",
                       env={"GPUGUARD_RUN_OPTIONS": ""})
        self.assertTrue(wait_until(lambda: activity(act) > 0, 10), "the writer never started")
        anchor = self.anchor_of(p.pid)
        os.kill(anchor, signal.SIGKILL)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=5)
        # The anchor was PID 1 of the job's namespace: the kernel ended every process in it.
        self.assertTrue(wait_until(lambda: processes_naming(act) == [], 2.0), "a process of the job outlived both")

    def test_bad_cgroup_value_in_the_environment_is_named_and_ignored(self):
        rc, _, err = self.run_gpuguard("--", "true", env={"GPUGUARD_RUN_OPTIONS": "cgroup=maybe"})
        self.assertEqual(rc, 0, err)
        self.assertIn("GPUGUARD_RUN_OPTIONS: bad value 'maybe' for key 'cgroup': expected one of 0, 1, true, false, yes, no; "
                      "ignored", err)


# ---- jobs that try to escape: a PID hopper, a fast fork bomb -------------------------------------
# Every trial runs `gpuguard run` inside a cgroup of the test's own (where this process can make
# one), ended with cgroup.kill afterwards whatever happened; every stress process also ends by
# itself after a few seconds, so that nothing of a failed trial can load the machine. A trial
# counts an escape when a process of the job is alive once `gpuguard run` has exited.
# GPUGUARD_RUN_ESCAPE_TRIALS=N runs N trials of each kind on each path (default 3; 50 for the
# long form).
ESCAPE_TRIALS = int(os.environ.get("GPUGUARD_RUN_ESCAPE_TRIALS", "3"))


def own_cgroup_dir():
    """This process's cgroup v2 directory, or None."""
    with open("/proc/self/mountinfo") as f:
        mount = next(((l.split(" - ")[0].split()[4], l.split(" - ")[0].split()[3]) for l in f if " - cgroup2 " in l), None)
    if mount is None:
        return None
    with open("/proc/self/cgroup") as f:
        own = next((l[3:].strip() for l in f if l.startswith("0::")), None)
    if own is None or (mount[1] != "/" and not own.startswith(mount[1])):
        return None
    return mount[0] + (own[len(mount[1]):] if mount[1] != "/" else own).rstrip("/")


def read_events(directory):
    with open(os.path.join(directory, "cgroup.events")) as f:
        return dict(l.split() for l in f if l.strip())


def end_test_cgroup(directory):
    """cgroup.kill, a wait for populated 0 (bounded), then the directory and any below it."""
    with open(os.path.join(directory, "cgroup.kill"), "w") as f:
        f.write("1")
    wait_until(lambda: read_events(directory)["populated"] == "0", 10)
    for root, dirs, _ in sorted(os.walk(directory), key=lambda w: -w[0].count("/")):
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(directory)


def activity(path):
    """How much a job's processes wrote to `path` so far (each hop, each fork adds to it)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class escape(base):
    """A PID hopper (fork, parent exits, again, ignoring SIGTERM) and a fast fork bomb (every
    process forks every 200 us, up to 400): on the cgroup path none escapes and every process is
    gone within 2 s of CMD's end; on the subreaper path none escapes unless the status (124) and
    the summary say the job may still have processes."""

    def setUp(self):
        super().setUp()
        self.cgroup_why = cgroup_v2_writable()
        self.test_cgroup = None
        if not self.cgroup_why:
            self.test_cgroup = os.path.join(own_cgroup_dir(), f"gpuguard-test-escape.{os.getpid()}")
            os.mkdir(self.test_cgroup)
            self.addCleanup(end_test_cgroup, self.test_cgroup)

    def run_in_test_cgroup(self, *args):
        """`gpuguard run ARGS...` in the test's cgroup; its exit status, stderr, and the report."""
        report = self.path("r.json")
        procs = os.path.join(self.test_cgroup, "cgroup.procs") if self.test_cgroup else None

        def enter():
            no_core_dumps()
            if procs:
                with open(procs, "w") as f:
                    f.write("0")

        full_env = dict(os.environ)
        full_env.pop("GPUGUARD_RUN_OPTIONS", None)
        p = subprocess.Popen([GPUGUARD, "run", "--report", report, *args], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=full_env, start_new_session=True,
                             preexec_fn=enter)
        self.to_kill.append(p.pid)
        _, err = p.communicate(timeout=60)
        return p.returncode, err.decode(), self.read_report(report)

    def escaped(self, activity_file):
        """Whether a process of the job ran on after `gpuguard run` exited: it still wrote to
        `activity_file` (a hop, a fork), or it is still in the test's cgroup. (A process that
        escapes may be ended soon after by an init that ends adopted orphans, so being alive later
        is not the test.)"""
        before = activity(activity_file)
        time.sleep(0.3)
        if activity(activity_file) != before:
            return True
        return self.test_cgroup is not None and read_events(self.test_cgroup)["populated"] != "0"

    def judge(self, path_options, rc, err, doc, activity_file, name):
        """Escapes of one trial, and the invariant every path keeps: a trial with an escape exits
        124 and says so; one that claims nothing is left has none."""
        line = self.summary(err)
        escaped = self.escaped(activity_file)
        if escaped:
            self.assertEqual(rc, 124, f"{name} escaped, status {rc}: {line}")
            self.assertFalse(doc["teardown"]["job_empty"], line)
        if rc == 0:
            self.assertTrue(doc["teardown"]["job_empty"], line)
            self.assertFalse(escaped, line)
        else:
            self.assertEqual(rc, 124, line)
            self.assertTrue("THE JOB MAY STILL HAVE PROCESSES" in line or "COULD NOT BE ENDED" in line, line)
        self.assertNotIn("no process outlived it", line)  # both jobs always leave processes behind
        if "--no-namespace" not in path_options:  # a boundary the kernel keeps: nothing escapes
            kind = "cgroup" if "--no-cgroup" not in path_options else "pid_namespace"
            self.assertEqual(doc["boundary"]["kind"], kind, line)
            self.assertEqual((rc, escaped), (0, False), f"{name} on the {kind} path: {line}")
        return escaped

    def paths(self):
        """The cgroup path, the PID namespace path, the subreaper path: each where it can run."""
        paths = []
        for options, why in (((), self.cgroup_why), (("--no-cgroup",), pid_namespace_why()),
                             (("--no-cgroup", "--no-namespace"), "")):
            if why:
                print(f"\nthe path of {' '.join(options) or 'the cgroup'} is not tested: {why}", file=sys.stderr)
            else:
                paths.append(options)
        return paths

    @staticmethod
    def path_name(options):
        return {(): "cgroup", ("--no-cgroup",): "PID namespace"}.get(tuple(options), "subreaper")

    def test_pid_hopper_never_escapes_silently(self):
        for options in self.paths():
            escapes = 0
            for trial in range(ESCAPE_TRIALS):
                with self.subTest(options=options, trial=trial):
                    out = self.path(f"hopper.{trial}.{len(options)}")
                    rc, err, doc = self.run_in_test_cgroup("--grace", "0.1", *options, "--", PYTHON, HELPER, "hopper",
                                                           out, "200", "0.5", "5")
                    escaped = self.judge(options, rc, err, doc, out, "the hopper")
                    escapes += escaped
                    with open(out) as f:
                        hops = f.read().splitlines()
                    if "--no-namespace" not in options:  # the boundary ends it while it still hops
                        self.assertNotEqual(hops[-1], "done", f"the hopper made all its hops: {len(hops)} lines")
            print(f"\nhopper, {self.path_name(options)} path: {escapes} of {ESCAPE_TRIALS} trials escaped "
                  "(each said so, status 124)", file=sys.stderr)

    def test_fast_fork_bomb_is_gone_within_two_seconds_of_cmds_end(self):
        for options in self.paths():
            for trial in range(max(1, ESCAPE_TRIALS // 2)):
                with self.subTest(options=options, trial=trial):
                    out = self.path(f"bomb.{trial}.{len(options)}")
                    rc, err, doc = self.run_in_test_cgroup("--grace", "0.2", *options, "--", PYTHON, HELPER, "forkbomb",
                                                           out, "400", "5")
                    self.judge(options, rc, err, doc, out + ".count", "the fork bomb")
                    if "--no-namespace" not in options:  # SIGTERM, the grace, then the boundary's SIGKILL at once
                        self.assertLess(doc["teardown"]["duration_s"], 0.2 + 2.0, self.summary(err))

    def test_busy_fork_bomb_is_killed_on_time_on_the_cgroup_path(self):
        """400 processes that keep both CPUs busy make every read of the process table slow: the
        cgroup.kill at the end of the grace period must not wait for the scans."""
        if self.cgroup_why:
            self.skipTest(self.cgroup_why)
        out = self.path("busy")
        rc, err, doc = self.run_in_test_cgroup("--grace", "0.2", "--", PYTHON, HELPER, "forkbomb", out, "400", "5",
                                               "--spin")
        self.judge((), rc, err, doc, out + ".count", "the busy fork bomb")
        self.assertLess(doc["teardown"]["duration_s"], 0.2 + 2.0, self.summary(err))

    def test_busy_fork_bomb_is_killed_on_time_in_a_pid_namespace(self):
        """The same on the PID namespace path: the anchor's SIGKILL, from the timer's thread, ends
        the namespace at the end of the grace period."""
        why = pid_namespace_why()
        if why:
            self.skipTest(why)
        out = self.path("busy")
        rc, err, doc = self.run_in_test_cgroup("--grace", "0.2", "--no-cgroup", "--", PYTHON, HELPER, "forkbomb", out,
                                               "400", "5", "--spin")
        self.judge(("--no-cgroup",), rc, err, doc, out + ".count", "the busy fork bomb")
        self.assertLess(doc["teardown"]["duration_s"], 0.2 + 2.0, self.summary(err))


# ---- the supervisor's own failures, and names that are not text ---------------------------------

def pids_v1_dir():
    """The cgroup v1 `pids` hierarchy when this process may make a child of it, else None."""
    root = "/sys/fs/cgroup/pids"
    return root if os.geteuid() == 0 and os.access(os.path.join(root, "cgroup.procs"), os.W_OK) else None


class failures(base):
    def run_with_pids_max(self, pids_max, *args):
        """`gpuguard run ARGS...` in a cgroup v1 `pids` group of the test's own that allows
        `pids_max` processes: with 1 the supervisor cannot fork the anchor, with 2 the anchor
        cannot fork CMD. Returns (gpuguard's pid, exit status, stderr)."""
        root = pids_v1_dir()
        if root is None:
            self.skipTest("no writable cgroup v1 pids hierarchy (root and /sys/fs/cgroup/pids are needed)")
        group = os.path.join(root, f"gpuguard-test-fork.{os.getpid()}.{pids_max}")
        os.mkdir(group)
        self.addCleanup(os.rmdir, group)
        with open(os.path.join(group, "pids.max"), "w") as f:
            f.write(str(pids_max))

        def enter():
            no_core_dumps()
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write("0")

        p = subprocess.Popen([GPUGUARD, "run", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True, preexec_fn=enter)
        self.to_kill.append(p.pid)
        _, err = p.communicate(timeout=30)
        return p.pid, p.returncode, err.decode()

    def test_a_failed_fork_says_so_once_removes_its_cgroup_and_exits_1(self):
        for pids_max, who in ((1, "the supervisor forking the anchor"), (2, "the anchor forking CMD")):
            with self.subTest(who=who):
                report = self.path(f"r{pids_max}.json")
                supervisor, rc, err = self.run_with_pids_max(pids_max, "--report", report, "--", "true")
                self.assertEqual(rc, 1, err)
                self.assertEqual(err.count("gpuguard run:"), 1, err)
                self.assertIn("fork: Resource temporarily unavailable", err)
                own = own_cgroup_dir()
                if own is not None:
                    left = [n for n in os.listdir(own) if n.startswith(f"gpuguard-run.{supervisor}.")]
                    self.assertEqual(left, [], "the job's cgroup was left behind")
                if pids_max == 2:  # the report is written: CMD was not started, for a reason of ours
                    doc = self.read_report(report)
                    self.assertEqual((doc["end"], doc["exit_status"]), ("not_started", 1))
                    self.assertEqual(doc["exec_error"], "fork: Resource temporarily unavailable")

    def test_names_with_escape_sequences_and_newlines_are_printed_as_one_plain_line(self):
        name = self.path("evil\x1b[2J\x1b]0;title\x07name\nsecond line\x7f")
        with open(name, "w") as f:
            f.write("#!/bin/sh\nexit 3\n")
        os.chmod(name, 0o755)
        rc, _, err = self.run_gpuguard("--", name)
        self.assertEqual(rc, 3, err)
        rc2, _, err2 = self.run_gpuguard("--", name + ".missing")
        self.assertEqual(rc2, 127, err2)
        for text in (err, err2):
            self.assertEqual(len(text.splitlines()), 1, text)
            self.assertFalse(any(c in text for c in "\x1b\x07\x7f"), repr(text))
        self.assertIn("evil [2J ]0;title name second line  exited with status 3", err)
        self.assertIn("cannot start '", err2)


# ---- as a container's entrypoint: PID 1 of its own PID namespace --------------------------------

class pid1(base):
    """`unshare --pid --fork --mount-proc gpuguard run -- CMD`: gpuguard is PID 1 of a new PID
    namespace, as tini is in a container. It must reap every zombie (the job's orphans, and the
    orphans of processes entered from outside, like `docker exec`'s) and forward SIGTERM (`docker
    stop`) to CMD."""

    def setUp(self):
        super().setUp()
        unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
        if unshare is None or nsenter is None:
            self.skipTest("unshare or nsenter (util-linux) not found")
        probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest(f"unshare --pid --fork --mount-proc is not permitted here: {probe.stderr.strip()}")
        self.unshare, self.nsenter = unshare, nsenter

    def test_reaps_every_zombie_and_forwards_sigterm(self):
        out = self.path("entrypoint")
        report = self.path("r.json")
        p = subprocess.Popen([self.unshare, "--pid", "--fork", "--mount-proc", GPUGUARD, "run", "--report", report,
                              "--", PYTHON, HELPER, "entrypoint", out, "8"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=no_core_dumps)
        self.to_kill.append(p.pid)
        self.assertTrue(wait_until(lambda: os.path.exists(out), 20), "the entrypoint never started")
        # gpuguard's PID on this side: unshare's child (it is PID 1 on the other side).
        self.assertTrue(wait_until(lambda: len(children_of(p.pid)) == 1, 5))
        init = children_of(p.pid)[0]
        self.to_kill.append(init)
        self.assertEqual(proc_stat(init).comm, "gpuguard")
        with open(f"/proc/{init}/status") as f:
            nspid = next(l.split()[1:] for l in f if l.startswith("NSpid:"))
        self.assertEqual(nspid[-1], "1", "gpuguard is not PID 1 of its namespace")

        # A process entered from outside (as `docker exec` does) leaves an orphan: it is reparented
        # to PID 1, gpuguard, which must reap it when it exits.
        entered = subprocess.run([self.nsenter, "--target", str(init), "--pid", "--", "sh", "-c",
                                  "sleep 1 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, timeout=10)
        self.assertEqual(entered.returncode, 0, entered.stderr)
        def adopted_by_init():  # any child of PID 1 but the anchor (it may not have exec'd sleep yet)
            return [pid for pid in children_of(init) if getattr(proc_stat(pid), "comm", None) != "gpuguard-anchor"]
        self.assertTrue(wait_until(lambda: len(adopted_by_init()) == 1, 2),
                        f"the entered process's orphan was not adopted by PID 1: {adopted_by_init()}")
        adopted = adopted_by_init()
        self.assertTrue(wait_until(lambda: proc_stat(adopted[0]) is None, 4),
                        f"the orphan adopted by PID 1 stayed: {proc_stat(adopted[0])}")

        # `docker stop`: SIGTERM to PID 1 from outside, forwarded to CMD.
        os.kill(init, signal.SIGTERM)
        _, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 0, err.decode())
        with open(out) as f:
            lines = f.read().splitlines()
        self.assertIn("sigterm", lines)
        self.assertEqual(lines[-1], "zombies ", f"zombies in the namespace: {lines[-1]}")
        doc = self.read_report(report)
        self.assertEqual(doc["supervisor_pid"], 1)
        self.assertEqual(doc["signals_forwarded"], [{"signal": signal.SIGTERM, "name": "SIGTERM", "count": 1}])
        self.assertEqual(doc["exit_status"], 0)


# ---- --require-clean: the GPU gate, with the fake NVML --------------------------------------------

class clean(base):
    GIB = 1 << 30

    def spec(self, used, processes=""):
        """A fake_nvml.cpp spec: one 80 GiB device whose used memory answers `used` in turn (the
        first answer is the level before the job; the last repeats)."""
        self.specs = getattr(self, "specs", 0) + 1
        path = self.path(f"nvml{self.specs}.spec")
        with open(path, "w") as f:
            f.write(f"device 0 {80 * self.GIB} 0 {','.join(str(u) for u in used)} Fake GPU\n{processes}")
        return path

    def run_clean(self, spec, *cmd, grace="0.3"):
        report = self.path(f"r{self.specs}.json")
        env = {"GPUGUARD_NVML_LIBRARY": FAKE_NVML, "GPUGUARD_FAKE_NVML": spec}
        start = time.monotonic()
        rc, _, err = self.run_gpuguard("--require-clean", "--grace", grace, "--report", report, "--", *cmd, env=env)
        return rc, self.read_report(report), self.summary(err), time.monotonic() - start

    def test_clean_job_keeps_its_status(self):
        for code in (0, 3):
            with self.subTest(code=code):
                rc, doc, line, _ = self.run_clean(self.spec([self.GIB]), "sh", "-c", f"exit {code}")
                self.assertEqual(rc, code, line)
                self.assertTrue(doc["clean"]["clean"], doc["clean"])
                self.assertEqual(doc["clean"]["devices"], [{"device": 0, "before_bytes": self.GIB,
                                                            "after_bytes": self.GIB}])
                self.assertIn("; GPU clean (", line)

    def test_memory_that_comes_back_within_the_grace_is_clean(self):
        # Before: 1 GiB; the first two looks after the teardown: 3 GiB; then back.
        spec = self.spec([self.GIB, 3 * self.GIB, 3 * self.GIB, self.GIB])
        rc, doc, line, _ = self.run_clean(spec, "true", grace="2")
        self.assertEqual(rc, 0, line)
        self.assertTrue(doc["clean"]["clean"])
        self.assertGreater(doc["clean"]["waited_s"], 0.05)  # two looks, 50 ms apart

    def test_memory_not_back_exits_125_after_the_grace(self):
        for code in (0, 3):
            with self.subTest(code=code):
                spec = self.spec([self.GIB, 3 * self.GIB])
                rc, doc, line, took = self.run_clean(spec, "sh", "-c", f"exit {code}", grace="0.5")
                self.assertEqual(rc, 125, line)
                self.assertEqual(doc["exit_code"], code)  # CMD's own status stays in the report
                self.assertFalse(doc["clean"]["clean"])
                self.assertGreaterEqual(doc["clean"]["waited_s"], 0.9)  # the grace, at least 1 s
                self.assertLess(took, 5)
                self.assertIn("GPU NOT CLEAN after", line)
                self.assertIn("device 0 uses 2.00 GiB more than before the job (exit status 125)", line)

    def test_within_the_tolerance_is_clean(self):
        rc, doc, line, _ = self.run_clean(self.spec([self.GIB, self.GIB + (32 << 20)]), "true")
        self.assertEqual(rc, 0, line)
        self.assertEqual(doc["clean"]["tolerance_bytes"], 64 << 20)

    def test_a_process_of_the_job_still_listed_by_nvml_is_not_clean(self):
        # CMD lists itself as a GPU process and exits: NVML keeps listing its PID (a context the
        # driver has not torn down), though the memory figure is back.
        spec = self.spec([self.GIB])
        rc, doc, line, _ = self.run_clean(spec, "sh", "-c", f'echo "process 0 $$ 1000" >> {spec}')
        self.assertEqual(rc, 125, line)
        self.assertEqual(doc["clean"]["listed_by_nvml"], [doc["command_pid"]])
        self.assertIn(f"NVML still lists processes of the job: {doc['command_pid']}", line)

    def test_without_nvml_it_cannot_tell_and_exits_125(self):
        report = self.path("r.json")
        rc, _, err = self.run_gpuguard("--require-clean", "--report", report, "--", "true",
                                       env={"GPUGUARD_NVML_LIBRARY": self.path("no-libnvidia-ml.so.1")})
        self.assertEqual(rc, 125, err)
        c = self.read_report(report)["clean"]
        self.assertFalse(c["clean"])
        self.assertIn("NVML not available", c["note"])
        self.assertIn("device memory cannot be checked", self.summary(err))

    def test_environment_turns_it_on(self):
        spec = self.spec([self.GIB, 3 * self.GIB])
        rc, _, err = self.run_gpuguard("--grace", "0", "--", "true",
                                       env={"GPUGUARD_NVML_LIBRARY": FAKE_NVML, "GPUGUARD_FAKE_NVML": spec,
                                            "GPUGUARD_RUN_OPTIONS": "require_clean=1"})
        self.assertEqual(rc, 125, err)

    def test_not_asked_means_no_gate(self):
        report = self.path("r.json")
        rc, _, err = self.run_gpuguard("--report", report, "--", "true")
        self.assertEqual(rc, 0, err)
        self.assertIsNone(self.read_report(report)["clean"])
        self.assertNotIn("GPU clean", err)


# ---- the residue check --------------------------------------------------------------------------

class residue(base):
    def setUp(self):
        super().setUp()
        self.device = self.path("nvidia0")
        with open(self.device, "wb") as f:
            f.write(b"\0" * 4096)
        self.prefix = self.path("nvidia")

    def fake_nvml_spec(self, text="device 0 85899345920 0 0 Fake GPU\n"):
        """A spec for fake_nvml.cpp (see there): by default one device and no process."""
        self.specs = getattr(self, "specs", 0) + 1
        spec = self.path(f"nvml{self.specs}.spec")
        with open(spec, "w") as f:
            f.write(text)
        return spec

    def run_hold(self, *flags, env=None, options=("--device-prefix",)):
        self.runs = getattr(self, "runs", 0) + 1
        pidfile = self.path(f"pids{self.runs}")
        report = self.path(f"r{self.runs}.json")
        prefix_args = [options[0], self.prefix] if options else []
        rc, _, err = self.run_gpuguard("--grace", "2", "--report", report, *prefix_args, "--",
                                       PYTHON, HELPER, "hold", self.device, pidfile, *flags, env=env)
        self.assertEqual(rc, 0, err)
        pids = self.read_pids(pidfile)
        self.assertFalse(alive(pids["holder"]), "the holder outlived the teardown")
        return pids["holder"], self.read_report(report), self.summary(err)

    def test_holder_reported_with_its_memory_from_nvml(self):
        nvml_spec = self.fake_nvml_spec()
        holder, doc, line = self.run_hold("--nvml", nvml_spec, "123456789",
                                          env={"GPUGUARD_NVML_LIBRARY": FAKE_NVML, "GPUGUARD_FAKE_NVML": nvml_spec})
        holders = doc["residue"]["at_end"]["holders"]
        self.assertEqual([h["pid"] for h in holders], [holder])
        self.assertEqual(holders[0]["files"], [self.device])
        self.assertEqual(holders[0]["gpu_memory_bytes"], 123456789)
        self.assertEqual(holders[0]["gpus"], [{"device": 0, "bytes": 123456789}])
        self.assertEqual(doc["residue"]["at_end"]["nvml"], {"queried": True, "available": True, "note": ""})
        self.assertEqual(doc["residue"]["after_teardown"]["holders"], [])
        self.assertEqual(doc["teardown"]["terminated"], 1)
        self.assertIn(f"1 process of it held a GPU when it ended: {holder} python", line)
        self.assertIn("(117.7 MiB on GPU 0); none holds one now", line)

    def test_holder_without_nvml_is_a_note_not_a_failure(self):
        for env in ({"GPUGUARD_NVML_LIBRARY": self.path("no-such-libnvidia-ml.so.1")},
                    {"GPUGUARD_NVML_LIBRARY": FAKE_NVML, "GPUGUARD_FAKE_NVML": self.fake_nvml_spec("init_error 9\n")}):
            with self.subTest(env=env):
                holder, doc, line = self.run_hold(env=env)
                check = doc["residue"]["at_end"]
                self.assertEqual([h["pid"] for h in check["holders"]], [holder])
                self.assertIsNone(check["holders"][0]["gpu_memory_bytes"])
                self.assertEqual(check["nvml"]["available"], False)
                self.assertIn("NVML not available", check["nvml"]["note"])
                self.assertIn(f"{holder} python", line)
                self.assertIn("(memory unknown: no NVML); none holds one now", line)

    def test_mapping_without_a_descriptor_still_holds(self):
        holder, doc, _ = self.run_hold("--mmap", env={"GPUGUARD_NVML_LIBRARY": FAKE_NVML})
        holders = doc["residue"]["at_end"]["holders"]
        self.assertEqual([(h["pid"], h["files"]) for h in holders], [(holder, [self.device])])

    def test_prefix_from_the_environment(self):
        holder, doc, _ = self.run_hold(env={"GPUGUARD_DEVICE_PREFIX": self.prefix,
                                            "GPUGUARD_NVML_LIBRARY": FAKE_NVML}, options=())
        self.assertEqual(doc["residue"]["device_prefix"], self.prefix)
        self.assertEqual([h["pid"] for h in doc["residue"]["at_end"]["holders"]], [holder])

    def test_no_holder_when_nothing_holds_the_device(self):
        _, doc, line = self.run_hold("--none", env={"GPUGUARD_NVML_LIBRARY": FAKE_NVML})
        self.assertEqual(doc["residue"]["at_end"]["holders"], [])
        self.assertEqual(doc["residue"]["at_end"]["nvml"]["queried"], False)  # nobody held a device
        self.assertEqual(doc["teardown"]["terminated"], 1)
        self.assertTrue(line.endswith("1 process outlived it: 1 ended after SIGTERM; no process of it holds a GPU"),
                        line)

    def test_a_holder_under_another_prefix_is_not_one(self):
        pidfile = self.path("pids")
        report = self.path("r.json")
        rc, _, err = self.run_gpuguard("--report", report, "--device-prefix", self.path("nvidia-other"), "--",
                                       PYTHON, HELPER, "hold", self.device, pidfile)
        self.assertEqual(rc, 0, err)
        self.read_pids(pidfile)
        self.assertEqual(self.read_report(report)["residue"]["at_end"]["holders"], [])


# ---- --track ------------------------------------------------------------------------------------

class track(base):
    def test_preload_prepended_and_options_appended(self):
        rc, out, err = self.run_gpuguard("--track", "--options", "leak_exitcode=3", "--options", "stacks=off",
                                         PYTHON, HELPER, "env",
                                         env={"GPUGUARD_PRELOAD_LIBRARY": FAKE_PRELOAD, "LD_PRELOAD": FAKE_NVML,
                                              "GPUGUARD_OPTIONS": "stacks=all"})
        self.assertEqual(rc, 0, err)
        env = json.loads(out)
        self.assertEqual(env["LD_PRELOAD"], f"{FAKE_PRELOAD}:{FAKE_NVML}")
        self.assertEqual(env["GPUGUARD_OPTIONS"], "stacks=all:leak_exitcode=3:stacks=off")

    def test_without_track_nothing_is_preloaded(self):
        rc, out, err = self.run_gpuguard(PYTHON, HELPER, "env", env={"GPUGUARD_PRELOAD_LIBRARY": FAKE_PRELOAD})
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["LD_PRELOAD"], os.environ.get("LD_PRELOAD"))

    def test_library_next_to_an_installed_executable(self):
        bindir, libdir = self.path("prefix/bin"), self.path("prefix/lib")
        os.makedirs(bindir)
        os.makedirs(libdir)
        shutil.copy(GPUGUARD, bindir)
        shutil.copy(FAKE_PRELOAD, os.path.join(libdir, "libgpuguard_preload.so"))
        env = dict(os.environ)
        env.pop("GPUGUARD_PRELOAD_LIBRARY", None)
        env.pop("LD_PRELOAD", None)
        p = subprocess.run([os.path.join(bindir, "gpuguard"), "run", "--track", PYTHON, HELPER, "env"],
                           capture_output=True, env=env, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(json.loads(p.stdout)["LD_PRELOAD"],
                         os.path.realpath(os.path.join(libdir, "libgpuguard_preload.so")))

    def test_library_not_found_exits_2_naming_where_it_looked(self):
        bindir = self.path("bin")
        os.makedirs(bindir)
        shutil.copy(GPUGUARD, bindir)
        env = dict(os.environ)
        env.pop("GPUGUARD_PRELOAD_LIBRARY", None)
        p = subprocess.run([os.path.join(bindir, "gpuguard"), "run", "--track", "true"], capture_output=True,
                           env=env, timeout=30)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 2, err)
        self.assertIn("libgpuguard_preload.so not found", err)
        for where in ("/../lib/libgpuguard_preload.so", "/../preload/libgpuguard_preload.so"):
            self.assertIn(bindir + where, err)
        env["GPUGUARD_PRELOAD_LIBRARY"] = self.path("nope.so")
        p = subprocess.run([GPUGUARD, "run", "--track", "true"], capture_output=True, env=env, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"GPUGUARD_PRELOAD_LIBRARY={self.path('nope.so')}", p.stderr.decode())


# ---- the terminal -------------------------------------------------------------------------------

class tty(base):
    def read_until(self, fd, text, timeout=20):
        """Reads the terminal until `text` has appeared after the previous match. What one read
        brought beyond the match is kept for the next call: under load, two lines written 0.2 s
        apart can arrive in one read."""
        pending = self.__dict__.setdefault("_pending", {})
        seen = pending.get(fd, b"")
        deadline = time.monotonic() + timeout
        while text.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
        self.assertIn(text, seen.decode(errors="replace"))
        end = seen.index(text.encode()) + len(text.encode())
        pending[fd] = seen[end:]
        return seen[:end].decode(errors="replace")

    def on_terminal(self, *argv):
        """argv started in a new session whose controlling terminal is a new pty; returns the
        process and the pty's master side."""
        master, slave = pty.openpty()

        def session():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            no_core_dumps()

        p = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, preexec_fn=session)
        self.to_kill.append(p.pid)
        os.close(slave)
        self.addCleanup(os.close, master)
        return p, master

    def test_cmd_gets_the_terminal_and_ctrl_c(self):
        p, master = self.on_terminal(GPUGUARD, "run", "--", PYTHON, HELPER, "tty")
        # Without the foreground, reading the terminal would stop CMD (SIGTTIN) and this would hang.
        self.read_until(master, "ready foreground=True")
        os.write(master, b"hello\n")
        self.read_until(master, "got hello")
        os.write(master, b"\x03")  # Ctrl-C: SIGINT to the foreground group, CMD's
        self.assertEqual(p.wait(timeout=10), 128 + signal.SIGINT)
        self.read_until(master, "was killed by SIGINT (status 130)")

    def test_ctrl_z_stops_the_whole_job_and_fg_resumes_it(self):
        p, master = self.on_terminal(PYTHON, HELPER, "jobshell", GPUGUARD, "run", "--", PYTHON, HELPER, "tty")
        self.read_until(master, "ready foreground=True")
        os.write(master, b"hello\n")
        self.read_until(master, "got hello")
        os.write(master, b"\x1a")  # Ctrl-Z: CMD's group stops, and gpuguard stops with it
        self.read_until(master, "shell: stopped by SIGTSTP")
        self.read_until(master, "shell: continued")
        os.write(master, b"world\n")  # read only if CMD has the foreground again
        self.read_until(master, "got world")
        os.write(master, b"\x03")
        self.read_until(master, "shell: ended 130")
        self.assertEqual(p.wait(timeout=10), 0)

    def test_cmd_stopping_itself_on_a_terminal_stops_the_job_and_fg_resumes_it(self):
        p, master = self.on_terminal(PYTHON, HELPER, "jobshell", GPUGUARD, "run", "--", "sh", "-c",
                                     "kill -TSTP $$; echo cmd resumed")
        self.read_until(master, "shell: stopped by SIGTSTP")
        self.read_until(master, "cmd resumed")
        self.read_until(master, "shell: ended 0")
        self.assertEqual(p.wait(timeout=10), 0)

    def caller_script(self, stop, preexec_fn):
        """A script without a terminal (as in CI) runs `gpuguard run` on a CMD that stops itself with
        `stop`, then goes on. Returns the script's exit status, stdout and stderr."""
        script = (f"{GPUGUARD} run -- sh -c 'kill -{stop} $$; echo cmd resumed'; echo after $?")
        p = subprocess.Popen(["bash", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, preexec_fn=preexec_fn)
        self.addCleanup(lambda: os.killpg(p.pid, signal.SIGKILL) if p.poll() is None else None)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            state = proc_stat(p.pid)
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            self.fail(f"the calling script did not go on (its state: {state}); stdout {out!r} stderr {err!r}")
        return p.returncode, out.decode(), err.decode()

    def test_cmd_stopping_itself_without_a_terminal_stops_no_caller(self):
        # In a session of its own (the reproduction), and in a process group of its own in
        # this session: there the group is not orphaned, and a stop sent to it would hold.
        for where, preexec_fn in (("own session", os.setsid), ("own group", os.setpgrp)):
            for stop in ("TSTP", "TTIN", "TTOU"):
                with self.subTest(where=where, stop=stop):
                    status, out, err = self.caller_script(stop, preexec_fn)
                    self.assertEqual(status, 0, err)
                    self.assertEqual(out.splitlines(), ["cmd resumed", "after 0"], err)
                    self.assertIn(f"CMD was stopped by SIG{stop}, but no terminal job control can resume it: "
                                  "continuing it", err)


if __name__ == "__main__":
    GPUGUARD, FAKE_NVML, FAKE_PRELOAD = (os.path.abspath(a) for a in sys.argv[1:4])
    unittest.main(argv=[sys.argv[0], "-v", *sys.argv[4:]])
