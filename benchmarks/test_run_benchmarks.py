#!/usr/bin/env python3
"""Checks run_benchmarks.py on a recorded run, without running any benchmark.

testdata/sample.json is the JSON that `run_benchmarks.py --json-out` kept from a run of
gpuguard_tracking_bench on the H200 GPU machine (5 repetitions, aggregates only). From it the test
checks the table rows and PASS/MISS verdicts, derives a no-GPU variant (the CUDA benchmarks
replaced by the entries Google Benchmark writes for SkipWithError), and checks that
--append-section replaces its own section and keeps the others. Plain python3; exits non-zero on
the first failed check.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "run_benchmarks.py")
SAMPLE = os.path.join(HERE, "testdata", "sample.json")
NO_GPU = "not run (no GPU on this machine)"
CUDA_NAMES = ("BM_cuda_malloc_pair/untracked/real_time", "BM_cuda_malloc_pair/tracked/real_time",
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


def set_median(document, name, field, value):
    for entry in document["benchmarks"]:
        if entry.get("run_name") == name and entry.get("aggregate_name") == "median":
            entry[field] = value


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
    assert row(text, "`BM_cuda_malloc_pair/untracked/real_time`") == (
        "| `BM_cuda_malloc_pair/untracked/real_time` | 103136.8 | "
        "`BM_cuda_malloc_pair/tracked/real_time` | 71285.5 | 0.691 | <= 1.02 | PASS |")
    assert row(text, "`BM_cuda_async_pair/untracked/real_time`") == (
        "| `BM_cuda_async_pair/untracked/real_time` | 997.1 | "
        "`BM_cuda_async_pair/tracked/real_time` | 1904.9 | 1.910 | <= 1.1 | MISS |")
    stacks = [line for line in tables(text).splitlines()
              if line.startswith("| `BM_host_pair/tracked/real_time/threads:1` |")]
    assert stacks == [
        "| `BM_host_pair/tracked/real_time/threads:1` | 305.0 | "
        "`BM_host_pair_stacks_all/tracked/real_time` | 9806.0 | +9501.0 | <= 2000 ns | MISS |",
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
    assert text.count("| PASS |") == 1 and text.count("| MISS |") == 5, text
    assert "not run" not in text


def headings(text):
    return [line for line in text.splitlines() if line.startswith("## ")]


def main():
    with open(SAMPLE) as f:
        doc = json.load(f)
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

        # A no-GPU run as a new section: CUDA rows are "not run", host rows are measured.
        cpu = without_gpu(doc)
        text = run(tmp, cpu, out, "--append-section", "CPU machine")
        assert "cpu numbers" not in text and text.count("## CPU machine\n") == 1, text
        cpu_section = text.split("## CPU machine\n")[1].split("## GPU machine")[0]
        assert "- GPU: none (no nvidia-smi, or it found no GPU)" in cpu_section, cpu_section
        assert row(cpu_section, "`BM_cuda_malloc_pair/untracked/real_time`") == (
            "| `BM_cuda_malloc_pair/untracked/real_time` | - | "
            "`BM_cuda_malloc_pair/tracked/real_time` | - | - | <= 1.02 | %s |" % NO_GPU)
        assert row(cpu_section, "`BM_cuda_async_pair/untracked/real_time`").endswith(
            "| <= 1.1 | %s |" % NO_GPU)
        assert cpu_section.count(NO_GPU) == 2 + 4, cpu_section  # two targets, four medians
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

        # Verdicts follow the numbers: the other side of each limit gives PASS.
        better = copy.deepcopy(doc)
        off = median(doc, "BM_host_pair/tracked/real_time/threads:1")
        set_median(better, "BM_host_pair/untracked/real_time/threads:1", "real_time", off - 50.0)
        set_median(better, "BM_host_pair_stacks_sampled/tracked/real_time", "real_time", off * 1.2)
        set_median(better, "BM_host_pair_stacks_all/tracked/real_time", "real_time", off + 1999.0)
        set_median(better, "BM_cuda_async_pair/tracked/real_time", "real_time",
                   median(doc, "BM_cuda_async_pair/untracked/real_time") * 1.09)
        set_median(better, "BM_host_pair/tracked/real_time/threads:16", "items_per_second",
                   median(doc, "BM_host_pair/tracked/real_time/threads:1", "items_per_second") * 8)
        text = run(tmp, better, out)
        assert "| +50.0 | <= 50 ns | PASS |" in text, text
        assert "| 1.200 | <= 1.2 | PASS |" in text, text
        assert "| +1999.0 | <= 2000 ns | PASS |" in text, text
        assert "| 1.090 | <= 1.1 | PASS |" in text, text
        assert "| 8.00x | >= 8 | PASS |" in text, text
        assert "| MISS |" not in text, text
    print("test_run_benchmarks.py: all checks passed")


if __name__ == "__main__":
    main()
