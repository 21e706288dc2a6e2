#!/usr/bin/env python3
"""Runs gpuguard_tracking_bench (or reads its JSON) and writes the results, as ratios against the
untracked baseline of the same run, into a section of docs/benchmarks.md.

usage: report.py BENCH_BINARY --section NAME [--out docs/benchmarks.md] [--json-in FILE]
                 [--json-out FILE] [--min-time 0.2]
Every number written comes from the JSON; nothing is typed in by hand.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys

TARGETS = [
    # (row, kind, numerator, denominator, limit)
    ("host, stacks off: added per alloc+free pair", "added_ns",
     "BM_host_pair_tracked/real_time/threads:1", "BM_host_pair_untracked/real_time/threads:1", 50),
    ("host, 16 threads: tracked throughput vs 1 thread", "throughput_x",
     "BM_host_pair_tracked/real_time/threads:16", "BM_host_pair_tracked/real_time/threads:1", 8),
    ("cudaMalloc/cudaFree pair: tracked / untracked", "ratio",
     "BM_cuda_malloc_pair_tracked", "BM_cuda_malloc_pair_untracked", 1.02),
    ("cudaMallocAsync/cudaFreeAsync pair: tracked / untracked", "ratio",
     "BM_cuda_async_pair_tracked", "BM_cuda_async_pair_untracked", 1.10),
    ("stacks=all: added per allocation", "added_ns",
     "BM_host_pair_tracked_stacks_all", "BM_host_pair_tracked/real_time/threads:1", 2000),
    ("stacks=sampled 1/64: tracked / stacks off", "ratio",
     "BM_host_pair_tracked_stacks_sampled", "BM_host_pair_tracked/real_time/threads:1", 1.2),
]


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    gpu = "no GPU"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            gpu = out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "%s, %d cores; %s" % (cpu, os.cpu_count() or 0, gpu)


def medians(document):
    """Real time per iteration (ns) of each benchmark: the median aggregate where there is one."""
    times, errors, rates = {}, {}, {}
    for b in document["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b.get("error_occurred"):
            errors[name] = b.get("error_message", "error")
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        times[name] = b["real_time"] * unit
        rates[name] = b.get("items_per_second", 0.0)
    return times, errors, rates


def rows(times, errors, rates):
    out = []
    for row, kind, num, den, limit in TARGETS:
        if num not in times or den not in times:
            why = errors.get(num) or errors.get(den) or "missing from the run"
            out.append("| %s | - | - | - | %s | not run (%s) |" % (row, limit_text(kind, limit), why))
            continue
        a, b = times[num], times[den]
        if kind == "added_ns":
            value, ok, shown = a - b, a - b <= limit, "%+.1f ns" % (a - b)
        elif kind == "ratio":
            value, ok, shown = a / b, a / b <= limit, "%.3f x" % (a / b)
        else:  # throughput: pairs per second summed over all threads, as Google Benchmark counts them
            value = rates[num] / rates[den] if rates.get(den) else 0.0
            ok, shown = value >= limit, "%.2f x (%.2fM/s vs %.2fM/s)" % (value, rates[num] / 1e6, rates[den] / 1e6)
        out.append("| %s | %.1f | %.1f | %s | %s | %s |" % (row, a, b, shown, limit_text(kind, limit),
                                                           "PASS" if ok else "MISS"))
    return out


def limit_text(kind, limit):
    return {"added_ns": "<= %g ns" % limit, "ratio": "<= %g x" % limit, "throughput_x": ">= %g x" % limit}[kind]


def section_text(name, document, command):
    times, errors, rates = medians(document)
    lines = ["## %s" % name, "",
             "- machine: %s" % machine(),
             "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "- command: `%s`" % command, "",
             "Times are medians of 5 repetitions, real time per iteration; with 16 threads an iteration",
             "is one pair on each thread. The machine's core count bounds what 16 threads can gain.", "",
             "| target | measured ns | baseline ns | result | goal | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += rows(times, errors, rates)
    lines += ["", "Raw medians (real time per iteration, ns):", ""]
    lines += ["- `%s`: %.1f" % (k, v) for k, v in sorted(times.items())]
    return "\n".join(lines) + "\n"


def replace_section(text, name, section):
    parts = re.split(r"(?m)^(?=## )", text)
    kept = [p for p in parts if not p.startswith("## %s\n" % name)]
    if not kept or not kept[0].startswith("# "):
        kept.insert(0, "# Benchmarks\n\nEach section is one run of `benchmarks/report.py`; "
                       "every ratio compares against the untracked baseline of the same run.\n\n")
    return "".join(kept).rstrip("\n") + "\n\n" + section


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--section", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks.md"))
    ap.add_argument("--json-in")
    ap.add_argument("--json-out")
    ap.add_argument("--min-time", default="0.2")
    args = ap.parse_args()
    command = "python3 benchmarks/report.py %s --section '%s'" % (os.path.relpath(args.bench), args.section)
    if args.json_in:
        with open(args.json_in) as f:
            document = json.load(f)
    else:
        run = subprocess.run([args.bench, "--benchmark_format=json", "--benchmark_repetitions=5",
                              "--benchmark_report_aggregates_only=true",
                              "--benchmark_min_time=%s" % args.min_time],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("report.py: %s failed (%d):\n%s" % (args.bench, run.returncode, run.stderr))
        document = json.loads(run.stdout)
        if args.json_out:
            with open(args.json_out, "w") as f:
                f.write(run.stdout)
    section = section_text(args.section, document, command)
    old = open(args.out).read() if os.path.exists(args.out) else ""
    with open(args.out, "w") as f:
        f.write(replace_section(old, args.section, section))
    print(section)


if __name__ == "__main__":
    main()
