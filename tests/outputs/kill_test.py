#!/usr/bin/env python3
"""SIGKILL at a random moment of a process writing the event log and the trace
(tests/outputs/ops_child.cpp, mode `endless`): what is left must read by the rules of
docs/formats.md ("After SIGKILL or a crash").

- The event log: every line that ends with a newline is one JSON object (the first a `start`); only
  a last line without its newline may be cut, and `gpuguard report` reads the log with that line
  skipped and named as cut (exit status 0).
- The trace: empty (killed before the first write), or `[` and then one event a line, from the
  second on led by a comma, and `]` last when the process finished; only a last line without its
  newline may be cut. Those lines, the cut one dropped and a `]` added where it is missing, are a
  JSON array of events.

Trials: GPUGUARD_KILL_TRIALS (default 50, 1..500); the whole test stops starting trials after
120 s, and every child is killed and reaped before the next starts.

usage: kill_test.py OPS_CHILD GPUGUARD_CLI
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, no_core_dumps, say, scratch  # noqa: E402  (tests/support)

CHILD, CLI = sys.argv[1], sys.argv[2]
TRIALS = min(max(int(os.environ.get("GPUGUARD_KILL_TRIALS", "50")), 1), 500)
BUDGET_S = 120.0
no_core_dumps()
tmp = scratch("gpuguard-kill-")
rng = random.Random(int(os.environ.get("GPUGUARD_KILL_SEED", str(int(time.time())))))


def split_lines(data):
    """The lines that end with a newline, and the rest after the last newline (b"" if none)."""
    whole, _, rest = data.rpartition(b"\n")
    return (whole.split(b"\n") if whole or data.startswith(b"\n") else []), rest


def read_log(data, where):
    lines, rest = split_lines(data)
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except ValueError as error:
            return check(False, f"{where}:{number} (a whole line) is JSON", f"{error}: {line[:200]!r}")
        if number == 1 and not check(event.get("type") == "start", f"{where}: the first line is `start`", line[:200]):
            return False
    return True


def read_trace(data, where):
    """The events by the documented rule, or None where the file breaks it."""
    if not data:
        return []  # killed before the first write
    lines, rest = split_lines(data)
    if not check(lines[:1] == [b"["], f"{where}: the first line is `[`", data[:80]):
        return None
    closed = lines[-1:] == [b"]"] and len(lines) > 1 and rest == b""  # finished: the last line is `]`
    if closed:
        lines = lines[:-1]
    events = []
    for number, line in enumerate(lines[1:], 2):
        text = line[1:] if number > 2 and line.startswith(b",") else line
        if number > 2 and not line.startswith(b","):
            check(False, f"{where}:{number} is led by its comma", line[:200])
            return None
        try:
            events.append(json.loads(text))
        except ValueError as error:
            check(False, f"{where}:{number} (a whole line) is one event", f"{error}: {line[:200]!r}")
            return None
    repaired = b"\n".join(lines) + b"\n]\n"  # the `]` a finished trace has, or the one a kill left out
    try:
        loaded = json.loads(repaired)
    except ValueError as error:
        check(False, f"{where}: the whole lines and a `]` are a JSON array", error)
        return None
    check(loaded == events, f"{where}: the array holds the same events")
    return events


options_of = lambda n: ":".join([  # noqa: E731
    "device=host", "host_capacity=1G", "sample_ms=2",
    "jsonl_log=" + os.path.join(tmp, f"events{n}.jsonl"), "trace_file=" + os.path.join(tmp, f"trace{n}.json"),
])

started = time.monotonic()
done = cut_logs = cut_traces = empty_traces = unopened = 0
for trial in range(TRIALS):
    if time.monotonic() - started > BUDGET_S:
        say(f"the time budget ({BUDGET_S:.0f} s) ended the trials after {done}")
        break
    log, trace = os.path.join(tmp, f"events{trial}.jsonl"), os.path.join(tmp, f"trace{trial}.json")
    child = subprocess.Popen([CHILD, "endless", "20"], env=dict(os.environ, GPUGUARD_OPTIONS=options_of(trial)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(rng.uniform(0.02, 0.6))
    finally:
        child.send_signal(signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
    done += 1
    if not check(child.returncode == -signal.SIGKILL, f"trial {trial}: the child died of SIGKILL",
                 f"status {child.returncode}: {stderr.decode(errors='replace')[-400:]}"):
        continue
    if not os.path.exists(log):
        # Killed before it opened its outputs (a slow start: a sanitizer's, a loaded machine's):
        # nothing was written, so nothing can be cut.
        unopened += 1
        continue
    with open(log, "rb") as f:
        log_data = f.read()
    trace_data = b""  # the trace may open after the log: killed in between, it is empty
    if os.path.exists(trace):
        with open(trace, "rb") as f:
            trace_data = f.read()
    cut_logs += bool(log_data) and not log_data.endswith(b"\n")
    cut_traces += bool(trace_data) and not trace_data.endswith(b"\n")
    empty_traces += not trace_data
    ok = read_log(log_data, f"trial {trial} events")
    events = read_trace(trace_data, f"trial {trial} trace")
    if ok and events is not None:  # a failing trial's files stay for a look
        os.remove(log)
        if os.path.exists(trace):
            os.remove(trace)
say(f"{done} trials: {cut_logs} event logs and {cut_traces} traces ended in a cut line, {empty_traces} traces empty, "
    f"{unopened} killed before their outputs opened")
check(done >= min(TRIALS, 5), f"at least {min(TRIALS, 5)} trials ran ({done})")
check(done - unopened >= min(TRIALS, 5) // 2 + 1, f"most trials got as far as their outputs ({done - unopened} of {done})")

# A whole log and trace, cut here the way a kill cuts them, so that the cut case is read on every
# run whatever the kills did.
log = os.path.join(tmp, "whole.jsonl")
whole_trace = os.path.join(tmp, "whole.json")
child = subprocess.run([CHILD, "endless", "0.2"], capture_output=True, timeout=60,
                       env=dict(os.environ, GPUGUARD_OPTIONS=f"device=host:jsonl_log={log}:trace_file={whole_trace}"))
check(child.returncode == 0, "a whole log and trace were written", child.stderr[-400:])

# The rule on a trace cut in the middle of its last event, made here from a whole one: plain JSON
# cannot read it, the rule reads every event before the cut one.
with open(whole_trace, "rb") as f:
    finished = f.read()
lines, rest = split_lines(finished)
check(lines[-1:] == [b"]"] and rest == b"", "a finished trace ends with a `]` line")
events = read_trace(finished, "the finished trace")
check(events is not None and json.loads(finished) == events, "a finished trace is strict JSON, one event a line")
cut_trace = finished[:len(finished) - len(b"]\n") - 1 - len(lines[-2]) // 2]
try:
    json.loads(cut_trace + b"]")
    check(False, "a trace with a cut last event is not JSON as it stands, even with a `]` added")
except ValueError:
    pass
cut_events = read_trace(cut_trace, "the cut trace")
check(cut_events is not None and cut_events == (events or [None])[:-1],
      "the rule reads every event of the cut trace but the cut one")

# `gpuguard report` on the log with its last line cut in half.
with open(log, "rb") as f:
    whole = f.read()
lines, rest = split_lines(whole)
check(rest == b"" and len(lines) > 2, f"the whole log ends with a newline ({len(lines)} lines)")
cut = os.path.join(tmp, "cut.jsonl")
with open(cut, "wb") as f:
    f.write(whole[:len(whole) - 1 - len(lines[-1]) // 2])  # half of its last line, no newline
html = os.path.join(tmp, "cut.html")
result = subprocess.run([CLI, "report", cut, "-o", html], capture_output=True, text=True, timeout=120)
summary = result.stdout + result.stderr
check(result.returncode == 0 and os.path.exists(html), "gpuguard report reads a log with a cut last line (exit 0)",
      f"status {result.returncode}: {summary[-600:]}")
check(f"{len(lines)} lines read" in summary and f"{len(lines) - 1} events used" in summary and "1 lines skipped" in summary,
      "gpuguard report uses every whole line and skips the cut one", summary[-600:])
check("the last line was cut: the process ended while writing it" in summary,
      "gpuguard report's summary names the cut last line", summary[-600:])
with open(html, encoding="utf-8", errors="replace") as f:
    check("the last line was cut (the process ended while writing it)" in f.read(), "the page names the cut line")

finish("core.outputs.kill", f"({done} trials)")
