#!/usr/bin/env python3
"""The evidence harness's CPU side (docs/evidence.md): the metrics on recorded timelines with
answers worked out by hand, the harness end to end on the fake device (the driver's rule on
files) with the job's workers as real processes, plain and under `gpuguard run`, the report and
its SVG plots, and bad input.

usage: evidence_test.py ROOT GPUGUARD
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.dom.minidom

ROOT, GPUGUARD = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "evidence"))
import metrics  # noqa: E402

HARNESS = os.path.join(ROOT, "benchmarks", "evidence", "harness.py")
REPORT = os.path.join(ROOT, "benchmarks", "evidence", "report.py")
FAKE_JOB = os.path.join(ROOT, "tests", "evidence", "fake_job.py")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def timeline_tests():
    # Baseline 500 MiB; the job peaks at +1000, ends at t=2, leaves +300 until t=5, then is back.
    samples = [[0.0, 500], [1.0, 1500], [2.0, 1500], [2.5, 800], [5.0, 800], [5.5, 510], [13.0, 505]]
    trial = {"baseline_mib": 500.0, "end_s": 2.0, "samples": samples, "status": "signal 9", "errors": []}
    check(metrics.peak_mib(trial) == 1000.0, "peak above the baseline")
    check(metrics.residual_mib(trial, 1.0) == 300.0, "residue 1 s after the end (the level at t=3)")
    check(metrics.residual_mib(trial, 10.0) == 0.0, "no residue at 10 s (510 is within the tolerance)")
    check(abs(metrics.time_to_baseline_s(trial) - 3.5) < 1e-9, "back at t=5.5, 3.5 s after the end")
    short = dict(trial, samples=samples[:5])
    check(metrics.residual_mib(short, 10.0) is None, "no 10 s figure when sampling stopped before it")
    check(metrics.time_to_baseline_s(short) is None, "never back while sampled")
    # Back, away again, back: the time counts from when it came back for good.
    bounce = dict(trial, samples=[[2.0, 1500], [2.2, 500], [2.4, 900], [3.0, 500], [12.5, 500]])
    check(abs(metrics.time_to_baseline_s(bounce) - 1.0) < 1e-9, "back for good at t=3, not at the first dip")
    s = metrics.summarize([trial, dict(trial, status="exit 1", errors=["out_of_memory"]), short])
    check(s["trials"] == 3 and s["never_back"] == 1, "summary counts trials and those never back")
    check(abs(s["residue_share_1s_pct"] - 100.0) < 1e-9, "every trial had residue at 1 s")
    check(abs(s["residue_share_10s_pct"] - 0.0) < 1e-9, "none at 10 s (the short trial has no 10 s figure)")
    check(s["statuses"] == {"exit 1": 1, "signal 9": 2} and s["errors"] == {"out_of_memory": 1},
          "statuses and errors counted by kind")
    check(abs(s["residual_1s_pct_of_peak"] - 30.0) < 1e-9, "residue as a share of the peak")


def harness_tests(tmp):
    out, dev = os.path.join(tmp, "out"), os.path.join(tmp, "dev")
    cmd = [sys.executable, HARNESS, "--scenario", "kill", "--job", FAKE_JOB, "--gpuguard", GPUGUARD,
           "--trials", "2", "--out", out, "--fake-device", dev, "--main-mib", "100", "--worker-mib", "50",
           "--workers", "2", "--post-s", "1.5", "--min-iter", "3", "--max-iter", "6"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(done.stderr)
    check(done.returncode == 0, f"the harness ran (status {done.returncode})")
    trials = [json.loads(line) for line in open(os.path.join(out, "trials.jsonl"))]
    check(len(trials) == 4, "2 trials per arm, arms interleaved")
    plain = [t for t in trials if t["arm"] == "plain"]
    guarded = [t for t in trials if t["arm"] == "guarded"]
    check({t["variant"] for t in plain} == {"SIGKILL", "SIGTERM"}, "half SIGKILL, half SIGTERM")
    check(all(t["status"] in ("signal 9", "signal 15") for t in plain), "plain: the job died by the signal")
    check(all(t["status"].startswith(("exit 137", "exit 143")) for t in guarded),
          "guarded: gpuguard run passed the death on as 128+N")
    sp, sg = metrics.summarize(plain), metrics.summarize(guarded)
    check(abs(sp["peak_mib"] - 200.0) < 1e-9, "peak: the job's 100 MiB and its workers' 2 x 50")
    check(sp["residual_1s_mib"] == 100.0 and all(t["survivors"] == 2 for t in plain),
          "plain: the two orphaned workers still hold 100 MiB 1 s later")
    check(sg["residual_1s_mib"] == 0.0 and all(t["survivors"] == 0 for t in guarded),
          "guarded: no worker survives, nothing held 1 s later")
    check(sg["back_max_s"] is not None and sg["back_max_s"] < 1.0, "guarded: back to the baseline within 1 s")
    check(os.listdir(dev) == [] or metrics_fake_level(dev) == 0, "the harness ended every survivor afterwards")
    return out


def contention_tests(tmp):
    out, dev = os.path.join(tmp, "contention"), os.path.join(tmp, "dev-contention")
    cmd = [sys.executable, HARNESS, "--scenario", "contention", "--job", FAKE_JOB, "--gpuguard", GPUGUARD,
           "--rounds", "1", "--processes", "4", "--abnormal", "2", "--contention-mib", "100", "--workers", "1",
           "--worker-mib", "50", "--out", out, "--fake-device", dev, "--post-s", "1.5", "--min-iter", "3",
           "--max-iter", "6", "--iters", "40"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(done.stderr)
    check(done.returncode == 0, f"the contention round ran (status {done.returncode})")
    trials = [json.loads(line) for line in open(os.path.join(out, "trials.jsonl"))]
    by_arm = {t["arm"]: t for t in trials}
    check(set(by_arm) == {"plain", "guarded"} and all(len(t["statuses"]) == 4 for t in trials),
          "one round per arm, four jobs each")
    peak = metrics.peak_mib(by_arm["plain"])
    check(400.0 <= peak <= 600.0, f"peak {peak}: at most four jobs of 100 MiB with a 50 MiB worker each, "
          "at least the four jobs (the ones failing early may end before the last starts)")
    check(metrics.residual_mib(by_arm["plain"], 1.0) == 200.0,
          "plain: every job's worker outlives it (4 x 50 MiB), the two that died abnormally included")
    check(metrics.residual_mib(by_arm["guarded"], 1.0) == 0.0, "guarded: nothing left")


def metrics_fake_level(dev):
    from harness import FakeMemory  # noqa: E402
    return FakeMemory(dev).used_mib()


def report_tests(out, tmp):
    results = os.path.join(tmp, "docs", "results.md")
    os.makedirs(os.path.dirname(results))
    done = subprocess.run([sys.executable, REPORT, out, "--out", results], capture_output=True, text=True, timeout=60)
    check(done.returncode == 0, f"the report ran (status {done.returncode}: {done.stderr.strip()})")
    text = open(results).read()
    check("| plain, SIGKILL | 1 | 200 | 100 (50%)" in text, "the plain SIGKILL row carries its figures")
    check("| guarded, all | 2 | 200 | 0 (0%)" in text, "the guarded row shows no residue")
    check("fake device (a test run, not a GPU)" in text, "a fake-device run says so")
    check("47 s average recovery after SIGKILL" in text, "the reference figure is quoted")
    for arm in ("plain", "guarded"):
        svg = os.path.join(tmp, "docs", "results", f"kill-{arm}.svg")
        try:
            doc = xml.dom.minidom.parse(svg)
            points = doc.getElementsByTagName("polyline")[0].getAttribute("points").split()
            check(len(points) > 10, f"the {arm} plot is SVG with a memory line of {len(points)} points")
        except Exception as e:  # noqa: BLE001
            check(False, f"the {arm} plot parses as SVG ({e})")
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "trials.jsonl"), "w") as f:
        f.write('{"scenario": "kill"\n')
    done = subprocess.run([sys.executable, REPORT, bad, "--out", os.path.join(tmp, "x.md")],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode != 0 and "line 1" in done.stderr and not os.path.exists(os.path.join(tmp, "x.md")),
          "a broken trials file is named with its line, and nothing is written")


def bad_input_tests(tmp):
    done = subprocess.run([sys.executable, HARNESS, "--scenario", "kill", "--job", os.path.join(tmp, "no-such-job"),
                           "--fake-device", tmp], capture_output=True, text=True, timeout=60)
    check(done.returncode == 2 and "no-such-job" in done.stderr, "a missing job is a usage error naming it")
    done = subprocess.run([sys.executable, HARNESS, "--scenario", "explode", "--job", FAKE_JOB],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 2 and "explode" in done.stderr, "an unknown scenario is a usage error naming it")


def main():
    timeline_tests()
    with tempfile.TemporaryDirectory() as tmp:
        bad_input_tests(tmp)
        out = harness_tests(tmp)
        contention_tests(tmp)
        report_tests(out, tmp)
    print("evidence:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
