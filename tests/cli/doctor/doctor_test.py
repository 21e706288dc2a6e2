#!/usr/bin/env python3
"""`gpuguard doctor` as a process, on real processes that hold fake device files (regular files named
like /dev/nvidia*, passed with --device-prefix) in every state the doctor tells apart: running,
stopped, zombie, orphaned (reparented to init, and to a subreaper this test sets up), not visible
in this PID namespace; --reap (orphans end, live holders are untouched, --pid forces one, a PID
whose start time changed is not signalled); --json against docs/schemas/doctor-v1.schema.json
(when jsonschema is installed); --watch with --count; NVML absent, and NVML faked by
fake_nvml.cpp (shared with the run tests) so that its path runs without a GPU.

usage: doctor_test.py GPUGUARD_BINARY FAKE_NVML_LIBRARY REPO_ROOT
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from procfs import alive, stat as read_stat, wait_until  # noqa: E402  (tests/support)

GPUGUARD = None
FAKE_NVML = None
ROOT = None
GiB = 1 << 30
MiB = 1 << 20

# A holder: opens the device files named in argv, optionally maps the first and closes its fd,
# optionally ignores SIGTERM, says "ready", then waits to be signalled.
HOLDER = textwrap.dedent("""
    import ctypes, os, signal, sys
    mode, paths = sys.argv[1], sys.argv[2:]
    files = [open(p, "r+b") for p in paths]
    if "map" in mode:
        # libc's mmap, not Python's (which keeps a duplicate of the descriptor)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        if libc.mmap(None, 4096, 1, 1, files[0].fileno(), 0) in (None, ctypes.c_void_p(-1).value):
            sys.exit("mmap failed")
        files[0].close()
    if "ignore-term" in mode:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        signal.pause()
""")

# Makes an orphan: this process (Q) starts a job of its own (a new process group), opens the
# device files, forks the holder P, prints P's PID and exits, so that P is reparented. With
# "subreaper", a process S first marks itself PR_SET_CHILD_SUBREAPER, and Q is its child: P goes to
# S, which then collects its children until none is left.
ORPHAN_MAKER = textwrap.dedent("""
    import ctypes, os, signal, sys, time
    mode, paths = sys.argv[1], sys.argv[2:]
    signal.signal(signal.SIGHUP, signal.SIG_DFL)   # as a job started normally
    if "subreaper" in mode:
        if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:   # PR_SET_CHILD_SUBREAPER
            sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
        print(os.getpid(), flush=True)
        q = os.fork()
        if q != 0:
            os.waitpid(q, 0)
            while True:
                try:
                    os.wait()
                except ChildProcessError:
                    os._exit(0)
    if os.getsid(0) != os.getpid():
        os.setpgid(0, 0)
    files = [open(p, "r+b") for p in paths]
    p = os.fork()
    if p == 0:
        if "ignore-term" in mode:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            signal.pause()
    time.sleep(0.05)   # let the child set its signal disposition
    print(p, flush=True)
    os._exit(0)
""")


# A job's main process, as a training program is shaped: it restores SIGHUP's default unless told
# "nohup" (a job started normally does not ignore it, whatever this test's caller does), opens the
# device files, forks N workers that open them too (DataLoader workers), prints its PID and the
# workers' on one line, then waits. Started by the shapes below: a script without job control, a
# shell with job control, setsid, nohup.
JOB_MAIN = textwrap.dedent("""
    import os, signal, sys
    nworkers, mode, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if mode != "nohup":
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    files = [open(p, "r+b") for p in paths]
    workers = []
    for _ in range(nworkers):
        w = os.fork()
        if w == 0:
            mine = [open(p, "r+b") for p in paths]
            while True:
                signal.pause()
        workers.append(w)
    print(os.getpid(), *workers, flush=True)
    while True:
        signal.pause()
""")

# A double-forked daemon (daemon(3), python-daemon): fork, setsid, fork again so that it leads
# nothing, chdir("/"), hold the device files; the first two exit. Prints the daemon's PID.
DAEMON = textwrap.dedent("""
    import os, signal, sys
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.chdir("/")
            files = [open(p, "r+b") for p in sys.argv[1:]]
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            while True:
                signal.pause()
        os._exit(0)
    os.close(w)
    print(os.read(r, 64).decode(), flush=True)
""")


def wait_for(predicate, what, timeout=10.0):
    if not wait_until(predicate, timeout, step=0.02):
        raise AssertionError(f"timed out waiting for {what}")


class doctor_test(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-doctor-test-")
        self.dir = self.tmp.name
        self.prefix = os.path.join(self.dir, "nvidia")
        self.devices = [self.prefix + "0", self.prefix + "ctl"]
        for path in self.devices:
            with open(path, "wb") as f:
                f.write(b"\0" * 4096)
        self.children = []   # Popen objects to end and collect
        self.orphans = []    # PIDs (not our children) to end

    def tearDown(self):
        for pid, start in self.orphans:
            s = read_stat(pid)
            if s is not None and s.start_time == start:   # the same process: never another one
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.children:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()
        self.tmp.cleanup()

    # --- running the doctor -----------------------------------------------------------------

    def env(self, nvml=None, **extra):
        env = dict(os.environ)
        env.pop("GPUGUARD_DEVICE_PREFIX", None)
        env.pop("GPUGUARD_FAKE_NVML", None)
        if nvml is None:
            env["GPUGUARD_NVML_LIBRARY"] = os.path.join(self.dir, "no-such-dir", "libnvidia-ml.so.1")
        else:
            spec = os.path.join(self.dir, "nvml.spec")
            with open(spec, "w") as f:
                f.write(nvml)
            env["GPUGUARD_NVML_LIBRARY"] = FAKE_NVML
            env["GPUGUARD_FAKE_NVML"] = spec
        env.update(extra)
        return env

    def doctor(self, *args, nvml=None, prefix=True, env=None, timeout=60):
        argv = [GPUGUARD, "doctor", *(["--device-prefix", self.prefix] if prefix else []), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else self.env(nvml))

    def doctor_json(self, *args, nvml=None, expect=None):
        r = self.doctor("--json", *args, nvml=nvml)
        if expect is not None:
            self.assertEqual(r.returncode, expect, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertGreaterEqual(len(lines), 1, r.stderr)
        docs = [json.loads(line) for line in lines]
        for d in docs:
            validate(self, d)
            self.assertEqual(d["exit_status"], r.returncode if len(docs) == 1 else d["exit_status"])
        return docs[-1] if len(docs) == 1 else docs

    def assert_one_line_error(self, r, status, start, named):
        """`r` exited with `status`, printed nothing on stdout and one line on stderr that starts
        with `start` and holds `named`."""
        self.assertEqual(r.returncode, status, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(start), lines[0])
        self.assertIn(named, lines[0])

    def holder_of(self, doc, pid):
        found = [h for h in doc["holders"] if h["pid"] == pid]
        self.assertEqual(len(found), 1, f"PID {pid} not listed once: {[h['pid'] for h in doc['holders']]}")
        return found[0]

    # --- making processes ---------------------------------------------------------------------

    def start_holder(self, mode="open", paths=None):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, mode, *(paths or self.devices)],
                             stdout=subprocess.PIPE, text=True)
        self.children.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        return p

    def make_orphan(self, mode="init"):
        """Returns (orphan PID, subreaper Popen or None)."""
        new_session = "subreaper" not in mode
        maker = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER, mode, *self.devices],
                                 stdout=subprocess.PIPE, text=True, start_new_session=new_session, cwd=self.dir)
        self.children.append(maker)
        reaper = None
        if "subreaper" in mode:
            reaper = int(maker.stdout.readline())
        orphan = int(maker.stdout.readline())
        self.orphans.append((orphan, read_stat(orphan).start_time))
        if reaper is None:
            maker.wait(timeout=10)   # Q exits: P goes to init (or the nearest subreaper above us)
        else:
            self.assertEqual(reaper, maker.pid)
        wait_for(lambda: read_stat(orphan).ppid not in (0,) and read_stat(orphan).ppid != read_stat(orphan).pgid
                 and (reaper is None or read_stat(orphan).ppid == reaper), "the orphan to be reparented")
        return orphan, (maker if reaper is not None else None)

    def start_job(self, shell_command, nworkers=2, mode="plain", **popen):
        """Runs `shell_command` under bash -c in a new session (as Slurm, CI and Docker start a
        batch script), with $MAIN expanded to the job's main process (JOB_MAIN with `nworkers`
        workers); returns (script Popen, main PID, worker PIDs). Every PID is ended by tearDown."""
        main_py = os.path.join(self.dir, "main.py")
        with open(main_py, "w") as f:
            f.write(JOB_MAIN)
        env = dict(os.environ, MAIN=" ".join(
            map(shlex.quote, [sys.executable, main_py, str(nworkers), mode, *self.devices])))
        script = subprocess.Popen(["bash", "-c", shell_command], stdout=subprocess.PIPE, text=True,
                                  start_new_session=True, cwd=self.dir, env=env, **popen)
        self.children.append(script)
        pids = [int(x) for x in script.stdout.readline().split()]
        self.assertEqual(len(pids), 1 + nworkers, pids)
        for pid in pids:
            self.orphans.append((pid, read_stat(pid).start_time))
        return script, pids[0], pids[1:]

    def kill_main(self, main, workers):
        """SIGKILLs a job's main process and waits until its workers are reparented."""
        os.kill(main, signal.SIGKILL)
        wait_for(lambda: all(read_stat(w).ppid != main for w in workers), "the workers to be reparented")

    # --- tests ----------------------------------------------------------------------------------

    def test_help_and_usage_errors(self):
        r = self.doctor("--help", prefix=False)
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: gpuguard doctor", r.stdout)
        self.assertIn("exit status", r.stdout)
        cases = [
            (["--watch", "abc"], "abc"), (["--watch", "0"], "'0'"), (["--watch"], "--watch"),
            (["--count", "3"], "--count"), (["--watch", "1", "--count", "0"], "'0'"),
            (["--watch", "1", "--count", "x1"], "x1"), (["--pid", "x"], "'x'"), (["--pid", "0"], "'0'"),
            (["--pid", "12:abc"], "12:abc"), (["--pid", "5", "--pid", "5"], "5"), (["--grace", "1"], "--grace"),
            (["--reap", "--grace", "-1"], "-1"), (["--bogus"], "--bogus"), (["extra"], "extra"),
            (["--device-prefix", "relative/x"], "relative/x"), (["--json=1"], "--json"),
            (["--watch", "nan"], "nan"), (["--watch", "1e3"], "1e3"),
        ]
        for args, named in cases:
            with self.subTest(args=args):
                self.assert_one_line_error(self.doctor(*args, prefix=False), 2, "gpuguard doctor: ", named)
        r = self.doctor(prefix=False, env=self.env(GPUGUARD_DEVICE_PREFIX="not-absolute"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("not-absolute", r.stderr)

    def test_no_holder_and_nvml_absent(self):
        r = self.doctor()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no process holds a GPU device", r.stdout)
        self.assertIn("NVML not available: per-process memory unknown", r.stdout)
        doc = self.doctor_json(expect=0)
        self.assertFalse(doc["nvml"]["available"])
        self.assertIn("NVML not available: per-process memory unknown", doc["nvml"]["note"])
        self.assertEqual(doc["holders"], [])
        self.assertEqual(doc["device_prefix"], self.prefix)
        self.assertIsNone(doc["residue_bytes"])
        # The prefix from the environment; NVML failing at nvmlInit (driver not loaded) is the
        # same note, not a failure.
        r = self.doctor(prefix=False, env=self.env("init_error 9\n", GPUGUARD_DEVICE_PREFIX=self.prefix))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("NVML not available: per-process memory unknown (nvmlInit_v2: Driver Not Loaded)", r.stdout)
        r = self.doctor("--no-nvml")
        self.assertEqual(r.returncode, 0)
        self.assertIn("NVML not used (--no-nvml): per-process memory unknown", r.stdout)

    def test_running_holder(self):
        p = self.start_holder()
        r = self.doctor()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, rf"\n\s+{p.pid}\s+running\s+")
        self.assertIn(self.devices[0] + " (1 fd)", r.stdout)
        doc = self.doctor_json(expect=1)
        h = self.holder_of(doc, p.pid)
        self.assertEqual(h["class"], "running")
        self.assertFalse(h["orphaned"])
        self.assertEqual(h["ppid"], os.getpid())
        self.assertEqual(h["start_time"], read_stat(p.pid).start_time)
        self.assertEqual(sorted(f["path"] for f in h["files"]), sorted(self.devices))
        self.assertEqual({f["fds"] for f in h["files"]}, {1})
        self.assertEqual(doc["holder_count"], 1)
        self.assertEqual({f["path"]: f["holders"] for f in doc["device_files"]}, {d: 1 for d in self.devices})
        # Another prefix sees nothing.
        r = subprocess.run([GPUGUARD, "doctor", "--device-prefix", self.prefix + "-other"], capture_output=True,
                           env=self.env(), timeout=60)
        self.assertEqual(r.returncode, 0)

    def test_a_mapping_alone_holds_the_device(self):
        p = self.start_holder("map")
        h = self.holder_of(self.doctor_json(expect=1), p.pid)
        files = {f["path"]: f for f in h["files"]}
        self.assertEqual(files[self.devices[0]]["fds"], 0)
        self.assertEqual(files[self.devices[0]]["mappings"], 1)
        self.assertEqual(files[self.devices[1]]["fds"], 1)

    def test_stopped_holder(self):
        p = self.start_holder()
        os.kill(p.pid, signal.SIGSTOP)
        wait_for(lambda: read_stat(p.pid).state == "T", "the holder to stop")
        h = self.holder_of(self.doctor_json(expect=1), p.pid)
        self.assertEqual(h["class"], "stopped")
        self.assertEqual(h["state"], "T")
        self.assertIn("kill -CONT", h["hint"])
        os.kill(p.pid, signal.SIGCONT)

    def test_zombie(self):
        p = self.start_holder()
        p.send_signal(signal.SIGTERM)
        wait_for(lambda: read_stat(p.pid).state == "Z", "the holder to become a zombie")
        # A zombie holds no file: the scan does not list it ...
        self.assertEqual(self.doctor().returncode, 0)
        # ... but asked by PID, it is classified; and NVML can still list memory for it.
        h = self.holder_of(self.doctor_json("--pid", str(p.pid), expect=0), p.pid)
        self.assertEqual(h["class"], "zombie")
        self.assertFalse(h["holds"])
        self.assertTrue(h["named"])
        self.assertIn(f"PID {os.getpid()}", h["why"])
        nvml = f"device 0 1000000000 0 600000000 Fake GPU\nprocess 0 {p.pid} 500000000\n"
        doc = self.doctor_json(nvml=nvml, expect=1)
        h = self.holder_of(doc, p.pid)
        self.assertEqual(h["class"], "zombie")
        self.assertEqual(h["gpu_memory_bytes"], 500000000)
        self.assertEqual(h["files"], [])
        # --reap --pid on a zombie: nothing can be signalled.
        doc = self.doctor_json("--reap", "--pid", str(p.pid), nvml=nvml, expect=1)
        self.assertEqual(self.holder_of(doc, p.pid)["reap"]["action"], "skipped")

    def test_a_process_whose_main_thread_exited(self):
        # The main thread calls pthread_exit: /proc/PID shows a zombie with an empty fd table, while
        # another thread runs and holds the device. It is a live holder, not a zombie.
        code = textwrap.dedent(f'''
            import ctypes, sys, threading, time
            def worker():
                f = open({self.devices[0]!r}, "rb")
                print("ready", flush=True)
                time.sleep(60)
            threading.Thread(target=worker).start()
            time.sleep(0.1)
            ctypes.CDLL(None).pthread_exit(None)
        ''')
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        self.children.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        wait_for(lambda: read_stat(p.pid).state == "Z", "the main thread to exit")
        h = self.holder_of(self.doctor_json(expect=1), p.pid)
        self.assertEqual(h["class"], "running", h["why"])
        self.assertTrue(h["main_thread_exited"])
        self.assertFalse(h["exiting"])
        self.assertEqual(h["files"], [{"path": self.devices[0], "fds": 1, "mappings": 0}])
        self.assertIn("python", h["command"])
        self.assertIn("main thread has exited", h["why"])

    def test_orphaned_to_a_subreaper(self):
        orphan, reaper = self.make_orphan("subreaper")
        doc = self.doctor_json(expect=1)
        h = self.holder_of(doc, orphan)
        self.assertEqual(h["class"], "orphaned", h["why"])
        self.assertTrue(h["orphaned"])
        self.assertEqual(h["ppid"], reaper.pid)
        self.assertIn(f"PID {reaper.pid}", h["why"])
        self.assertIn("no live leader", h["why"])
        self.assertIsNone(h["reap"])
        r = self.doctor()
        self.assertRegex(r.stdout, rf"\n\s+{orphan}\s+orphaned\s+")
        self.assertIn("--reap", r.stdout)
        self.assertTrue(alive(orphan), "the doctor without --reap signalled nobody")

    def test_orphaned_to_init(self):
        orphan, _ = self.make_orphan("init")
        h = self.holder_of(self.doctor_json(expect=1), orphan)
        self.assertEqual(h["class"], "orphaned", h["why"])
        self.assertNotEqual(h["ppid"], os.getpid())

    def test_reap_ends_orphans_and_leaves_live_holders(self):
        orphan, reaper = self.make_orphan("subreaper")
        stubborn, reaper2 = self.make_orphan("subreaper ignore-term")
        live = self.start_holder()
        started = time.monotonic()
        doc = self.doctor_json("--reap", "--grace", "0.5", expect=1)
        took = time.monotonic() - started
        self.assertEqual(doc["reap"], {"grace_s": 0.5, "available": True, "note": None})
        h = self.holder_of(doc, orphan)
        self.assertEqual(h["reap"]["action"], "terminated", h["reap"])
        self.assertEqual(h["reap"]["signals"], ["SIGTERM"])
        h = self.holder_of(doc, stubborn)
        self.assertEqual(h["reap"]["action"], "killed", h["reap"])
        self.assertEqual(h["reap"]["signals"], ["SIGTERM", "SIGKILL"])
        self.assertGreaterEqual(took, 0.5)
        self.assertIsNone(self.holder_of(doc, live.pid)["reap"])
        wait_for(lambda: not alive(orphan) and not alive(stubborn), "the orphans to end")
        time.sleep(0.2)
        self.assertIsNone(live.poll(), "a live holder that is not orphaned was signalled")
        # What remains is the live holder: exit status 1, and only it is listed now.
        doc = self.doctor_json(expect=1)
        self.assertEqual([h["pid"] for h in doc["holders"]], [live.pid])
        # Its subreapers collected them.
        reaper.wait(timeout=10)
        reaper2.wait(timeout=10)

    def test_reap_pid_forces_one_and_a_reused_pid_is_not_signalled(self):
        live = self.start_holder()
        start = read_stat(live.pid).start_time
        # The PID as if reused since it was recorded: another start time. Not signalled.
        doc = self.doctor_json("--reap", "--grace", "0.2", "--pid", f"{live.pid}:{start + 7}", expect=1)
        h = self.holder_of(doc, live.pid)
        self.assertEqual(h["reap"]["action"], "refused", h["reap"])
        self.assertEqual(h["reap"]["signals"], [])
        self.assertIn("reused", h["reap"]["detail"])
        self.assertIn("now names another process", h["why"])
        time.sleep(0.2)
        self.assertIsNone(live.poll(), "a PID with another start time was signalled")
        # Named with the right identity (or none): a running holder is ended when named.
        r = self.doctor("--reap", "--grace", "2", "--pid", f"{live.pid}:{start}")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("reap: terminated [SIGTERM]", r.stdout)
        self.assertEqual(live.wait(timeout=10), -signal.SIGTERM)
        # A named process that holds nothing is left alone.
        bystander = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        self.children.append(bystander)
        doc = self.doctor_json("--reap", "--pid", str(bystander.pid), expect=0)
        self.assertEqual(self.holder_of(doc, bystander.pid)["reap"]["action"], "skipped")
        self.assertIsNone(bystander.poll())

    def test_nvml_faked_processes_visibility_and_residue(self):
        live = self.start_holder()
        with open("/proc/sys/kernel/pid_max") as f:
            unseen = int(f.read()) + 5        # no process here can have this PID
        nvml = (f"driver 580.159\n"
                f"device 0 150000000000 500000000 10000000000 Fake H200\n"
                f"device 1 150000000000 500000000 0 Fake H200 (idle)\n"
                f"uuid 1 error\n"
                f"process 0 {live.pid} 4000000000\n"
                f"process 0 {unseen} 5000000000\n"
                f"process 0 {os.getpid()} 500000000\n"
                f"process 0 424242424 na\n")
        doc = self.doctor_json(nvml=nvml, expect=1)
        self.assertTrue(doc["nvml"]["available"])
        self.assertEqual(doc["nvml"]["driver_version"], "580.159")
        self.assertIsNone(doc["nvml"]["note"])
        d0, d1 = doc["devices"]
        self.assertEqual((d0["name"], d0["minor"], d0["used_bytes"], d0["reserved_bytes"]),
                         ("Fake H200", 0, 10000000000, 500000000))
        self.assertEqual(d0["uuid"], "GPU-fa4e0000-0000-4000-8000-000000000000")
        self.assertIsNone(d1["uuid"])  # NVML gave none
        self.assertEqual(d0["process_bytes"], 9500000000)
        self.assertEqual(d0["visible_process_bytes"], 4000000000)
        self.assertEqual(d0["residue_bytes"], 6000000000)
        self.assertEqual(d1["residue_bytes"], 0)
        self.assertEqual(doc["residue_bytes"], 6000000000)
        h = self.holder_of(doc, live.pid)
        self.assertEqual((h["class"], h["gpu_memory_bytes"]), ("running", 4000000000))
        h = self.holder_of(doc, unseen)
        self.assertEqual(h["class"], "not_visible")
        self.assertIsNone(h["state"])
        self.assertEqual(h["gpu_memory_bytes"], 5000000000)
        self.assertIn("NVML reports host PIDs", h["why"])
        # This test's own PID exists here but holds no device file: NVML meant another process.
        h = self.holder_of(doc, os.getpid())
        self.assertEqual(h["class"], "not_visible")
        self.assertIn("another PID namespace", h["why"])
        h = self.holder_of(doc, 424242424)
        self.assertIsNone(h["gpu_memory_bytes"])
        self.assertEqual(h["gpu_memory"], [{"device": 0, "bytes": None}])
        r = self.doctor(nvml=nvml)
        self.assertIn("device 0  Fake H200", r.stdout)
        self.assertIn("residue 5.59 GiB", r.stdout)
        self.assertIn("(not in this PID namespace)", r.stdout)
        # With --pid, the devices still count every process.
        doc = self.doctor_json("--pid", str(live.pid), nvml=nvml, expect=1)
        self.assertEqual([h["pid"] for h in doc["holders"]], [live.pid])
        self.assertEqual(doc["devices"][0]["residue_bytes"], 6000000000)

    def test_nvml_process_list_retry_protocol(self):
        # The fake answers NVML_ERROR_INSUFFICIENT_SIZE until given room for every process.
        procs = "".join(f"process 0 {4194304 + 100 + i} {i + 1}\n" for i in range(40))
        doc = self.doctor_json(nvml="device 0 1000 0 900 Fake\n" + procs, expect=1)
        self.assertEqual(len(doc["holders"]), 40)
        self.assertEqual(doc["devices"][0]["process_bytes"], sum(range(1, 41)))

    def test_watch_reports_the_residue_trend(self):
        for used, trend in (("3221225472,2147483648,1073741824", "shrinking"),
                            ("1073741824,1073741824,5368709120", "growing"),
                            ("1073741824,1073741824,1073741900", "steady")):
            with self.subTest(trend=trend):
                nvml = f"device 0 150000000000 0 {used} Fake\n"
                started = time.monotonic()
                docs = self.doctor_json("--watch", "0.1", "--count", "3", nvml=nvml)
                self.assertGreaterEqual(time.monotonic() - started, 0.2)
                self.assertEqual([d["watch"]["sample"] for d in docs], [1, 2, 3])
                self.assertEqual(docs[0]["watch"]["residue_trend"], "unknown")
                last = docs[-1]["watch"]
                self.assertEqual(last["residue_trend"], trend)
                values = [int(v) for v in used.split(",")]
                self.assertEqual((last["residue_first_bytes"], last["residue_last_bytes"]), (values[0], values[-1]))
                self.assertEqual((last["residue_min_bytes"], last["residue_max_bytes"]), (min(values), max(values)))
                self.assertEqual(last["count"], 3)
                self.assertGreaterEqual(last["elapsed_s"], 0.2)
        nvml = "device 0 150000000000 0 3221225472,2147483648,1073741824 Fake\n"
        r = self.doctor("--watch", "0.05", "--count", "3", nvml=nvml)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("sample 3/3", r.stdout)
        self.assertIn("residue shrinking: 3.00 GiB -> 1.00 GiB", r.stdout)
        # Without NVML the trend is unknown, and the holders are still counted.
        live = self.start_holder()
        r = self.doctor("--watch", "0.05", "--count", "2")
        self.assertEqual(r.returncode, 1)
        self.assertIn("holders 1 -> 1; residue unknown (no NVML)", r.stdout)
        live.kill()
        # An unbounded watch ends on SIGINT with its summary.
        p = subprocess.Popen([GPUGUARD, "doctor", "--device-prefix", self.prefix, "--watch", "0.05"],
                             stdout=subprocess.PIPE, text=True, env=self.env())
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        self.assertIn("watch: ", out)

    def test_reap_then_watch_the_holders_go(self):
        orphan, reaper = self.make_orphan("subreaper")
        docs = self.doctor_json("--reap", "--grace", "1", "--watch", "0.1", "--count", "3")
        self.assertEqual(self.holder_of(docs[0], orphan)["reap"]["action"], "terminated")
        self.assertEqual(docs[0]["exit_status"], 0)
        self.assertEqual(docs[-1]["holders"], [])
        self.assertIsNone(docs[-1]["reap"], "reaps after the first sample only")
        self.assertEqual((docs[-1]["watch"]["holders_first"], docs[-1]["watch"]["holders_last"]), (1, 0))
        reaper.wait(timeout=10)

    # --- the shapes a job is started in -------------------------------------------------------

    def test_job_from_a_script_without_job_control_main_killed(self):
        # As Slurm batch scripts, CI and Docker entrypoints run a job: the main process is in the
        # script's process group, and the script lives on after it (here: sleeps).
        script, main, workers = self.start_job("$MAIN; sleep 600")
        self.assertEqual(read_stat(main).pgid, script.pid, "the main process is in the script's group")
        doc = self.doctor_json(expect=1)
        self.assertEqual(self.holder_of(doc, main)["class"], "running")
        for w in workers:
            self.assertFalse(self.holder_of(doc, w)["orphaned"], "a live job's worker")
        self.kill_main(main, workers)
        self.assertEqual(read_stat(workers[0]).pgid, script.pid, "the script still leads the workers' group")
        doc = self.doctor_json(expect=1)
        for w in workers:
            h = self.holder_of(doc, w)
            self.assertEqual(h["class"], "orphaned", h["why"])
            self.assertIn(f"whose live leader, PID {script.pid} (", h["why"])
            self.assertIn("is not its ancestor", h["why"])
        doc = self.doctor_json("--reap", "--grace", "2", expect=0)
        self.assertEqual(sorted(h["pid"] for h in doc["holders"] if h["reap"]), sorted(workers))
        for w in workers:
            self.assertEqual(self.holder_of(doc, w)["reap"]["action"], "terminated")
        wait_for(lambda: not any(alive(w) for w in workers), "the workers to end")
        self.assertIsNone(script.poll(), "the script, a live group leader, was signalled")

    def test_job_from_a_shell_with_job_control_main_killed(self):
        # set -m: each job gets a process group of its own, led by its main process.
        script, main, workers = self.start_job("set -m; $MAIN & wait; sleep 600")
        self.assertEqual(read_stat(main).pgid, main, "job control: the main process leads its group")
        self.assertEqual(self.holder_of(self.doctor_json(expect=1), main)["class"], "running")
        self.kill_main(main, workers)
        doc = self.doctor_json(expect=1)
        for w in workers:
            h = self.holder_of(doc, w)
            self.assertEqual(h["class"], "orphaned", h["why"])
            self.assertIn("that group has no live leader", h["why"])
        doc = self.doctor_json("--reap", "--grace", "2", expect=0)
        wait_for(lambda: not any(alive(w) for w in workers), "the workers to end")
        self.assertIsNone(script.poll())

    def test_job_started_with_setsid_main_killed(self):
        # The script is the main process itself (exec), in a session of its own.
        script, main, workers = self.start_job("exec $MAIN")
        self.assertEqual(main, script.pid)
        h = self.holder_of(self.doctor_json(expect=1), main)
        self.assertEqual(h["class"], "running")
        self.assertIn("leads its own process session", h["why"])
        self.kill_main(main, workers)
        script.wait(timeout=10)
        doc = self.doctor_json(expect=1)
        for w in workers:
            self.assertEqual(self.holder_of(doc, w)["class"], "orphaned", self.holder_of(doc, w)["why"])
        self.doctor_json("--reap", "--grace", "2", expect=0)
        wait_for(lambda: not any(alive(w) for w in workers), "the workers to end")

    def test_a_nohup_live_job_whose_script_exited_is_not_orphaned(self):
        # The script starts the job with nohup in the background and exits: the job's main process
        # goes to init, outside a process group with no leader: what the rule once called orphaned.
        script, main, workers = self.start_job("nohup $MAIN > nohup.out 2>&1 & sleep 0.2; cat nohup.out",
                                               mode="nohup")
        script.wait(timeout=10)
        wait_for(lambda: read_stat(main).ppid != script.pid, "the main process to be reparented")
        alone, alone_main, _ = self.start_job("nohup $MAIN > alone.out 2>&1 & sleep 0.2; cat alone.out",
                                              nworkers=0, mode="nohup")
        alone.wait(timeout=10)
        wait_for(lambda: read_stat(alone_main).ppid != alone.pid, "the lone job to be reparented")
        doc = self.doctor_json(expect=1)
        h = self.holder_of(doc, main)
        self.assertEqual(h["class"], "running", h["why"])
        self.assertIn("live children of its own", h["why"])
        for w in workers:
            self.assertEqual(self.holder_of(doc, w)["class"], "running")
        h = self.holder_of(doc, alone_main)
        self.assertEqual(h["class"], "running", h["why"])
        self.assertIn("ignores SIGHUP (nohup)", h["why"])
        doc = self.doctor_json("--reap", "--grace", "0.5", expect=1)
        self.assertEqual([h["pid"] for h in doc["holders"] if h["reap"]], [])
        time.sleep(0.2)
        self.assertTrue(all(alive(p) for p in [main, alone_main, *workers]), "--reap signalled a live job")

    def test_a_double_forked_daemon_is_not_orphaned(self):
        maker = subprocess.Popen([sys.executable, "-c", DAEMON, *self.devices], stdout=subprocess.PIPE, text=True,
                                 cwd=self.dir)
        self.children.append(maker)
        daemon = int(maker.stdout.readline())
        self.orphans.append((daemon, read_stat(daemon).start_time))
        maker.wait(timeout=10)
        wait_for(lambda: read_stat(daemon).ppid != maker.pid, "the daemon to be reparented")
        pgid = read_stat(daemon).pgid
        self.assertNotEqual(pgid, daemon, "it leads nothing")
        h = self.holder_of(self.doctor_json(expect=1), daemon)
        self.assertEqual(h["class"], "running", h["why"])
        self.assertIn("double-forked daemon", h["why"])
        doc = self.doctor_json("--reap", "--grace", "0.5", expect=1)
        self.assertIsNone(self.holder_of(doc, daemon)["reap"])
        time.sleep(0.2)
        self.assertTrue(alive(daemon), "--reap signalled a daemon")

    def test_another_users_orphan_is_never_signalled(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to run processes as two other users")
        os.chmod(self.dir, 0o755)
        for path in self.devices:
            os.chmod(path, 0o666)
        maker = None
        for python in (sys.executable, "/usr/bin/python3"):   # one that UID 65534 may run
            try:
                maker = subprocess.Popen([python, "-c", ORPHAN_MAKER, "init", *self.devices], stdout=subprocess.PIPE,
                                         text=True, start_new_session=True, cwd=self.dir, user=65534, group=65534,
                                         extra_groups=[])
                break
            except PermissionError:
                continue
        if maker is None:
            self.skipTest("no Python interpreter that UID 65534 may run")
        self.children.append(maker)
        orphan = int(maker.stdout.readline())
        self.orphans.append((orphan, read_stat(orphan).start_time))
        maker.wait(timeout=10)
        # Root sees it orphaned; UID 65533 cannot read its descriptors, so NVML's list names it.
        self.assertEqual(self.holder_of(self.doctor_json(expect=1), orphan)["class"], "orphaned")
        nvml = f"device 0 1000000000 0 600000000 Fake GPU\nprocess 0 {orphan} 500000000\n"
        env = self.env(nvml)
        r = subprocess.run([GPUGUARD, "doctor", "--json", "--device-prefix", self.prefix, "--reap", "--grace", "0.5"],
                           capture_output=True, text=True, timeout=60, env=env, user=65533, group=65533,
                           extra_groups=[])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        validate(self, doc)
        h = self.holder_of(doc, orphan)
        self.assertFalse(h["files_readable"])
        self.assertIn("UID 65534, which this user may not signal", h["why"])
        self.assertEqual(h["reap"]["action"], "skipped", h["reap"])
        self.assertEqual(h["reap"]["signals"], [])
        self.assertIn("no permission to signal it", h["reap"]["detail"])
        time.sleep(0.2)
        self.assertTrue(alive(orphan))

    def test_prometheus_textfile(self):
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            self.skipTest("prometheus-client is not installed")
        orphan, reaper = self.make_orphan("subreaper")
        live = self.start_holder()
        # Two devices: the first with the stand-in's UUID, the second one NVML gives none for.
        nvml = (f"device 0 150000000000 500000000 7000000000 Fake \"H200\"\n"
                f"device 1 80000000000 0 0 Fake B\nuuid 1 error\n"
                f"process 0 {orphan} 3000000000\nprocess 0 {live.pid} 1000000000\n")
        out_dir = os.path.join(self.dir, "textfile")
        os.mkdir(out_dir)
        prom = os.path.join(out_dir, "gpuguard.prom")

        def metrics():
            with open(prom) as f:
                text = f.read()
            found = {}
            for family in text_string_to_metric_families(text):
                self.assertEqual(family.type, "gauge", family.name)
                self.assertTrue(family.documentation, family.name)
                for m in family.samples:
                    found[(m.name, tuple(sorted(m.labels.items())))] = m.value
            return found

        r = self.doctor("--prometheus", prom, nvml=nvml)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        m = metrics()
        self.assertEqual(m[("gpuguard_doctor_holders", ())], 2)
        self.assertEqual(m[("gpuguard_doctor_orphans", ())], 1)
        self.assertEqual(m[("gpuguard_doctor_orphan_bytes", ())], 3000000000)
        self.assertEqual(m[("gpuguard_doctor_holders_by_class", (("class", "orphaned"),))], 1)
        self.assertEqual(m[("gpuguard_doctor_holders_by_class", (("class", "running"),))], 1)
        self.assertEqual(m[("gpuguard_doctor_holders_by_class", (("class", "stopped"),))], 0)
        dev = (("device", "0"), ("name", 'Fake "H200"'), ("uuid", "GPU-fa4e0000-0000-4000-8000-000000000000"))
        self.assertEqual(m[("gpuguard_doctor_device_used_bytes", dev)], 7000000000)
        self.assertEqual(m[("gpuguard_doctor_device_total_bytes", dev)], 150000000000)
        self.assertEqual(m[("gpuguard_doctor_device_process_bytes", dev)], 4000000000)
        self.assertEqual(m[("gpuguard_doctor_device_residue_bytes", dev)], 3000000000)
        no_uuid = (("device", "1"), ("name", "Fake B"), ("uuid", "unknown"))
        self.assertEqual(m[("gpuguard_doctor_device_total_bytes", no_uuid)], 80000000000)
        self.assertEqual(m[("gpuguard_doctor_device_residue_bytes", no_uuid)], 0)
        # Every per-device sample names the device by index and UUID; none names the node (the
        # scrape target does).
        for name, labels in m:
            keys = {k for k, _ in labels}
            if name.startswith("gpuguard_doctor_device_"):
                self.assertEqual(keys, {"device", "uuid", "name"}, name)
            self.assertFalse(keys & {"host", "hostname", "node", "instance"}, name)
        self.assertEqual(m[("gpuguard_doctor_nvml_available", ())], 1)
        self.assertEqual(m[("gpuguard_doctor_exit_status", ())], 1)
        self.assertAlmostEqual(m[("gpuguard_doctor_last_sample_timestamp_seconds", ())], time.time(), delta=60)
        self.assertNotIn(("gpuguard_doctor_reap_targets", (("action", "terminated"),)), m)
        self.assertEqual(os.listdir(out_dir), ["gpuguard.prom"], "the temporary file is renamed")
        self.assertEqual(os.stat(prom).st_mode & 0o777, 0o644, "node_exporter may run as another user")

        # Unwritable: a clear line, exit 3, nothing sampled, signalled or written.
        with open(prom) as f:
            before = f.read()
        for bad, says in ((os.path.join(self.dir, "nvidia0", "x.prom"), "Not a directory"),
                          (out_dir, "is a directory"),
                          (os.path.join(self.dir, "no-such-dir", "x.prom"), "No such file or directory")):
            with self.subTest(path=bad):
                self.assert_one_line_error(self.doctor("--reap", "--prometheus", bad, nvml=nvml), 3,
                                           "gpuguard doctor: --prometheus: ", says)
                self.assertTrue(alive(orphan), "--reap acted although --prometheus could not be written")
        with open(prom) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(os.listdir(out_dir), ["gpuguard.prom"])
        r = self.doctor("--prometheus", "", prefix=False)
        self.assertEqual(r.returncode, 2, r.stderr)

        # With --reap: what it did; the later samples of --watch show the orphan gone.
        r = self.doctor("--reap", "--grace", "2", "--prometheus", prom, nvml=nvml)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)   # the live holder remains
        m = metrics()
        self.assertEqual(m[("gpuguard_doctor_reap_targets", (("action", "terminated"),))], 1)
        self.assertEqual(m[("gpuguard_doctor_reap_targets", (("action", "failed"),))], 0)
        reaper.wait(timeout=10)
        r = self.doctor("--prometheus", prom)   # no NVML: no memory figures
        m = metrics()
        self.assertEqual(m[("gpuguard_doctor_orphans", ())], 0)
        self.assertEqual(m[("gpuguard_doctor_holders", ())], 1)
        self.assertEqual(m[("gpuguard_doctor_nvml_available", ())], 0)
        self.assertNotIn(("gpuguard_doctor_orphan_bytes", ()), m)

    def test_schema_rejects_what_it_should(self):
        if not HAVE_JSONSCHEMA:
            self.skipTest("jsonschema is not installed")
        doc = self.doctor_json(expect=0)
        for broken in ({**doc, "version": 2}, {**doc, "extra": 1},
                       {**doc, "holders": [{"pid": 1, "class": "bogus"}]}):
            with self.assertRaises(jsonschema.ValidationError):
                jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


HAVE_JSONSCHEMA = False
SCHEMA = None
try:
    import jsonschema
    HAVE_JSONSCHEMA = True
except ImportError:
    jsonschema = None


def validate(test, doc):
    """Checks a document against the schema where jsonschema is installed (and says so once)."""
    if HAVE_JSONSCHEMA:
        jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    else:
        test.assertEqual((doc["schema"], doc["version"]), ("gpuguard.doctor", 1))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    GPUGUARD, FAKE_NVML, ROOT = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    with open(os.path.join(ROOT, "docs", "schemas", "doctor-v1.schema.json")) as f:
        SCHEMA = json.load(f)
    if HAVE_JSONSCHEMA:
        jsonschema.Draft202012Validator.check_schema(SCHEMA)
    else:
        print("doctor_test: jsonschema is not installed: documents are checked by hand only", file=sys.stderr)
    unittest.main(argv=sys.argv[:1], verbosity=2)
