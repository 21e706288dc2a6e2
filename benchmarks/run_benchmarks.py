#!/usr/bin/env python3
"""Runs gpuguard's benchmark programs (or reads a JSON result it wrote) and writes what tracking,
operation scopes and the outputs cost, as differences and ratios against the baseline of the same
run, and the JSONL writer's rate, into a Markdown file; keeps a GPU run's results; and builds
docs/benchmarks.md from the kept results.

    python3 benchmarks/run_benchmarks.py [--bench BINARY]... [--out benchmarks.md]
        [--append-section NAME] [--json-in FILE | --json-out FILE] [--min-time T]
        [--repetitions 5] [--no-interleave]
    python3 benchmarks/run_benchmarks.py keep RUNNER_OUT --commit COMMIT [--command CMD]
    python3 benchmarks/run_benchmarks.py docs [--out docs/benchmarks.md]
    python3 benchmarks/run_benchmarks.py summary RUNNER_OUT

`keep` takes the three JSON results of one `scripts/gpu-runner.sh bench` (benchmarks.json,
track_overhead.json, torch_bench.json in its output folder) and writes them, with the commit and
command that made them, to benchmarks/results/<model>.json (h100.json, h200.json): one per GPU
model, the newest replacing the one before. `docs` builds docs/benchmarks.md from those files
alone: each target, its figure on each GPU model with the run's date, commit and command, and how
it is measured. benchmarks/test_run_benchmarks.py checks that the committed page is what `docs`
builds. `summary` writes RUNNER_OUT/summary.md and summary.json from track_overhead.json and
torch_bench.json: every target they judged (median, 95% interval, verdict) and each baseline's
spread against itself, under the card's name; the bench slice prints it last.

--bench names one program and may be repeated; without it, both programs of build/benchmarks run
(gpuguard_tracking_bench, then gpuguard_ops_bench). Without --json-in each program runs as
    BINARY --benchmark_format=json --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
its results are put into one JSON document, and the median aggregates are used. The repetitions of
all of a program's benchmarks run in one random interleaved order (--no-interleave: each
benchmark's repetitions back to back), so that a machine's drift over the run (its clock, its
neighbours) falls on a tracked benchmark and its baseline alike instead of on whichever ran
later. Every repetition is kept in the JSON, because Google Benchmark leaves a repetition that
failed (SkipWithError) out of the aggregates: a benchmark with any failed repetition is reported as
not run. With --json-in the Markdown is built from that JSON instead. The tables of a program
appear when it ran (or when the JSON holds any of its results); a benchmark of it missing from the
run shows as "not run".

Without --append-section the output file (default: benchmarks.md in the current directory) is
replaced by one report ("## Results"); a file that has sections of its own (docs/benchmarks.md,
say) is refused instead, before anything runs. With --append-section NAME the report becomes the
section "## NAME" of the file: a section of that name is replaced, every other section is kept, so
several runs can share one file (scripts/gpu-runner.sh writes its three sections into one).

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

import figure_stats as stats

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACKING_PROGRAM = "gpuguard_tracking_bench"
OPS_PROGRAM = "gpuguard_ops_bench"
DEFAULT_BENCHES = [os.path.join(REPO_ROOT, "build", "benchmarks", name)
                   for name in (TRACKING_PROGRAM, OPS_PROGRAM)]
DEFAULT_OUT = "benchmarks.md"
TITLE = "# Benchmarks"
INTRO = ("What tracking, operation scopes and the outputs cost, measured by "
         "`benchmarks/gpuguard_tracking_bench` and `benchmarks/gpuguard_ops_bench` and written by "
         "`benchmarks/run_benchmarks.py`. Every measured benchmark is compared with its baseline "
         "from the same run.")
NO_GPU = "no CUDA device"  # the SkipWithError message of the CUDA benchmarks

# Benchmark run names, as Google Benchmark spells them.
HOST_UNTRACKED_1 = "BM_host_pair/untracked/real_time/threads:1"
HOST_TRACKED_1 = "BM_host_pair/tracked/real_time/threads:1"
HOST_UNTRACKED_16 = "BM_host_pair/untracked/real_time/threads:16"
HOST_TRACKED_16 = "BM_host_pair/tracked/real_time/threads:16"
HOST_UNTRACKED_2 = "BM_host_pair/untracked/real_time/threads:2"
HOST_TRACKED_2 = "BM_host_pair/tracked/real_time/threads:2"
HOST_POSTMORTEM_1 = "BM_host_pair/tracked_postmortem/real_time/threads:1"
STACKS_ALL = "BM_host_pair_stacks_all/tracked/real_time"
STACKS_SAMPLED = "BM_host_pair_stacks_sampled/tracked/real_time"
CUDA_UNTRACKED = "BM_cuda_malloc_pair/untracked/real_time"
CUDA_TRACKED = "BM_cuda_malloc_pair/tracked/real_time"
CUDA_TRACKED_STACKS = "BM_cuda_malloc_pair/tracked_stacks/real_time"
ASYNC_UNTRACKED = "BM_cuda_async_pair/untracked/real_time"
ASYNC_TRACKED = "BM_cuda_async_pair/tracked/real_time"
ASYNC_ALTERNATING = "BM_cuda_async_pair/alternating/real_time"
ALTERNATING_HEADING = ("cudaMallocAsync/cudaFreeAsync pairs, tracked and untracked batches alternating "
                       "in one loop: tracked / untracked")
ALTERNATING_LIMIT = 1.10

CLOCK_TSC = "BM_clock_read/tsc/real_time"
CLOCK_STEADY = "BM_clock_read/steady_clock/real_time"

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
     HOST_TRACKED_1, STACKS_ALL, 100.0),
    ("cudaMalloc/cudaFree pairs (1 MiB) with stacks=all, the default: tracked / untracked", "ratio",
     CUDA_UNTRACKED, CUDA_TRACKED_STACKS, 1.02),
    ("stacks=sampled, stack_sample=64: tracked sampled / tracked stacks off", "ratio",
     HOST_TRACKED_1, STACKS_SAMPLED, 1.2),
]
THREADS_HEADING = "Host memory, 16 threads: throughput of tracked at 16 threads / at 1 thread"
THREADS_LIMIT = 8.0
# Tracking's own scaling: (tracked 16 / 1 threads) / (untracked 16 / 1 threads). With a baseline
# that scales (malloc) the plain tracked / untracked ratio at 16 threads is mostly the 1-thread
# cost of tracking, so the judged figure is how much of the baseline's scaling tracking keeps.
RELATIVE_SCALING_LIMIT = 0.8

# gpuguard_ops_bench. Its scope benchmarks time batches of bodies, so their times are per body:
# 1e9 / items_per_second (items are bodies), with the producer's CPU time per body beside it.
SCOPE_BASELINE = "BM_op_scope/baseline/manual_time"
SCOPE_SCOPED = "BM_op_scope/scoped/manual_time"
SCOPE_NVTX_OFF = "BM_op_scope/scoped_nvtx_off/manual_time"
SCOPE_NO_SINK = "BM_op_scope/scoped_no_sink/manual_time"
PAIR_BASELINE = "BM_op_scope_pair/baseline/manual_time"
PAIR_SCOPED = "BM_op_scope_pair/scoped/manual_time"
LATENCY_BASELINE = "BM_op_scope_latency/baseline/manual_time"
LATENCY_SCOPED = "BM_op_scope_latency/scoped/manual_time"
WRITER_FILE = "BM_jsonl_sink/file/real_time"
WRITER_DEV_NULL = "BM_jsonl_sink/dev_null/real_time"
OPS_PREFIXES = ("BM_op_scope", "BM_jsonl_sink")

# (heading, baseline, measured, limit): added time per body, measured - baseline <= limit ns;
# limit None: a comparison, no verdict.
SCOPE_TARGETS = [
    ("Operation scope, empty body, nvtx=1 (default), JSONL writer running: added time per scope",
     SCOPE_BASELINE, SCOPE_SCOPED, 100.0),
    ("Operation scope, empty body, nvtx=0, JSONL writer running: added time per scope",
     SCOPE_BASELINE, SCOPE_NVTX_OFF, 100.0),
    ("Operation scope around a tracked 256 B host allocate+deallocate pair, nvtx=1, JSONL writer "
     "running: added time per scope", PAIR_BASELINE, PAIR_SCOPED, 100.0),
    ("Producer with the JSONL writer busy / with no sink at all: time per scope (nvtx=1)",
     SCOPE_NO_SINK, SCOPE_SCOPED, None),
]
SCOPE_ALTERNATING_HEADING = ("Operation scope, plain and scoped batches alternating in one loop, JSONL "
                             "writer running: added time per scope")
# (benchmark, body, limit ns): the median of the iterations' own differences <= limit.
SCOPE_ALTERNATING = [
    ("BM_op_scope_alternating/nvtx_on/manual_time", "empty, nvtx=1", 100.0),
    ("BM_op_scope_alternating/nvtx_off/manual_time", "empty, nvtx=0", 100.0),
    ("BM_op_scope_alternating/pair/manual_time", "a tracked 256 B host pair, nvtx=1", 100.0),
]
LATENCY_HEADING = ("Latency of each scope while the writer drains the queue (empty body, nvtx=1, "
                   "JSONL writer running)")
LATENCY_COUNTERS = (("p50_ns", "p50"), ("p99_ns", "p99"), ("p999_ns", "p99.9"), ("max_ns", "max"))
PRODUCER_HEADING = ("Producer thread during the timed batches: does it wait while the writer "
                    "works?")
# (benchmark, judged): a judged row must show no voluntary context switch in its timed batches.
PRODUCER_ROWS = [(SCOPE_BASELINE, False), (SCOPE_SCOPED, True), (SCOPE_NVTX_OFF, True),
                 (SCOPE_NO_SINK, True), (PAIR_BASELINE, False), (PAIR_SCOPED, True),
                 (LATENCY_SCOPED, True)]
WRITER_HEADING = "JSONL sink: events written per second by the writer thread, none dropped"
# (benchmark, what it writes to, limit events/s or None for a comparison)
WRITER_TARGETS = [
    (WRITER_FILE, "a file in the temp directory", 1e6),
    (WRITER_DEV_NULL, "/dev/null", None),
]

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
        self.counters = {}  # user counters (dropped, cpu_ns_per_op, p99_ns, ...): their medians
        self.mean_counters = {}  # their means: a count that must stay 0 is judged on the mean


def results_from(document):
    """Median results by run name. A benchmark with a median aggregate uses it; one that has only
    iteration entries (a run without repetitions) uses the median of those. A benchmark with any
    failed or skipped entry is not run, whatever its aggregates say."""
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
                result.counters = counters_of(entry)
            elif entry.get("aggregate_name") == "mean":
                result.mean_counters = counters_of(entry)
            elif entry.get("aggregate_name") == "cv":
                result.cv_percent = entry["real_time"] * 100.0  # a fraction, whatever time_unit says
        else:
            iterations.setdefault(name, []).append(
                (entry["real_time"] * unit, entry.get("items_per_second"), counters_of(entry)))
    for name, runs in iterations.items():
        result = by_name[name]
        if result.real_ns is None and result.not_run is None:
            result.real_ns = statistics.median(r[0] for r in runs)
            rates = [r[1] for r in runs if r[1] is not None]
            result.items_per_second = statistics.median(rates) if rates else None
            result.repetitions = len(runs)
            keys = set().union(*(r[2] for r in runs))
            result.counters = {k: statistics.median(r[2][k] for r in runs if k in r[2])
                               for k in keys}
            result.mean_counters = {k: statistics.mean(r[2][k] for r in runs if k in r[2])
                                    for k in keys}
    return by_name


# The fields Google Benchmark writes for every run; any other number is a user counter.
STANDARD_FIELDS = {"family_index", "per_family_instance_index", "repetitions", "repetition_index",
                   "threads", "iterations", "real_time", "cpu_time", "items_per_second",
                   "bytes_per_second"}


def counters_of(entry):
    return {k: v for k, v in entry.items()
            if k not in STANDARD_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)}


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


def per_item_ns(result):
    """Time per item (per body of a batch): 1e9 / items/s, or real time per iteration."""
    return 1e9 / throughput(result)


def program_of(name):
    """The program a benchmark belongs to, by its name."""
    return OPS_PROGRAM if name.startswith(OPS_PREFIXES) else TRACKING_PROGRAM


def bench_commands(document):
    context = document.get("context", {})
    commands = context.get("gpuguard_bench_commands")
    if commands:
        return list(commands)
    return [context["gpuguard_bench_command"]] if context.get("gpuguard_bench_command") else []


def programs_in(document, results):
    """The programs whose tables the report holds: those that ran, and those with results."""
    programs = {program_of(name) for name in results}
    for command in bench_commands(document):
        words = shlex.split(command)
        if words and os.path.basename(words[0]) in (TRACKING_PROGRAM, OPS_PROGRAM):
            programs.add(os.path.basename(words[0]))
    return programs


# ---- the machine ------------------------------------------------------------------------------------
def threads_per_core(cpuinfo):
    """Hardware threads per physical core from /proc/cpuinfo's text (its first processor's
    "siblings" over "cpu cores"), or None where it does not say. The 16-thread host benchmark
    scales differently where two of its threads share a core."""
    siblings = re.search(r"^siblings\s*:\s*(\d+)\s*$", cpuinfo, re.M)
    cores = re.search(r"^cpu cores\s*:\s*(\d+)\s*$", cpuinfo, re.M)
    if not siblings or not cores or int(cores.group(1)) == 0:
        return None
    return max(int(siblings.group(1)) // int(cores.group(1)), 1)


def describe_machine():
    """CPU model, core count, threads per core and GPUs of this machine (never the host name)."""
    cpu = "unknown CPU"
    per_core = None
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        if match:
            cpu = match.group(1).strip()
        per_core = threads_per_core(cpuinfo)
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
    return {"cpu": cpu, "cores": os.cpu_count() or 0, "threads_per_core": per_core, "gpus": gpus}


def machine_words(machine):
    """describe_machine()'s result in words: "CPU model, N cores, GPU (driver D)"."""
    gpus = ", ".join("%s (driver %s)" % (g["name"], g["driver"]) for g in machine.get("gpus", [])) or "no GPU"
    return "%s, %s cores, %s" % (machine.get("cpu", "unknown CPU"), machine.get("cores", "?"), gpus)


def machine_lines(document):
    context = document.get("context", {})
    machine = context.get("gpuguard_machine")
    lines = []
    if machine:
        per_core = machine.get("threads_per_core")
        threads = "" if not per_core else " (1 thread a core)" if per_core == 1 else " (%d threads a core)" % per_core
        lines.append("- CPU: %s, %d logical cores%s" % (machine["cpu"], machine["cores"], threads))
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


def rounds_verdict(baseline, measured, limit):
    """The verdict on rounds that each ran the baseline and the measured program once, in separate
    processes: (verdict, each round's ratio). PASS where every round's ratio measured / baseline is
    at most `limit`, MISS where none is, and "within noise" where the rounds disagree: then one
    process's time differs from the next one's by more than the margin judged, and the median of
    the rounds cannot be told from the target (docs/benchmarks.md shows how far they spread)."""
    if not baseline or len(baseline) != len(measured):
        raise ValueError("rounds_verdict needs one baseline per measured round")
    ratios = [m / b for b, m in zip(baseline, measured)]
    if max(ratios) <= limit:
        return "PASS", ratios
    if min(ratios) > limit:
        return "MISS", ratios
    return "within noise", ratios


def ratio_range(ratios):
    return "%.3f to %.3f" % (min(ratios), max(ratios))


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


def alternating_table(results):
    """The stream-ordered pair measured in one loop: each iteration times a batch untracked and a
    batch tracked, and the benchmark's counters hold the median batch of each and the median of
    the iterations' own ratios, with its quartiles. The verdict judges that median ratio. A run
    from before the benchmark existed gets no table."""
    if ASYNC_ALTERNATING not in results:
        return []
    target = "<= %g" % ALTERNATING_LIMIT
    lines = ["### " + ALTERNATING_HEADING, "",
             "Each iteration times a batch of 32 untracked pairs and a batch of 32 tracked pairs, "
             "in turn first; the ratio is the median of the iterations' own ratios (median of the "
             "repetitions), so drift between the two benchmarks above does not enter it.", "",
             "| benchmark | untracked ns | tracked ns | ratio | quartiles of the ratio | target | verdict |",
             "| --- | ---: | ---: | ---: | --- | --- | --- |"]
    result = lookup(results, ASYNC_ALTERNATING)
    needed = ("untracked_ns", "tracked_ns", "ratio", "ratio_p25", "ratio_p75")
    reason = result.not_run
    if reason is None and any(k not in result.counters for k in needed):
        reason = "no ratio counters in this run"  # this table's reason only: the run itself ran
    if reason:
        lines.append("| `%s` | - | - | - | - | %s | not run (%s) |" % (ASYNC_ALTERNATING, target, reason))
        return lines
    c = result.counters
    lines.append("| `%s` | %s | %s | %.3f | %.3f to %.3f | %s | %s |"
                 % (ASYNC_ALTERNATING, ns(c["untracked_ns"]), ns(c["tracked_ns"]), c["ratio"],
                    c["ratio_p25"], c["ratio_p75"], target, verdict(c["ratio"] <= ALTERNATING_LIMIT)))
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
    one_t, many_t = lookup(results, HOST_TRACKED_1), lookup(results, HOST_TRACKED_16)
    one_u, many_u = lookup(results, HOST_UNTRACKED_1), lookup(results, HOST_UNTRACKED_16)
    reason = not_run_reason(one_t, many_t) or not_run_reason(one_u, many_u)
    lines += ["", "| figure | value | target | verdict |", "| --- | ---: | --- | --- |"]
    if reason:
        lines.append("| tracked / untracked pairs/s at 16 threads | - | (comparison) | %s |" % reason)
        lines.append("| tracked 16 / 1 threads over untracked 16 / 1 threads | - | >= %g | %s |"
                     % (RELATIVE_SCALING_LIMIT, reason))
    else:
        relative = ((throughput(many_t) / throughput(one_t))
                    / (throughput(many_u) / throughput(one_u)))
        lines.append("| tracked / untracked pairs/s at 16 threads | %.3f | (comparison) | - |"
                     % (throughput(many_t) / throughput(many_u)))
        lines.append("| tracked 16 / 1 threads over untracked 16 / 1 threads | %.3f | >= %g | %s |"
                     % (relative, RELATIVE_SCALING_LIMIT, verdict(relative >= RELATIVE_SCALING_LIMIT)))
    # Threads whose reused block shares a shard of the live table with another's: each such pair
    # passes the shard's lines between cores on every event (ledger.cpp), so this says whether a
    # run's 16-thread figure had any. Absent from runs made before the counter.
    sharing = many_t.mean_counters.get("threads_sharing_a_shard") if not not_run_reason(many_t) else None
    if sharing is not None:
        lines.append("| threads of 16 whose block shares its live-table shard with another's, mean of the "
                     "repetitions | %.1f | (comparison) | - |" % sharing)
    # Two threads, which a 2-core machine can run at once: the same figure, for comparison.
    two_t, two_u = lookup(results, HOST_TRACKED_2), lookup(results, HOST_UNTRACKED_2)
    if not not_run_reason(one_t, two_t, one_u, two_u):
        relative_2 = ((throughput(two_t) / throughput(one_t))
                      / (throughput(two_u) / throughput(one_u)))
        lines.append("| tracked 2 / 1 threads over untracked 2 / 1 threads | %.3f | (comparison) | - |"
                     % relative_2)
    if cores and cores < 16:
        lines += ["", "This machine has %d logical cores, so 16 threads cannot run at once: "
                      "the 8x target needs at least 8 free cores." % cores]
    return lines


def cpu_ns(result):
    value = result.counters.get("cpu_ns_per_op")
    return "%.1f" % value if value is not None else "-"


def scope_table(results, heading, baseline_name, measured_name, limit):
    baseline, measured = lookup(results, baseline_name), lookup(results, measured_name)
    target = ("<= %g ns" % limit) if limit is not None else "(comparison)"
    lines = ["### " + heading, "",
             "| baseline | baseline ns | measured | measured ns | added ns | baseline cpu ns "
             "| measured cpu ns | added cpu ns | target | verdict |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    reason = not_run_reason(baseline, measured)
    if reason:
        lines.append("| `%s` | - | `%s` | - | - | - | - | - | %s | %s |"
                     % (baseline_name, measured_name, target, reason))
        return lines
    added = per_item_ns(measured) - per_item_ns(baseline)
    cpu_base = baseline.counters.get("cpu_ns_per_op")
    cpu_measured = measured.counters.get("cpu_ns_per_op")
    cpu_added = ("%+.1f" % (cpu_measured - cpu_base)
                 if cpu_base is not None and cpu_measured is not None else "-")
    lines.append("| `%s` | %s | `%s` | %s | %+.1f | %s | %s | %s | %s | %s |"
                 % (baseline_name, ns(per_item_ns(baseline)), measured_name,
                    ns(per_item_ns(measured)), added, cpu_ns(baseline), cpu_ns(measured),
                    cpu_added, target, verdict(added <= limit) if limit is not None else "-"))
    return lines


def scope_alternating_table(results):
    """The scope's three figures measured in one loop each: every iteration times a batch of plain
    bodies and a batch of scoped ones, and the benchmark's counters hold the median batch of each
    and the median of the iterations' own differences, with its quartiles. The verdict judges that
    median difference. A run from before the benchmarks existed gets no table."""
    if not any(name in results for name, _, _ in SCOPE_ALTERNATING):
        return []
    lines = ["### " + SCOPE_ALTERNATING_HEADING, "",
             "Each iteration times a batch of 8192 plain bodies and a batch of 8192 scoped ones, in "
             "turn first; the added time is the median of the iterations' own differences per body "
             "(median of the repetitions), so drift between the separate benchmarks above does not "
             "enter it.", "",
             "| benchmark | body | baseline ns | scoped ns | added ns | quartiles of added ns | target "
             "| verdict |",
             "| --- | --- | ---: | ---: | ---: | --- | --- | --- |"]
    needed = ("baseline_ns", "scoped_ns", "added_ns", "added_p25", "added_p75")
    for name, body, limit in SCOPE_ALTERNATING:
        result = lookup(results, name)
        target = "<= %g ns" % limit
        reason = result.not_run
        if reason is None and any(k not in result.counters for k in needed):
            reason = "no difference counters in this run"
        if reason:
            lines.append("| `%s` | %s | - | - | - | - | %s | not run (%s) |" % (name, body, target, reason))
            continue
        c = result.counters
        lines.append("| `%s` | %s | %s | %s | %+.1f | %+.1f to %+.1f | %s | %s |"
                     % (name, body, ns(c["baseline_ns"]), ns(c["scoped_ns"]), c["added_ns"],
                        c["added_p25"], c["added_p75"], target, verdict(c["added_ns"] <= limit)))
    return lines


def latency_table(results):
    lines = ["### " + LATENCY_HEADING, "",
             "Each body timed on its own with two steady_clock reads, over every body of the run; "
             "the baseline is the two clock reads around the empty body. A producer that waited "
             "for the writer would show it in the upper percentiles; max also holds the times the "
             "thread lost its core to something else.", "",
             "| benchmark | %s |" % " | ".join("%s ns" % label for _, label in LATENCY_COUNTERS),
             "| --- |%s" % (" ---: |" * len(LATENCY_COUNTERS))]
    baseline, scoped = lookup(results, LATENCY_BASELINE), lookup(results, LATENCY_SCOPED)
    for result in (baseline, scoped):
        reason = not_run_reason(result)
        if reason or any(key not in result.counters for key, _ in LATENCY_COUNTERS):
            lines.append("| `%s` | %s |" % (result.name, " | ".join(
                [reason or "not run (no percentiles)"] * len(LATENCY_COUNTERS))))
        else:
            lines.append("| `%s` | %s |" % (result.name, " | ".join(
                "%.0f" % result.counters[key] for key, _ in LATENCY_COUNTERS)))
    if not not_run_reason(baseline, scoped) and all(
            key in r.counters for r in (baseline, scoped) for key, _ in LATENCY_COUNTERS):
        # The maxima are single events of two different runs: their difference means nothing.
        lines.append("| added by the scope | %s |" % " | ".join(
            "%+.0f" % (scoped.counters[key] - baseline.counters[key]) if key != "max_ns" else "-"
            for key, _ in LATENCY_COUNTERS))
    return lines


def producer_table(results):
    lines = ["### " + PRODUCER_HEADING, "",
             "Context switches of the producer thread per timed batch of 8192 bodies, the mean of "
             "the repetitions (so a wait in any repetition shows). A wait is a voluntary switch: "
             "the thread blocked (a lock, a sleep, I/O); the target is none. A preemption is an "
             "involuntary switch: the thread could run but another thread had its core. The "
             "baselines queue no events, so the writer stays asleep during them.", "",
             "| benchmark | ns per body | cpu ns per body | waits per batch | preemptions per batch "
             "| target | verdict |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, judged in PRODUCER_ROWS:
        result = lookup(results, name)
        target = "no waits" if judged else "(comparison)"
        reason = not_run_reason(result)
        waits = result.mean_counters.get("waits_per_batch")
        preemptions = result.mean_counters.get("preemptions_per_batch")
        if reason or waits is None or preemptions is None:
            lines.append("| `%s` | - | - | - | - | %s | %s |"
                         % (name, target, reason or "not run (no switch counts)"))
            continue
        lines.append("| `%s` | %s | %s | %.3g | %.3g | %s | %s |"
                     % (name, ns(per_item_ns(result)), cpu_ns(result), waits, preemptions, target,
                        verdict(waits == 0) if judged else "-"))
    return lines


def writer_table(results):
    lines = ["### " + WRITER_HEADING, "",
             "One iteration queues 65536 empty scopes and waits until the writer has written them "
             "all; the producer keeps at most half the queue in flight, so the writer sets the pace. "
             "A run that dropped an event, or whose sink failed, is reported as not run.", "",
             "| benchmark | writes to | ns per event | events/s | bytes per event | dropped "
             "| target | verdict |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, where, limit in WRITER_TARGETS:
        result = lookup(results, name)
        target = (">= %.3g events/s" % limit) if limit is not None else "(comparison)"
        reason = not_run_reason(result)
        if reason:
            lines.append("| `%s` | %s | - | - | - | - | %s | %s |" % (name, where, target, reason))
            continue
        rate = throughput(result)
        dropped = result.counters.get("dropped")
        size = result.counters.get("bytes_per_event")
        if limit is None:
            judged = "-"
        elif dropped is None:
            judged = "MISS (no drop count)"
        else:
            judged = verdict(rate >= limit and dropped == 0)
        lines.append("| `%s` | %s | %s | %.3g | %s | %s | %s | %s |"
                     % (name, where, ns(1e9 / rate), rate,
                        "%.0f" % size if size is not None else "-",
                        "%d" % dropped if dropped is not None else "-", target, judged))
    return lines


def ops_tables(results):
    lines = ["**Operation scopes and the outputs** (`gpuguard_ops_bench`): every scope benchmark "
             "times batches of 8192 bodies while the writer thread drains the queue into the JSONL "
             "sink (/dev/null); times are per body (median batch time / 8192), and cpu ns is the "
             "producer thread's CPU time per body, which leaves out time it spent off its core. "
             "The verdicts judge the wall time.", ""]
    for heading, baseline, measured, limit in SCOPE_TARGETS:
        lines += scope_table(results, heading, baseline, measured, limit) + [""]
    alternating = scope_alternating_table(results)
    if alternating:
        lines += alternating + [""]
    lines += producer_table(results) + [""]
    lines += latency_table(results) + [""]
    lines += writer_table(results) + [""]
    return lines


def clock_line(results, context):
    """What one clock read costs here, and which exact clock gpuguard reads: the TSC where it is
    invariant (the program's context says), steady_clock elsewhere."""
    tsc, steady = lookup(results, CLOCK_TSC), lookup(results, CLOCK_STEADY)
    invariant = context.get("invariant_tsc")
    if not_run_reason(steady) or (invariant == "1" and not_run_reason(tsc)):
        return []
    if invariant == "1":
        used = "the TSC (invariant on this CPU)"
    elif invariant == "0":
        used = "steady_clock (this CPU's TSC is not invariant)"
    elif not not_run_reason(tsc):
        used = "the TSC or steady_clock (the run did not record whether the TSC is invariant)"
    else:
        used = "steady_clock (no TSC on this CPU)"
    reads = ("TSC %s ns, " % ns(tsc.real_ns)) if not not_run_reason(tsc) else ""
    return ["- a clock read: %ssteady_clock %s ns. The exact clock is %s: an operation scope reads "
            "it twice, the ledger once per event while the JSONL log or the Chrome trace is on (the "
            "live table keeps the kernel's coarse clock)." % (reads, ns(steady.real_ns), used)]


def section_body(document, command):
    results = results_from(document)
    context = document.get("context", {})
    machine = context.get("gpuguard_machine") or {}
    cores = machine.get("cores") or context.get("num_cpus") or 0
    repetitions = sorted({r.repetitions for r in results.values() if r.repetitions})
    programs = programs_in(document, results)
    lines = machine_lines(document)
    lines.append("- date: %s" % utc_date(document))
    lines.append("- command: `%s`" % command)
    for bench_command in bench_commands(document):
        lines.append("- benchmark command: `%s`" % bench_command)
    shown = "/".join(str(r) for r in repetitions) or "?"
    if any("--benchmark_enable_random_interleaving=true" in c for c in bench_commands(document)):
        shown += " repetitions, interleaved at random with the other benchmarks'"
    else:
        shown += " repetitions"
    if TRACKING_PROGRAM in programs:
        lines += ["- times: median of %s, real time per iteration (one allocate+"
                  "deallocate pair)" % shown] + clock_line(results, context) + [""]
        first = True
        for heading, kind, baseline, measured, limit in PAIR_TARGETS:
            lines += pair_table(results, heading, kind, baseline, measured, limit) + [""]
            alternating = alternating_table(results) if measured == ASYNC_TRACKED else []
            if alternating:
                lines += alternating + [""]
            if first:  # the threads table follows the single-thread host pair
                lines += threads_table(results, cores) + [""]
                first = False
    else:
        lines += ["- times: median of %s" % shown, ""]
    if OPS_PROGRAM in programs:
        lines += ops_tables(results)
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


# ---- the kept results and docs/benchmarks.md -------------------------------------------------------
# `keep` puts one GPU runner's three JSON results (the benchmark programs', track_overhead.py's and
# torch_bench.py's) into benchmarks/results/<model>.json with the commit and command that made them;
# `docs` builds docs/benchmarks.md from those files alone, so the page never holds a typed number.
RESULTS_DIR = os.path.join(REPO_ROOT, "benchmarks", "results")
DOCS_PAGE = os.path.join(REPO_ROOT, "docs", "benchmarks.md")
DOCS_LINE_LIMIT = 250
RUNNER_FILES = {"benchmarks": "benchmarks.json", "track_overhead": "track_overhead.json",
                "torch_bench": "torch_bench.json"}
BY_TRACKING = "`gpuguard_tracking_bench`"
BY_OPS = "`gpuguard_ops_bench`"
BY_TRACK = "`track_overhead.py`"
BY_TORCH = "`torch_bench.py`"
TRACK_FIGURES = (("cudaMalloc pair ns", "cudaMalloc/cudaFree pair (1 MiB)", "tracked / plain"),
                 ("cuMemAllocAsync pair ns", "cuMemAllocAsync/cuMemFreeAsync pair", "tracked / plain (two processes)"),
                 ("median step ms", "a PyTorch training step", "tracked / plain"))


def gpu_model(machine):
    """The GPU's model ("H100", "H200") from a machine description, as scripts/gpu-runner.sh names
    its sections: the first word of the first GPU's name after "NVIDIA"."""
    gpus = (machine or {}).get("gpus") or []
    words = gpus[0]["name"].split() if gpus else []
    if words and words[0] == "NVIDIA":
        words = words[1:]
    if not words:
        raise ValueError("the run recorded no GPU, so it names no GPU model to keep it under")
    return words[0]


def kept_result(benchmarks, track_overhead, torch_bench, commit, command):
    """The document `keep` writes: the three results as recorded, and how they were made."""
    machine = benchmarks.get("context", {}).get("gpuguard_machine")
    model = gpu_model(machine)
    for name, document in (("track_overhead", track_overhead), ("torch_bench", torch_bench)):
        other = gpu_model(document.get("machine"))
        if other != model:
            raise ValueError("the %s result ran on a %s, the benchmark programs' on a %s: keep results "
                             "of one run" % (name, other, model))
    return {"model": model, "commit": commit, "command": command, "benchmarks": benchmarks,
            "track_overhead": track_overhead, "torch_bench": torch_bench}


def short_date(text):
    """"2026-12-06T17:55:48+00:00" as "2026-12-06 17:55 UTC"; a date alone as itself."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return text or "?"
    if when.tzinfo is None:
        return text
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def cell(value, target_ok, detail=""):
    """A figure's cell: the value, what it is made of, and its verdict."""
    verdict_text = target_ok if isinstance(target_ok, str) else verdict(target_ok)
    return "%s%s: %s" % (value, " (%s)" % detail if detail else "", verdict_text)


def library_rows(document):
    """(figure, target, measured by, cell) for the benchmark programs' targets of one run."""
    results = results_from(document)
    rows = []

    def pair(heading, kind, baseline_name, measured_name, limit):
        baseline, measured = lookup(results, baseline_name), lookup(results, measured_name)
        target = ("<= +%g ns" % limit) if kind == "added" else ("<= %g" % limit)
        reason = not_run_reason(baseline, measured)
        if reason:
            rows.append((heading, target, BY_TRACKING, reason))
        elif kind == "added":
            value = measured.real_ns - baseline.real_ns
            rows.append((heading, target, BY_TRACKING, cell("%+.1f ns" % value, value <= limit, "%s against %s ns"
                                                          % (ns(measured.real_ns), ns(baseline.real_ns)))))
        else:
            value = measured.real_ns / baseline.real_ns
            rows.append((heading, target, BY_TRACKING, cell("%.3f" % value, value <= limit, "%s against %s ns"
                                                          % (ns(measured.real_ns), ns(baseline.real_ns)))))

    pair("host allocate+deallocate pair (256 B), tracked minus untracked", "added",
         HOST_UNTRACKED_1, HOST_TRACKED_1, 50.0)
    pair("post-mortem region, added per host pair: tracked with the region minus untracked", "added",
         HOST_UNTRACKED_1, HOST_POSTMORTEM_1, 50.0)
    one_t, many_t = lookup(results, HOST_TRACKED_1), lookup(results, HOST_TRACKED_16)
    one_u, many_u = lookup(results, HOST_UNTRACKED_1), lookup(results, HOST_UNTRACKED_16)
    heading = "16 threads: tracked's 16/1-thread throughput over untracked's"
    reason = not_run_reason(one_t, many_t, one_u, many_u)
    if reason:
        rows.append((heading, ">= %g" % RELATIVE_SCALING_LIMIT, BY_TRACKING, reason))
    else:
        relative = (throughput(many_t) / throughput(one_t)) / (throughput(many_u) / throughput(one_u))
        rows.append((heading, ">= %g" % RELATIVE_SCALING_LIMIT, BY_TRACKING,
                     cell("%.3f" % relative, relative >= RELATIVE_SCALING_LIMIT)))
    pair("stacks=all: added per allocation, against tracked with stacks off", "added",
         HOST_TRACKED_1, STACKS_ALL, 100.0)
    pair("stacks=sampled (1 in 64) / stacks off, tracked", "ratio", HOST_TRACKED_1, STACKS_SAMPLED, 1.2)
    pair("cudaMalloc/cudaFree pair (1 MiB), tracked / untracked", "ratio", CUDA_UNTRACKED, CUDA_TRACKED, 1.02)
    pair("the same with stacks=all, the default (the leak report names each site)", "ratio",
         CUDA_UNTRACKED, CUDA_TRACKED_STACKS, 1.02)
    pair("cudaMallocAsync/cudaFreeAsync pair (1 MiB), tracked / untracked", "ratio",
         ASYNC_UNTRACKED, ASYNC_TRACKED, 1.10)
    heading = "the same stream-ordered pair, tracked and untracked batches alternating in one loop"
    target = "<= %g" % ALTERNATING_LIMIT
    result = lookup(results, ASYNC_ALTERNATING)
    c = result.counters
    if result.not_run or any(k not in c for k in ("ratio", "ratio_p25", "ratio_p75")):
        rows.append((heading, target, BY_TRACKING, "not run (%s)" % (result.not_run or "no ratio counters")))
    else:
        rows.append((heading, target, BY_TRACKING, cell("%.3f" % c["ratio"], c["ratio"] <= ALTERNATING_LIMIT,
                                                      "quartiles %.3f to %.3f" % (c["ratio_p25"], c["ratio_p75"]))))

    def scope(heading, baseline_name, measured_name, alternating_name):
        baseline, measured = lookup(results, baseline_name), lookup(results, measured_name)
        reason = not_run_reason(baseline, measured)
        if reason:
            rows.append((heading, "<= +100 ns", BY_OPS, reason))
            return
        added = per_item_ns(measured) - per_item_ns(baseline)
        detail = ""
        loop = lookup(results, alternating_name)
        if not loop.not_run and "added_ns" in loop.counters:
            detail = "%+.1f ns in one loop" % loop.counters["added_ns"]
        rows.append((heading, "<= +100 ns", BY_OPS, cell("%+.1f ns" % added, added <= 100.0, detail)))

    scope("operation scope, empty body (nvtx=1), JSONL writer running: added per scope",
          SCOPE_BASELINE, SCOPE_SCOPED, "BM_op_scope_alternating/nvtx_on/manual_time")
    scope("the same with nvtx=0", SCOPE_BASELINE, SCOPE_NVTX_OFF, "BM_op_scope_alternating/nvtx_off/manual_time")
    scope("operation scope around a tracked host pair: added per scope", PAIR_BASELINE, PAIR_SCOPED,
          "BM_op_scope_alternating/pair/manual_time")
    writer = lookup(results, WRITER_FILE)
    heading = "JSONL writer thread, to a file: events written per second, none dropped"
    dropped = writer.counters.get("dropped")
    if writer.not_run or dropped is None:
        rows.append((heading, ">= 1e+06 events/s", BY_OPS, "not run (%s)" % (writer.not_run or "no drop count")))
    else:
        rate = throughput(writer)
        rows.append((heading, ">= 1e+06 events/s", BY_OPS,
                     cell("%.3g events/s" % rate, rate >= 1e6 and dropped == 0, "%d dropped" % dropped)))
    return rows


def rounds_cell(ratio, round_ratios, judged):
    return cell("%.3f" % ratio, judged, "rounds %s" % ratio_range(round_ratios))


def interval_cell(figure):
    """A figure of figure_stats.figure(): its median, its interval and its verdict."""
    if figure["interval"] is None:
        return cell("%.3f" % figure["median"], figure.get("verdict", ""), "%d rounds" % len(figure["rounds"]))
    return cell("%.3f" % figure["median"], figure.get("verdict", ""), "95%% interval %.3f to %.3f, %d rounds"
                % (figure["interval"][0], figure["interval"][1], len(figure["rounds"])))


def track_rows(document):
    """(figure, target, measured by, cell) for track_overhead.py's figures of one run (a run before
    the intervals: rounds' ratios and their verdict)."""
    rows = []
    figures = document.get("figures", {})
    for name, what, how in TRACK_FIGURES:
        heading = "`gpuguard run --track`: %s, %s" % (what, how)
        figure = figures.get(name)
        if not figure:
            rows.append((heading, "?", BY_TRACK, "not run (not in this run)"))
            continue
        if "interval" in figure:
            rows.append((heading, "<= %g" % figure["target"], BY_TRACK, interval_cell(figure)))
        else:
            rows.append((heading, "<= %g" % figure["target"], BY_TRACK,
                         rounds_cell(figure["ratio"], figure["round_ratios"], figure["verdict"])))
        if name == "cuMemAllocAsync pair ns":
            inside = document.get("in_one_process", {}).get("track")
            heading = "the same pair inside one process: the interposer's calls / the driver's own"
            if not inside:
                rows.append((heading, "<= %g" % figure["target"], BY_TRACK, "not run (not in this run)"))
            elif "interval" in inside:
                rows.append((heading, "<= %g" % figure["target"], BY_TRACK, interval_cell(
                    dict(inside, verdict=stats.verdict(inside["interval"], figure["target"])))))
            else:
                judged, _ = rounds_verdict([1.0] * len(inside["round_ratios"]), inside["round_ratios"],
                                           figure["target"])
                rows.append((heading, "<= %g" % figure["target"], BY_TRACK,
                             rounds_cell(inside["ratio"], inside["round_ratios"], judged)))
    peer = document.get("peer")
    if peer:
        heading = "`--track` overhead / `_record_memory_history()` overhead, a PyTorch training step"
        q = peer["track_over_peer"]
        from track_overhead import PEER_LIMIT  # track_overhead imports this file
        rows.append((heading, "<= %g" % PEER_LIMIT, BY_TRACK,
                     interval_cell(q) if q else "not measurable (recording cost nothing in a round)"))
    return rows


# torch_bench.py's targets before its JSON named them (runs before 2026-12-07).
TORCH_TARGETS_BEFORE_INTERVALS = {"observe": 1.01, "swap_in": 1.15}


def torch_rows(document):
    """(figure, target, measured by, cell) for torch_bench.py's figures of one run (a run before
    the intervals: rounds' ratios and their verdict)."""
    rows = []
    for mode, heading in (("observe", "LibTorch adapter, observe mode: training step / native step"),
                          ("swap_in", "LibTorch adapter, swap-in mode: training step / native step")):
        figure = document.get("figures", {}).get(mode)
        if figure:
            rows.append((heading, "<= %g" % figure["target"], BY_TORCH, interval_cell(figure)))
            continue
        target = "<= %g" % TORCH_TARGETS_BEFORE_INTERVALS[mode]
        if mode not in document.get("ratios", {}):
            rows.append((heading, target, BY_TORCH, "not run (not in this run)"))
            continue
        rows.append((heading, target, BY_TORCH, rounds_cell(document["ratios"][mode],
                                                           document["round_ratios"][mode],
                                                           document["verdicts"][mode])))
    return rows


def kept_rows(kept):
    return (library_rows(kept["benchmarks"]) + track_rows(kept["track_overhead"])
            + torch_rows(kept["torch_bench"]))


def command_words(command):
    """A recorded benchmark command with its program named without the directory it ran from, so
    the page holds no path of one machine."""
    words = shlex.split(command)
    return shlex.join([os.path.basename(words[0])] + words[1:]) if words else command


def merged_rows(rows, models):
    """The page's rows from each model's (figure, target, by, cell) rows: one per figure, in the
    order the models first name them, with each model's target (None where its run has no such
    figure) and cell ("not run (not in this run)" there)."""
    order = []
    for model in models:
        for figure, _, by, _ in rows[model]:
            if (figure, by) not in order:
                order.append((figure, by))
    merged = []
    for figure, by in order:
        found = [{r[0]: r for r in rows[m]}.get(figure) for m in models]
        merged.append((figure, by, [r[1] if r else None for r in found],
                       [r[3] if r else "not run (not in this run)" for r in found]))
    return merged


def docs_page(kept_by_model):
    """docs/benchmarks.md from the kept results, one per GPU model (sorted by model)."""
    models = sorted(kept_by_model)
    if not models:
        raise ValueError("no kept results to build the page from")
    rows = {model: kept_rows(kept_by_model[model]) for model in models}
    dated = {model: short_date(kept_by_model[model]["benchmarks"].get("context", {}).get("date"))
             for model in models}
    lines = [
        TITLE, "",
        "<!-- Generated by `python3 benchmarks/run_benchmarks.py docs` from benchmarks/results/*.json: edit "
        "those (with `run_benchmarks.py keep`) or the script, never this page. -->", "",
        "What gpuguard costs a program, on each GPU model it is tested on: the newest kept run of each. "
        "Every figure is computed from the JSON in `benchmarks/results/`, written by the commands named "
        "under \"The runs\". A figure of one run on one machine does not settle a target: two machines "
        "of one kind can differ by more than a target's margin, which is why the rounds' range is shown.",
        "", "## Where each target stands", "",
        "| figure | target | measured by | %s |" % " | ".join(
            "%s (%s, %s)" % (model, dated[model].split(" ")[0], kept_by_model[model]["commit"])
            for model in models),
        "|---|---|---|%s" % ("---|" * len(models))]
    for figure, by, targets, cells in merged_rows(rows, models):
        named = {t for t in targets if t is not None}
        target = named.pop() if len(named) == 1 else "; ".join(
            "%s: %s" % (m, t) for m, t in zip(models, targets) if t is not None)
        lines.append("| %s | %s | %s | %s |" % (figure, target, by, " | ".join(cells)))
    lines += ["", "PASS: within the target; MISS: over it; within noise: the rounds' own ratios fall on "
              "both sides of the target, so the run cannot tell. Where a figure shows a 95% interval: met "
              "where the interval's upper end is within the target, missed where its lower end is over it, "
              "within noise where it covers the target.", "", "## The runs", "",
              "| | %s |" % " | ".join(models), "|---|%s" % ("---|" * len(models))]
    machines = [kept_by_model[m]["benchmarks"].get("context", {}).get("gpuguard_machine", {}) for m in models]
    lines.append("| GPU | %s |" % " | ".join(
        ", ".join("%s (driver %s)" % (g["name"], g["driver"]) for g in mach.get("gpus", [])) for mach in machines))
    lines.append("| CPU | %s |" % " | ".join("%s, %s cores" % (mach.get("cpu", "?"), mach.get("cores", "?"))
                                             for mach in machines))
    lines.append("| date | %s |" % " | ".join(dated[m] for m in models))
    lines.append("| commit | %s |" % " | ".join(kept_by_model[m]["commit"] for m in models))
    lines.append("| command | %s |" % " | ".join("`%s`" % kept_by_model[m]["command"] for m in models))
    lines.append("| kept in | %s |" % " | ".join("`benchmarks/results/%s.json`" % m.lower() for m in models))
    lines += ["", "The benchmark programs ran as:", ""]
    seen = []
    for model in models:
        for command in bench_commands(kept_by_model[model]["benchmarks"]):
            shown = command_words(command)
            if shown not in seen:
                seen.append(shown)
    lines += ["- `%s`" % c for c in seen]
    lines += track_parts_lines(kept_by_model, models)
    lines += ["", "## How it is measured", ""] + HOW_MEASURED
    text = "\n".join(lines) + "\n"
    return text


# track_overhead.py's arms besides plain and --track, in the order shown: what they tell apart.
TRACK_PARTS = (("preload", "`LD_PRELOAD` of the interposer alone, no supervisor"),
               ("run", "`gpuguard run` without `--track`"),
               ("at_once", "`--track` recording on the calling thread (`GPUGUARD_TRACK_DEFER=0`)"))


def track_parts_lines(kept_by_model, models):
    """What `--track`'s cost is made of: each other arm of track_overhead.py against plain, per figure
    and GPU model (median of the rounds; "-" where the run had no such arm)."""
    lines = ["", "## `--track`, taken apart", "",
             "Each arm of `track_overhead.py` against the plain program, median of the rounds: whether "
             "a cost is the interposer's, the supervisor's, or the recording's (what recording off the "
             "calling thread saves).", "",
             "| figure | arm (its time / plain's) | %s |" % " | ".join(models), "|---|---|%s" % ("---|" * len(models))]
    for name, what, _ in TRACK_FIGURES:
        for arm, title in TRACK_PARTS:
            cells = []
            for model in models:
                figure = kept_by_model[model]["track_overhead"].get("figures", {}).get(name, {})
                ratio = figure.get(arm + "_ratio")
                cells.append("%.3f" % ratio if ratio is not None else "-")
            if any(c != "-" for c in cells):
                lines.append("| %s | %s | %s |" % (what, title, " | ".join(cells)))
    return lines


HOW_MEASURED = [
    "- **The library's hot path** (`benchmarks/gpuguard_tracking_bench`, Google Benchmark): each tracked "
    "benchmark has an untracked twin in the same run, and every repetition of every benchmark runs in "
    "one random interleaved order, so a machine's drift falls on both. A figure is the median of the "
    "repetitions; a benchmark with a failed repetition counts as not run. The alternating benchmarks "
    "time a tracked and an untracked batch in turn inside one loop and report the median of those "
    "batches' own ratios.",
    "- **Operation scopes and the JSONL writer** (`benchmarks/gpuguard_ops_bench`): batches of 8192 "
    "scope bodies while the writer thread drains the queue into the JSONL sink; a figure is the time "
    "per body. The writer's rate is 65536 scopes written to a file, none dropped.",
    "- **`gpuguard run --track`** (`benchmarks/track_overhead.py`): a plain program against the same "
    "program under `gpuguard run --track`, in separate processes (the interposer is preloaded), in rounds "
    "that each run every arm once, each round starting one arm later, and the plain program a second "
    "time (the baseline's own spread). A figure is the median of the rounds' paired ratios (an arm over "
    "plain in the same round) with a distribution-free 95% interval on that median (the order statistics "
    "of the rounds, as the sign test bounds a median); runs before the intervals judged each round's ratio. "
    "The program also times the stream-ordered pair inside one process, through the interposer and "
    "through the driver's entry points in alternating batches. The PyTorch step also runs alternating "
    "blocks under PyTorch's `torch.cuda.memory._record_memory_history()` (default arguments) in the "
    "plain processes: the peer whose overhead `--track`'s is compared with.",
    "- **The LibTorch adapter** (`benchmarks/torch_bench.py`): `examples/torch_cnn`'s median step "
    "time in observe and swap-in mode against PyTorch's native allocator, a process per mode, the modes "
    "alternating round by round, native run twice a round; figures, intervals and verdicts as for "
    "`--track`.",
    "",
    "To measure again on a machine with one H100 or H200, and keep the run:",
    "",
    "```sh",
    "bash scripts/gpu-runner.sh bench          # writes gpu-runner-out/{benchmarks,track_overhead,torch_bench}.json",
    "python3 benchmarks/run_benchmarks.py keep gpu-runner-out --commit \"$(git rev-parse --short HEAD)\"",
    "python3 benchmarks/run_benchmarks.py docs # rebuilds this page from benchmarks/results/",
    "```",
    "",
    "To judge a change to the hot path, time it against the code before it in one run on one machine: "
    "`benchmarks/ab_tracking.sh PATCH [ROUNDS]` builds the benchmarks with and without the patch and "
    "interleaves them. `benchmarks/ledger_instructions.sh [BUILD_DIR]` counts the instructions the "
    "ledger runs per tracked pair (callgrind), which is exact for a build where times vary by machine.",
]


def load_kept(directory):
    """{model: kept document} for every benchmarks/results/*.json."""
    kept = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                document = json.load(f)
            kept[document["model"]] = document
    return kept


def keep_main(argv):
    parser = argparse.ArgumentParser(
        prog="run_benchmarks.py keep",
        description="Keep one GPU runner's results as benchmarks/results/<model>.json, the source of "
                    "docs/benchmarks.md. The three results must come from one run on one machine.")
    parser.add_argument("runner_out", nargs="?", metavar="RUNNER_OUT",
                        help="scripts/gpu-runner.sh's output folder (benchmarks.json, track_overhead.json, "
                             "torch_bench.json)")
    parser.add_argument("--benchmarks", metavar="FILE", help="the benchmark programs' JSON (--json-out)")
    parser.add_argument("--track-overhead", metavar="FILE", help="track_overhead.py's JSON")
    parser.add_argument("--torch-bench", metavar="FILE", help="torch_bench.py's JSON")
    parser.add_argument("--commit", required=True, help="the commit the run built")
    parser.add_argument("--command", default="bash scripts/gpu-runner.sh bench",
                        help="the command that made the results (default: %(default)s)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where to keep it (default benchmarks/results)")
    args = parser.parse_args(argv)
    documents = {}
    for key, file_name in RUNNER_FILES.items():
        path = getattr(args, key) or (os.path.join(args.runner_out, file_name) if args.runner_out else None)
        if path is None:
            parser.error("name RUNNER_OUT or --%s FILE" % key.replace("_", "-"))
        try:
            with open(path) as f:
                documents[key] = json.load(f)
        except (OSError, ValueError) as error:
            parser.error("cannot read %s: %s" % (path, error))
    try:
        kept = kept_result(documents["benchmarks"], documents["track_overhead"], documents["torch_bench"],
                           args.commit, args.command)
    except ValueError as error:
        parser.error(str(error))
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, kept["model"].lower() + ".json")
    with open(path, "w") as f:
        json.dump(kept, f, indent=1)
        f.write("\n")
    print("run_benchmarks.py keep: wrote %s" % path)


def docs_main(argv):
    parser = argparse.ArgumentParser(
        prog="run_benchmarks.py docs",
        description="Build docs/benchmarks.md from the kept results in benchmarks/results.")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="the kept results (default benchmarks/results)")
    parser.add_argument("--out", default=DOCS_PAGE, help="the page (default docs/benchmarks.md); - for stdout")
    args = parser.parse_args(argv)
    try:
        text = docs_page(load_kept(args.results_dir))
    except (OSError, ValueError, KeyError) as error:
        parser.error("cannot build the page from %s: %s" % (args.results_dir, error))
    lines = text.count("\n")
    if lines > DOCS_LINE_LIMIT:
        parser.error("the page would be %d lines, over its %d" % (lines, DOCS_LINE_LIMIT))
    if args.out == "-":
        sys.stdout.write(text)
        return
    with open(args.out, "w") as f:
        f.write(text)
    print("run_benchmarks.py docs: wrote %s (%d lines)" % (args.out, lines))


# ---- the bench slice's summary ---------------------------------------------------------------------
# The targets track_overhead.py and torch_bench.py judged in one GPU runner's output folder, with
# their intervals and verdicts, and the spread of each baseline against itself.
SUMMARY_SOURCES = (("track_overhead", BY_TRACK), ("torch_bench", BY_TORCH))


def summary_of(documents):
    """The summary document from {key: JSON} of track_overhead.py's and torch_bench.py's runs."""
    cards = sorted({d.get("card", "?") for d in documents.values()})
    if len(cards) > 1:
        raise ValueError("the results ran on different cards (%s): summarize one run" % ", ".join(cards))
    summary = {"card": cards[0] if cards else "?", "method": stats.METHOD, "targets": [], "baseline_spread": []}
    for key, by in SUMMARY_SOURCES:
        document = documents.get(key)
        if document is None:
            continue
        if "targets" not in document:
            raise ValueError("the %s result has no judged targets: a run before the intervals" % key)
        summary["targets"] += [dict(row, by=by) for row in document["targets"]]
        summary["baseline_spread"] += [dict(row, by=by) for row in document["baseline_spread"]]
    return summary


def summary_markdown(summary):
    def interval(row):
        return stats.interval_range(row) if row["interval"] else "-"

    def median(row):
        return "%.3f" % row["median"] if row["median"] is not None else "-"

    lines = ["## Targets on %s" % summary["card"], "", "Each figure: %s." % summary["method"], "",
             "| figure | target | median | 95% interval | rounds | verdict | measured by |",
             "|---|---|---:|---:|---:|---|---|"]
    lines += ["| %s | %s | %s | %s | %d | %s | %s |" % (r["figure"], r["target"], median(r), interval(r), r["rounds"],
                                                       r["verdict"], r["by"]) for r in summary["targets"]]
    lines += ["", "met: the interval's upper end is within the target; missed: its lower end is over it; "
              "within noise: the interval covers the target.", "",
              "The baseline against itself (the baseline run twice in each round): a target's margin "
              "narrower than this spread cannot be judged by the run.", "",
              "| figure | median | 95% interval | rounds | measured by |", "|---|---:|---:|---:|---|"]
    lines += ["| %s | %s | %s | %d | %s |" % (r["figure"], median(r), interval(r), r["rounds"], r["by"])
              for r in summary["baseline_spread"]]
    return "\n".join(lines) + "\n"


def summary_main(argv):
    parser = argparse.ArgumentParser(
        prog="run_benchmarks.py summary",
        description="Write summary.md and summary.json into a GPU runner's output folder: the targets "
                    "track_overhead.py and torch_bench.py judged, with intervals and verdicts, and each "
                    "baseline's spread; print the Markdown.")
    parser.add_argument("runner_out", metavar="RUNNER_OUT", help="scripts/gpu-runner.sh's output folder")
    args = parser.parse_args(argv)
    documents = {}
    for key, _ in SUMMARY_SOURCES:
        path = os.path.join(args.runner_out, RUNNER_FILES[key])
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                documents[key] = json.load(f)
        except (OSError, ValueError) as error:
            parser.error("cannot read %s: %s" % (path, error))
    if not documents:
        parser.error("%s holds neither %s nor %s" % (args.runner_out, RUNNER_FILES["track_overhead"],
                                                      RUNNER_FILES["torch_bench"]))
    try:
        summary = summary_of(documents)
    except (ValueError, KeyError, TypeError) as error:
        parser.error("cannot summarize %s: %s" % (args.runner_out, error))
    text = summary_markdown(summary)
    with open(os.path.join(args.runner_out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(args.runner_out, "summary.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


# ---- running ----------------------------------------------------------------------------------------
def run_one(bench, args):
    """(command, JSON document) of one program's run."""
    cmd = [bench, "--benchmark_format=json", "--benchmark_repetitions=%d" % args.repetitions]
    if args.interleave:
        cmd.append("--benchmark_enable_random_interleaving=true")
    if args.min_time:
        cmd.append("--benchmark_min_time=%s" % args.min_time)
    if args.filter:
        cmd.append("--benchmark_filter=%s" % args.filter)
    print("run_benchmarks.py: running %s" % shlex.join(cmd), file=sys.stderr)
    try:
        run = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    except OSError as error:
        sys.exit("run_benchmarks.py: cannot run %s: %s" % (bench, error))
    if run.returncode != 0:
        sys.exit("run_benchmarks.py: %s exited with %d" % (bench, run.returncode))
    # A filter that matches nothing in this program leaves no JSON at all.
    return shlex.join(cmd), (json.loads(run.stdout) if run.stdout.strip() else {})


def run_benches(args):
    """Runs every program and puts their results into one document: the context of the first
    program that wrote one (with the machine and the commands added) and the benchmarks of all,
    in order."""
    document = {"context": {}, "benchmarks": []}
    commands = []
    for bench in args.bench or DEFAULT_BENCHES:
        command, one = run_one(bench, args)
        commands.append(command)
        if not document["context"]:
            document["context"] = dict(one.get("context", {}))
        else:  # a later program's own keys (the tracking program's invariant_tsc) are kept too
            for key, value in one.get("context", {}).items():
                document["context"].setdefault(key, value)
        document["benchmarks"] += one.get("benchmarks", [])
    document["context"]["gpuguard_machine"] = describe_machine()
    document["context"]["gpuguard_bench_command"] = commands[0]
    document["context"]["gpuguard_bench_commands"] = commands
    return document


def own_sections(path):
    """The '## ' headings of the Markdown file at `path` other than the one this script writes
    when it writes a whole file (none if there is no such file)."""
    try:
        with open(path) as f:
            headings = [line[3:].strip() for line in f if line.startswith("## ")]
    except FileNotFoundError:
        return []
    return [h for h in headings if h != "Results"]


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("docs", "keep", "summary"):
        {"docs": docs_main, "keep": keep_main, "summary": summary_main}[sys.argv[1]](sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", action="append", metavar="BINARY",
                        help="a benchmark program; repeat for several (default: %s and %s in "
                             "build/benchmarks)" % (TRACKING_PROGRAM, OPS_PROGRAM))
    parser.add_argument("--out", default=DEFAULT_OUT, help="Markdown file (default benchmarks.md in the current directory)")
    parser.add_argument("--append-section", metavar="NAME",
                        help="write the report as section '## NAME' of --out, keeping others")
    parser.add_argument("--json-in", metavar="FILE", help="build from this JSON; do not run")
    parser.add_argument("--json-out", metavar="FILE", help="also keep the run's JSON here")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--no-interleave", dest="interleave", action="store_false",
                        help="run each benchmark's repetitions back to back, not interleaved with the others'")
    parser.add_argument("--min-time", help="passed as --benchmark_min_time")
    parser.add_argument("--filter", help="passed as --benchmark_filter")
    args = parser.parse_args()
    # Without --append-section the whole of --out is replaced by this one report: refuse, before
    # any run, where that would lose sections the file has of its own (docs/benchmarks.md).
    others = [] if args.append_section else own_sections(args.out)
    if others:
        parser.error("%s has sections of its own (%s), which writing this report as the whole file would "
                     "lose: name its section with --append-section NAME, or write elsewhere with --out FILE; "
                     "nothing was run or written" % (args.out, ", ".join("'## %s'" % h for h in others[:3])
                                                     + (", ..." if len(others) > 3 else "")))

    if args.json_in:
        with open(args.json_in) as f:
            document = json.load(f)
    else:
        document = run_benches(args)
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
