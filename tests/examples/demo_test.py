#!/usr/bin/env python3
"""The README's demo, end to end: the demo program with a JSONL log, then `gpuguard report` on it.
Checks the exit status, the per-operation lines, the leak report naming the planted line, the log
against its schema, and that the report page was written.

usage: demo_test.py DEMO GPUGUARD_CLI REPO_ROOT
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, check_schema, finish, line_of, scratch  # noqa: E402  (tests/support)

DEMO, CLI, ROOT = sys.argv[1:4]
leak_line = line_of(os.path.join(ROOT, "examples", "demo.cu"), "the leak the report at exit points to")
tmp = scratch("gpuguard-demo-")
log = os.path.join(tmp, "events.jsonl")
env = dict(os.environ, GPUGUARD_OPTIONS="stacks=all:jsonl_log=" + log)
demo = subprocess.run([DEMO], env=env, capture_output=True, text=True, timeout=300)
check(demo.returncode == 0, "the demo exits 0", demo.stdout + demo.stderr)
check("steps done: every guard freed what it owned" in demo.stdout, "the demo's steps passed", demo.stdout)
err = demo.stderr
check(len(re.findall(r"^\[gpuguard\]   forward: \+192\.0 MiB \(peak \+256\.0 MiB, 2 allocs, 1 free\) ", err, re.M)) == 4,
      "four forward lines with their figures", err)
check(re.search(r"^\[gpuguard\]   eval: \+96\.0 MiB \(peak \+96\.0 MiB, 1 alloc\) ", err, re.M), "the eval line shows the leak", err)
check(re.search(r"^\[gpuguard\] failing_step: .* \[exception\]$", err, re.M), "the failing step is marked", err)
check(re.search(r"^\[gpuguard\] LEAK: 96\.0 MiB in 1 allocation still live, from 1 site$", err, re.M), "the leak headline", err)
check(re.search(r"demo\.cu:%d$" % leak_line, err, re.M), "the leak report names demo.cu:%d" % leak_line, err)

events = []
with open(log) as f:
    events = [json.loads(line) for line in f]
with open(os.path.join(ROOT, "docs", "schemas", "events-v1.schema.json")) as f:
    schema = json.load(f)
for number, event in enumerate(events, 1):
    check_schema(event, schema, "events.jsonl:%d" % number)
types = [e["type"] for e in events]
check(types[:1] == ["start"] and types[-1:] == ["end"], "the log starts and ends", types)
check(types.count("op") == 4 * 4 + 1 + 1, "18 op lines (4 steps x 4, eval, failing_step)", types.count("op"))
leaks = [e for e in events if e["type"] == "leaks"]
check(leaks and leaks[0]["total_bytes"] == 96 * 1024 * 1024, "the log's leaks line has 96 MiB", leaks)

# The memory timeline: every allocation and free reached the log, so its highest live bytes are
# each device's peak, however fast the demo ran (the samples alone never draw the peak).
end_devices = events[-1].get("devices", []) if events else []
for d in end_devices:
    if d["allocations"] == 0:
        continue
    highest = [e["live_bytes"] for e in events if e["type"] in ("alloc", "free") and e["device"] == d["device"]]
    highest += [e["max_bytes"] for e in events if e["type"] == "mem_step" and e["device"] == d["device"]]
    check(highest and max(highest) == d["peak_bytes"], "the timeline of device %d reaches its peak" % d["device"],
          (max(highest, default=None), d))
check(end_devices, "the end line has the devices", events[-1:])

html = os.path.join(tmp, "report.html")
report = subprocess.run([CLI, "report", log, "-o", html], capture_output=True, text=True, timeout=120)
check(report.returncode == 0, "gpuguard report exits 0", report.stdout + report.stderr)
check(os.path.getsize(html) > 1000 if os.path.exists(html) else False, "report.html was written")
if os.path.exists(html):
    with open(html, encoding="utf-8") as f:
        page_data = json.loads(re.search(r'id="report-data">(.*?)</script>', f.read(), re.S).group(1))
    for d in page_data["devices"]:
        peak = next((e["peak_bytes"] for e in end_devices if e["device"] == d["device"]), None)
        check(d["live"]["max"] == peak, "the page's chart of device %d reaches the peak" % d["device"], (d["live"]["max"], peak))
        check(d["timeline"]["bands_drawn"] > 0, "the page draws device %d's allocations as bands" % d["device"], d["timeline"])

finish("demo_test", "(%d events)" % len(events))
