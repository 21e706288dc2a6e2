#!/usr/bin/env python3
"""Turns the evidence harness's recorded trials into docs/results.md and its SVG plots
(docs/evidence.md): per scenario, one chart of device memory over one trial of each arm, aligned
on the fault, and one of the residue of every trial, per arm.

    python3 benchmarks/evidence/report.py DIR [DIR...] --out docs/results.md [--plots docs/results]

Each DIR is a harness --out directory (trials.jsonl and run-<scenario>-<first trial>.json); a
scenario split over several runs is merged. Every number written comes from those files; the
reference figures are the write-up's, quoted as such.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics  # noqa: E402

SCENARIOS = {
    "kill": "Forced kill (SIGKILL or SIGTERM at a random iteration; the job has worker processes holding device memory)",
    "abnormal": "Abnormal exit (uncaught exception, or out of memory, at a random iteration)",
    "contention": "Contention (8 jobs of 4 GiB on one GPU, 3 of them dying abnormally at random times)",
}
ARMS = ("plain", "guarded", "doctor")
ARM_TEXT = {
    "plain": "the job as it is",
    "guarded": "under `gpuguard run`, with the LibTorch adapter in the job",
    "doctor": "the job as it is, then `gpuguard doctor --reap` a fixed time after the fault",
}
COLOURS = {"plain": "#d62728", "guarded": "#2ca02c", "doctor": "#1f77b4"}
REFERENCE_MACHINE = "A100, Ubuntu 20.04, PyTorch 1.12 to 2.0, no guard"


def shown_command(argv):
    """A recorded harness command as a reader can run it anywhere: the harness by its path in the
    repository, the programs under $BUILD (the build folder), the output folder under $OUT, so no
    path of the machine that ran it is printed."""
    if not argv:
        return "(not recorded)"
    shown = ["benchmarks/evidence/harness.py" if argv[0].endswith("harness.py") else os.path.basename(argv[0])]
    for previous, word in zip(argv, argv[1:]):
        if previous == "--out" and os.path.isabs(word):
            word = "$OUT/" + os.path.basename(word.rstrip("/"))
        elif os.path.isabs(word):
            inside = [word.rfind(part) for part in ("/benchmarks/", "/src/", "/examples/")]
            start = max(inside)
            word = "$BUILD" + word[start:] if start >= 0 else os.path.basename(word)
        shown.append(word)
    return " ".join(shown)


def load(directories):
    trials, runs = [], {}
    for d in directories:
        with open(os.path.join(d, "trials.jsonl")) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    trials.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{d}/trials.jsonl line {n}: not JSON ({e.msg})")
        for name in sorted(os.listdir(d)):
            if name.startswith("run-") and name.endswith(".json"):
                with open(os.path.join(d, name)) as f:
                    info = json.load(f)
                runs.setdefault(info["scenario"], []).append(info)
    return trials, runs


def fmt(value, unit="", digits=0):
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def counts(d):
    return ", ".join(f"{k}: {v}" for k, v in d.items()) or "none"


def groups(trials, scenario):
    """(label, arm, trials) rows: each variant, then all variants, for each arm."""
    rows = []
    for arm in ARMS:
        of_arm = [t for t in trials if t["scenario"] == scenario and t["arm"] == arm]
        variants = sorted({t["variant"] for t in of_arm})
        if len(variants) > 1:
            for v in variants:
                rows.append((f"{arm}, {v}", arm, [t for t in of_arm if t["variant"] == v]))
        if of_arm:
            rows.append((f"{arm}" + (", all" if len(variants) > 1 else ""), arm, of_arm))
    return rows


def representative(trials):
    """The trial whose peak is the median one."""
    ordered = sorted(trials, key=metrics.peak_mib)
    return ordered[len(ordered) // 2] if ordered else None


# ---- plots ------------------------------------------------------------------------------------------

def svg_open(width, height, title):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            'font-family="sans-serif">',
            f"<title>{title}</title>", '<rect width="100%" height="100%" fill="white"/>',
            f'<text x="10" y="18" font-size="13">{title}</text>']


def timeline_svg(by_arm, title, origin_label="fault", after_s=10.5):
    """Device memory above the baseline over one trial of each arm, whole, x = seconds from the fault."""
    width, height, left, bottom, top, right = 720, 340, 64, 44, 34, 150
    before_s = float(max([math.ceil(metrics.origin_s(t) - t["samples"][0][0]) for t in by_arm.values()] + [1]))
    series = {}
    for arm, trial in by_arm.items():
        origin = metrics.origin_s(trial)
        series[arm] = [(ts - origin, u - metrics.baseline_mib(trial)) for ts, u in trial["samples"]
                       if -before_s <= ts - origin <= after_s]
    y_max = max([v for pts in series.values() for _, v in pts] + [1.0])

    def x(t):
        return left + (width - left - right) * (t + before_s) / (before_s + after_s)

    def y(v):
        return height - bottom - (height - bottom - top) * max(v, 0.0) / y_max

    out = svg_open(width, height, title)
    out += [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
            f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">{y_max:.0f} MiB</text>',
            f'<text x="{left - 6}" y="{height - bottom}" font-size="11" text-anchor="end">0</text>']
    step = 1 if before_s + after_s <= 16 else 2
    for t in range(-int(before_s), int(after_s) + 1, step):
        out.append(f'<text x="{x(t):.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">{t}</text>')
    out += [f'<line x1="{x(0):.1f}" y1="{top}" x2="{x(0):.1f}" y2="{height - bottom}" stroke="black" '
            'stroke-dasharray="4 3"/>',
            f'<text x="{x(0) + 4:.1f}" y="{top + 10}" font-size="11">{origin_label}</text>']
    for n, (arm, pts) in enumerate(series.items()):
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        trial = by_arm[arm]
        out.append(f'<polyline fill="none" stroke="{COLOURS[arm]}" stroke-width="1.8" points="{points}">'
                   f'<title>{arm}: trial {trial["trial"]} ({trial["variant"]}), {trial["status"]}</title></polyline>')
        ly = top + 20 + 34 * n
        out += [f'<line x1="{width - right + 10}" y1="{ly}" x2="{width - right + 30}" y2="{ly}" '
                f'stroke="{COLOURS[arm]}" stroke-width="3"/>',
                f'<text x="{width - right + 34}" y="{ly + 4}" font-size="12">{arm}</text>',
                f'<text x="{width - right + 34}" y="{ly + 17}" font-size="10">{legend(trial)}</text>']
    out += [f'<text x="{(width - right + left) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
            f"seconds from the {origin_label}; device memory used above the level before the job</text>", "</svg>"]
    return "\n".join(out) + "\n"


def legend(trial):
    if "statuses" in trial:  # a contention round: its jobs' statuses are in the table
        return f"{len(trial['statuses'])} jobs, {trial['abnormal']} dying"
    return f"{trial['variant']}, {trial['status']}"


def residue_svg(trials_by_arm, title):
    """Each trial's residue at 1 s and at 10 s after the fault, a dot per trial, a row per arm and time."""
    rows = []
    for arm, trials in trials_by_arm.items():
        for after in (1.0, 10.0):
            rows.append((arm, after, [metrics.residual_mib(t, after) for t in trials]))
    width, left, right, top, row_h = 720, 150, 30, 34, 30
    height = top + row_h * len(rows) + 46
    x_max = max([v for _, _, values in rows for v in values if v is not None] + [1.0])

    def x(v):
        return left + (width - left - right) * v / x_max

    out = svg_open(width, height, title)
    axis_y = top + row_h * len(rows)
    out += [f'<line x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}" stroke="black"/>',
            f'<text x="{left}" y="{axis_y + 14}" font-size="10" text-anchor="middle">0</text>',
            f'<text x="{width - right}" y="{axis_y + 14}" font-size="10" text-anchor="end">{x_max:.0f} MiB</text>',
            f'<text x="{(width + left) / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
            "residue: device memory above the level before the job, a dot per trial</text>"]
    for n, (arm, after, values) in enumerate(rows):
        cy = top + row_h * n + row_h / 2
        known = [v for v in values if v is not None]
        with_residue = sum(1 for v in known if v > 0)
        out += [f'<line x1="{left}" y1="{cy:.1f}" x2="{width - right}" y2="{cy:.1f}" stroke="#ddd"/>',
                f'<text x="{left - 8}" y="{cy + 4:.1f}" font-size="11" text-anchor="end">'
                f"{arm}, {after:.0f} s ({with_residue}/{len(known)})</text>"]
        for k, v in enumerate(known):
            jitter = ((k * 7) % 11 - 5) * 1.4  # spreads equal values so that every trial shows
            out.append(f'<circle cx="{x(v):.1f}" cy="{cy + jitter:.1f}" r="3.2" fill="{COLOURS[arm]}" '
                       f'fill-opacity="0.6"><title>{v:.0f} MiB</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---- the reference, beside ours ------------------------------------------------------------------------

def reference_rows(scenario, trials):
    """(the write-up's figure, ours from these trials, why they differ) for each reference figure."""
    def of(arm, variant=None):
        return [t for t in trials if t["arm"] == arm and (variant is None or t["variant"] == variant)]

    def back(arm, variant=None):
        ts = of(arm, variant)
        if not ts:
            return "not run"
        s = metrics.summarize(ts)
        never = f"; {s['never_back']} of {s['trials']} not back within {post_s(ts):.0f} s" if s["never_back"] else ""
        return f"{arm}: mean {fmt(s['back_mean_s'], ' s', 2)} over the trials that came back{never}"

    def share(arm, variant):
        ts = of(arm, variant)
        if not ts:
            return "not run"
        s = metrics.summarize(ts)
        return f"{arm}: {fmt(s['residue_share_10s_pct'], '%')} at 10 s"

    why_holders = ("The driver gives a process's memory back within a fraction of a second of its exit "
                   "(the guarded and doctor arms); what stays is held by processes that outlive the job, "
                   "here its data-loader workers (the survivors column), so our plain arm's figure is how "
                   "long those live, which nothing ends in this harness before the 10 s window closes.")
    if scenario == "kill":
        return [("47 s average recovery after SIGKILL",
                 "; ".join(back(arm, "SIGKILL") for arm in ARMS if of(arm)), why_holders)]
    if scenario == "abnormal":
        plain = metrics.summarize(of("plain")) if of("plain") else None
        return [("15% of abnormal exits left residue",
                 "; ".join(share(arm, "throw") for arm in ARMS if of(arm)),
                 "Our plain job never ends its workers, so every plain trial leaves them: the rate is the job's, "
                 "not the driver's, which gives a process's memory back within a fraction of a second of its exit "
                 "(the guarded and doctor arms). The write-up's jobs left holders only sometimes."),
                ("63% of OOM exits left residue",
                 "; ".join(share(arm, "oom") for arm in ARMS if of(arm)),
                 "An out-of-memory error ends our job the same way as any uncaught exception, and its "
                 "workers survive it the same way; the write-up's higher OOM figure is not a driver "
                 "effect we can reproduce here."),
                ("residue averaged 32% of the initial allocation",
                 f"plain: {fmt(plain['residual_1s_pct_of_peak'] if plain else None, '%')} of the peak at 1 s",
                 "The share is the workers' part of the job's memory: our job holds 2 GiB itself and each "
                 "of its 2 workers 1 GiB, so a job that leaves its workers leaves half.")]
    per = [(metrics.residual_mib(t, 10.0) or 0.0) / t["abnormal"] for t in of("plain") if t.get("abnormal")]
    per_job = [(metrics.residual_mib(t, 10.0) or 0.0) / len(t["statuses"]) for t in of("plain") if t.get("statuses")]
    return [("1.2 GiB left per abnormally exiting process",
             (f"plain: {sum(per) / len(per) / 1024:.1f} GiB at 10 s per abnormally ending job; "
              f"{sum(per_job) / len(per_job) / 1024:.1f} GiB per job of the round") if per and per_job else "not run",
             "Our plain job never ends its workers, on a normal exit either, so every job of a round leaves "
             "them (the survivors column): the residue is its workers' memory, whatever the job's end."),
            ("about 30 minutes for a contended GPU to recover",
             "; ".join(back(arm) for arm in ARMS if of(arm)),
             "Time back counts from the round's last job's end. Plain, the survivors hold their memory "
             "until someone ends them; guarded, `gpuguard run` ends each job's processes as it ends.")]


def post_s(trials):
    spans = [t["samples"][-1][0] - metrics.origin_s(t) for t in trials if t["samples"] and not t.get("settled")]
    return min(spans) if spans else 10.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--plots", help="folder for the SVG plots (default: beside --out, results/)")
    args = parser.parse_args()
    trials, runs = load(args.dirs)
    if not trials:
        raise SystemExit("no trials in " + ", ".join(args.dirs))
    plots = args.plots or os.path.join(os.path.dirname(os.path.abspath(args.out)), "results")
    os.makedirs(plots, exist_ok=True)

    out = ["# Evidence: abnormal exits with and without gpuguard", "",
           "Made by `benchmarks/evidence/report.py` from the evidence harness's recorded trials "
           "([evidence.md](evidence.md) says how they are run and what each figure means). "
           "Residue is device memory above the level before the job, more than "
           f"{metrics.TOLERANCE_MIB:.0f} MiB, measured from the fault: the signal sent, or the job's "
           "own line just before its exception or failing allocation. Arms: "
           + "; ".join(f"*{a}*, {t}" for a, t in ARM_TEXT.items()) + ".", "",
           "To run it again on a GPU machine: `bash scripts/evidence-runner.sh` until it prints "
           "`evidence: complete`, then this script over the three scenario folders; each scenario lists the "
           "harness commands the runner ran for it ($BUILD is the build folder, $OUT the harness's output folder).", ""]
    for scenario, title in SCENARIOS.items():
        of_scenario = [t for t in trials if t["scenario"] == scenario]
        if not of_scenario:
            continue
        infos = runs.get(scenario, [])
        info = infos[0] if infos else {}
        machine = info.get("machine", {})
        gpus = ", ".join(f"{g['name']} (driver {g['driver']})" for g in machine.get("gpus", [])) or "no GPU"
        dates = sorted({i.get("date", "unknown") for i in infos}) or ["unknown"]
        out += [f"## {title}", "",
                f"Machine: {machine.get('cpu', 'unknown')}, {gpus}; PyTorch {info.get('torch') or 'unknown'}; "
                f"date {', '.join(dates)}"
                + ("; **fake device (a test run, not a GPU)**" if info.get("fake_device") else "") + ".", "",
                "Commands:", ""]
        out += [f"    {shown_command(i.get('argv'))}" for i in infos] or ["    (not recorded)"]
        out += ["",
                "| arm | trials | peak (MiB) | residue at 1 s (MiB, % of peak) | residue at 10 s (MiB) "
                "| trials with residue at 1 s / 10 s | back from the fault: median / max (s) | never back "
                "| back after the command returned: median (s) | survivors ended after measuring (mean) "
                "| exit statuses | logged errors | doctor --reap |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, arm, rows in groups(trials, scenario):
            s = metrics.summarize(rows)
            survivors = sum(t.get("survivors", 0) for t in rows) / len(rows)
            out.append(f"| {label} | {s['trials']} | {fmt(s['peak_mib'])} | {fmt(s['residual_1s_mib'])} "
                       f"({fmt(s['residual_1s_pct_of_peak'], '%')}) | {fmt(s['residual_10s_mib'])} "
                       f"| {fmt(s['residue_share_1s_pct'], '%')} / {fmt(s['residue_share_10s_pct'], '%')} "
                       f"| {fmt(s['back_median_s'], '', 2)} / {fmt(s['back_max_s'], '', 2)} | {s['never_back']} "
                       f"| {fmt(s['back_after_end_median_s'], '', 2)} | {survivors:.1f} | {counts(s['statuses'])} "
                       f"| {counts(s['errors'])} | {counts(s['doctor']) if arm == 'doctor' else ''} |")
        corrected = [f"{arm} {sum(1 for t in of_scenario if t['arm'] == arm and metrics.baseline_corrected(t))}"
                     for arm in ARMS if any(t["arm"] == arm and metrics.baseline_corrected(t) for t in of_scenario)]
        if corrected:
            out += ["", "Baselines corrected (trials per arm): " + ", ".join(corrected) + ". Their level before the job "
                    "was taken while the driver was still giving back the previous trial's memory, and they settled "
                    f"more than {metrics.TOLERANCE_MIB:.0f} MiB below it; the level they settled at is their baseline "
                    "(metrics.baseline_mib). The harness now waits for the level to be back where it was before the "
                    "first trial before it measures the next one's."]
        if scenario == "contention":
            per = [(metrics.residual_mib(t, 10.0) or 0.0) / t["abnormal"]
                   for t in of_scenario if t["arm"] == "plain" and t.get("abnormal")]
            if per:
                out += ["", f"Plain arm, residue at 10 s per abnormally ending process: {sum(per) / len(per):.0f} MiB."]
        out += ["", f"Beside the write-up this project started from ({REFERENCE_MACHINE}):", "",
                "| the write-up | ours | why they differ |", "|---|---|---|"]
        out += [f"| {ref} | {ours} | {why} |" for ref, ours, why in reference_rows(scenario, of_scenario)]
        out.append("")
        by_arm = {}
        for arm in ARMS:
            trial = representative([t for t in of_scenario if t["arm"] == arm])
            if trial is not None:
                by_arm[arm] = trial
        names = {"timeline": f"{scenario}-timeline.svg", "residue": f"{scenario}-residue.svg"}
        with open(os.path.join(plots, names["timeline"]), "w") as f:
            f.write(timeline_svg(by_arm, f"{scenario}: device memory over one trial of each arm (the median peak)",
                                 "last job's end" if scenario == "contention" else "fault"))
        with open(os.path.join(plots, names["residue"]), "w") as f:
            f.write(residue_svg({arm: [t for t in of_scenario if t["arm"] == arm] for arm in by_arm},
                                f"{scenario}: residue of every trial, 1 s and 10 s after the fault"))
        for kind, what in (("timeline", "device memory over one trial of each arm"),
                           ("residue", "residue of every trial, per arm")):
            rel = os.path.relpath(os.path.join(plots, names[kind]), os.path.dirname(os.path.abspath(args.out)))
            out.append(f"![{scenario}: {what}]({rel})")
        out.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(out))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
