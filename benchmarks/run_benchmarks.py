#!/usr/bin/env python3
"""Runs gpuguard_tracking_bench (or reads a JSON result it wrote) and writes what tracking costs,
as differences and ratios against the untracked baseline of the same run, into a Markdown file.

    python3 benchmarks/run_benchmarks.py [--bench BINARY] [--out docs/benchmarks.md]
        [--append-section NAME] [--json-in FILE | --json-out FILE] [--min-time T]
        [--repetitions 5]

Without --json-in the benchmark runs as
    BINARY --benchmark_format=json --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
and the median aggregates are used. With --json-in the Markdown is built from that JSON instead.

Without --append-section the output file is replaced by one report ("## Results"). With --append-section NAME
the report becomes the section "## NAME" of the file: a section of that name is replaced, every
other section is kept, so the CPU machine and the GPU machine can share one docs file.

Every number written comes from the JSON; nothing is typed in by hand. The machine description
is recorded into the JSON's context when this script runs the benchmark (--json-out keeps it), so
--json-in describes the machine the numbers came from, not the one that formats them. The host
name is never written.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BENCH = os.path.join(REPO_ROOT, "build", "benchmarks", "gpuguard_tracking_bench")
DEFAULT_OUT = os.path.join(REPO_ROOT, "docs", "benchmarks.md")
TITLE = "# Benchmarks"
INTRO = ("What tracking costs, measured by `benchmarks/gpuguard_tracking_bench` and written by "
         "`benchmarks/run_benchmarks.py`. Every tracked benchmark is compared with its untracked "
         "baseline (or its stacks-off variant) from the same run.")
NO_GPU = "no CUDA device"  # the SkipWithError message of the CUDA benchmarks

# Benchmark run names, as Google Benchmark spells them.
HOST_UNTRACKED_1 = "BM_host_pair/untracked/real_time/threads:1"
HOST_TRACKED_1 = "BM_host_pair/tracked/real_time/threads:1"
HOST_UNTRACKED_16 = "BM_host_pair/untracked/real_time/threads:16"
HOST_TRACKED_16 = "BM_host_pair/tracked/real_time/threads:16"
STACKS_ALL = "BM_host_pair_stacks_all/tracked/real_time"
STACKS_SAMPLED = "BM_host_pair_stacks_sampled/tracked/real_time"
CUDA_UNTRACKED = "BM_cuda_malloc_pair/untracked/real_time"
CUDA_TRACKED = "BM_cuda_malloc_pair/tracked/real_time"
ASYNC_UNTRACKED = "BM_cuda_async_pair/untracked/real_time"
ASYNC_TRACKED = "BM_cuda_async_pair/tracked/real_time"

# (heading, kind, baseline, measured, limit). kind "added": measured - baseline <= limit ns;
# "ratio": measured / baseline <= limit.
PAIR_TARGETS = [
    ("Host memory, stacks off: added time per allocate+deallocate pair (256 B)", "added",
     HOST_UNTRACKED_1, HOST_TRACKED_1, 50.0),
    ("cudaMalloc/cudaFree pairs (1 MiB): tracked / untracked", "ratio",
     CUDA_UNTRACKED, CUDA_TRACKED, 1.02),
    ("cudaMallocAsync/cudaFreeAsync pairs (1 MiB, one stream): tracked / untracked", "ratio",
     ASYNC_UNTRACKED, ASYNC_TRACKED, 1.10),
    ("stacks=all: added time per allocation (against tracked, stacks off)", "added",
     HOST_TRACKED_1, STACKS_ALL, 2000.0),
    ("stacks=sampled, stack_sample=64: tracked sampled / tracked stacks off", "ratio",
     HOST_TRACKED_1, STACKS_SAMPLED, 1.2),
]
THREADS_HEADING = "Host memory, 16 threads: throughput of tracked at 16 threads / at 1 thread"
THREADS_LIMIT = 8.0

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


# ---- reading Google Benchmark's JSON ----------------------------------------------------------------
class Result:
    """One benchmark's median: real time per iteration in ns and items per second, or why not run."""

    def __init__(self, name):
        self.name = name
        self.real_ns = None
        self.items_per_second = None
        self.repetitions = None
        self.cv_percent = None  # coefficient of variation of real time across repetitions
        self.not_run = None  # reason text when the benchmark was skipped or failed


def results_from(document):
    """Median results by run name. A benchmark with a median aggregate uses it; one that has only
    iteration entries (a run without repetitions) uses the median of those."""
    by_name = {}
    iterations = {}
    for entry in document.get("benchmarks", []):
        name = entry.get("run_name", entry["name"])
        result = by_name.setdefault(name, Result(name))
        if entry.get("error_occurred") or entry.get("skipped"):
            message = entry.get("error_message") or entry.get("skip_message") or "skipped"
            result.not_run = ("no GPU on this machine" if message == NO_GPU
                              else "skipped: %s" % message)
            continue
        unit = UNIT_NS[entry.get("time_unit", "ns")]
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                result.real_ns = entry["real_time"] * unit
                result.items_per_second = entry.get("items_per_second")
                result.repetitions = entry.get("repetitions")
            elif entry.get("aggregate_name") == "cv":
                result.cv_percent = entry["real_time"] * 100.0  # a fraction, whatever time_unit says
        else:
            iterations.setdefault(name, []).append(
                (entry["real_time"] * unit, entry.get("items_per_second")))
    for name, runs in iterations.items():
        result = by_name[name]
        if result.real_ns is None and result.not_run is None:
            result.real_ns = statistics.median(r[0] for r in runs)
            rates = [r[1] for r in runs if r[1] is not None]
            result.items_per_second = statistics.median(rates) if rates else None
            result.repetitions = len(runs)
    return by_name


def lookup(results, name):
    result = results.get(name)
    if result is None:
        result = Result(name)
        result.not_run = "not in this run"
    elif result.not_run is None and result.real_ns is None:
        result.not_run = "no median in this run"
    return result


def throughput(result):
    """Pairs per second over all threads: items/s, or iterations per real second."""
    if result.items_per_second:
        return result.items_per_second
    return 1e9 / result.real_ns


# ---- the machine ------------------------------------------------------------------------------------
def describe_machine():
    """CPU model, core count and GPUs of this machine (never the host name)."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            match = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            if match:
                cpu = match.group(1).strip()
    except OSError:
        pass
    gpus = []
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if smi.returncode == 0:
            for line in smi.stdout.strip().splitlines():
                name, _, driver = line.partition(",")
                gpus.append({"name": name.strip(), "driver": driver.strip()})
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count() or 0, "gpus": gpus}


def machine_lines(document):
    context = document.get("context", {})
    machine = context.get("gpuguard_machine")
    lines = []
    if machine:
        lines.append("- CPU: %s, %d logical cores" % (machine["cpu"], machine["cores"]))
        if machine["gpus"]:
            names = {}
            for gpu in machine["gpus"]:
                key = "%s (driver %s)" % (gpu["name"], gpu["driver"])
                names[key] = names.get(key, 0) + 1
            lines.append("- GPU: %s" % ", ".join(
                ("%d x %s" % (n, k)) if n > 1 else k for k, n in names.items()))
        else:
            lines.append("- GPU: none (no nvidia-smi, or it found no GPU)")
    else:
        lines.append("- machine: not recorded in the JSON; its context says %s CPUs at %s MHz"
                     % (context.get("num_cpus", "?"), context.get("mhz_per_cpu", "?")))
    if context.get("library_build_type"):
        lines.append("- Google Benchmark library build: %s" % context["library_build_type"])
    return lines


def utc_date(document):
    text = document.get("context", {}).get("date")
    if not text:
        return "not recorded in the JSON"
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return text
    if when.tzinfo is None:
        return text + " (time zone not recorded)"
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# ---- the Markdown -----------------------------------------------------------------------------------
def ns(value):
    return "%.1f" % value


def verdict(ok):
    return "PASS" if ok else "MISS"


def not_run_reason(*results):
    for result in results:
        if result.not_run:
            return "not run (%s)" % result.not_run
    return None


def pair_table(results, heading, kind, baseline_name, measured_name, limit):
    baseline, measured = lookup(results, baseline_name), lookup(results, measured_name)
    label = "added ns" if kind == "added" else "ratio"
    target = ("<= %g ns" % limit) if kind == "added" else ("<= %g" % limit)
    lines = ["### " + heading, "",
             "| baseline | baseline ns | measured | measured ns | %s | target | verdict |" % label,
             "| --- | ---: | --- | ---: | ---: | --- | --- |"]
    reason = not_run_reason(baseline, measured)
    if reason:
        lines.append("| `%s` | - | `%s` | - | - | %s | %s |"
                     % (baseline_name, measured_name, target, reason))
    else:
        if kind == "added":
            value = measured.real_ns - baseline.real_ns
            shown = "%+.1f" % value
        else:
            value = measured.real_ns / baseline.real_ns
            shown = "%.3f" % value
        lines.append("| `%s` | %s | `%s` | %s | %s | %s | %s |"
                     % (baseline_name, ns(baseline.real_ns), measured_name, ns(measured.real_ns),
                        shown, target, verdict(value <= limit)))
    return lines


def threads_table(results, cores):
    lines = ["### " + THREADS_HEADING, "",
             "Throughput is allocate+deallocate pairs per second summed over all threads; time is "
             "real time per pair (wall time / pairs on all threads).", "",
             "| variant | 1 thread ns | 16 threads ns | 1 thread pairs/s | 16 threads pairs/s "
             "| 16 / 1 threads | target | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for variant, one_name, many_name, judged in (("tracked", HOST_TRACKED_1, HOST_TRACKED_16, True),
                                                 ("untracked", HOST_UNTRACKED_1, HOST_UNTRACKED_16,
                                                  False)):
        one, many = lookup(results, one_name), lookup(results, many_name)
        target = (">= %g" % THREADS_LIMIT) if judged else "(comparison)"
        reason = not_run_reason(one, many)
        if reason:
            lines.append("| %s | - | - | - | - | - | %s | %s |" % (variant, target, reason))
            continue
        scale = throughput(many) / throughput(one)
        lines.append("| %s | %s | %s | %.3g | %.3g | %.2fx | %s | %s |"
                     % (variant, ns(one.real_ns), ns(many.real_ns), throughput(one),
                        throughput(many), scale, target,
                        verdict(scale >= THREADS_LIMIT) if judged else "-"))
    if cores and cores < 16:
        lines += ["", "This machine has %d logical cores, so 16 threads cannot run at once: "
                      "the 8x target needs at least 8 free cores." % cores]
    return lines


def section_body(document, command):
    results = results_from(document)
    context = document.get("context", {})
    machine = context.get("gpuguard_machine") or {}
    cores = machine.get("cores") or context.get("num_cpus") or 0
    repetitions = sorted({r.repetitions for r in results.values() if r.repetitions})
    lines = machine_lines(document)
    lines.append("- date: %s" % utc_date(document))
    lines.append("- command: `%s`" % command)
    if context.get("gpuguard_bench_command"):
        lines.append("- benchmark command: `%s`" % context["gpuguard_bench_command"])
    lines += ["- times: median of %s repetitions, real time per iteration (one allocate+deallocate "
              "pair)" % ("/".join(str(r) for r in repetitions) or "?"), ""]
    first = True
    for heading, kind, baseline, measured, limit in PAIR_TARGETS:
        lines += pair_table(results, heading, kind, baseline, measured, limit) + [""]
        if first:  # the threads table follows the single-thread host pair
            lines += threads_table(results, cores) + [""]
            first = False
    lines += ["### All medians", "",
              "cv is the coefficient of variation of real time across the repetitions: a ratio "
              "closer to its target than the cvs of its two benchmarks is within the noise.", "",
              "| benchmark | real ns per iteration | cv | items/s |", "| --- | ---: | ---: | ---: |"]
    for name in sorted(results):
        result = results[name]
        if result.not_run or result.real_ns is None:
            lines.append("| `%s` | %s | - | - |"
                         % (name, "not run (%s)" % (result.not_run or "no median")))
        else:
            rate = "%.4g" % result.items_per_second if result.items_per_second else "-"
            cv = "%.1f%%" % result.cv_percent if result.cv_percent is not None else "-"
            lines.append("| `%s` | %s | %s | %s |" % (name, ns(result.real_ns), cv, rate))
    return "\n".join(lines).rstrip("\n") + "\n"


def split_sections(text):
    """(preamble, [(name, text)]) for the '## ' sections of a Markdown file."""
    parts = re.split(r"(?m)^(?=## )", text)
    preamble, sections = parts[0], []
    for part in parts[1:]:
        first_line = part.split("\n", 1)[0]
        sections.append((first_line[3:].strip(), part))
    return preamble, sections


def with_section(old_text, name, body):
    """old_text with section `name` replaced by (or, if absent, appended as) body."""
    preamble, sections = split_sections(old_text)
    if not preamble.strip():
        preamble = TITLE + "\n\n" + INTRO + "\n"
    new = "## %s\n\n%s" % (name, body)
    replaced = False
    out = []
    for section_name, text in sections:
        if section_name == name:
            if not replaced:
                out.append(new)
                replaced = True
        else:
            out.append(text)
    if not replaced:
        out.append(new)
    return "\n\n".join([preamble.rstrip("\n")] + [s.rstrip("\n") for s in out]) + "\n"


# ---- running ----------------------------------------------------------------------------------------
def run_bench(args):
    cmd = [args.bench, "--benchmark_format=json", "--benchmark_repetitions=%d" % args.repetitions,
           "--benchmark_report_aggregates_only=true"]
    if args.min_time:
        cmd.append("--benchmark_min_time=%s" % args.min_time)
    if args.filter:
        cmd.append("--benchmark_filter=%s" % args.filter)
    print("run_benchmarks.py: running %s" % shlex.join(cmd), file=sys.stderr)
    run = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit("run_benchmarks.py: %s exited with %d" % (args.bench, run.returncode))
    document = json.loads(run.stdout)
    document.setdefault("context", {})["gpuguard_machine"] = describe_machine()
    document["context"]["gpuguard_bench_command"] = shlex.join(cmd)
    return document


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=DEFAULT_BENCH, help="gpuguard_tracking_bench binary")
    parser.add_argument("--out", default=DEFAULT_OUT, help="Markdown file (default docs/benchmarks.md)")
    parser.add_argument("--append-section", metavar="NAME",
                        help="write the report as section '## NAME' of --out, keeping others")
    parser.add_argument("--json-in", metavar="FILE", help="build from this JSON; do not run")
    parser.add_argument("--json-out", metavar="FILE", help="also keep the run's JSON here")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", help="passed as --benchmark_min_time")
    parser.add_argument("--filter", help="passed as --benchmark_filter")
    args = parser.parse_args()

    if args.json_in:
        with open(args.json_in) as f:
            document = json.load(f)
    else:
        document = run_bench(args)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(document, f, indent=2)
                f.write("\n")
    command = shlex.join(["python3"] + sys.argv)
    body = section_body(document, command)
    if args.append_section:
        old = ""
        if os.path.exists(args.out):
            with open(args.out) as f:
                old = f.read()
        text = with_section(old, args.append_section, body)
    else:
        text = TITLE + "\n\n" + INTRO + "\n\n## Results\n\n" + body
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
