#!/usr/bin/env python3
"""What the LibTorch adapter costs a training step: examples/torch_cnn's median step time in
observe and swap-in mode as ratios against the native allocator, measured in one run with the
modes interleaved (so drift in clocks or temperature falls on all of them alike).

    python3 benchmarks/torch_bench.py TORCH_CNN [--rounds 5] [--steps 210] [--inside]
        [--out FILE.md --append-section NAME] [--json-out FILE]
    python3 benchmarks/torch_bench.py --json-in FILE [--out ... --append-section NAME]

Each round runs every mode once (`TORCH_CNN --mode M --bench --no-leak --steps N`; the program
drops its first 10 steps as warm-up and prints the median of the rest), starting one mode later
than the round before, so the modes alternate round by round (a mode needs its own process:
swap-in must come before the first tensor, and observe cannot be detached). Each round also runs
native a second time ("native_again"): native_again / native is the spread of the baseline
itself. A figure is the median of the rounds' paired ratios (a mode over the native run of the
same round) with a distribution-free 95% interval on that median (figure_stats.py). Targets:
observe at most 1.02 times native, swap-in at most 1.05 times, each the interval's upper end; the
verdict is met where the upper end is within the target, missed where the lower end is above it,
within noise where the interval covers it. At least 6 rounds (a 95% interval needs them); 7 by
default. A fourth mode, native_async, runs PyTorch's own
allocator with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: the upstream swap-in allocates
from (the stream-ordered pool), without the pluggable allocator or gpuguard. It splits swap-in's
cost into the pool's share (native_async / native) and the rest's (swap_in / native_async).
Swap-in allocates from gpuguard's caching pool by default; a fifth mode, swap_in_async, is swap-in
over cudaMallocAsync (GPUGUARD_OPTIONS torch_upstream=async), the upstream it had before the pool:
what the pool saves.
--json-out keeps the figures, the judged targets ("targets"), the baseline's spread
("baseline_spread") and the card's name ("card").

The rounds' own ratios spread across 1 percent because one process's step time differs from the
next one's. With --inside, observe's target is also judged inside processes: the native run of
each round gets `--split STEPS/2` (printing the median of its steps before and after the split),
and an observe run attaching gpuguard at the split joins the round. A round's figure is observe's
after/before over native's after/before: what attaching changed, less what the second half of a
native run drifts. (Not by default: a native process's halves have drifted as far apart as two
processes, and the extra run costs the GPU runner time.)
Exits 77 without a GPU (the program does), 0 otherwise; a missed target is reported in the table,
not as a failure of this script.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figure_stats as stats  # noqa: E402
from run_benchmarks import describe_machine, machine_words, with_section  # noqa: E402

MODES = ("native", "observe", "swap_in", "native_async", "swap_in_async", "native_again")
TARGETS = {"observe": 1.02, "swap_in": 1.05}
TARGET_TITLES = {"observe": "LibTorch adapter, observe / native step",
                 "swap_in": "LibTorch adapter, swap-in / native step"}
# What a round runs: every mode, and observe attached at the split (native is split as it runs).
RUNS = MODES + ("observe_split",)


def split_step(steps):
    """Where --split divides a run of `steps`, or None where a half would have under 10 timed steps."""
    half = steps // 2
    return half if half >= 20 and steps - half >= 20 else None


def run_mode(binary, run, steps, split):
    """One run of the program: (median step ms, (median before the split, after it) or None,
    allocations gpuguard recorded per timed step or None: native mode records none)."""
    env = dict(os.environ, GPUGUARD_OPTIONS="text_log=off:leak_report=0")
    mode = {"native_async": "native", "native_again": "native", "observe_split": "observe",
            "swap_in_async": "swap_in"}.get(run, run)
    if run == "swap_in_async":
        env["GPUGUARD_OPTIONS"] += ":torch_upstream=async"
    if run == "native_async":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    command = [binary, "--mode", mode, "--bench", "--no-leak", "--steps", str(steps)]
    split_run = split is not None and run in ("native", "observe_split")
    if split_run:
        command += ["--split", str(split)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=550, env=env)
    if done.returncode == 77:
        raise SystemExit(77)
    m = re.search(r"median step ms ([0-9.]+)", done.stdout)
    halves = [re.search(rf"median step ms {side} step {split} ([0-9.]+)", done.stdout)
              for side in ("before", "after")] if split_run else []
    if done.returncode != 0 or not m or not all(halves):
        raise RuntimeError(f"{run}: status {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}")
    allocations = re.search(r"allocations per step ([0-9.]+)", done.stdout)
    return (float(m.group(1)), (tuple(float(h.group(1)) for h in halves) if split_run else None),
            float(allocations.group(1)) if allocations else None)


def split_figure(halves):
    """Observe judged inside processes, from each round's (before, after) medians of a native run
    and of an observe run that attached at the split: a figure() of the rounds' figures, each
    observe's after/before over native's after/before, judged against observe's target."""
    native = [after / before for before, after in halves["native"]]
    observed = [after / before for before, after in halves["observe_split"]]
    return stats.figure(stats.paired_ratios(native, observed), TARGETS["observe"])


def summarize(per_mode, rounds, steps, machine, date, halves=None, split=None, allocations=None):
    """The run's document (what --json-out writes): each mode's rounds and their median, each
    mode's paired ratio to native with its interval (and verdict where it has a target), swap-in
    over native_async, the baseline's spread (native_again / native, where the run has it), the
    judged targets; with `halves` (each round's medians before and after the split, of native and
    observe_split), observe judged inside processes too; with `allocations` (each mode's
    allocations per step, per round), their medians."""
    native = per_mode["native"]
    present = [m for m in MODES if per_mode.get(m)]
    figures = {m: stats.figure(stats.paired_ratios(native, per_mode[m]), TARGETS.get(m))
               for m in present if m not in ("native", "native_again")}
    if "swap_in" in figures and "native_async" in figures:
        figures["swap_in_over_native_async"] = stats.figure(stats.paired_ratios(per_mode["native_async"],
                                                                                per_mode["swap_in"]))
    document = {"date": date, "machine": machine, "card": stats.card_of(machine), "rounds": rounds, "steps": steps,
                "method": stats.METHOD, "per_round_ms": {m: per_mode[m] for m in present},
                "median_ms": {m: statistics.median(per_mode[m]) for m in present}, "figures": figures}
    if per_mode.get("native_again"):
        document["native_spread"] = stats.figure(stats.paired_ratios(native, per_mode["native_again"]))
    if halves:
        document.update(split_step=split, halves_ms=halves, observe_split=split_figure(halves))
    if allocations:
        document["allocations_per_step"] = {m: statistics.median(v) for m, v in allocations.items() if v}
    document["targets"] = [stats.target_row(TARGET_TITLES[m], figures[m]) for m in TARGETS if m in figures]
    if halves:
        document["targets"].append(stats.target_row(TARGET_TITLES["observe"] + ", attached inside processes",
                                                    document["observe_split"]))
    document["baseline_spread"] = ([stats.spread_row("native again / native step", document["native_spread"])]
                                   if "native_spread" in document else [])
    return document


def table_lines(document, binary_name):
    medians, rounds, steps, figures = document["median_ms"], document["rounds"], document["steps"], document["figures"]
    lines = [f"Machine: {machine_words(document['machine'])}; {document['date']}.",
             f"Command: `python3 benchmarks/torch_bench.py {binary_name} --rounds {rounds} "
             f"--steps {steps}{' --inside' if 'observe_split' in document else ''}`: median step of examples/torch_cnn over {steps - 10} steps after "
             f"10 of warm-up, {rounds} rounds with the modes alternating. Figures: {stats.METHOD}.", "",
             "| mode | median step | ratio to native | 95% interval | target | verdict |",
             "|---|---|---|---|---|---|",
             f"| native | {medians['native']:.3f} ms | 1.000 | | | |"]
    if "native_spread" in document:
        spread = document["native_spread"]
        lines.append(f"| native again (the baseline's spread) | {medians['native_again']:.3f} ms | "
                     f"{spread['median']:.3f} | {stats.interval_range(spread)} | | |")
    for mode, limit in TARGETS.items():
        if mode in figures:
            f = figures[mode]
            lines.append(f"| {mode} | {medians[mode]:.3f} ms | {f['median']:.3f} | {stats.interval_range(f)} | "
                         f"at most {limit} | {f['verdict']} |")
    if "native_async" in figures:
        f = figures["native_async"]
        lines.append(f"| native_async (PyTorch's allocator, backend:cudaMallocAsync) | {medians['native_async']:.3f} ms | "
                     f"{f['median']:.3f} | {stats.interval_range(f)} | (comparison) | |")
    if "swap_in_async" in figures:
        f = figures["swap_in_async"]
        lines.append(f"| swap_in_async (swap-in over cudaMallocAsync, torch_upstream=async) | "
                     f"{medians['swap_in_async']:.3f} ms | {f['median']:.3f} | {stats.interval_range(f)} | "
                     "(comparison) | |")
    if "observe_split" in document:
        inside = document["observe_split"]
        lines.append(f"| observe, attached at step {document['split_step']} (inside processes) | | "
                     f"{inside['median']:.3f} | {stats.interval_range(inside)} | at most "
                     f"{TARGETS['observe']} | {inside['verdict']} |")
    if "swap_in_over_native_async" in figures:
        f = figures["swap_in_over_native_async"]
        lines += ["", f"swap_in / native_async: {f['median']:.3f} (95% interval: {stats.interval_range(f)}; what the "
                  "pluggable allocator and gpuguard add over the stream-ordered pool they allocate from)."]
    per_step = document.get("allocations_per_step", {})
    if per_step.get("observe"):
        added_us = (medians["observe"] - medians["native"]) * 1000
        events = 2 * per_step["observe"]  # every tensor of a step is freed in it (--no-leak)
        lines += ["", f"Observe recorded {per_step['observe']:.1f} allocations per step (and as many frees): "
                  f"its added {added_us:.1f} us per step is {added_us * 1000 / events:.0f} ns per allocation "
                  "or free: all that observe adds to a step (PyTorch's three trace entries per tensor, the ledger's "
                  "records, gpuguard's writer thread), spread over the events."]
    if "observe_split" in document:
        lines += ["", f"Observe inside processes: each round also ran `--split {document['split_step']}` in "
                  "native mode and in observe mode, observe attaching at that step; a round's figure is "
                  "observe's median after the split over its median before, divided by the same for "
                  "native (each half after 10 steps of warm-up)."]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", nargs="?", help="examples/torch_cnn (not with --json-in)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=210)
    parser.add_argument("--out")
    parser.add_argument("--append-section", metavar="NAME")
    parser.add_argument("--json-out")
    parser.add_argument("--inside", action="store_true",
                        help="also judge observe inside processes (split runs; see above)")
    parser.add_argument("--json-in", metavar="FILE",
                        help="write the table of a recorded run (a --json-out file) instead of running")
    args = parser.parse_args()
    if args.rounds < stats.MIN_ROUNDS:
        parser.error(f"--rounds must be at least {stats.MIN_ROUNDS}: fewer rounds cannot give a 95% interval "
                     f"on the median (got {args.rounds})")
    if args.steps <= 10:
        parser.error(f"--steps must be more than 10, the warm-up (got {args.steps})")
    if (args.binary is None) == (args.json_in is None):
        parser.error("give either TORCH_CNN or --json-in FILE")
    if args.binary is not None and not os.path.isfile(args.binary):
        parser.error(f"TORCH_CNN {args.binary}: no such file")

    if args.json_in:
        try:
            with open(args.json_in) as f:
                recorded = json.load(f)
            per_mode = {m: [float(v) for v in recorded["per_round_ms"][m]] for m in MODES
                        if m in recorded["per_round_ms"]}  # runs before 2026-12-07 have no native_again
            halves = recorded.get("halves_ms")  # runs before 2026-12-05 17:00 have none
            if halves is not None:
                halves = {run: [(float(b), float(a)) for b, a in halves[run]] for run in ("native", "observe_split")}
            document = summarize(per_mode, recorded["rounds"], recorded["steps"], recorded["machine"],
                                 recorded["date"], halves, recorded.get("split_step"))
            if "allocations_per_step" in recorded:  # runs before 2026-12-06 have none
                document["allocations_per_step"] = {m: float(v) for m, v in recorded["allocations_per_step"].items()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"torch_bench.py: {args.json_in}: not a recorded run ({type(e).__name__}: {e})", file=sys.stderr)
            return 2
        binary_name = "torch_cnn"
    else:
        per_mode = {m: [] for m in MODES}
        split = split_step(args.steps) if args.inside else None
        if args.inside and split is None:
            parser.error("--inside needs --steps of at least 40 (10 warm-up and 10 timed steps a half)")
        halves = {"native": [], "observe_split": []} if split else None
        allocations = {m: [] for m in TARGETS}
        for r, order in enumerate(stats.schedule(RUNS if split else MODES, args.rounds)):
            for run in order:
                median, run_halves, per_step = run_mode(args.binary, run, args.steps, split)
                if run in per_mode:
                    per_mode[run].append(median)
                if run in allocations and per_step is not None:
                    allocations[run].append(per_step)
                if run_halves is not None:
                    halves[run].append(run_halves)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{m} {per_mode[m][-1]:.3f} ms" for m in MODES)
                  + (f", observe after/before step {split} {halves['observe_split'][-1][1] / halves['observe_split'][-1][0]:.3f}"
                     if split else ""), flush=True)
        document = summarize(per_mode, args.rounds, args.steps, describe_machine(),
                             datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), halves, split,
                             allocations)
        binary_name = os.path.basename(args.binary)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(document, f, indent=2)
    lines = table_lines(document, binary_name)
    body = "\n".join(lines) + "\n"
    print(body)
    if args.out:
        old = open(args.out).read() if os.path.exists(args.out) else ""
        name = args.append_section or "LibTorch adapter"
        with open(args.out, "w") as f:
            f.write(with_section(old, name, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
