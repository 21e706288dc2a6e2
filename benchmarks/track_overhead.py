#!/usr/bin/env python3
"""What `gpuguard run --track` costs, as ratios against the same program run plain, measured in
one run with the two interleaved round by round (so drift falls on both alike):
  - gpuguard_track_bench: a cudaMalloc/cudaFree pair and a cuMemAllocAsync/cuMemFreeAsync pair
    (target: each at most 1.02 of plain);
  - track_step.py: a PyTorch training step (target: at most 1.01 of plain).

    python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH [--rounds 5]
        [--out docs/benchmarks.md --append-section NAME] [--json-out FILE]

A figure is the median over rounds of each run's median. Exits 77 without a GPU, 0 otherwise; a
missed target is reported as MISS in the table, not as a failure of this script.
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
from run_benchmarks import describe_machine, with_section  # noqa: E402

STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "track_step.py")
FIGURES = (("cudaMalloc pair ns", 1.02), ("cuMemAllocAsync pair ns", 1.02), ("median step ms", 1.01))


def measure(argv, tracked, cli, preload):
    env = dict(os.environ, GPUGUARD_OPTIONS="text_log=off:leak_report=0", GPUGUARD_PRELOAD_LIBRARY=preload)
    env.pop("LD_PRELOAD", None)
    command = [cli, "run", "--track", "--"] + argv if tracked else argv
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode == 77:
        raise SystemExit(77)
    found = {name: float(m.group(1)) for name, _ in FIGURES
             for m in [re.search(re.escape(name) + r" ([0-9.]+)", done.stdout)] if m}
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{command}: status {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cli")
    parser.add_argument("preload")
    parser.add_argument("bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument("--append-section", metavar="NAME")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    runs = {"plain": {}, "track": {}}
    for r in range(args.rounds):
        for program in ([args.bench], [sys.executable, STEP]):
            for arm in ("plain", "track"):
                for name, value in measure(program, arm == "track", args.cli, args.preload).items():
                    runs[arm].setdefault(name, []).append(value)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name}: {runs['plain'][name][-1]:.1f} plain, {runs['track'][name][-1]:.1f} --track"
            for name, _ in FIGURES if name in runs["plain"]), flush=True)
    rows = []
    result = {"date": datetime.date.today().isoformat(), "machine": describe_machine(), "rounds": args.rounds, "figures": {}}
    for name, target in FIGURES:
        if name not in runs["plain"] or name not in runs["track"]:
            continue
        plain, track = statistics.median(runs["plain"][name]), statistics.median(runs["track"][name])
        ratio = track / plain
        result["figures"][name] = {"plain": plain, "track": track, "ratio": ratio, "target": target}
        rows.append(f"| {name} | {plain:.1f} | {track:.1f} | {ratio:.3f} | {target:.2f} | {'ok' if ratio <= target else 'MISS'} |")
    table = "\n".join([
        f"`gpuguard run --track` against plain, {args.rounds} interleaved rounds, {result['date']}, {result['machine']}",
        f"(`python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH --rounds {args.rounds}`):",
        "",
        "| figure | plain | --track | ratio | target | |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ] + rows) + "\n"
    print(table)
    if args.out:
        text = open(args.out).read() if os.path.exists(args.out) else ""
        with open(args.out, "w") as f:
            f.write(with_section(text, args.append_section or "--track overhead", table))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
