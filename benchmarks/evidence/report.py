#!/usr/bin/env python3
"""Turns the evidence harness's recorded trials into docs/results.md and one SVG plot per scenario
and arm (docs/evidence.md).

    python3 benchmarks/evidence/report.py DIR [DIR...] --out docs/results.md [--plots docs/results]

Each DIR is a harness --out directory (trials.jsonl and run-<scenario>.json). Every number written
comes from those files; the reference figures are the write-up's, quoted as such.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics  # noqa: E402

SCENARIOS = {
    "kill": "Forced kill (SIGKILL or SIGTERM at a random iteration; the job has worker processes holding device memory)",
    "abnormal": "Abnormal exit (uncaught exception, or out of memory, at a random iteration)",
    "contention": "Contention (8 jobs of 4 GiB on one GPU, 3 of them dying abnormally at random times)",
}

# The write-up this project started from: A100, Ubuntu 20.04, PyTorch 1.12 to 2.0, no guard.
REFERENCE = {
    "kill": "47 s average recovery after SIGKILL",
    "abnormal": "15% of abnormal exits and 63% of OOM exits left residue; residue averaged 32% of the initial allocation",
    "contention": "1.2 GiB left per abnormally exiting process; about 30 minutes for a contended GPU to recover",
}


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
        for name in os.listdir(d):
            if name.startswith("run-") and name.endswith(".json"):
                with open(os.path.join(d, name)) as f:
                    info = json.load(f)
                runs[info["scenario"]] = info
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
    for arm in ("plain", "guarded"):
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


def svg_plot(trial, title):
    """Device memory above the baseline over time, the job's end marked: a standalone SVG."""
    width, height, left, bottom, top, right = 640, 320, 60, 40, 30, 20
    samples = trial["samples"]
    t_max = max(samples[-1][0], 1e-3)
    ys = [u - trial["baseline_mib"] for _, u in samples]
    y_max = max(max(ys), 1.0)

    def x(t):
        return left + (width - left - right) * t / t_max

    def y(v):
        return height - bottom - (height - bottom - top) * max(v, 0.0) / y_max

    points = " ".join(f"{x(t):.1f},{y(v):.1f}" for (t, _), v in zip(samples, ys))
    end = x(trial["end_s"])
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<title>{title}</title>',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-family="sans-serif" font-size="13">{title}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-family="sans-serif" font-size="11" text-anchor="end">{y_max:.0f} MiB</text>',
        f'<text x="{left - 6}" y="{height - bottom}" font-family="sans-serif" font-size="11" text-anchor="end">0</text>',
        f'<text x="{width - right}" y="{height - bottom + 16}" font-family="sans-serif" font-size="11" text-anchor="end">{t_max:.1f} s</text>',
        f'<line x1="{end:.1f}" y1="{top}" x2="{end:.1f}" y2="{height - bottom}" stroke="red" stroke-dasharray="4 3"/>',
        f'<text x="{end + 4:.1f}" y="{top + 12}" font-family="sans-serif" font-size="11" fill="red">job ended ({trial["status"]})</text>',
        f'<polyline fill="none" stroke="steelblue" stroke-width="1.5" points="{points}"/>',
        f'<text x="{(width + left) / 2:.0f}" y="{height - 8}" font-family="sans-serif" font-size="11" text-anchor="middle">'
        'seconds since the job started; device memory used above the baseline</text>',
        "</svg>",
    ]) + "\n"


def verdict(scenario, plain, guarded):
    """What our plain arm shows beside the reference, and what the guarded arm changed, from data."""
    def residue(summary):
        if summary["residue_share_10s_pct"] is not None:
            return f"{fmt(summary['residue_share_10s_pct'], '%')} of trials had residue 10 s after the job ended " \
                   f"(mean {fmt(summary['residual_10s_mib'], ' MiB')})"
        return f"{fmt(summary['residue_share_1s_pct'], '%')} of trials had residue 1 s after the job ended " \
               f"(mean {fmt(summary['residual_1s_mib'], ' MiB')}; sampling stopped before 10 s)"
    return [f"Plain arm: {residue(plain)}; {plain['never_back']} of {plain['trials']} never came back while "
            f"sampled; median time back {fmt(plain['back_median_s'], ' s', 2)}.",
            f"Guarded arm: {residue(guarded)}; {guarded['never_back']} of {guarded['trials']} never came back; "
            f"median time back {fmt(guarded['back_median_s'], ' s', 2)}, max {fmt(guarded['back_max_s'], ' s', 2)}."]


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
           f"{metrics.TOLERANCE_MIB:.0f} MiB, after the job's command returned.", ""]
    for scenario, title in SCENARIOS.items():
        of_scenario = [t for t in trials if t["scenario"] == scenario]
        if not of_scenario:
            continue
        info = runs.get(scenario, {})
        machine = info.get("machine", {})
        gpus = ", ".join(f"{g['name']} (driver {g['driver']})" for g in machine.get("gpus", [])) or "no GPU"
        out += [f"## {title}", "",
                f"Machine: {machine.get('cpu', 'unknown')}, {gpus}; date {info.get('date', 'unknown')}"
                + ("; **fake device (a test run, not a GPU)**" if info.get("fake_device") else "") + ".",
                f"Command: `{' '.join(info.get('argv', ['(not recorded)']))}`", "",
                "| arm | trials | peak (MiB) | residue at 1 s (MiB, % of peak) | residue at 10 s (MiB) "
                "| trials with residue at 1 s / 10 s | back to baseline: median / max (s) | never back "
                "| survivors ended after measuring (mean) | exit statuses | logged errors |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        summaries = {}
        for label, arm, rows in groups(trials, scenario):
            s = metrics.summarize(rows)
            if label in ("plain", "plain, all", "guarded", "guarded, all"):
                summaries[arm] = s
            survivors = sum(t.get("survivors", 0) for t in rows) / len(rows)
            out.append(f"| {label} | {s['trials']} | {fmt(s['peak_mib'])} | {fmt(s['residual_1s_mib'])} "
                       f"({fmt(s['residual_1s_pct_of_peak'], '%')}) | {fmt(s['residual_10s_mib'])} "
                       f"| {fmt(s['residue_share_1s_pct'], '%')} / {fmt(s['residue_share_10s_pct'], '%')} "
                       f"| {fmt(s['back_median_s'], '', 2)} / {fmt(s['back_max_s'], '', 2)} | {s['never_back']} "
                       f"| {survivors:.1f} | {counts(s['statuses'])} | {counts(s['errors'])} |")
        if scenario == "contention":
            per = [(metrics.residual_mib(t, 10.0) or 0.0) / t["abnormal"]
                   for t in of_scenario if t["arm"] == "plain" and t.get("abnormal")]
            if per:
                out += ["", f"Plain arm, residue at 10 s per abnormally ending process: {sum(per) / len(per):.0f} MiB."]
        out += ["", f"Reference (the write-up: A100, Ubuntu 20.04, PyTorch 1.12 to 2.0, no guard): {REFERENCE[scenario]}.", ""]
        if "plain" in summaries and "guarded" in summaries:
            out += verdict(scenario, summaries["plain"], summaries["guarded"]) + [""]
        for arm in ("plain", "guarded"):
            trial = representative([t for t in of_scenario if t["arm"] == arm])
            if trial is None:
                continue
            name = f"{scenario}-{arm}.svg"
            with open(os.path.join(plots, name), "w") as f:
                f.write(svg_plot(trial, f"{scenario}, {arm} arm, trial {trial['trial']} ({trial['variant']})"))
            rel = os.path.relpath(os.path.join(plots, name), os.path.dirname(os.path.abspath(args.out)))
            out.append(f"![{scenario}, {arm} arm: device memory over one trial]({rel})")
        out.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(out))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
