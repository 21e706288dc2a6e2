#!/usr/bin/env python3
"""Output tests, in real child processes (tests/outputs/ops_child.cpp): every sink's file is read back
with the ecosystem's own parsers (jsonschema for the JSONL log and the trace events,
prometheus-client's text parser for the Prometheus file) and its numbers checked against the
exact sizes the child allocates.

usage: outputs_test.py OPS_CHILD REPO_ROOT
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, check_schema as validate, finish, line_of, scratch  # noqa: E402  (tests/support)

CHILD, ROOT = sys.argv[1], sys.argv[2]
SCHEMAS = os.path.join(ROOT, "docs", "schemas")
SOURCE = os.path.join(ROOT, "tests", "outputs", "ops_child.cpp")
MIB = 1024 * 1024
# A job name that needs the text format's escapes: a double quote, a backslash, a newline.
JOB = 'llm "7b"\\ run\n2'


def run(mode, options, timeout=60, args=(), env_extra=None):
    # The Prometheus file's job_id comes from $SLURM_JOB_ID where prometheus_job is not set: none
    # unless a case sets it, whether or not this test itself runs under Slurm.
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    env.update(GPUGUARD_OPTIONS=options, **(env_extra or {}))
    return subprocess.run([CHILD, mode, *args], env=env, capture_output=True, text=True, timeout=timeout)


def load_schema(name):
    with open(os.path.join(SCHEMAS, name)) as f:
        return json.load(f)


def marker_line(marker):
    return line_of(SOURCE, marker)


# ---- the workload, with every output on ----------------------------------------------------------
tmp = scratch("gpuguard-outputs-")
paths = {k: os.path.join(tmp, k) for k in ("events.jsonl", "trace.json", "metrics.prom", "ops.txt")}
options = ":".join([
    "device=host", "host_capacity=64M", "stacks=all", "sample_ms=5",
    "alert_fraction=0.5", "alert_hysteresis=0.05", "alert_op_growth=2M",
    "jsonl_log=" + paths["events.jsonl"], "trace_file=" + paths["trace.json"],
    "prometheus_file=" + paths["metrics.prom"], "text_log=" + paths["ops.txt"],
    "prometheus_job=" + JOB,
])
result = run("workload", options)
check(result.returncode == 0, "workload exit status %d" % result.returncode, result.stderr)

# JSONL: every line parses and matches the schema; first start, last end.
events_schema = load_schema("events-v1.schema.json")
events = []
with open(paths["events.jsonl"]) as f:
    for number, line in enumerate(f, 1):
        try:
            event = json.loads(line)
        except ValueError as error:
            check(False, "events.jsonl:%d is not JSON: %s" % (number, error))
            continue
        validate(event, events_schema, "events.jsonl:%d" % number)
        events.append(event)
check(events and events[0]["type"] == "start" and events[0]["pid"] > 0, "the log starts with start", events[:1])
check(events and events[-1]["type"] == "end" and events[-1]["reason"] == "exit", "the log ends with end", events[-1:])

ops = [e for e in events if e["type"] == "op"]
by_name = {}
for op in ops:
    by_name.setdefault(op["name"], []).append(op)
expected_counts = {"forward": 3, "backward": 3, "train_step": 3, "load_batch": 2, "failing_step": 1,
                   "leaky_eval": 1, "fill": 1}
for name, count in expected_counts.items():
    check(len(by_name.get(name, [])) == count, "%d op lines for %s" % (count, name), len(by_name.get(name, [])))
for op in by_name.get("forward", []):
    check((op["alloc_bytes"], op["net_bytes"], op["peak_bytes"], op["allocs"], op["depth"]) ==
          (4 * MIB, 1 * MIB, 4 * MIB, 2, 1), "forward's figures", op)
for op in by_name.get("backward", []):
    check((op["alloc_bytes"], op["free_bytes"], op["net_bytes"], op["peak_bytes"]) ==
          (2 * MIB, 3 * MIB, -1 * MIB, 2 * MIB), "backward's figures", op)
for op in by_name.get("train_step", []):
    # forward's 4 MiB peak, and backward's 2 MiB on top of the 1 MiB forward kept: peak 4 MiB.
    check((op["alloc_bytes"], op["net_bytes"], op["peak_bytes"], op["depth"], op["exception"]) ==
          (6 * MIB, 0, 4 * MIB, 0, False), "train_step's figures", op)
for op in by_name.get("failing_step", []):
    check(op["exception"] is True and op["alloc_bytes"] == 1 * MIB, "failing_step is marked as ended by an exception", op)
main_thread = by_name["train_step"][0]["thread"] if by_name.get("train_step") else None
for op in by_name.get("load_batch", []):
    check(op["thread"] != main_thread and op["depth"] == 0 and op["peak_bytes"] == 512 * 1024,
          "load_batch ran on its own thread", op)
for op in ops:
    check(op["net_bytes"] == op["alloc_bytes"] - op["free_bytes"], "net = alloc - free", op)
    check(op["dur"] >= 0, "durations are not negative", op)

threads = {e["thread"]: e for e in events if e["type"] == "thread"}
check(set(threads) == {op["thread"] for op in ops}, "one thread line per thread that ran scopes", threads)
first_op_line = {}
for index, e in enumerate(events):
    if e["type"] == "op":
        first_op_line.setdefault(e["thread"], index)
    if e["type"] == "thread":
        check(e["thread"] not in first_op_line, "a thread line comes before that thread's ops", e)

alerts = [e for e in events if e["type"] == "alert"]
kinds = [a["kind"] for a in alerts]
check(kinds.count("op_growth") == 1, "one op_growth alert", kinds)
check(kinds.count("device_full") == 1 and kinds.count("device_recovered") == 1,
      "one device_full and one device_recovered alert", kinds)
growth = [a for a in alerts if a["kind"] == "op_growth"]
if growth:
    check(growth[0]["name"] == "leaky_eval" and growth[0]["net_bytes"] == 3 * MIB and
          growth[0]["limit_bytes"] == 2 * MIB, "the op_growth alert names leaky_eval", growth[0])
full = [a for a in alerts if a["kind"] == "device_full"]
if full:
    check(full[0]["device"] == -1 and full[0]["total_bytes"] == 64 * MIB and
          full[0]["used_bytes"] == 43 * MIB and abs(full[0]["fraction"] - 43 / 64) < 1e-3,
          "the device_full alert has the host figures", full[0])

mems = [e for e in events if e["type"] == "mem"]
check(mems and all(m["device"] == -1 for m in mems), "memory samples of host memory", mems[:3])
check(any(m["peak_bytes"] >= 43 * MIB for m in mems), "a sample saw the 43 MiB peak", [m["peak_bytes"] for m in mems])
check(mems and mems[-1]["live_bytes"] == 3 * MIB, "the last sample shows the 3 MiB leak", mems[-1:])
devices = [e for e in events if e["type"] == "device"]
check(len(devices) == 1 and devices[0]["device"] == -1 and devices[0]["total_bytes"] == 64 * MIB,
      "one device line for host memory", devices)

leaks = [e for e in events if e["type"] == "leaks"]
leak_line = marker_line("LEAK-SITE-EVAL")
if check(len(leaks) == 1, "one leaks line", leaks):
    check(leaks[0]["total_bytes"] == 3 * MIB and leaks[0]["total_count"] == 1, "the leak is 3 MiB", leaks[0])
    frames = leaks[0]["sites"][0]["frames"] if leaks[0]["sites"] else []
    check(any(f["file"].endswith("ops_child.cpp") and f["line"] == leak_line for f in frames),
          "the leak's site names ops_child.cpp:%d" % leak_line, frames[:4])
sites = [e for e in events if e["type"] == "sites"]
if check(len(sites) == 1, "one sites line (stacks=all)", sites):
    top = sites[0]["sites"]
    check(top and top[0]["bytes"] == 40 * MIB and top[0]["allocs"] == 1, "the largest site is fill's 40 MiB", top[:1])
    check(sites[0]["sampled"] is False, "stacks=all is not sampled", sites[0])
end = events[-1]
host = [d for d in end.get("devices", []) if d["device"] == -1]
check(host and host[0]["current_bytes"] == 3 * MIB and host[0]["peak_bytes"] == 43 * MIB,
      "end carries the host counters", host)
check(end.get("dropped") == 0, "nothing dropped", end)

# Chrome trace: a closed JSON array; each event matches the trace-event schema; slices nest per thread.
trace_schema = load_schema("trace-event.schema.json")
with open(paths["trace.json"]) as f:
    trace = json.load(f)
check(isinstance(trace, list) and trace, "the trace is a JSON array of events")
for index, event in enumerate(trace):
    validate(event, trace_schema, "trace.json event %d" % index)
slices = [e for e in trace if e["ph"] == "X"]
check(len(slices) == len(ops), "one slice per op line", (len(slices), len(ops)))
named_threads = {e["tid"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
check({e["tid"] for e in slices} <= named_threads, "every slice's thread is named", named_threads)
check(any(e["ph"] == "M" and e["name"] == "process_name" for e in trace), "the process is named")
for tid in {e["tid"] for e in slices}:
    stack = []
    for e in sorted((e for e in slices if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        end_ts = e["ts"] + e["dur"]
        check(not stack or end_ts <= stack[-1] + 0.001, "slices on thread %d nest" % tid, e)
        stack.append(end_ts)
counters = [e for e in trace if e["ph"] == "C"]
check(counters and all(e["name"] == "host memory live bytes (gpuguard)" for e in counters),
      "memory counters for host memory", counters[:2])
check(max((e["args"]["bytes"] for e in counters), default=0) == 43 * MIB, "the counter track reaches 43 MiB")
check(sum(1 for e in trace if e["ph"] == "i" and e["name"].startswith("alert:")) == 3, "three alert instants")

# Prometheus: parsed by prometheus-client; names and types follow the conventions.
with open(paths["metrics.prom"]) as f:
    prom = f.read()
check(not any(name.startswith("metrics.prom.tmp") for name in os.listdir(tmp)), "no temporary file left behind")
types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", prom, re.M))
check(types and all(name.startswith("gpuguard_") for name in types), "every metric is gpuguard_*", types)
for name, kind in types.items():
    if kind == "counter":
        check(name.endswith("_total"), "counter %s ends in _total" % name)
    else:
        check(not name.endswith("_total"), "gauge %s does not end in _total" % name)
    check(re.search(r"(_bytes|_bytes_total|_total|_seconds_total)$", name), "%s carries a unit or _total" % name)
samples = {}
for line in prom.splitlines():
    if line and not line.startswith("#"):
        key, value = line.rsplit(" ", 1)
        samples[key] = float(value)
pid = events[0]["pid"] if events else 0
JOB_LABEL = 'job_id="%s"' % JOB.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
def sample(name, **labels):
    inner = ",".join(['pid="%d"' % pid, JOB_LABEL] + ['%s="%s"' % kv for kv in labels.items()])
    return samples.get("%s{%s}" % (name, inner))
check(sample("gpuguard_op_calls_total", op="forward") == 3, "forward was called 3 times", prom)
check(sample("gpuguard_op_allocated_bytes_total", op="train_step") == 18 * MIB, "train_step allocated 18 MiB")
check(sample("gpuguard_op_exceptions_total", op="failing_step") == 1, "one exception in failing_step")
check(sample("gpuguard_live_bytes", device="-1", uuid="host") == 3 * MIB, "3 MiB live at the end", prom)
check(all(JOB_LABEL in line for line in prom.splitlines() if line and not line.startswith("#")),
      "every sample names the job, escaped", prom)
check(sample("gpuguard_alerts_total", kind="op_growth") == 1, "one op_growth alert counted")
check(sample("gpuguard_events_dropped_total") == 0, "no drops counted")
try:
    from prometheus_client.parser import text_string_to_metric_families
    families = {family.name: family for family in text_string_to_metric_families(prom)}
    check("gpuguard_live_bytes" in families and families["gpuguard_live_bytes"].type == "gauge",
          "prometheus-client parses the gauge", list(families))
    check("gpuguard_op_calls" in families and families["gpuguard_op_calls"].type == "counter",
          "prometheus-client parses the counter family", list(families))
    live = families["gpuguard_live_bytes"].samples if "gpuguard_live_bytes" in families else []
    check([s.labels for s in live] == [{"pid": str(pid), "job_id": JOB, "device": "-1", "uuid": "host"}],
          "prometheus-client reads the job's name back, unescaped, and host memory's device labels", live)
except ImportError:
    print("note: prometheus-client is not installed here; its parser did not run")

# Text lines: one per op, in the documented shape, indented by depth.
with open(paths["ops.txt"]) as f:
    text = f.read().splitlines()
line_re = re.compile(r"^\[gpuguard\] ( *)(\S+): ([+-][0-9.]+ (?:B|KiB|MiB|GiB)) \(peak \+([0-9.]+ (?:B|KiB|MiB|GiB)), "
                     r"(\d+) allocs?(?:, \d+ frees?)?\) [0-9.]+ (?:ns|us|ms|s)( \[exception\])?$")
op_lines = [m for m in (line_re.match(l) for l in text) if m]
check(len(op_lines) == len(ops), "one text line per op", "\n".join(text))
forward_lines = [m for m in op_lines if m.group(2) == "forward"]
check(forward_lines and forward_lines[0].group(1) == "  " and forward_lines[0].group(3) == "+1.0 MiB" and
      forward_lines[0].group(4) == "4.0 MiB" and forward_lines[0].group(5) == "2",
      "forward's line: indented, +1.0 MiB, peak +4.0 MiB, 2 allocs", forward_lines[:1])
check(any(m.group(2) == "failing_step" and m.group(6) for m in op_lines), "failing_step's line says [exception]")
check(sum("ALERT" in l for l in text) == 2 and any("re-armed" in l for l in text), "alert lines in the text log", text)

# ---- the device alert fires on the allocation that crosses, however short the spike ---------------
# 41 MiB of a 64 MiB capacity for microseconds, between samples 200 ms (or 1 s) apart.
for mode, sample_ms in (("spike", 200), ("spike_first", 1000)):
    jsonl = os.path.join(tmp, mode + ".jsonl")
    result = run(mode, "device=host:host_capacity=64M:alert_fraction=0.5:text_log=off:sample_ms=%d:jsonl_log=%s" %
                 (sample_ms, jsonl))
    check(result.returncode == 0, mode + ": exit status", result.stderr)
    with open(jsonl) as f:
        spike_events = [json.loads(l) for l in f]
    full = [e for e in spike_events if e["type"] == "alert" and e["kind"] == "device_full"]
    check(len(full) == 1 and full[0]["used_bytes"] == 41 * MIB and "reached by an allocation" in full[0]["message"],
          mode + ": one device_full alert, at the spike's 41 MiB", [e for e in spike_events if e["type"] in ("alert", "mem")])
    if mode == "spike" and full:
        # Stamped with the moment of the crossing, before the end and before any sample after it.
        samples_after = [e for e in spike_events if e["type"] == "mem" and e["t"] > full[0]["t"]]
        check(full[0]["t"] < spike_events[-1]["t"] and all(m["live_bytes"] <= 1 * MIB for m in samples_after),
              "spike: the alert carries the crossing's time, ahead of the samples that no longer see it",
              (full[0], samples_after))
    print("%s: %s" % (mode, full[0]["message"] if full else "no alert"))

# ---- memory over time from the ledger's own events: every step, however fast ------------------------
# The whole run takes about a millisecond and sample_ms is a second: samples alone would draw nothing.
jsonl, trace_path = os.path.join(tmp, "steps.jsonl"), os.path.join(tmp, "steps.trace.json")
result = run("steps", "device=host:text_log=off:sample_ms=1000:stacks=all:jsonl_log=%s:trace_file=%s" % (jsonl, trace_path),
             args=(jsonl,))
check(result.returncode == 0, "steps: exit status", result.stderr)
check("ops_child: flushed 1, 4 alloc lines after flush_outputs" in result.stdout,
      "steps: flush_outputs() waits for the timeline's lines too", result.stdout)
with open(jsonl) as f:
    steps_events = [json.loads(l) for l in f]
for number, event in enumerate(steps_events, 1):
    validate(event, events_schema, "steps.jsonl:%d" % number)
expected_live = [1 * MIB, 3 * MIB, 7 * MIB, 3 * MIB, 1 * MIB, 4 * MIB, 1 * MIB, 0]
timeline = [e for e in steps_events if e["type"] in ("alloc", "free", "mem_step")]
check([e["type"] for e in timeline] == ["alloc", "alloc", "alloc", "free", "free", "alloc", "free", "free"],
      "steps: one alloc or free line per event, in order, nothing folded", timeline)
check([e["live_bytes"] for e in timeline if "live_bytes" in e] == expected_live, "steps: the live bytes after each event",
      timeline)
check([e["bytes"] for e in timeline if "bytes" in e] == [1 * MIB, 2 * MIB, 4 * MIB, 4 * MIB, 2 * MIB, 3 * MIB, 3 * MIB, 1 * MIB],
      "steps: the size of each event", timeline)
# In order, but for the small steps back the ledger's clock may take when the writer refines its scale.
check(all(b["t"] > a["t"] - 100000 for a, b in zip(timeline, timeline[1:])), "steps: times in order", timeline)
alloc_at = {e["address"]: e for e in timeline if e["type"] == "alloc"}
check(all(e["address"] in alloc_at and alloc_at[e["address"]]["bytes"] == e["bytes"] and
          alloc_at[e["address"]]["site"] == e["site"] for e in timeline if e["type"] == "free"),
      "steps: each free names an address, size and site of an allocation", timeline)
check(all(e["site"] > 0 and e["thread"] >= 1 for e in timeline), "steps: sites (stacks=all) and threads", timeline)
check(len([e for e in steps_events if e["type"] == "mem"]) <= 2, "steps: at most the first and the last sample",
      [e for e in steps_events if e["type"] == "mem"])
with open(trace_path) as f:
    steps_trace = json.load(f)
counter_values = []
for e in sorted((e for e in steps_trace if e["ph"] == "C"), key=lambda e: e["ts"]):
    if not counter_values or counter_values[-1] != e["args"]["bytes"]:
        counter_values.append(e["args"]["bytes"])
check(counter_values == expected_live, "steps: the trace's memory counter has every step and the 7 MiB peak",
      counter_values)

# Many events: at most timeline_events alloc lines per millisecond, the rest folded into mem_step
# lines; every event is still counted and the exact peak kept.
jsonl = os.path.join(tmp, "many.jsonl")
count = 200000  # ops_child's default for many
result = run("many", "device=host:text_log=off:timeline_events=8:jsonl_log=" + jsonl)
check(result.returncode == 0, "many: exit status", result.stderr)
with open(jsonl) as f:
    many_events = [json.loads(l) for l in f]
validated = {}
for number, event in enumerate(many_events, 1):  # a few of each type: validating is slow
    if validated.setdefault(event["type"], 0) < 5:
        validated[event["type"]] += 1
        validate(event, events_schema, "many.jsonl:%d" % number)
end_line = many_events[-1]
host = [d for d in end_line.get("devices", []) if d["device"] == -1]
peak = 7 * 4096 + 64 * MIB
check(end_line["type"] == "end" and host and host[0]["allocations"] == count and host[0]["peak_bytes"] == peak,
      "many: %d allocations, the ledger's peak is 7 * 4 KiB + 64 MiB" % count, end_line)
allocs = [e for e in many_events if e["type"] == "alloc"]
frees = [e for e in many_events if e["type"] == "free"]
steps = [e for e in many_events if e["type"] == "mem_step"]
# Counted per millisecond as the writer counts: in the order written, a line whose time is behind
# the latest millisecond seen (the ledger's clock can step back a little when its scale is
# refined) counts in that latest one.
per_ms = {}
window = -1
for e in many_events:
    if e["type"] in ("alloc", "free"):
        window = max(window, e["t"] // 1000000)
        if e["type"] == "alloc":
            per_ms[window] = per_ms.get(window, 0) + 1
check(per_ms and max(per_ms.values()) <= 8, "many: at most 8 alloc lines per millisecond", max(per_ms.values(), default=0))
check(len(frees) <= len(allocs), "many: a free line only for an allocation that had one", (len(frees), len(allocs)))
check(bool(host) and len(allocs) + sum(s["allocs"] for s in steps) == count and
      len(frees) + sum(s["frees"] for s in steps) == host[0]["frees"],
      "many: every allocation and free is a line or counted in a mem_step",
      (len(allocs), sum(s["allocs"] for s in steps), len(frees), sum(s["frees"] for s in steps)))
timeline_lines = len(allocs) + len(frees) + len(steps)
times = [e["t"] for e in allocs + frees + steps]
windows = (max(times) - min(times)) // 1000000 + 1 if times else 0
# Per millisecond at most 8 alloc lines, as many free lines overall, a mem_step cut short by each
# of them, and one more per writer pass (at most about one per millisecond here).
check(timeline_lines <= 4 * 8 * windows + windows + 10 and timeline_lines < 2 * count,
      "many: %d timeline lines for %d events over %d ms (bounded)" % (timeline_lines, 2 * count, windows))
highest = max([e["live_bytes"] for e in allocs + frees] + [s["max_bytes"] for s in steps])
check(highest == peak, "many: the timeline keeps the exact peak", highest)
check(all(s["min_bytes"] <= s["end_bytes"] <= s["max_bytes"] and s["t"] <= s["min_t"] <= s["end"] and
          s["t"] <= s["max_t"] <= s["end"] for s in steps),
      "many: each mem_step's lowest, highest and times are consistent", steps[:3])
print("many: %d events -> %d alloc, %d free and %d mem_step lines over %d ms; peak %d" %
      (2 * count, len(allocs), len(frees), len(steps), len(per_ms), highest))

# A full timeline queue: 4 threads, 320,000 events while the writer is stuck; the producers fold
# what does not fit (queue_full mem_step lines), and every event and the exact peak survive.
jsonl = os.path.join(tmp, "timeline_full.jsonl")
result = run("timeline_full", "device=host:text_log=off:alert_op_growth=1K:jsonl_log=" + jsonl)
check(result.returncode == 0, "timeline_full: exit status", result.stderr)
with open(jsonl) as f:
    full_events = [json.loads(l) for l in f]
full_end = [d for d in full_events[-1].get("devices", []) if d["device"] == -1]
full_steps = [e for e in full_events if e["type"] == "mem_step"]
full_lines = [e for e in full_events if e["type"] in ("alloc", "free")]
check(any(s["queue_full"] for s in full_steps), "timeline_full: the producers folded events when the queue was full",
      len(full_steps))
if check(bool(full_end), "timeline_full: the end line has host memory", full_events[-1:]):
    check(sum(e["type"] == "alloc" for e in full_lines) + sum(s["allocs"] for s in full_steps) == full_end[0]["allocations"] and
          sum(e["type"] == "free" for e in full_lines) + sum(s["frees"] for s in full_steps) == full_end[0]["frees"],
          "timeline_full: every allocation and free is a line or counted in a mem_step", full_end[0])
    highest = max([e["live_bytes"] for e in full_lines] + [s["max_bytes"] for s in full_steps])
    check(highest == full_end[0]["peak_bytes"] and highest >= 32 * MIB,
          "timeline_full: the timeline keeps the exact peak across threads and folds", (highest, full_end[0]))


# ---- a full queue drops, counts and reports, and never blocks ------------------------------------
jsonl = os.path.join(tmp, "overflow.jsonl")
result = run("overflow", "device=host:queue_capacity=64:alert_op_growth=1K:text_log=off:jsonl_log=" + jsonl)
check(result.returncode == 0, "overflow exit status", result.stdout + result.stderr)
check("queued 65 dropped 936 written 65 (dropped while blocked 936)" in result.stdout,
      "64 of 1000 fit while the writer was blocked, 936 dropped", result.stdout)
with open(jsonl) as f:
    overflow_events = [json.loads(l) for l in f]
dropped = [e for e in overflow_events if e["type"] == "dropped"]
check(dropped and dropped[-1]["total"] == 936 and sum(e["count"] for e in dropped) == 936, "dropped lines add up", dropped)
check(overflow_events[-1]["type"] == "end" and overflow_events[-1]["dropped"] == 936, "end reports 936 dropped")
check(sum(1 for e in overflow_events if e["type"] == "op") == 65, "65 op lines written")

# ---- failing sinks: clear messages, the rest still work, the exit status is kept -----------------
jsonl = os.path.join(tmp, "plain.jsonl")
result = run("plain", "device=host:text_log=off:trace_file=/nonexistent-dir/t.json:prometheus_file=/nonexistent-dir/m.prom:jsonl_log=" + jsonl)
check(result.returncode == 0, "a missing directory does not change the exit status", result.stderr)
check("[gpuguard] trace_file: cannot open '/nonexistent-dir/t.json': No such file or directory; trace_file is off" in result.stderr,
      "the unopenable trace file is named", result.stderr)
with open(jsonl) as f:
    check(sum(1 for l in f if '"type":"op"' in l) == 3, "the JSONL log still has its 3 ops")
result = run("plain", "device=host:text_log=off:jsonl_log=/dev/full")
check(result.returncode == 0, "a full disk does not change the exit status", result.stderr)
check(result.stderr.count("jsonl_log: cannot write '/dev/full': No space left on device; this output is off from now on") == 1,
      "a write failure is reported once", result.stderr)

# The job's label: prometheus_job, else $SLURM_JOB_ID, else none.
prom = os.path.join(tmp, "job.prom")
for options, slurm, expect in (("", None, None), ("", "4242", "4242"), (":prometheus_job=sweep-3", "4242", "sweep-3"),
                               (":prometheus_job=", "4242", "4242")):
    result = run("plain", "device=host:text_log=off:prometheus_file=" + prom + options,
                 env_extra={"SLURM_JOB_ID": slurm} if slurm else None)
    check(result.returncode == 0, "plain run with job %r exits 0" % expect, result.stderr)
    with open(prom) as f:
        lines = [l for l in f.read().splitlines() if l and not l.startswith("#")]
    job_ids = {re.search(r'job_id="([^"]*)"', l).group(1) if "job_id=" in l else None for l in lines}
    check(lines and job_ids == {expect}, "options %r with SLURM_JOB_ID=%s: job_id %r on every sample" %
          (options, slurm, expect), lines)

# fork(): the child's exit handlers do not write into the parent's files.
jsonl = os.path.join(tmp, "fork.jsonl")
# Under ThreadSanitizer (scripts/sanitize.sh tsan) the child's exit starts no watchdog thread
# (cleanup_timeout=0): TSan cannot follow a thread started after a threaded process forked.
no_thread_after_fork = ":cleanup_timeout=0" if os.environ.get("GPUGUARD_TEST_SANITIZE") == "thread" else ""
result = run("fork", "device=host:text_log=off:jsonl_log=" + jsonl + no_thread_after_fork)
check(result.returncode == 0, "fork mode exit status", result.stderr)
with open(jsonl) as f:
    fork_lines = f.read().splitlines()
fork_events = [json.loads(l) for l in fork_lines]
fork_types = [e["type"] for e in fork_events]
check(fork_types.count("start") == 1 and fork_types.count("end") == 1 and fork_types[-1] == "end",
      "one start and one end line despite the child's exit()", fork_types)
check([e["name"] for e in fork_events if e["type"] == "op"] == ["before_fork", "after_fork"],
      "only the parent's operations, each once", fork_lines)

# %p in a path is the process id.
result = run("plain", "device=host:text_log=off:jsonl_log=" + os.path.join(tmp, "run-%p.jsonl"))
logs = [n for n in os.listdir(tmp) if re.fullmatch(r"run-\d+\.jsonl", n)]
check(len(logs) == 1, "%p became the pid", os.listdir(tmp))

finish("outputs_test", "(%d events, %d trace events, %d metric lines)" % (len(events), len(trace), len(samples)))
