#!/usr/bin/env python3
"""exit() and SIGTERM racing for the end of the run, in real children (tests/exit/hooks_child.cpp),
each order forced by a cleanup that holds the window open:

  exit_during_signal  SIGTERM's cleanups run on gpuguard's watcher; one of them has another thread
                      call exit(0) and waits until that exit() has reached gpuguard's exit handler
  signal_during_exit  main returns 0; exit()'s first cleanup prints "gate" and waits for a line on
                      stdin, which the test writes after it has sent SIGTERM

Every trial must end by SIGTERM (status 143 in a shell) with each cleanup run exactly once, one
leak report on stderr, the leak JSON written, one `end` line closing the event log, no empty crash
file left, and exit() never going on past gpuguard's handler to the program's own atexit work.
A few more trials of the second order run with leak_exitcode=9: the signal still decides.
GPUGUARD_EXIT_RACE_TRIALS (1 to 50, default 50) sets the trials of each order; each child gets
at most 20 s and is reaped.

usage: exit_race_test.py HOOKS_CHILD
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import abort, check, finish, no_core_dumps, scratch  # noqa: E402  (tests/support)

CHILD = sys.argv[1]
MIB = 1024 * 1024
CHILD_SECONDS = 20
text = os.environ.get("GPUGUARD_EXIT_RACE_TRIALS", "50")
if not text.isdigit() or not 1 <= int(text) <= 50:
    abort("GPUGUARD_EXIT_RACE_TRIALS must be a whole number from 1 to 50, not %r" % text)
TRIALS = int(text)
tmp = scratch("gpuguard-exit-race-")


def read_until(proc, word, deadline, seen):
    """Reads the child's stdout (unbuffered) until a line starts with `word`; False at the deadline
    or end of file."""
    while not any(line.startswith(word) for line in seen[0].split("\n")[:-1]):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            return False
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            return False
        seen[0] += chunk.decode(errors="replace")
    return True


def trial(mode, number, options=""):
    what = "%s%s #%d" % (mode, " " + options if options else "", number)
    base = os.path.join(tmp, "%s-%s-%d" % (mode, options.replace("=", ""), number))
    marker, leaks, log, crash = base + ".marker", base + ".leaks.json", base + ".jsonl", base + ".crash.json"
    env = dict(os.environ, GPUGUARD_OPTIONS="device=host:text_log=off:leak_json=%s:jsonl_log=%s:crash_file=%s%s"
               % (leaks, log, crash, ":" + options if options else ""))
    proc = subprocess.Popen([CHILD, mode, marker], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0, preexec_fn=no_core_dumps)
    deadline = time.monotonic() + CHILD_SECONDS
    seen = [""]
    try:
        if read_until(proc, "ready", deadline, seen):
            if mode == "exit_during_signal":
                proc.send_signal(signal.SIGTERM)
            elif read_until(proc, "gate", deadline, seen):
                proc.send_signal(signal.SIGTERM)
                proc.stdin.write(b"sent\n")
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        check(False, "%s: ended within %d s" % (what, CHILD_SECONDS), seen[0])
    except BrokenPipeError:  # the child is gone already: its status tells
        out, err = proc.communicate()
    err = err.decode(errors="replace")
    detail = "status %s\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, seen[0] + out.decode(errors="replace"), err[-3000:])
    check(proc.returncode == -signal.SIGTERM, "%s: died by SIGTERM (143)" % what, detail)
    marks = []
    if os.path.exists(marker):
        with open(marker) as f:
            marks = f.read().split()
    for mark in ("gate:start", "gate:end", "cleanup:ordinary", "cleanup:safe"):
        check(marks.count(mark) == 1, "%s: %s exactly once" % (what, mark), marks)
    check("exit:went-on" not in marks, "%s: exit() did not go on past gpuguard's end of the run" % what, marks)
    reports = [l for l in err.splitlines() if l.startswith(("[gpuguard] LEAK:", "[gpuguard] no leaks"))]
    check(len(reports) == 1 and reports[0].startswith("[gpuguard] LEAK: 3.0 MiB in 1 allocation "),
          "%s: one leak report on stderr" % what, detail)
    try:
        with open(leaks) as f:
            report = json.load(f)
        check(report["total_bytes"] == 3 * MIB, "%s: the leak JSON lists the 3 MiB" % what, report)
    except (OSError, ValueError) as error:
        check(False, "%s: leak JSON missing or bad: %s" % (what, error), detail)
    try:
        with open(log) as f:
            events = [json.loads(line) for line in f]
    except (OSError, ValueError) as error:
        events = []
        check(False, "%s: the event log is unreadable: %s" % (what, error))
    ends = [e for e in events if e.get("type") == "end"]
    reason = "signal SIGTERM" if mode == "exit_during_signal" else "exit"
    check(len(ends) == 1 and events[-1] is ends[0] and ends[0]["reason"] == reason,
          "%s: one end line, last, reason %r" % (what, reason), ends or events[-2:])
    check(not os.path.exists(crash), "%s: no empty crash file is left" % what)
    if mode == "signal_during_exit":
        check("[gpuguard] SIGTERM received while the exit work runs" in err, "%s: says the signal waits for the "
              "exit work" % what, err[-2000:])


started = time.monotonic()
for mode in ("exit_during_signal", "signal_during_exit"):
    for number in range(1, TRIALS + 1):
        trial(mode, number)
# A signal handed to exit() also wins over the status leak_exitcode would give (9: leaks remain).
for number in range(1, min(TRIALS, 5) + 1):
    trial("signal_during_exit", number, "leak_exitcode=9")
finish("exit_race_test", "(%d trials of each order in %.1f s)" % (TRIALS, time.monotonic() - started))
