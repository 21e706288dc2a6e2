#!/usr/bin/env python3
"""Checks run_benchmarks.py on recorded runs, without running any real benchmark.

testdata/sample.json is the JSON that `run_benchmarks.py --json-out` kept from a run of
gpuguard_tracking_bench on the H200 GPU machine (5 repetitions, aggregates only). From it the test
checks the table rows and PASS/MISS verdicts, derives a no-GPU variant (the CUDA benchmarks
replaced by the entries Google Benchmark writes for SkipWithError), and checks that
--append-section replaces its own section and keeps the others.

testdata/cpu_machine_2026-12-02.json is the JSON of a run of both programs (gpuguard_tracking_bench
and gpuguard_ops_bench) on the 2-core CPU machine, every repetition kept: the source of the CPU
CPU machine's figures. From it the test checks the operation-scope, producer, latency and
JSONL-writer rows and verdicts, that a failed repetition hidden by the aggregates still makes its
benchmark "not run", and, with stand-in programs that print parts of it, that several --bench
programs are run and their results merged.

benchmarks/results/<model>.json are the kept GPU runs that docs/benchmarks.md is generated from
(`run_benchmarks.py docs`): the test regenerates the page and requires it to equal the committed one
and to stay within its line limit, recomputes figures of the page from the JSON, and checks that
`run_benchmarks.py keep` writes the same kept file from a runner's output folder and refuses results
of different machines. Plain python3; exits non-zero on the first failed check.
"""
import copy
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "run_benchmarks.py")
SAMPLE = os.path.join(HERE, "testdata", "sample.json")
CPU_RUN = os.path.join(HERE, "testdata", "cpu_machine_2026-12-02.json")
RESULTS = os.path.join(HERE, "results")
DOCS_PAGE = os.path.join(os.path.dirname(HERE), "docs", "benchmarks.md")
README = os.path.join(os.path.dirname(HERE), "README.md")
NO_GPU = "not run (no GPU on this machine)"
CUDA_NAMES = ("BM_cuda_malloc_pair/untracked/real_time", "BM_cuda_malloc_pair/tracked/real_time",
              "BM_cuda_malloc_pair/tracked_stacks/real_time",
              "BM_cuda_async_pair/untracked/real_time", "BM_cuda_async_pair/tracked/real_time")


def run(tmp, document, out, *extra):
    path = os.path.join(tmp, "in.json")
    with open(path, "w") as f:
        json.dump(document, f)
    done = subprocess.run([sys.executable, SCRIPT, "--json-in", path, "--out", out] + list(extra),
                          capture_output=True, text=True)
    assert done.returncode == 0, "run_benchmarks.py failed:\n" + done.stderr
    with open(out) as f:
        text = f.read()
    assert done.stdout == text, "stdout is the written Markdown"
    return text


def median(document, name, field="real_time"):
    for entry in document["benchmarks"]:
        if entry.get("run_name") == name and entry.get("aggregate_name") == "median":
            assert entry["time_unit"] == "ns"
            return entry[field]
    raise AssertionError("no median for " + name)


def set_median(document, name, field, value, aggregate="median"):
    found = False
    for entry in document["benchmarks"]:
        if entry.get("run_name") == name and entry.get("aggregate_name") == aggregate:
            entry[field] = value
            found = True
    assert found, "no %s for %s" % (aggregate, name)


def without_gpu(document):
    """The same run as a machine without a GPU records it: 5 error entries per CUDA benchmark."""
    out = copy.deepcopy(document)
    out["context"]["gpuguard_machine"]["gpus"] = []
    out["benchmarks"] = [e for e in out["benchmarks"] if e["run_name"] not in CUDA_NAMES]
    for index, name in enumerate(CUDA_NAMES):
        for repetition in range(5):
            out["benchmarks"].append({
                "name": name, "family_index": 8 + index, "per_family_instance_index": 0,
                "run_name": name, "run_type": "iteration", "repetitions": 5,
                "repetition_index": repetition, "threads": 1, "iterations": 0, "real_time": 0.0,
                "cpu_time": 0.0, "time_unit": "ns", "error_occurred": True,
                "error_message": "no CUDA device"})
    return out


def tables(text):
    """The target tables, without the list of all medians after them."""
    return text.split("### All medians")[0]


def row(text, first_cell):
    rows = [line for line in tables(text).splitlines() if line.startswith("| " + first_cell + " |")]
    assert len(rows) == 1, "one row starting %r, found %d:\n%s" % (first_cell, len(rows), text)
    return rows[0]


def check_gpu_report(text, doc):
    # Machine and date come from the JSON; the host name never appears.
    assert "- CPU: Intel(R) Xeon(R) Processor, 16 logical cores" in text, text
    assert "- GPU: NVIDIA H200 (driver 580.159.04)" in text, text
    assert "- date: 2026-12-02 12:29:55 UTC" in text, text
    assert "- command: `python3 " in text and "--json-in" in text, text
    assert "- benchmark command: `/tmp/bb/benchmarks/gpuguard_tracking_bench --benchmark_format=json" \
           " --benchmark_repetitions=5 --benchmark_report_aggregates_only=true`" in text, text
    assert "secret-host-name" not in text, "the host name is not written"

    # The rows, exactly as recorded (medians of sample.json).
    assert row(text, "`BM_host_pair/untracked/real_time/threads:1`") == (
        "| `BM_host_pair/untracked/real_time/threads:1` | 54.7 | "
        "`BM_host_pair/tracked/real_time/threads:1` | 305.0 | +250.3 | <= 50 ns | MISS |")
    assert row(text, "tracked") == ("| tracked | 305.0 | 264.4 | 3.28e+06 | 3.78e+06 | 1.15x | >= 8 "
                                    "| MISS |")
    assert row(text, "untracked") == ("| untracked | 54.7 | 92.4 | 1.83e+07 | 1.08e+07 | 0.59x "
                                      "| (comparison) | - |")
    malloc_pairs = [line for line in tables(text).splitlines()
                    if line.startswith("| `BM_cuda_malloc_pair/untracked/real_time` |")]
    assert malloc_pairs[0] == (
        "| `BM_cuda_malloc_pair/untracked/real_time` | 103136.8 | "
        "`BM_cuda_malloc_pair/tracked/real_time` | 71285.5 | 0.691 | <= 1.02 | PASS |"), malloc_pairs
    # The stacks=all arm (main() gives the sample, which predates it, the tracked arm's figures +2%).
    assert malloc_pairs[1:] == [
        "| `BM_cuda_malloc_pair/untracked/real_time` | 103136.8 | "
        "`BM_cuda_malloc_pair/tracked_stacks/real_time` | 72711.2 | 0.705 | <= 1.02 | PASS |"], malloc_pairs
    assert row(text, "`BM_cuda_async_pair/untracked/real_time`") == (
        "| `BM_cuda_async_pair/untracked/real_time` | 997.1 | "
        "`BM_cuda_async_pair/tracked/real_time` | 1904.9 | 1.910 | <= 1.1 | MISS |")
    stacks = [line for line in tables(text).splitlines()
              if line.startswith("| `BM_host_pair/tracked/real_time/threads:1` |")]
    assert stacks == [
        "| `BM_host_pair/tracked/real_time/threads:1` | 305.0 | "
        "`BM_host_pair_stacks_all/tracked/real_time` | 9806.0 | +9501.0 | <= 100 ns | MISS |",
        "| `BM_host_pair/tracked/real_time/threads:1` | 305.0 | "
        "`BM_host_pair_stacks_sampled/tracked/real_time` | 400.7 | 1.314 | <= 1.2 | MISS |"], stacks

    # The same numbers, recomputed here from the JSON: the script invents nothing.
    added = (median(doc, "BM_host_pair/tracked/real_time/threads:1")
             - median(doc, "BM_host_pair/untracked/real_time/threads:1"))
    assert "| %+.1f | <= 50 ns |" % added in text
    ratio = (median(doc, "BM_cuda_malloc_pair/tracked/real_time")
             / median(doc, "BM_cuda_malloc_pair/untracked/real_time"))
    assert "| %.3f | <= 1.02 |" % ratio in text
    scale = (median(doc, "BM_host_pair/tracked/real_time/threads:16", "items_per_second")
             / median(doc, "BM_host_pair/tracked/real_time/threads:1", "items_per_second"))
    assert "| %.2fx | >= 8 |" % scale in text
    untracked_scale = (median(doc, "BM_host_pair/untracked/real_time/threads:16", "items_per_second")
                       / median(doc, "BM_host_pair/untracked/real_time/threads:1", "items_per_second"))
    assert ("| tracked 16 / 1 threads over untracked 16 / 1 threads | %.3f | >= 0.8 | PASS |"
            % (scale / untracked_scale)) in text, text
    assert text.count("| PASS |") == 3 and text.count("| MISS |") == 5, text  # + the stacks=all cudaMalloc pair
    assert "not run" not in text


def headings(text):
    return [line for line in text.splitlines() if line.startswith("## ")]


# ---- gpuguard_ops_bench ---------------------------------------------------------------------------
SCOPED = "BM_op_scope/scoped/manual_time"
SCOPE_BASELINE = "BM_op_scope/baseline/manual_time"
PAIR_SCOPED = "BM_op_scope_pair/scoped/manual_time"
PAIR_BASELINE = "BM_op_scope_pair/baseline/manual_time"
WRITER_FILE = "BM_jsonl_sink/file/real_time"


def table(text, heading_start):
    """The one table whose heading starts with heading_start, up to the next heading."""
    parts = [p for p in text.split("\n### ") if p.startswith(heading_start)]
    assert len(parts) == 1, "one table %r, found %d:\n%s" % (heading_start, len(parts), text)
    return parts[0]


def per_body_ns(document, name):
    return 1e9 / median(document, name, "items_per_second")


def check_cpu_report(text, doc):
    """The CPU machine's run of both programs, as recorded."""
    assert "- CPU: Intel(R) Xeon(R) Processor, 2 logical cores" in text, text
    assert "- GPU: none (no nvidia-smi, or it found no GPU)" in text, text
    assert "- date: 2026-12-02 21:57:36 UTC" in text, text
    assert "- benchmark command: `build-bench/benchmarks/gpuguard_tracking_bench " \
           "--benchmark_format=json --benchmark_repetitions=5`\n" \
           "- benchmark command: `build-bench/benchmarks/gpuguard_ops_bench " \
           "--benchmark_format=json --benchmark_repetitions=5`\n" in text, text
    assert "secret-host-name" not in text and "| vm |" not in text

    # The tracking tables are there too, with the CUDA rows not run on this machine.
    assert row(text, "`BM_host_pair/untracked/real_time/threads:1`") == (
        "| `BM_host_pair/untracked/real_time/threads:1` | 30.4 | "
        "`BM_host_pair/tracked/real_time/threads:1` | 140.9 | +110.6 | <= 50 ns | MISS |")
    malloc_pairs = [line for line in tables(text).splitlines()
                    if line.startswith("| `BM_cuda_malloc_pair/untracked/real_time` |")]
    assert len(malloc_pairs) == 2 and all(line.endswith("| <= 1.02 | %s |" % NO_GPU) for line in malloc_pairs), \
        malloc_pairs  # without and with stacks

    # Scope targets: per-body times, 1e9 / items_per_second of the median.
    scope_rows = [line for line in tables(text).splitlines()
                  if line.startswith("| `%s` |" % SCOPE_BASELINE) and "manual_time` | 0.3 | `" in line]
    assert scope_rows == [
        "| `BM_op_scope/baseline/manual_time` | 0.3 | `BM_op_scope/scoped/manual_time` | 70.7 | "
        "+70.4 | 0.3 | 63.8 | +63.5 | <= 100 ns | PASS |",
        "| `BM_op_scope/baseline/manual_time` | 0.3 | `BM_op_scope/scoped_nvtx_off/manual_time` | "
        "68.3 | +68.1 | 0.3 | 67.5 | +67.2 | <= 100 ns | PASS |"], scope_rows
    assert row(table(text, "Operation scope around"), "`%s`" % PAIR_BASELINE) == (
        "| `BM_op_scope_pair/baseline/manual_time` | 186.5 | `BM_op_scope_pair/scoped/manual_time` | "
        "291.0 | +104.5 | 186.7 | 233.5 | +46.8 | <= 100 ns | MISS |")
    assert row(table(text, "Producer with"), "`BM_op_scope/scoped_no_sink/manual_time`") == (
        "| `BM_op_scope/scoped_no_sink/manual_time` | 66.6 | `BM_op_scope/scoped/manual_time` | "
        "70.7 | +4.0 | 66.7 | 63.8 | -2.9 | (comparison) | - |")
    added = per_body_ns(doc, PAIR_SCOPED) - per_body_ns(doc, PAIR_BASELINE)
    assert "| %+.1f | 186.7 |" % added in text
    cpu_added = (median(doc, SCOPED, "cpu_ns_per_op")
                 - median(doc, SCOPE_BASELINE, "cpu_ns_per_op"))
    assert "| %+.1f | <= 100 ns |" % cpu_added in text

    # The producer never waited; it was preempted, mostly while the writer had work.
    producer = table(text, "Producer thread during")
    assert "| `BM_op_scope_pair/scoped/manual_time` | 291.0 | 233.5 | 0 | 0.49 | no waits | PASS |" \
        in producer, producer
    assert "| `BM_op_scope/baseline/manual_time` | 0.3 | 0.3 | 0 | 9.89e-05 | (comparison) | - |" \
        in producer, producer
    assert producer.count("| no waits | PASS |") == 5 and "MISS" not in producer, producer

    # Latency percentiles; the maxima are not subtracted.
    latency = table(text, "Latency of each scope")
    assert row(latency, "`BM_op_scope_latency/baseline/manual_time`") == (
        "| `BM_op_scope_latency/baseline/manual_time` | 16 | 17 | 19 | 67167 |")
    assert row(latency, "`BM_op_scope_latency/scoped/manual_time`") == (
        "| `BM_op_scope_latency/scoped/manual_time` | 79 | 116 | 396 | 915877 |")
    assert row(latency, "added by the scope") == "| added by the scope | +63 | +99 | +377 | - |"

    # The JSONL writer's rate into a file, with its drop count; /dev/null for comparison.
    assert row(text, "`%s`" % WRITER_FILE) == (
        "| `BM_jsonl_sink/file/real_time` | a file in the temp directory | 403.1 | 2.48e+06 | 183 "
        "| 0 | >= 1e+06 events/s | PASS |")
    assert row(text, "`BM_jsonl_sink/dev_null/real_time`") == (
        "| `BM_jsonl_sink/dev_null/real_time` | /dev/null | 333.3 | 3e+06 | - | 0 | (comparison) "
        "| - |")
    assert "| %.3g |" % median(doc, WRITER_FILE, "items_per_second") in text
    assert text.count("| PASS |") == 2 + 5 + 1 + 1, text  # + tracking's relative scaling
    assert text.count("| MISS |") == 4 + 1, text  # four tracking targets, the pair scope


def check_ops_verdicts(tmp, doc, out):
    """Each ops verdict follows its numbers, on both sides of its limit."""
    def with_body_ns(document, name, value):
        set_median(document, name, "items_per_second", 1e9 / value)

    better = copy.deepcopy(doc)
    with_body_ns(better, PAIR_BASELINE, 200.0)
    with_body_ns(better, PAIR_SCOPED, 300.0)  # exactly +100 ns
    text = run(tmp, better, out)
    assert row(table(text, "Operation scope around"), "`%s`" % PAIR_BASELINE).endswith(
        "| +100.0 | 186.7 | 233.5 | +46.8 | <= 100 ns | PASS |"), text
    worse = copy.deepcopy(doc)
    with_body_ns(worse, SCOPE_BASELINE, 1.0)
    with_body_ns(worse, SCOPED, 101.5)
    set_median(worse, WRITER_FILE, "items_per_second", 999999.0)
    set_median(worse, "BM_op_scope/scoped_nvtx_off/manual_time", "waits_per_batch", 0.2, "mean")
    text = run(tmp, worse, out)
    assert "| 1.0 | `BM_op_scope/scoped/manual_time` | 101.5 | +100.5 |" in text, text
    assert "| +100.5 | 0.3 | 63.8 | +63.5 | <= 100 ns | MISS |" in text, text
    assert "| 1e+06 | 183 | 0 | >= 1e+06 events/s | MISS |" in text, text
    assert "| `BM_op_scope/scoped_nvtx_off/manual_time` | 68.3 | 67.5 | 0.2 | 0.0335 | no waits " \
           "| MISS |" in text, text
    # A drop count above zero is a miss whatever the rate.
    dropped = copy.deepcopy(doc)
    set_median(dropped, WRITER_FILE, "dropped", 3.0)
    text = run(tmp, dropped, out)
    assert "| 2.48e+06 | 183 | 3 | >= 1e+06 events/s | MISS |" in text, text


def check_failed_repetition(tmp, doc, out):
    """Google Benchmark leaves a repetition that failed out of the aggregates; the report does not."""
    failed = copy.deepcopy(doc)
    for entry in failed["benchmarks"]:
        if entry["run_name"] == WRITER_FILE and entry.get("repetition_index") == 2:
            for key in ("real_time", "cpu_time", "items_per_second", "dropped", "bytes_per_event"):
                entry.pop(key, None)
            entry.update({"error_occurred": True, "iterations": 0,
                          "error_message": "events were dropped: the output queue was full"})
            break
    else:
        raise AssertionError("no repetition 2 of " + WRITER_FILE)
    assert median(failed, WRITER_FILE, "items_per_second") > 1e6  # the aggregate still looks good
    text = run(tmp, failed, out)
    assert row(text, "`%s`" % WRITER_FILE) == (
        "| `BM_jsonl_sink/file/real_time` | a file in the temp directory | - | - | - | - "
        "| >= 1e+06 events/s | not run (skipped: events were dropped: the output queue was full) |")


def check_programs(tmp, doc, sample):
    """Only the tables of the programs that ran; several --bench programs are run and merged."""
    # The tracking program alone (the H200 sample): no ops tables at all.
    text = run(tmp, sample, os.path.join(tmp, "tracking.md"))
    assert "Operation scope" not in text and "JSONL" not in text, text
    # The ops program alone: no tracking tables.
    ops_only = copy.deepcopy(doc)
    ops_only["benchmarks"] = [e for e in doc["benchmarks"]
                              if e["run_name"].startswith(("BM_op_scope", "BM_jsonl_sink"))]
    ops_only["context"]["gpuguard_bench_commands"] = doc["context"]["gpuguard_bench_commands"][1:]
    text = run(tmp, ops_only, os.path.join(tmp, "ops.md"))
    assert "Host memory" not in text and "cudaMalloc" not in text, text
    assert "- times: median of 5 repetitions\n" in text, text
    assert text.count("| PASS |") == 2 + 5 + 1 and text.count("| MISS |") == 1, text
    # An ops program that ran but lost a benchmark shows it as not in this run.
    lost = copy.deepcopy(ops_only)
    lost["benchmarks"] = [e for e in lost["benchmarks"] if e["run_name"] != WRITER_FILE]
    text = run(tmp, lost, os.path.join(tmp, "lost.md"))
    assert "| >= 1e+06 events/s | not run (not in this run) |" in text, text

    # Stand-ins for the two programs print their part of the recorded run and their arguments.
    programs = []
    for name, prefixes in (("gpuguard_tracking_bench", ("BM_host", "BM_cuda")),
                           ("gpuguard_ops_bench", ("BM_op_scope", "BM_jsonl_sink"))):
        part = copy.deepcopy(doc)
        part["benchmarks"] = [e for e in doc["benchmarks"] if e["run_name"].startswith(prefixes)]
        for key in ("gpuguard_machine", "gpuguard_bench_command", "gpuguard_bench_commands"):
            del part["context"][key]
        if name == "gpuguard_ops_bench":  # a key of the second program's own context
            part["context"]["second_program_key"] = "kept"
        data = os.path.join(tmp, name + ".json")
        with open(data, "w") as f:
            json.dump(part, f)
        program = os.path.join(tmp, "bin", name)
        os.makedirs(os.path.dirname(program), exist_ok=True)
        with open(program, "w") as f:
            f.write("#!%s\nimport sys\n"
                    "sys.stderr.write('args: ' + ' '.join(sys.argv[1:]) + '\\n')\n"
                    "sys.stdout.write(open(%r).read())\n" % (sys.executable, data))
        os.chmod(program, os.stat(program).st_mode | stat.S_IEXEC)
        programs.append(program)
    kept = os.path.join(tmp, "merged.json")
    out = os.path.join(tmp, "merged.md")
    done = subprocess.run([sys.executable, SCRIPT, "--bench", programs[0], "--bench", programs[1],
                           "--out", out, "--json-out", kept, "--min-time", "0.01"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("args: --benchmark_format=json --benchmark_repetitions=5 "
                             "--benchmark_enable_random_interleaving=true --benchmark_min_time=0.01\n") == 2, done.stderr
    # --no-interleave leaves the flag out.
    done = subprocess.run([sys.executable, SCRIPT, "--bench", programs[0], "--out", os.path.join(tmp, "plain.md"),
                           "--repetitions", "3", "--no-interleave"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "args: --benchmark_format=json --benchmark_repetitions=3\n" in done.stderr, done.stderr
    with open(kept) as f:
        merged = json.load(f)
    assert [e["name"] for e in merged["benchmarks"]] == [e["name"] for e in doc["benchmarks"]]
    commands = merged["context"]["gpuguard_bench_commands"]
    assert [os.path.basename(c.split()[0]) for c in commands] == [
        "gpuguard_tracking_bench", "gpuguard_ops_bench"], commands
    assert merged["context"]["gpuguard_bench_command"] == commands[0]
    assert merged["context"]["second_program_key"] == "kept", merged["context"]
    assert merged["context"]["date"] == doc["context"]["date"]
    with open(out) as f:
        text = f.read()
    for command in commands:
        assert "- benchmark command: `%s`" % command in text, text
    assert "- times: median of 5 repetitions, interleaved at random with the other benchmarks', real time" in text, text
    # A program whose filter matched nothing prints no JSON: the context comes from the next one.
    silent = os.path.join(tmp, "bin", "silent")
    with open(silent, "w") as f:
        f.write("#!/bin/sh\necho 'Failed to match any benchmarks' >&2\n")
    os.chmod(silent, os.stat(silent).st_mode | stat.S_IEXEC)
    done = subprocess.run([sys.executable, SCRIPT, "--bench", silent, "--bench", programs[1],
                           "--out", os.path.join(tmp, "silent.md")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "- date: 2026-12-02 21:57:36 UTC" in done.stdout, done.stdout
    assert "Host memory" not in done.stdout and "| `%s` |" % WRITER_FILE in done.stdout, done.stdout
    # The operation-scope tables do not depend on the machine the script runs on (the tracking
    # section notes when a machine has too few cores for its 16-thread row).
    def ops_tables(markdown):
        return tables(markdown).split("**Operation scopes")[-1]
    assert ops_tables(text) == ops_tables(run(tmp, doc, os.path.join(tmp, "recorded.md"))), \
        "the same tables as the recorded run"


ALTERNATING = "BM_cuda_async_pair/alternating/real_time"


def with_alternating(document, counters, error=None, name=ALTERNATING, family_index=40):
    """`document` with an alternating benchmark added (the stream-ordered pair's unless `name`
    says another): its median aggregate with `counters`, or, given `error`, the iteration entries
    of a run that failed with it."""
    out = copy.deepcopy(document)
    base = {"name": name, "family_index": family_index, "per_family_instance_index": 0,
            "run_name": name, "repetitions": 3, "threads": 1, "time_unit": "ns"}
    if error:
        for repetition in range(3):
            out["benchmarks"].append(dict(base, run_type="iteration", repetition_index=repetition,
                                          iterations=0, real_time=0.0, cpu_time=0.0,
                                          error_occurred=True, error_message=error))
    else:
        out["benchmarks"].append(dict(base, run_type="aggregate", aggregate_name="median",
                                      iterations=3, real_time=45000.0, cpu_time=45000.0, **counters))
    return out


def check_alternating(tmp, doc, out):
    heading = "### cudaMallocAsync/cudaFreeAsync pairs, tracked and untracked batches alternating"
    # A run from before the benchmark existed (sample.json) has no such table.
    text = run(tmp, doc, out)
    assert heading not in text and ALTERNATING not in text, text
    # The counters are the figures, the median ratio the verdict.
    counters = {"untracked_ns": 650.25, "tracked_ns": 703.5, "ratio": 1.0812,
                "ratio_p25": 1.0423, "ratio_p75": 1.1204}
    text = run(tmp, with_alternating(doc, counters), out)
    assert heading in text, text
    assert row(text, "`%s`" % ALTERNATING) == (
        "| `%s` | 650.2 | 703.5 | 1.081 | 1.042 to 1.120 | <= 1.1 | PASS |" % ALTERNATING), text
    text = run(tmp, with_alternating(doc, dict(counters, ratio=1.1001)), out)
    assert row(text, "`%s`" % ALTERNATING).endswith("| 1.100 | 1.042 to 1.120 | <= 1.1 | MISS |"), text
    # A run without the counters, and a machine without a GPU, have no figure to judge.
    text = run(tmp, with_alternating(doc, {"ratio": 1.0}), out)
    assert row(text, "`%s`" % ALTERNATING).endswith("not run (no ratio counters in this run) |"), text
    medians = text.split("### All medians")[1]
    assert "| `%s` | 45000.0 |" % ALTERNATING in medians, medians  # it ran: only its table lacks figures
    text = run(tmp, with_alternating(doc, {}, error="no CUDA device"), out)
    assert row(text, "`%s`" % ALTERNATING).endswith("| <= 1.1 | %s |" % NO_GPU), text


def check_threads_per_core(tmp, doc, out):
    """Threads per core: read from /proc/cpuinfo's text, and written beside the core count when the
    JSON has it (a run from before it was recorded shows the line as it was)."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import run_benchmarks  # noqa: E402
    block = "processor\t: 0\nmodel name\t: X\nsiblings\t: %s\ncore id\t\t: 0\ncpu cores\t: %s\n\n"
    assert run_benchmarks.threads_per_core(block % (16, 8) + block % (16, 8)) == 2
    assert run_benchmarks.threads_per_core(block % (16, 16)) == 1
    assert run_benchmarks.threads_per_core("processor\t: 0\nmodel name\t: X\n") is None  # not said (a VM)
    assert run_benchmarks.threads_per_core(block % (4, 0)) is None
    recorded = copy.deepcopy(doc)
    recorded["context"]["gpuguard_machine"]["threads_per_core"] = 2
    text = run(tmp, recorded, out)
    assert "- CPU: Intel(R) Xeon(R) Processor, 16 logical cores (2 threads a core)\n" in text, text
    recorded["context"]["gpuguard_machine"]["threads_per_core"] = 1
    text = run(tmp, recorded, out)
    assert "- CPU: Intel(R) Xeon(R) Processor, 16 logical cores (1 thread a core)\n" in text, text


SCOPE_ALTERNATING = ["BM_op_scope_alternating/%s/manual_time" % body for body in ("nvtx_on", "nvtx_off", "pair")]


def check_scope_alternating(tmp, doc, out):
    heading = "### Operation scope, plain and scoped batches alternating in one loop"
    # A run from before the benchmarks existed (sample.json) has no such table.
    text = run(tmp, doc, out)
    assert heading not in text and "BM_op_scope_alternating" not in text, text
    counters = {"baseline_ns": 0.4, "scoped_ns": 72.25, "added_ns": 71.9, "added_p25": 70.04,
                "added_p75": 74.5}
    with_all = doc
    for index, name in enumerate(SCOPE_ALTERNATING):
        added = dict(counters, added_ns=100.05) if "pair" in name else counters
        with_all = with_alternating(with_all, added, name=name, family_index=60 + index)
    text = run(tmp, with_all, out)
    assert heading in text, text
    # The median difference is the figure and the verdict; the two medians and quartiles beside it.
    assert row(text, "`%s`" % SCOPE_ALTERNATING[0]) == (
        "| `%s` | empty, nvtx=1 | 0.4 | 72.2 | +71.9 | +70.0 to +74.5 | <= 100 ns | PASS |"
        % SCOPE_ALTERNATING[0]), text
    assert row(text, "`%s`" % SCOPE_ALTERNATING[2]).endswith("| +100.0 | +70.0 to +74.5 | <= 100 ns | MISS |"), text
    # One of the three missing from a run, one without its counters: each says so, not a figure.
    partial = with_alternating(with_alternating(doc, counters, name=SCOPE_ALTERNATING[0], family_index=60),
                               {"added_ns": 1.0}, name=SCOPE_ALTERNATING[1], family_index=61)
    text = run(tmp, partial, out)
    assert row(text, "`%s`" % SCOPE_ALTERNATING[1]).endswith("not run (no difference counters in this run) |"), text
    assert row(text, "`%s`" % SCOPE_ALTERNATING[2]).endswith("| <= 100 ns | not run (not in this run) |"), text


def check_shard_sharing_line(tmp, doc, out):
    """The 16-thread table's count of threads that share a live-table shard: absent from a run
    without the counter, the mean of the repetitions where there is one."""
    line = "| threads of 16 whose block shares its live-table shard with another's, mean of the repetitions |"
    assert line not in run(tmp, doc, out)
    counted = copy.deepcopy(doc)
    name = "BM_host_pair/tracked/real_time/threads:16"
    set_median(counted, name, "threads_sharing_a_shard", 2.0)
    set_median(counted, name, "threads_sharing_a_shard", 0.6666, aggregate="mean")
    assert row(run(tmp, counted, out), line[2:-2]) == line + " 0.7 | (comparison) | - |"


def check_clock_line(tmp, doc, out):
    """The clock reads' line: absent from a run without them; with them, both reads and which
    clock the ledger uses, from the program's invariant_tsc context."""
    assert "a clock read" not in run(tmp, doc, out)
    timed = copy.deepcopy(doc)
    template = next(e for e in doc["benchmarks"] if e.get("aggregate_name") == "median")
    for name, value in (("BM_clock_read/tsc/real_time", 9.56), ("BM_clock_read/steady_clock/real_time", 23.5)):
        entry = dict(template, name=name + "_median", run_name=name, real_time=value, cpu_time=value)
        timed["benchmarks"].append(entry)
    timed["context"]["invariant_tsc"] = "1"
    assert ("- a clock read: TSC 9.6 ns, steady_clock 23.5 ns. The exact clock is the TSC (invariant on this "
            "CPU): an operation scope reads it twice, the ledger once per event while the JSONL log or the "
            "Chrome trace is on (the live table keeps the kernel's coarse clock).\n") in run(tmp, timed, out)
    timed["context"]["invariant_tsc"] = "0"
    assert "The exact clock is steady_clock (this CPU's TSC is not invariant)" in run(tmp, timed, out)
    del timed["context"]["invariant_tsc"]  # a run that did not record it claims neither clock
    assert "The exact clock is the TSC or steady_clock (the run did not record" in run(tmp, timed, out)


def page_row(text, figure):
    rows = [line for line in text.splitlines() if line.startswith("| " + figure + " |")]
    assert len(rows) == 1, "one row for %r, found %d:\n%s" % (figure, len(rows), text)
    return [c.strip() for c in rows[0].strip("|").split("|")]


def generate(results_dir, out):
    done = subprocess.run([sys.executable, SCRIPT, "docs", "--results-dir", results_dir, "--out", out],
                          capture_output=True, text=True)
    assert done.returncode == 0, "run_benchmarks.py docs failed:\n" + done.stderr
    with open(out) as f:
        return f.read()


def check_docs_page(tmp):
    """docs/benchmarks.md is exactly what `run_benchmarks.py docs` builds from benchmarks/results,
    within its line limit, and its figures are the kept JSON's."""
    text = generate(RESULTS, os.path.join(tmp, "page.md"))
    with open(DOCS_PAGE) as f:
        committed = f.read()
    assert text == committed, ("docs/benchmarks.md differs from what `python3 benchmarks/run_benchmarks.py "
                               "docs` builds from benchmarks/results: regenerate it")
    assert committed.count("\n") <= 250, "docs/benchmarks.md has %d lines, over 250" % committed.count("\n")
    models = sorted(name[:-5].upper() for name in os.listdir(RESULTS) if name.endswith(".json"))
    assert models == ["H100", "H200"], models
    assert "/work/" not in text and "/tmp/" not in text, "no path of one machine on the page"

    # Figures recomputed here from the kept JSON: the page invents nothing.
    for column, model in enumerate(models, start=3):
        with open(os.path.join(RESULTS, model.lower() + ".json")) as f:
            kept = json.load(f)
        assert kept["model"] == model
        assert "%s (%s, %s)" % (model, kept["benchmarks"]["context"]["date"][:10], kept["commit"]) in text
        doc = kept["benchmarks"]
        added = (median(doc, "BM_host_pair/tracked/real_time/threads:1")
                 - median(doc, "BM_host_pair/untracked/real_time/threads:1"))
        cells = page_row(text, "host allocate+deallocate pair (256 B), tracked minus untracked")
        assert cells[1] == "<= +50 ns" and cells[column].startswith("%+.1f ns (" % added), cells
        assert cells[column].endswith(": PASS" if added <= 50 else ": MISS"), cells
        ratio = (median(doc, "BM_cuda_malloc_pair/tracked/real_time")
                 / median(doc, "BM_cuda_malloc_pair/untracked/real_time"))
        cells = page_row(text, "cudaMalloc/cudaFree pair (1 MiB), tracked / untracked")
        assert cells[column].startswith("%.3f (" % ratio), cells
        step = kept["track_overhead"]["figures"]["median step ms"]
        cells = page_row(text, "`gpuguard run --track`: a PyTorch training step, tracked / plain")
        assert cells[column] == "%.3f (rounds %.3f to %.3f): %s" % (
            step["ratio"], min(step["round_ratios"]), max(step["round_ratios"]), step["verdict"]), cells
        torch = kept["torch_bench"]
        cells = page_row(text, "LibTorch adapter, swap-in mode: training step / native step")
        assert cells[1] == "<= 1.15" and cells[column].startswith("%.3f (" % torch["ratios"]["swap_in"]), cells
        assert cells[column].endswith(": " + torch["verdicts"]["swap_in"]), cells
        assert "`%s`" % kept["command"] in text

    # A verdict follows its number: the H100's stream-ordered pair made cheaper passes.
    moved = os.path.join(tmp, "moved")
    os.makedirs(moved)
    for model in models:
        with open(os.path.join(RESULTS, model.lower() + ".json")) as f:
            kept = json.load(f)
        if model == "H100":
            untracked = median(kept["benchmarks"], "BM_cuda_async_pair/untracked/real_time")
            set_median(kept["benchmarks"], "BM_cuda_async_pair/tracked/real_time", "real_time", untracked * 1.05)
        with open(os.path.join(moved, model.lower() + ".json"), "w") as f:
            json.dump(kept, f)
    cells = page_row(generate(moved, os.path.join(tmp, "moved.md")),
                     "cudaMallocAsync/cudaFreeAsync pair (1 MiB), tracked / untracked")
    assert cells[3].startswith("1.050 (") and cells[3].endswith(": PASS"), cells
    assert cells[4] == page_row(text, "cudaMallocAsync/cudaFreeAsync pair (1 MiB), tracked / untracked")[4]


def check_readme_costs():
    """README.md's "What it costs" copies figures of docs/benchmarks.md: each of its rows names the
    target and the H100 and H200 figures of one row of the page, so a regenerated page with new
    figures makes this fail until the README is copied again."""
    with open(README) as f:
        section = f.read().split("## What it costs\n")[1].split("\n## ")[0]
    with open(DOCS_PAGE) as f:
        page_rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                     for line in f if line.startswith("| ") and line.count("|") == 6]
    header = [line for line in section.splitlines() if line.startswith("| figure |")]
    assert header == ["| figure | target | H100 (2026-12-06) | H200 (2026-12-06) |"], header
    with open(DOCS_PAGE) as f:
        page = f.read()
    assert "| H100 (2026-12-06, " in page and "| H200 (2026-12-06, " in page, "the README's dates are the page's"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| figure |")]
    assert len(rows) >= 5, rows
    for figure, target, h100, h200 in rows:
        def shows(cell, value):  # the page's cell is "VALUE (detail): VERDICT" or "VALUE: VERDICT"
            return cell.startswith(value + " (") or cell.startswith(value + ":")
        matches = [r for r in page_rows if r[1] == target and shows(r[3], h100) and shows(r[4], h200)]
        assert matches, "README's %r (%s, %s, %s) is not a row of docs/benchmarks.md" % (figure, target, h100, h200)


def check_keep(tmp):
    """`keep` makes the kept file from a GPU runner's output folder, and refuses a mix of machines."""
    with open(os.path.join(RESULTS, "h100.json")) as f:
        kept = json.load(f)
    runner_out = os.path.join(tmp, "gpu-runner-out")
    os.makedirs(runner_out)
    for key in ("benchmarks", "track_overhead", "torch_bench"):
        with open(os.path.join(runner_out, key + ".json"), "w") as f:
            json.dump(kept[key], f)
    results = os.path.join(tmp, "results")
    done = subprocess.run([sys.executable, SCRIPT, "keep", runner_out, "--commit", kept["commit"],
                           "--command", kept["command"], "--results-dir", results], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(results, "h100.json")) as f:
        assert json.load(f) == kept, "keep wrote what benchmarks/results/h100.json holds"

    # torch_bench.py's result from another machine: refused by name, nothing written.
    other = copy.deepcopy(kept["torch_bench"])
    other["machine"]["gpus"] = [{"name": "NVIDIA H200", "driver": "580.159.04"}]
    with open(os.path.join(runner_out, "torch_bench.json"), "w") as f:
        json.dump(other, f)
    os.remove(os.path.join(results, "h100.json"))
    done = subprocess.run([sys.executable, SCRIPT, "keep", runner_out, "--commit", "abc1234",
                           "--results-dir", results], capture_output=True, text=True)
    assert done.returncode == 2, done
    assert "the torch_bench result ran on a H200, the benchmark programs' on a H100" in done.stderr, done.stderr
    assert not os.listdir(results), "nothing kept"
    # A missing file is named; a run without a GPU names no model to keep it under.
    os.remove(os.path.join(runner_out, "track_overhead.json"))
    done = subprocess.run([sys.executable, SCRIPT, "keep", runner_out, "--commit", "abc1234",
                           "--results-dir", results], capture_output=True, text=True)
    assert done.returncode == 2 and "track_overhead.json" in done.stderr, done.stderr
    sys.path.insert(0, HERE)
    import run_benchmarks
    try:
        run_benchmarks.gpu_model({"gpus": []})
        raise AssertionError("a run without a GPU has no model")
    except ValueError as error:
        assert "recorded no GPU" in str(error), error
    assert run_benchmarks.gpu_model({"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}) == "H100"


def with_stacks_arm(doc):
    """The sample with BM_cuda_malloc_pair/tracked_stacks, which it predates: the tracked arm's
    aggregates, times 1.02."""
    for entry in [e for e in doc["benchmarks"] if e["run_name"] == "BM_cuda_malloc_pair/tracked/real_time"]:
        arm = copy.deepcopy(entry)
        arm["name"] = arm["name"].replace("/tracked/", "/tracked_stacks/")
        arm["run_name"] = "BM_cuda_malloc_pair/tracked_stacks/real_time"
        if arm.get("aggregate_unit") == "time":
            arm["real_time"] *= 1.02
            arm["cpu_time"] *= 1.02
        doc["benchmarks"].append(arm)
    return doc


def check_summary(tmp):
    """`summary` writes summary.json and summary.md into a runner's folder from track_overhead.py's
    and torch_bench.py's results: every judged target with its interval and verdict, each baseline's
    spread, on the card's name; results of two cards, of a run before the intervals, or no result
    at all are refused with status 2."""
    sys.path.insert(0, HERE)
    import torch_bench
    import track_overhead
    machine = {"cpu": "x", "cores": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580"}]}
    plain = [2.0, 2.1, 2.0, 2.2, 2.1, 2.0, 2.05]
    runs = {"plain": {"median step ms": plain, track_overhead.PEER_STEP: [3.0] * 7,
                      track_overhead.PEER_RATIO: [1.5] * 7},
            "track": {"median step ms": [p * 1.03 for p in plain]},
            "plain_again": {"median step ms": list(plain)}}
    track = track_overhead.result_of(runs, 7, machine, "2026-12-07")
    per_mode = {m: [p * f for p in plain] for m, f in (("native", 1.0), ("observe", 1.01), ("swap_in", 1.2),
                                                      ("native_async", 1.1), ("native_again", 1.0))}
    torch = torch_bench.summarize(per_mode, 7, 310, machine, "2026-12-07")
    folder = os.path.join(tmp, "summary-out")
    os.makedirs(folder)
    for name, document in (("track_overhead.json", track), ("torch_bench.json", torch)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(document, f)
    done = subprocess.run([sys.executable, SCRIPT, "summary", folder], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    assert summary["card"] == "NVIDIA H100 80GB HBM3" and "distribution-free" in summary["method"], summary
    judged = [(r["figure"], r["verdict"], r["by"]) for r in summary["targets"]]
    assert judged == [("`--track` PyTorch step / plain", "missed", "`track_overhead.py`"),
                      (track_overhead.PEER_TITLE, "met", "`track_overhead.py`"),
                      ("LibTorch adapter, observe / native step", "met", "`torch_bench.py`"),
                      ("LibTorch adapter, swap-in / native step", "missed", "`torch_bench.py`")], judged
    assert [r["figure"] for r in summary["baseline_spread"]] == ["plain again / plain: median step ms",
                                                                 "native again / native step"], summary
    with open(os.path.join(folder, "summary.md")) as f:
        text = f.read()
    assert text == done.stdout, "summary prints what it writes"
    assert text.startswith("## Targets on NVIDIA H100 80GB HBM3\n"), text
    assert ("| LibTorch adapter, swap-in / native step | <= 1.05, the 95% interval's upper end | 1.200 | 1.200 to 1.200 "
            "| 7 | missed | `torch_bench.py` |") in text, text
    assert "| native again / native step | 1.000 | 1.000 to 1.000 | 7 | `torch_bench.py` |" in text, text
    # One result alone is summarized too.
    os.remove(os.path.join(folder, "track_overhead.json"))
    done = subprocess.run([sys.executable, SCRIPT, "summary", folder], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--track" not in done.stdout and "swap-in" in done.stdout, done
    # Refused: two cards; a run before the intervals; an empty folder.
    other = dict(track, card="NVIDIA H200")
    with open(os.path.join(folder, "track_overhead.json"), "w") as f:
        json.dump(other, f)
    done = subprocess.run([sys.executable, SCRIPT, "summary", folder], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "different cards (NVIDIA H100 80GB HBM3, NVIDIA H200)" in done.stderr, done
    with open(os.path.join(RESULTS, "h100.json")) as f:
        old = json.load(f)["track_overhead"]
    with open(os.path.join(folder, "track_overhead.json"), "w") as f:
        json.dump(dict(old, card="NVIDIA H100 80GB HBM3"), f)
    done = subprocess.run([sys.executable, SCRIPT, "summary", folder], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "a run before the intervals" in done.stderr, done
    # The generated page from a kept H100 run with intervals beside the H200's before them: one row
    # per figure, each model's target where they differ, the peer's row "not run" where absent.
    kept_dir = os.path.join(tmp, "kept-new")
    os.makedirs(kept_dir)
    for model in ("h100", "h200"):
        with open(os.path.join(RESULTS, model + ".json")) as f:
            kept = json.load(f)
        if model == "h100":
            kept["track_overhead"], kept["torch_bench"] = track, torch
        with open(os.path.join(kept_dir, model + ".json"), "w") as f:
            json.dump(kept, f)
    page = generate(kept_dir, os.path.join(tmp, "kept-new.md"))
    cells = page_row(page, "LibTorch adapter, swap-in mode: training step / native step")
    assert cells[1] == "H100: <= 1.05; H200: <= 1.15", cells
    assert cells[3] == "1.200 (95% interval 1.200 to 1.200, 7 rounds): missed" and cells[4].endswith(": within noise"), cells
    cells = page_row(page, "`--track` overhead / `_record_memory_history()` overhead, a PyTorch training step")
    assert cells[1] == "<= 0.5" and cells[3].endswith("7 rounds): met") and cells[4] == "not run (not in this run)", cells
    cells = page_row(page, "`gpuguard run --track`: a PyTorch training step, tracked / plain")
    assert cells[1] == "H100: <= 1.02; H200: <= 1.01" and cells[3].endswith(": missed"), cells
    empty = os.path.join(tmp, "summary-empty")
    os.makedirs(empty)
    done = subprocess.run([sys.executable, SCRIPT, "summary", empty], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "holds neither track_overhead.json nor torch_bench.json" in done.stderr, done


def main():
    with open(SAMPLE) as f:
        doc = with_stacks_arm(json.load(f))
    doc["context"]["host_name"] = "secret-host-name"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "benchmarks.md")

        # Without --append-section: the whole file is one report.
        with open(out, "w") as f:
            f.write("stale\n")
        text = run(tmp, doc, out)
        assert text.startswith("# Benchmarks\n") and "stale" not in text, text
        assert headings(text) == ["## Results"], text
        check_gpu_report(text, doc)
        check_clock_line(tmp, doc, out)
        check_shard_sharing_line(tmp, doc, out)
        check_alternating(tmp, doc, out)
        check_scope_alternating(tmp, doc, out)
        check_threads_per_core(tmp, doc, out)

        # --append-section replaces its own section, keeps the others and their order.
        with open(out, "w") as f:
            f.write("# Benchmarks\n\nintro text\n\n## CPU machine\n\ncpu numbers\n\n"
                    "## GPU machine\n\nold gpu numbers\n\n### old table\n\n## Notes\n\nkeep me\n")
        text = run(tmp, doc, out, "--append-section", "GPU machine")
        assert "old gpu numbers" not in text and "### old table" not in text, text
        assert text.count("## GPU machine\n") == 1, text
        assert text.startswith("# Benchmarks\n\nintro text\n"), text
        assert text.index("## CPU machine") < text.index("## GPU machine") < text.index("## Notes")
        assert "cpu numbers" in text and "keep me" in text, text
        check_gpu_report(text.split("## GPU machine\n")[1].split("## Notes")[0], doc)

        # Without --append-section, a file with sections of its own is refused by name before
        # anything runs, and left as it was; a file of one report (## Results) is replaced.
        before = text
        path = os.path.join(tmp, "in.json")
        done = subprocess.run([sys.executable, SCRIPT, "--json-in", path, "--out", out], capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == "", done
        assert ("%s has sections of its own ('## CPU machine', '## GPU machine', '## Notes')" % out) in done.stderr, done.stderr
        assert "nothing was run or written" in done.stderr, done.stderr
        with open(out) as f:
            assert f.read() == before

        # A no-GPU run as a new section: CUDA rows are "not run", host rows are measured.
        cpu = without_gpu(doc)
        text = run(tmp, cpu, out, "--append-section", "CPU machine")
        assert "cpu numbers" not in text and text.count("## CPU machine\n") == 1, text
        cpu_section = text.split("## CPU machine\n")[1].split("## GPU machine")[0]
        assert "- GPU: none (no nvidia-smi, or it found no GPU)" in cpu_section, cpu_section
        assert [line for line in cpu_section.splitlines()
                if line.startswith("| `BM_cuda_malloc_pair/untracked/real_time` | - | `")] == [
            "| `BM_cuda_malloc_pair/untracked/real_time` | - | "
            "`BM_cuda_malloc_pair/%s/real_time` | - | - | <= 1.02 | %s |" % (arm, NO_GPU)
            for arm in ("tracked", "tracked_stacks")], cpu_section
        assert row(cpu_section, "`BM_cuda_async_pair/untracked/real_time`").endswith(
            "| <= 1.1 | %s |" % NO_GPU)
        assert cpu_section.count(NO_GPU) == 3 + 5, cpu_section  # three targets, five medians
        assert "| +250.3 | <= 50 ns | MISS |" in cpu_section
        gpu_section = text.split("## GPU machine\n")[1].split("## Notes")[0]
        check_gpu_report(gpu_section, doc)  # the other machine's section is untouched
        assert "keep me" in text

        # A new name is appended at the end; a missing file gets the title.
        text = run(tmp, doc, out, "--append-section", "Another run")
        assert headings(text) == ["## CPU machine", "## GPU machine", "## Notes",
                                  "## Another run"], text
        assert text.rstrip().endswith(text.split("## Another run\n")[1].rstrip()), text
        assert text.index("## Notes") < text.index("## Another run")
        fresh = os.path.join(tmp, "new", "fresh.md")
        text = run(tmp, doc, fresh, "--append-section", "GPU machine")
        assert text.startswith("# Benchmarks\n") and headings(text) == ["## GPU machine"], text

        os.remove(out)  # the sectioned file above: from here on each run writes a whole report

        # Verdicts follow the numbers: the other side of each limit gives PASS.
        better = copy.deepcopy(doc)
        off = median(doc, "BM_host_pair/tracked/real_time/threads:1")
        set_median(better, "BM_host_pair/untracked/real_time/threads:1", "real_time", off - 50.0)
        set_median(better, "BM_host_pair_stacks_sampled/tracked/real_time", "real_time", off * 1.2)
        set_median(better, "BM_host_pair_stacks_all/tracked/real_time", "real_time", off + 99.0)
        set_median(better, "BM_cuda_async_pair/tracked/real_time", "real_time",
                   median(doc, "BM_cuda_async_pair/untracked/real_time") * 1.09)
        set_median(better, "BM_host_pair/tracked/real_time/threads:16", "items_per_second",
                   median(doc, "BM_host_pair/tracked/real_time/threads:1", "items_per_second") * 8)
        text = run(tmp, better, out)
        assert "| +50.0 | <= 50 ns | PASS |" in text, text
        assert "| 1.200 | <= 1.2 | PASS |" in text, text
        assert "| +99.0 | <= 100 ns | PASS |" in text, text
        assert "| 1.090 | <= 1.1 | PASS |" in text, text
        assert "| 8.00x | >= 8 | PASS |" in text, text
        assert "| MISS |" not in text, text

        # Two-thread results (a 2-core machine runs them at once) add tracking's scaling at 2.
        assert "2 / 1 threads" not in text, text
        two = copy.deepcopy(doc)
        for entry in copy.deepcopy(doc["benchmarks"]):
            if entry["run_name"].startswith("BM_host_pair/") and entry["run_name"].endswith("threads:16"):
                entry["run_name"] = entry["name"] = entry["run_name"][:-2] + "2"
                entry["threads"] = 2
                two["benchmarks"].append(entry)
        one_t = median(doc, "BM_host_pair/tracked/real_time/threads:1", "items_per_second")
        one_u = median(doc, "BM_host_pair/untracked/real_time/threads:1", "items_per_second")
        set_median(two, "BM_host_pair/tracked/real_time/threads:2", "items_per_second", one_t * 1.5)
        set_median(two, "BM_host_pair/untracked/real_time/threads:2", "items_per_second", one_u * 2.0)
        text = run(tmp, two, out)
        assert "| tracked 2 / 1 threads over untracked 2 / 1 threads | 0.750 | (comparison) | - |" in text, text

        # The CPU machine's run of both programs: the docs' CPU section.
        with open(CPU_RUN) as f:
            cpu_run = json.load(f)
        cpu_run["context"]["host_name"] = "secret-host-name"
        text = run(tmp, cpu_run, out, "--append-section", "CPU machine")
        check_cpu_report(text.split("## CPU machine\n")[1].split("\n## ")[0], cpu_run)
        os.remove(out)  # whole reports again below
        check_ops_verdicts(tmp, cpu_run, out)
        check_failed_repetition(tmp, cpu_run, out)
        check_programs(tmp, cpu_run, doc)
        check_docs_page(tmp)
        check_readme_costs()
        check_keep(tmp)
        check_summary(tmp)
    print("test_run_benchmarks.py: all checks passed")


if __name__ == "__main__":
    main()
