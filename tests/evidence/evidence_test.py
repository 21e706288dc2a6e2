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
import time
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
    # From the fault: the signal at t=1.5, the command returned at t=2 (after a clean-up).
    faulted = dict(trial, fault_s=1.5)
    check(metrics.residual_mib(faulted, 1.0) == 300.0, "residue 1 s after the fault (the level at t=2.5)")
    check(abs(metrics.time_to_baseline_s(faulted) - 4.0) < 1e-9, "back 4 s after the fault")
    check(abs(metrics.time_to_baseline_s(faulted, "end") - 3.5) < 1e-9, "and 3.5 s after the command returned")
    # A settled trial: sampling stopped at t=6 with memory back and nothing alive; 10 s counts as back.
    settled = dict(trial, fault_s=1.5, samples=samples[:6], settled=True)
    check(metrics.residual_mib(settled, 10.0) == 0.0, "a settled trial has no residue after its samples end")
    check(metrics.residual_mib(dict(settled, settled=False), 10.0) is None,
          "an unsettled one has no figure there")
    # A baseline taken while the previous trial's memory was still being given back: the trial
    # settled 26 GiB below it, so the level it settled at is its baseline.
    stale = {"baseline_mib": 26855.0, "fault_s": 2.0, "end_s": 2.5, "settled": True, "status": "exit 0", "errors": [],
             "samples": [[0.0, 26855.0], [1.0, 66564.0], [2.5, 20000.0], [3.0, 615.0], [3.6, 615.0]]}
    check(metrics.baseline_corrected(stale) and metrics.baseline_mib(stale) == 615.0
          and metrics.peak_mib(stale) == 65949.0, "a stale baseline is replaced by the settled level")
    check(abs(metrics.time_to_baseline_s(stale) - 1.0) < 1e-9, "and time back counts against the settled level")
    check(not metrics.baseline_corrected(trial), "a baseline the trial ended near is kept")
    s = metrics.summarize([dict(trial, doctor={"actions": {"terminated": 2}}),
                           dict(trial, doctor={"actions": {"terminated": 1, "gone": 1}})])
    check(s["doctor"] == {"gone": 1, "terminated": 3}, "the doctor's actions counted over the trials")


def baseline_tests():
    """The level before a trial waits until the driver has given the last trial's memory back."""
    from harness import quiet_baseline  # noqa: E402

    class Releasing:
        def __init__(self):
            self.start = time.monotonic()

        def used_mib(self):  # 20 GiB held for 0.8 s, then given back
            return 20615.0 if time.monotonic() - self.start < 0.8 else 615.0

    source = Releasing()
    level = quiet_baseline(source, expect=615.0, window_s=0.3, limit_s=10)
    check(level == 615.0 and time.monotonic() - source.start >= 0.8,
          f"the baseline waits for memory being given back ({level})")
    source = Releasing()
    level = quiet_baseline(source, expect=615.0, window_s=0.2, limit_s=0.3)
    check(level == 20615.0, f"and measures anyway after its limit ({level})")


def harness_tests(tmp):
    out, dev = os.path.join(tmp, "out"), os.path.join(tmp, "dev")
    cmd = [sys.executable, HARNESS, "--scenario", "kill", "--job", FAKE_JOB, "--gpuguard", GPUGUARD,
           "--trials", "2", "--out", out, "--fake-device", dev, "--main-mib", "100", "--worker-mib", "50",
           "--workers", "2", "--post-s", "3", "--min-iter", "3", "--max-iter", "6", "--doctor-after-s", "1.2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(done.stderr)
    check(done.returncode == 0, f"the harness ran (status {done.returncode})")
    trials = [json.loads(line) for line in open(os.path.join(out, "trials.jsonl"))]
    check(len(trials) == 6 and [t["arm"] for t in trials[:3]] == ["plain", "guarded", "doctor"],
          "2 trials per arm, the three arms interleaved")
    plain = [t for t in trials if t["arm"] == "plain"]
    guarded = [t for t in trials if t["arm"] == "guarded"]
    doctor = [t for t in trials if t["arm"] == "doctor"]
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
    check(all(t["fault_s"] is not None and t["fault_s"] <= t["end_s"] for t in trials),
          "the fault (the signal sent) is timed, before the command returned")
    check(all(t["settled"] for t in guarded) and not any(t["settled"] for t in plain),
          "guarded trials settle early; plain ones, with workers alive, are sampled to the end")
    check(all(t["samples"][-1][0] - t["fault_s"] < 1.5 for t in guarded),
          "a settled trial stops sampling before --post-s")
    sd = metrics.summarize(doctor)
    check(sd["residual_1s_mib"] == 100.0 and sd["residual_10s_mib"] == 0.0,
          f"doctor: the workers hold 100 MiB 1 s after the fault, nothing once reaped ({sd['residual_1s_mib']}, "
          f"{sd['residual_10s_mib']})")
    check(sd["doctor"].get("terminated", 0) + sd["doctor"].get("killed", 0) == 4 and all(t["survivors"] == 0 for t in doctor),
          f"doctor --reap ended the 2 orphaned workers of each trial ({sd['doctor']})")
    check(all(t["doctor"]["at_s"] - t["fault_s"] >= 1.2 for t in doctor), "the doctor ran --doctor-after-s after the fault")
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


def resume_tests(tmp):
    """--deadline-s stops between trial indices, --resume goes on, the runner packs and unpacks."""
    out, dev = os.path.join(tmp, "resume"), os.path.join(tmp, "dev-resume")
    options = ["--arms", "guarded", "--trials", "3", "--fake-device", dev, "--main-mib", "100", "--workers", "1",
               "--post-s", "2", "--min-iter", "3", "--max-iter", "9"]
    base = [sys.executable, HARNESS, "--scenario", "kill", "--job", FAKE_JOB, "--gpuguard", GPUGUARD, "--out", out] + options
    first = subprocess.run(base + ["--deadline-s", "0.5"], capture_output=True, text=True, timeout=120)
    indices = [json.loads(line)["trial"] for line in open(os.path.join(out, "trials.jsonl"))]
    check(first.returncode == 0 and indices == [0] and "deadline" in first.stderr,
          f"--deadline-s: the first index runs, the next would pass the deadline ({indices})")
    second = subprocess.run(base + ["--resume"], capture_output=True, text=True, timeout=120)
    trials = [json.loads(line) for line in open(os.path.join(out, "trials.jsonl"))]
    check(second.returncode == 0 and [t["trial"] for t in trials] == [0, 1, 2], "--resume ran the two left")
    other = os.path.join(tmp, "resume-other")
    subprocess.run(base[:base.index("--out")] + ["--out", other] + options + ["--first-trial", "2", "--trials", "1"],
                   capture_output=True, text=True, timeout=120)
    again = [json.loads(line) for line in open(os.path.join(other, "trials.jsonl"))]
    check(len(again) == 1 and again[0]["trial"] == 2 and again[0]["fail_at"] == trials[2]["fail_at"],
          "a trial index draws the same failing iteration in another run")
    # The runner on a build folder holding the fake job: nothing left to run, the report and archive written.
    fake_build = os.path.join(tmp, "fake-build")
    os.makedirs(os.path.join(fake_build, "benchmarks"))
    os.makedirs(os.path.join(fake_build, "src", "cli"))
    os.symlink(FAKE_JOB, os.path.join(fake_build, "benchmarks", "evidence_job"))
    os.symlink(os.path.abspath(GPUGUARD), os.path.join(fake_build, "src", "cli", "gpuguard"))
    state, results = os.path.join(tmp, "state"), os.path.join(tmp, "runner-out")
    os.makedirs(os.path.join(state, "kill"))
    with open(os.path.join(out, "trials.jsonl")) as src, open(os.path.join(state, "kill", "trials.jsonl"), "w") as dst:
        dst.write(src.read())
    env = dict(os.environ, GPUGUARD_GPU_BUILD=fake_build, GPUGUARD_EVIDENCE_DIR=state, OUT=results)
    runner = os.path.join(ROOT, "scripts", "evidence-runner.sh")
    done = subprocess.run(["bash", runner, "--budget-s", "60", "kill", "--"] + options,
                          capture_output=True, text=True, timeout=120, env=env)
    check(done.returncode == 0 and "evidence: kill: 3 of 60 trials recorded" in done.stdout
          and "not complete" in done.stdout and "[1/" not in done.stdout,
          f"the runner resumed with nothing left to run and said what is missing ({done.returncode}: "
          f"{done.stdout[-300:]} {done.stderr[-300:]})")
    check(os.path.exists(os.path.join(results, "results.md")) and os.path.exists(os.path.join(results, "evidence.tgz")),
          "the runner wrote the report and packed the state")
    fresh = os.path.join(tmp, "state-fresh")
    env = dict(env, GPUGUARD_EVIDENCE_DIR=fresh, OUT=os.path.join(tmp, "runner-out-2"))
    done = subprocess.run(["bash", runner, "--budget-s", "60", "--from", os.path.join(results, "evidence.tgz"), "kill",
                           "--"] + options, capture_output=True, text=True, timeout=120, env=env)
    check(done.returncode == 0 and "went on from" in done.stdout and "kill: 3 of 60" in done.stdout,
          "--from unpacks an earlier call's archive into an empty state")
    done = subprocess.run(["bash", runner, "--budget-s", "soon"], capture_output=True, text=True, timeout=60, env=env)
    check(done.returncode == 2 and "soon" in done.stderr, "a bad --budget-s is a usage error naming it")


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
    check("| doctor, all | 2 | 200 | 100 (50%) | 0 |" in text, "the doctor row: residue at 1 s, none at 10 s")
    check("| 47 s average recovery after SIGKILL |" in text and "doctor: mean" in text,
          "the reference figure sits beside ours, each arm's")
    svgs = os.path.join(tmp, "docs", "results")
    try:
        doc = xml.dom.minidom.parse(os.path.join(svgs, "kill-timeline.svg"))
        lines = doc.getElementsByTagName("polyline")
        check(len(lines) == 3 and all(len(p.getAttribute("points").split()) > 10 for p in lines),
              f"the timeline plot is SVG with a memory line per arm ({len(lines)})")
        doc = xml.dom.minidom.parse(os.path.join(svgs, "kill-residue.svg"))
        dots = doc.getElementsByTagName("circle")
        # Plain trials are sampled for 3 s here: they have no 10 s figure, and no dot there.
        check(len(dots) == 10, f"the residue plot has a dot per trial, arm and time where known ({len(dots)} of 10)")
    except Exception as e:  # noqa: BLE001
        check(False, f"the plots parse as SVG ({e})")
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "trials.jsonl"), "w") as f:
        f.write('{"scenario": "kill"\n')
    done = subprocess.run([sys.executable, REPORT, bad, "--out", os.path.join(tmp, "x.md")],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode != 0 and "line 1" in done.stderr and not os.path.exists(os.path.join(tmp, "x.md")),
          "a broken trials file is named with its line, and nothing is written")


def published_results_tests(tmp):
    """docs/results.md and its plots are what report.py makes of the recorded H200 trials."""
    data = os.path.join(ROOT, "benchmarks", "evidence", "data", "2026-12-04-h200")
    docs = os.path.join(tmp, "published", "docs")
    os.makedirs(docs)
    done = subprocess.run([sys.executable, REPORT] + [os.path.join(data, s) for s in ("kill", "abnormal", "contention")]
                          + ["--out", os.path.join(docs, "results.md"), "--plots", os.path.join(docs, "results")],
                          capture_output=True, text=True, timeout=120)
    check(done.returncode == 0, f"the report of the recorded trials ran ({done.stderr.strip()})")
    stale = []
    for name in ["results.md"] + [os.path.join("results", f) for f in sorted(os.listdir(os.path.join(docs, "results")))]:
        with open(os.path.join(docs, name), "rb") as made:
            try:
                with open(os.path.join(ROOT, "docs", name), "rb") as published:
                    if made.read() != published.read():
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name + " (missing)")
    check(not stale, f"docs/results.md and its plots are current with the recorded trials ({stale or 'all equal'})")
    with open(os.path.join(docs, "results.md")) as f:
        text = f.read()
    check("/work/" not in text and "/tmp/" not in text, "docs/results.md prints no path of the machine that ran the trials")


def bad_input_tests(tmp):
    done = subprocess.run([sys.executable, HARNESS, "--scenario", "kill", "--job", os.path.join(tmp, "no-such-job"),
                           "--fake-device", tmp], capture_output=True, text=True, timeout=60)
    check(done.returncode == 2 and "no-such-job" in done.stderr, "a missing job is a usage error naming it")
    done = subprocess.run([sys.executable, HARNESS, "--scenario", "explode", "--job", FAKE_JOB],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 2 and "explode" in done.stderr, "an unknown scenario is a usage error naming it")


def main():
    timeline_tests()
    baseline_tests()
    with tempfile.TemporaryDirectory() as tmp:
        bad_input_tests(tmp)
        published_results_tests(tmp)
        out = harness_tests(tmp)
        contention_tests(tmp)
        resume_tests(tmp)
        report_tests(out, tmp)
    print("evidence:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
