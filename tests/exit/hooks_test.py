#!/usr/bin/env python3
"""Exit-path tests, in real child processes (tests/exit/hooks_child.cpp) judged by their exit status
and the files they leave: the marker file their cleanups append to, the JSON leak report, the
JSONL log's end line, and the crash record.

usage: hooks_test.py HOOKS_CHILD HOOKS_CHILD_MALLOC_TRAP|- REPO_ROOT GPUGUARD_CLI
"""
import json
import re
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, line_of, no_core_dumps, scratch  # noqa: E402  (tests/support)
from procfs import alive, wait_until  # noqa: E402

CHILD, TRAP_CHILD, ROOT, CLI = sys.argv[1:5]
# Set by a sanitizer build's test (scripts/sanitize.sh): "address,undefined" or "thread".
SANITIZE = os.environ.get("GPUGUARD_TEST_SANITIZE", "")
MIB = 1024 * 1024
tmp = scratch("gpuguard-hooks-")
counter = [0]


class Run:
    """One child: started, waited for its "ready" line, then ended by the test."""

    def __init__(self, mode, arg=None, options="", binary=CHILD, tsan_options=""):
        counter[0] += 1
        base = os.path.join(tmp, "%s-%s-%d" % (mode, arg or "", counter[0]))
        self.marker, self.leaks, self.log, self.crash = (base + ".marker", base + ".leaks.json",
                                                         base + ".jsonl", base + ".crash.json")
        opts = ("device=host:stacks=all:text_log=off:leak_json=%s:jsonl_log=%s:crash_file=%s"
                % (self.leaks, self.log, self.crash))
        env = dict(os.environ, GPUGUARD_OPTIONS=opts + (":" + options if options else ""))
        if tsan_options and SANITIZE == "thread":
            env["TSAN_OPTIONS"] = (env.get("TSAN_OPTIONS", "") + ":" + tsan_options).lstrip(":")
        argv = [binary, mode, self.marker] + ([arg] if arg else [])
        self.what = " ".join(argv[1:2] + argv[3:])
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, preexec_fn=no_core_dumps)
        self.lines = []
        self.ready_at = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.strip())
            if line.startswith("ready"):
                self.ready_at = time.monotonic()
                break

    def send(self, sig):
        os.kill(self.proc.pid, sig)

    def finish(self, timeout=30):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            check(False, "%s: did not end within %d s" % (self.what, timeout))
        self.ended_at = time.monotonic()
        self.status, self.stdout, self.stderr = self.proc.returncode, out, err
        return self

    def markers(self):
        if not os.path.exists(self.marker):
            return []
        with open(self.marker) as f:
            return f.read().split()

    def leak_report(self):
        with open(self.leaks) as f:
            return json.load(f)

    def end_line(self):
        with open(self.log) as f:
            lines = [json.loads(l) for l in f]
        return lines[-1] if lines and lines[-1]["type"] == "end" else None

    def crash_records(self):
        if not os.path.exists(self.crash):
            return []
        with open(self.crash) as f:
            lines = [l for l in f if l.strip()]
        try:
            return [json.loads(l) for l in lines]
        except ValueError as error:
            check(False, "%s: the crash record does not parse: %s" % (self.what, error), "".join(lines)[:3000])
            return []


def died_by(run, sig):
    return check(run.status == -sig, "%s: died by %s" % (run.what, signal.Signals(sig).name),
                 "status %s\nstderr:\n%s" % (run.status, run.stderr[-3000:]))


def cleanups_once(run, ordinary=True):
    expected = ["cleanup:safe"] + (["cleanup:ordinary"] if ordinary else [])
    marks = run.markers()
    for mark in expected:
        check(marks.count(mark) == 1, "%s: %s ran exactly once" % (run.what, mark), marks)
    if not ordinary:
        check("cleanup:ordinary" not in marks, "%s: ordinary cleanups do not run on a crash" % run.what, marks)


def report_lists_live(run):
    try:
        report = run.leak_report()
    except (OSError, ValueError) as error:
        check(False, "%s: leak report missing or bad: %s" % (run.what, error), run.stderr[-2000:])
        return
    check(report["total_bytes"] == 3 * MIB and report["total_count"] == 1,
          "%s: the report lists the 3 MiB that were live" % run.what, report)


def crash_record(run, sig):
    records = run.crash_records()
    if not check(len(records) == 1, "%s: one crash record" % run.what, records):
        return None
    record = records[0]
    check(record["schema"] == "gpuguard.crash" and record["version"] == 1, "%s: crash record schema" % run.what, record)
    check(record["signal"] == sig and record["signal_name"] == signal.Signals(sig).name,
          "%s: the record names the signal" % run.what, record)
    check(len(record["frames"]) >= 3 and all(f.startswith("0x") for f in record["frames"]),
          "%s: raw frames" % run.what, record["frames"])
    host = [d for d in record["devices"] if d["device"] == -1]
    check(host and host[0]["live_bytes"] == 3 * MIB and host[0]["live_count"] == 1,
          "%s: live bytes per device" % run.what, record["devices"])
    check(record["sites"] and record["sites"][0]["bytes"] == 3 * MIB and record["sites"][0]["site"] > 0,
          "%s: top live site by id" % run.what, record["sites"])
    check(any(CHILD_NAME in m for m in record["mappings"]), "%s: executable mappings" % run.what, record["mappings"][:3])
    check("[gpuguard] CRASH: %s" % signal.Signals(sig).name in run.stderr, "%s: the record is on stderr too" % run.what,
          run.stderr[-2000:])
    check("crash record written to %s; resolve its frames with: gpuguard symbolize %s" % (run.crash, run.crash)
          in run.stderr, "%s: the hint names the record's path" % run.what, run.stderr[-2000:])
    # The event log has the crash, written by the handler itself (the writer thread may still flush
    # earlier events after it while a hung handler keeps the process alive: order is by "t").
    try:
        with open(run.log) as f:
            events = [json.loads(line) for line in f]
    except (OSError, ValueError) as error:
        events = []
        check(False, "%s: the event log is unreadable: %s" % (run.what, error))
    crashes = [e for e in events if e.get("type") == "crash"]
    last = crashes[0] if len(crashes) == 1 else {}
    check(last.get("type") == "crash" and last.get("signal") == signal.Signals(sig).name and
          last.get("crash_file") == run.crash and last.get("frames") and
          any(d["device"] == -1 and d["live_bytes"] == 3 * MIB for d in last.get("devices", [])),
          "%s: the event log has one crash line, with what was live" % run.what, crashes or events[-2:])
    check(sum(1 for e in events if e.get("type") == "end") == 0, "%s: no end line after a crash" % run.what)
    return record


CHILD_NAME = os.path.basename(CHILD)

# ---- normal exit: status kept, cleanups once, report written --------------------------------------
run = Run("exit", "7").finish()
check(run.status == 7, "exit 7 keeps its status", run.status)
cleanups_once(run)
report_lists_live(run)
end = run.end_line()
check(end and end["reason"] == "exit", "the log ends with reason exit", end)
check(not os.path.exists(run.crash), "an unused crash file is removed at a normal exit")

# ---- SIGINT, SIGTERM, SIGHUP, SIGQUIT: cleanups, report, then death by the same signal ------------
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    run = Run("signal")
    run.send(sig)
    run.finish()
    died_by(run, sig)
    cleanups_once(run)
    report_lists_live(run)
    end = run.end_line()
    check(end and end["reason"] == "signal " + sig.name, "%s: the log's end line names the signal" % sig.name, end)
    check("%s received" % sig.name in run.stderr, "%s: says what it does" % sig.name, run.stderr[-1000:])
    check(not os.path.exists(run.crash), "%s: no empty crash file is left" % sig.name)

# Without the hooks the same signal ends the process with nothing run: the tests above can fail.
run = Run("signal", options="hooks=0")
run.send(signal.SIGTERM)
run.finish()
died_by(run, signal.SIGTERM)
check(run.markers() == [], "hooks=0: no cleanup runs", run.markers())

# ---- fatal signals: the crash record, signal-safe cleanups only, the default action ---------------
# A sanitizer build passes "-" for the malloc-trapping child: the sanitizer owns malloc there.
if TRAP_CHILD == "-":
    print("hooks_test: the malloc-trapping child is left out (sanitizer build)")
for binary in [b for b in (CHILD, TRAP_CHILD) if b != "-"]:
    for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT):
        run = Run("crash", sig.name, binary=binary).finish()
        if binary == TRAP_CHILD:
            check("MALLOC IN CRASH HANDLER" not in run.stderr and run.status != 99,
                  "%s: no heap allocation inside the crash handler" % sig.name, run.stderr[-2000:])
        died_by(run, sig)
        cleanups_once(run, ordinary=False)
        record = crash_record(run, sig)
        if record and sig == signal.SIGSEGV and binary == CHILD:
            check(record["address"] == "0x0", "SIGSEGV: the fault address", record["address"])
            # Symbols are resolved afterwards, outside the crashed process.
            segv_line = line_of(os.path.join(ROOT, "tests", "exit", "hooks_child.cpp"), "CRASH-SEGV-LINE")
            symbolized = subprocess.run([CLI, "symbolize", run.crash], capture_output=True, text=True, timeout=60)
            check(symbolized.returncode == 0, "gpuguard symbolize exits 0", symbolized.stderr)
            first = symbolized.stdout.split("frames:\n")[-1].splitlines()[:1]
            check(first and re.search(r" at \S*hooks_child\.cpp:%d \(%s\+0x[0-9a-f]+\)$" % (segv_line, re.escape(CHILD_NAME)),
                                      first[0]),
                  "the faulting frame resolves to hooks_child.cpp:%d" % segv_line, symbolized.stdout)
            check("live on host memory: 3145728 bytes in 1 allocations" in symbolized.stdout,
                  "symbolize shows the live memory", symbolized.stdout)

# ---- a second SIGTERM during a slow cleanup ends the process at once -----------------------------
run = Run("slow_cleanup")
run.send(signal.SIGTERM)
deadline = time.monotonic() + 10
while "slow:start" not in run.markers() and time.monotonic() < deadline:
    time.sleep(0.01)
second = time.monotonic()
run.send(signal.SIGTERM)
run.finish()
died_by(run, signal.SIGTERM)
check(run.ended_at - second < 2.0, "a second SIGTERM ends the process at once", run.ended_at - second)
check(run.markers().count("slow:start") == 1 and "slow:end" not in run.markers(),
      "the slow cleanup was cut short", run.markers())
check(not os.path.exists(run.crash), "a second SIGTERM leaves no empty crash file")

# ---- a fault inside a cleanup: crash record, the signal-safe cleanup once -------------------------
run = Run("faulting_cleanup")
run.send(signal.SIGTERM)
run.finish()
died_by(run, signal.SIGSEGV)
check(run.markers().count("faulting:start") == 1, "the faulting cleanup ran once", run.markers())
check(run.markers().count("cleanup:safe") == 1, "the signal-safe cleanup ran once", run.markers())
check(len(run.crash_records()) == 1, "the fault in a cleanup leaves a crash record", run.stderr[-2000:])

# ---- a handler that hangs: the watchdog ends the process within 3 s, by the same signal -----------
# ThreadSanitizer delivers asynchronous signals at its interceptors only: the watchdog's SIGALRM
# never reaches a handler hung in pause(), so this case is left to the other builds.
if SANITIZE == "thread":
    print("hooks_test: the hung-handler watchdog is left out (ThreadSanitizer defers SIGALRM)")
else:
    run = Run("hanging_handler", "SIGSEGV").finish(timeout=20)
    died_by(run, signal.SIGSEGV)
    elapsed = run.ended_at - run.ready_at
    check(2.5 <= elapsed <= 8.0, "the watchdog ended the hung handler after about 3 s", elapsed)
    check("user-handler:hang" in run.markers(), "the program's own handler was chained", run.markers())
    check("did not finish within 3 s" in run.stderr, "the watchdog says so", run.stderr[-1000:])
    crash_record(run, signal.SIGSEGV)

# ---- two threads faulting at once: one record ----------------------------------------------------
run = Run("two_threads").finish()
died_by(run, signal.SIGSEGV)
check(run.stderr.count("[gpuguard] CRASH:") == 1, "one crash report on stderr", run.stderr[-2000:])
crash_record(run, signal.SIGSEGV)

# ---- an uncaught exception from a thread: logged, cleanups, report, then abort --------------------
run = Run("throw_in_thread").finish()
died_by(run, signal.SIGABRT)
check("[gpuguard] std::terminate: uncaught exception of type std::runtime_error: data loader failed: shard 7 is corrupt"
      in run.stderr, "the exception's type and what() are logged", run.stderr[-2000:])
check("live at terminate on host memory: 3.0 MiB in 1 allocations" in run.stderr, "the live ledger is logged",
      run.stderr[-2000:])
cleanups_once(run)
report_lists_live(run)
end = run.end_line()
check(end and end["reason"] == "terminate", "the log's end line says terminate", end)
# Reported once: the abort() that ends the terminate path is not a crash to record again.
check("[gpuguard] CRASH" not in run.stderr, "an uncaught exception is not reported again as a crash",
      run.stderr[-2000:])
check(not os.path.exists(run.crash), "an uncaught exception leaves no crash file")
with open(run.log) as f:
    check(not any(json.loads(l).get("type") == "crash" for l in f), "an uncaught exception: no crash line in the log")
check(sum(1 for l in run.stderr.splitlines() if l.startswith("[gpuguard] LEAK:")) == 1,
      "an uncaught exception: one leak report", run.stderr[-2000:])

# ---- exit() from another thread while memory is live ----------------------------------------------
run = Run("exit_from_thread").finish()
check(run.status == 5, "exit(5) from a thread keeps its status", run.status)
cleanups_once(run)
report_lists_live(run)

# ---- handlers the program installed first are kept ------------------------------------------------
# The program's SIGTERM handler calls exit(), so gpuguard's exit work runs inside a signal handler:
# that is the program's own signal-unsafe call, which ThreadSanitizer is told not to report here.
run = Run("user_handlers", tsan_options="report_signal_unsafe=0")
run.send(signal.SIGTERM)
run.finish()
check(run.status == 3, "the program's own SIGTERM handler ran (it exits 3)", run.status)
check(run.markers().count("user-handler:term") == 1, "the program's SIGTERM handler was called", run.markers())
cleanups_once(run)
run = Run("user_handlers", "SIGSEGV").finish()
died_by(run, signal.SIGSEGV)
check(run.markers().count("user-handler:segv") == 1, "the program's SIGSEGV handler was chained", run.markers())
crash_record(run, signal.SIGSEGV)

# ---- children started with gpuguard::spawn end with their parent ----------------------------------
def gone_within(pid, seconds):
    return wait_until(lambda: not alive(pid), seconds, step=0.02)


for how in ("exit", "SIGTERM", "SIGKILL"):
    run = Run("children", "exit" if how == "exit" else None)
    child = int(next(l for l in run.lines if l.startswith("child")).split()[1])
    if how != "exit":  # with "exit" the parent may already be gone, and the child with it
        check(alive(child), "%s: the child runs" % how)
    if how == "SIGTERM":
        run.send(signal.SIGTERM)
    elif how == "SIGKILL":
        run.send(signal.SIGKILL)
    run.finish()
    check(gone_within(child, 3), "%s: the child is gone with its parent" % how)
    if alive(child):
        os.kill(child, signal.SIGKILL)

# ---- fork(): a worker gets none of the parent's exit work ------------------------------------------
# The parent (3 MiB live, a cleanup of each kind, a helper started with gpuguard::spawn) forks a
# worker that frees its copy of the 3 MiB, allocates 1 MiB of its own, registers cleanups of its
# own, then exits or crashes. Only the parent's exit runs the parent's cleanups and reports.
# Under ThreadSanitizer the worker's exit starts no watchdog thread (cleanup_timeout=0): TSan cannot
# follow a thread started after a threaded process forked ("dup thread").
for how in ("exit", "crash"):
    run = Run("fork", how, options="cleanup_timeout=0" if SANITIZE == "thread" else "")
    what = "fork, worker %s" % ("exits" if how == "exit" else "crashes")
    helper = int(next(l for l in run.lines if l.startswith("child")).split()[1])
    check("helper running 1" in run.lines, "%s: the parent's spawned helper outlives the worker" % what, run.lines)
    run.finish()
    check(run.status == 0, "%s: the parent exits 0" % what, "status %s\n%s" % (run.status, run.stderr[-3000:]))
    worker = next((l for l in run.lines if l.startswith("worker before")), "")
    check(worker == "worker before 0 after %d live 1 misuse 0" % MIB,
          "%s: the worker's ledger starts empty, holds its own 1 MiB, and its frees of the parent's memory "
          "are not misuse" % what, worker)
    check("error:" not in run.stderr, "%s: no misuse reported" % what, run.stderr[-3000:])
    status = int(next((l for l in run.lines if l.startswith("worker status")), "worker status -1").split()[2])
    if how == "exit":
        check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "%s: the worker exits 0" % what, status)
    else:
        check(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV, "%s: the worker dies by SIGSEGV" % what,
              status)
    marks = run.markers()
    for mark in ("cleanup:ordinary", "cleanup:safe"):
        check(marks.count(mark) == 1, "%s: the parent's %s ran once, in the parent" % (what, mark), marks)
    if how == "exit":
        check(marks.count("cleanup:worker") == 1 and marks.count("cleanup:worker-safe") == 1,
              "%s: the worker's own cleanups ran once" % what, marks)
    else:
        check(marks.count("cleanup:worker-safe") == 1 and "cleanup:worker" not in marks,
              "%s: the worker's own signal-safe cleanup ran, its ordinary one did not" % what, marks)
        check(run.stderr.count("[gpuguard] CRASH: SIGSEGV") == 1, "%s: one crash report, the worker's" % what,
              run.stderr[-3000:])
        check("live on host memory: %d bytes (1 MiB) in 1 allocations" % MIB in run.stderr,
              "%s: the worker's crash report shows only its own memory" % what, run.stderr[-3000:])
        check(run.crash_records() == [], "%s: the worker's record is not written into the parent's crash file" % what)
    reports = [l for l in run.stderr.splitlines() if l.startswith(("[gpuguard] LEAK:", "[gpuguard] no leaks"))]
    check(len(reports) == 1 and reports[0].startswith("[gpuguard] LEAK: 3.0 MiB in 1 allocation "),
          "%s: one leak report, the parent's" % what, run.stderr[-3000:])
    try:
        report = run.leak_report()
        check(report["pid"] == run.proc.pid and report["total_bytes"] == 3 * MIB,
              "%s: leak_json is the parent's" % what, report)
    except (OSError, ValueError) as error:
        check(False, "%s: leak report missing or bad: %s" % (what, error))
    end = run.end_line()
    check(end and end["reason"] == "exit", "%s: the log ends with the parent's exit" % what, end)
    check(gone_within(helper, 3), "%s: the helper is gone with the parent" % what)
    if alive(helper):
        os.kill(helper, signal.SIGKILL)

# ---- fork-like calls that run no atfork handler: _Fork, syscall(SYS_fork), clone -------------------
# The same parent as above; the worker is made by a call that runs none of fork()'s child handlers,
# so its copy of the library's state is its parent's (the pid recorded at load differs from its
# own). It exits (exit(0): the atexit work runs), crashes (SIGSEGV) or sends itself SIGTERM; with
# cleanup_timeout=0 a worker that tried to join the parent's writer thread would hang for ever.
# ThreadSanitizer does not follow a process it did not see fork. AddressSanitizer cannot tell the
# clone worker's own small stack from a bad one, and warns at its every exit path.
fork_like_calls = ["_Fork", "sys_fork", "clone"]
if SANITIZE == "thread":
    print("hooks_test: the fork-like calls are left out (ThreadSanitizer does not follow them)")
    fork_like_calls = []
elif SANITIZE:
    print("hooks_test: the clone worker is left out (AddressSanitizer does not know its stack)")
    fork_like_calls.remove("clone")
for call in fork_like_calls:
    for how, sig in (("exit", None), ("crash", signal.SIGSEGV), ("term", signal.SIGTERM)):
        run = Run("fork_like", "%s+%s" % (call, how), options="cleanup_timeout=0")
        what = "%s, worker %s" % (call, how)
        if any(l.startswith("unsupported") for l in run.lines):
            run.finish()
            print("hooks_test: %s is not available in this C library: left out" % call)
            break
        helper = int(next(l for l in run.lines if l.startswith("child")).split()[1])
        run.finish(timeout=20)
        check(run.status == 0, "%s: the parent exits 0" % what, "status %s\n%s" % (run.status, run.stderr[-3000:]))
        check("helper running 1" in run.lines, "%s: the parent's spawned helper outlives the worker" % what, run.lines)
        status = int(next((l for l in run.lines if l.startswith("worker status")), "worker status -1").split()[2])
        if sig is None:
            check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "%s: the worker exits 0" % what, status)
        else:
            check(os.WIFSIGNALED(status) and os.WTERMSIG(status) == sig,
                  "%s: the worker dies by %s" % (what, sig.name), status)
        took = int(next((l for l in run.lines if l.startswith("worker ms")), "worker ms 999999").split()[2])
        check(took < 5000, "%s: the worker ends promptly (cleanup_timeout=0)" % what, took)
        marks = run.markers()
        check(marks.count("cleanup:ordinary") == 1 and marks.count("cleanup:safe") == 1,
              "%s: the parent's cleanups ran once, in the parent" % what, marks)
        check("[gpuguard] CRASH" not in run.stderr and "received" not in run.stderr,
              "%s: the worker's exit paths wrote nothing of gpuguard's" % what, run.stderr[-3000:])
        check(not os.path.exists(run.crash), "%s: nothing in the parent's crash file (removed unused)" % what)
        try:
            with open(run.log) as f:
                events = [json.loads(line) for line in f]
        except (OSError, ValueError) as error:
            events = []
            check(False, "%s: the event log is unreadable: %s" % (what, error))
        check(not any(e.get("type") == "crash" for e in events), "%s: no crash line in the parent's log" % what)
        ends = [e for e in events if e.get("type") == "end"]
        check(len(ends) == 1 and ends[0]["reason"] == "exit" and events[-1] is ends[0],
              "%s: the log ends once, with the parent's exit" % what, ends)
        reports = [l for l in run.stderr.splitlines() if l.startswith(("[gpuguard] LEAK:", "[gpuguard] no leaks"))]
        check(len(reports) == 1 and reports[0].startswith("[gpuguard] LEAK: 3.0 MiB in 1 allocation "),
              "%s: one leak report, the parent's" % what, run.stderr[-3000:])
        try:
            check(run.leak_report()["pid"] == run.proc.pid, "%s: leak_json is the parent's" % what)
        except (OSError, ValueError) as error:
            check(False, "%s: leak report missing or bad: %s" % (what, error))
        check(gone_within(helper, 3), "%s: the helper is gone with the parent" % what)
        if alive(helper):
            os.kill(helper, signal.SIGKILL)

# ---- quick_exit: the event log flushed, nothing else; no crash file left ----------------------------
run = Run("quick_exit", "100").finish()
check(run.status == 4, "quick_exit(4) keeps its status", run.status)
check(run.markers() == [], "quick_exit runs no cleanups", run.markers())
check(not os.path.exists(run.crash), "quick_exit leaves no empty crash file")
try:
    with open(run.log) as f:
        events = [json.loads(line) for line in f]
except (OSError, ValueError) as error:
    events = []
    check(False, "quick_exit: the event log is unreadable: %s" % error)
allocs = sum(1 for e in events if e["type"] == "alloc") + sum(e.get("allocs", 0) for e in events if e["type"] == "mem_step")
check(allocs == 101, "quick_exit: every allocation made before it reached the event log", allocs)
check(not any(e["type"] == "end" for e in events), "quick_exit: no end line (the exit work does not run)")

# ---- a hung cleanup is cut off after cleanup_timeout, and the status is kept ----------------------
for how, expected in (("exit", 7), ("signal", -signal.SIGTERM), ("throw", -signal.SIGABRT)):
    run = Run("hung_cleanup", how, options="cleanup_timeout=1")
    if how == "signal":
        run.send(signal.SIGTERM)
    run.finish(timeout=20)
    what = "hung cleanup, %s" % how
    check(run.status == expected, "%s: ends with the status it was going to have (%s)" % (what, expected),
          "status %s\n%s" % (run.status, run.stderr[-3000:]))
    elapsed = run.ended_at - run.ready_at
    check(0.8 <= elapsed <= 6.0, "%s: ended about 1 s after the exit work began" % what, elapsed)
    ending = "with status 7" if how == "exit" else "by signal %d" % -expected
    check("[gpuguard] cleanup 'stuck checkpoint' did not finish within cleanup_timeout=1 s: ending the process %s"
          % ending in run.stderr, "%s: says which cleanup hung" % what, run.stderr[-3000:])
    check(run.markers().count("stuck:start") == 1, "%s: the stuck cleanup had started" % what, run.markers())
    check(not os.path.exists(run.crash), "%s: no empty crash file is left" % what)

# The control: cleanup_timeout=0 waits for ever (the test ends it).
run = Run("hung_cleanup", "exit", options="cleanup_timeout=0")
try:
    run.proc.wait(timeout=2.5)
    check(False, "cleanup_timeout=0: the process waits for its hung cleanup", run.proc.returncode)
except subprocess.TimeoutExpired:
    run.proc.kill()
run.finish()

# symbolize: bad input gets clear errors.
bad = subprocess.run([CLI, "symbolize", os.path.join(tmp, "missing.json")], capture_output=True, text=True)
check(bad.returncode == 1 and "cannot read" in bad.stderr and "missing.json" in bad.stderr, "symbolize: a missing file", bad.stderr)
not_crash = os.path.join(tmp, "not-a-crash.json")
with open(not_crash, "w") as f:
    f.write('{"schema":"gpuguard.leaks"}\n{broken\n')
bad = subprocess.run([CLI, "symbolize", not_crash], capture_output=True, text=True)
check(bad.returncode == 1 and ":1: not a gpuguard crash record" in bad.stderr and ":2: not a gpuguard crash record: " in bad.stderr,
      "symbolize: lines that are not crash records are named", bad.stderr)
bad = subprocess.run([CLI, "symbolize"], capture_output=True, text=True)
check(bad.returncode == 2 and "usage:" in bad.stderr, "symbolize: no file is a usage error", bad.stderr)
bad = subprocess.run([CLI, "symbolize", "--frobnicate", "x"], capture_output=True, text=True)
check(bad.returncode == 2 and "unknown option '--frobnicate'" in bad.stderr, "symbolize: unknown option", bad.stderr)
bad = subprocess.run([CLI, "symbolize", "a.json", "b.json"], capture_output=True, text=True)
check(bad.returncode == 2 and "unexpected argument 'b.json'" in bad.stderr and len(bad.stderr.splitlines()) == 1,
      "symbolize: one crash file at a time", bad.stderr)
bad = subprocess.run([CLI, "symbolize", "a.json", "--addr2line"], capture_output=True, text=True)
check(bad.returncode == 2 and "'--addr2line' needs a value" in bad.stderr, "symbolize: --addr2line needs a path", bad.stderr)
helped = subprocess.run([CLI, "symbolize", "--help"], capture_output=True, text=True)
check(helped.returncode == 0 and helped.stdout.startswith("usage: gpuguard symbolize CRASH_FILE") and "--addr2line" in helped.stdout
      and "exit status" in helped.stdout, "symbolize --help: usage, options, exit status", helped.stdout)

# Found by cli.symbolize_fuzz and while factoring its reader out: a mapping path holding a NUL cut
# the addr2line command short (sh then complained on stderr), a field holding a newline split a
# frame's line in two, and a function name longer than 4095 bytes was read as a name and a
# location. A stand-in addr2line answers every address with a 5000-byte name.
fake_addr2line = os.path.join(tmp, "addr2line")
with open(fake_addr2line, "w") as f:
    f.write("#!/bin/sh\nshift 5\nfor a in \"$@\"; do echo \"$a\"; head -c 5000 /dev/zero | tr '\\0' f; echo; "
            "echo /src/long.cpp:7; done\n")
os.chmod(fake_addr2line, 0o755)
damaged = os.path.join(tmp, "damaged.crash.json")
with open(damaged, "w") as f:
    f.write(json.dumps(dict(schema="gpuguard.crash", version=1, pid=1, thread=1, signal_name="SIG\nSEGV", address="0x0",
                            frames=["0x401005", "0x7f0000001010"], devices=[],
                            mappings=["00400000-00403000 r-xp 00000000 08:01 42 /opt/prog",
                                      "7f0000001000-7f0000002000 r-xp 00000000 08:01 43 /opt/x\0'; touch /tmp/no"])) + "\n")
out = subprocess.run([CLI, "symbolize", damaged, "--addr2line", fake_addr2line], capture_output=True, text=True)
check(out.returncode == 0 and out.stderr == "", "symbolize: a damaged record is printed quietly", out.stderr)
check(out.stdout.splitlines()[:2] == ["SIG\\x0aSEGV in thread 1 of process 1, fault address 0x0", "frames:"],
      "symbolize: a newline in a field is printed escaped", out.stdout[:300])
check(out.stdout.splitlines()[2:] == ["  #0 0x401005 %s at /src/long.cpp:7 (prog+0x1005)" % ("f" * 5000),
                                      "  #1 0x7f0000001010 ??"],
      "symbolize: a long name is one name; the mapping with a NUL in its path is left out",
      out.stdout[:300] + "..." + out.stdout[-300:])

finish("hooks_test")
