#!/usr/bin/env python3
"""What `gpuguard run --track` costs, as ratios against the same program run plain, measured in
one run with the two interleaved round by round (so drift falls on both alike):
  - gpuguard_track_bench: a cudaMalloc/cudaFree pair and a cuMemAllocAsync/cuMemFreeAsync pair
    (target: each at most 1.02 of plain);
  - track_step.py: a PyTorch training step (target: at most 1.01 of plain).

    python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH [--rounds 5] [--parts]
        [--out FILE.md --append-section NAME] [--json-out FILE]

A figure is the median over rounds of each run's median; --json-out keeps the figures and every
arm's value in every round ("per_round"). The verdict looks at every round's own ratio (--track
against the plain run of the same round): PASS if each is within the target, MISS if none is,
"within noise" if the rounds disagree. Beside it, the fastest rounds' ratio (--track's fastest
round against plain's fastest): noise only adds time, and on a machine where a process runs in
a fast or a slow state from one run to the next (an H200 has done so), the two fastest
are the nearest to a comparison of like with like (if each arm had a fast round: a few rounds
do not make sure of that). Exits 77 without a GPU, 0 otherwise; a missed target is
reported in the table, not as a failure of this script.

Each run of gpuguard_track_bench also prints the stream-ordered pair's ratio within its own
process (its own calls against the driver's entry points, alternating batches): a second table
gives it per arm, the process's fast or slow state falling on both sides of each ratio.

--at-once adds the arm `--track` with GPUGUARD_TRACK_DEFER=0: the interposer records every call at
once, on the calling thread, instead of handing a lone allocating thread's calls to its drainer
(docs/run.md, "What --track costs"), so that one run shows what deferring saves.

--parts adds two more arms to every round, to tell where a --track cost comes from: the program
with only LD_PRELOAD=PRELOAD (the interposer and the ledger in the process, no supervisor), and
the program under `gpuguard run` without --track (the supervisor alone). Their ratios against
plain are written next to --track's. Each round starts with the next arm, so that no arm always
runs in the same place of a round.
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
from run_benchmarks import describe_machine, machine_words, ratio_range, rotated, rounds_verdict, with_section  # noqa: E402

STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "track_step.py")
FIGURES = (("cudaMalloc pair ns", 1.02), ("cuMemAllocAsync pair ns", 1.02), ("median step ms", 1.01))
# gpuguard_track_bench's stream-ordered pair through its own calls against the driver's entry
# points, in alternating batches of one process: per arm, not against plain.
IN_ONE_PROCESS = "cuMemAllocAsync pair in one process ratio"


# The arms: how the program is started. plain and track always run; preload and run with --parts,
# at_once with --at-once.
ARMS = ("plain", "track", "preload", "run")
ARM_TITLES = {"track": "--track", "preload": "LD_PRELOAD only", "run": "run, no --track",
              "at_once": "--track, recorded at once"}


def command_for(arm, argv, cli):
    if arm in ("track", "at_once"):
        return [cli, "run", "--track", "--"] + argv
    if arm == "run":
        return [cli, "run", "--"] + argv
    return list(argv)


def environment_for(arm, preload, base):
    env = dict(base, GPUGUARD_OPTIONS="text_log=off:leak_report=0", GPUGUARD_PRELOAD_LIBRARY=preload)
    env.pop("LD_PRELOAD", None)
    env.pop("GPUGUARD_RUN_OPTIONS", None)  # its track=1 would make every `gpuguard run` arm track
    if arm == "preload":
        env["LD_PRELOAD"] = preload
    if arm == "at_once":
        env["GPUGUARD_TRACK_DEFER"] = "0"
    return env


def measure(argv, arm, cli, preload):
    env = environment_for(arm, preload, os.environ)
    command = command_for(arm, argv, cli)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode == 77:
        raise SystemExit(77)
    found = {name: float(m.group(1)) for name in [n for n, _ in FIGURES] + [IN_ONE_PROCESS]
             for m in [re.search(re.escape(name) + r" ([0-9.]+)", done.stdout)] if m}
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{command}: status {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}")
    return found


def figures(runs):
    """Each figure's median per arm, and each arm's ratio against plain (the --track ratio as
    "ratio", with its target)."""
    out = {}
    for name, target in FIGURES:
        if name not in runs["plain"] or name not in runs["track"]:
            continue
        plain = statistics.median(runs["plain"][name])
        figure = {"plain": plain}
        for arm in [a for a in runs if a != "plain"]:
            if name in runs[arm]:
                figure[arm] = statistics.median(runs[arm][name])
                figure[arm + "_ratio"] = figure[arm] / plain
        figure["ratio"] = figure.pop("track_ratio")
        figure["fastest_ratio"] = min(runs["track"][name]) / min(runs["plain"][name])
        figure["target"] = target
        figure["verdict"], figure["round_ratios"] = rounds_verdict(runs["plain"][name], runs["track"][name], target)
        out[name] = figure
    return out


def in_one_process(runs):
    """Each arm's in-process ratio (its own calls against the driver's entry points): the median
    over rounds and every round's, for the arms whose program printed it."""
    return {arm: {"ratio": statistics.median(values[IN_ONE_PROCESS]), "round_ratios": values[IN_ONE_PROCESS]}
            for arm, values in runs.items() if values.get(IN_ONE_PROCESS)}


def in_one_process_text(figures):
    if not figures:
        return ""
    rows = [f"| {ARM_TITLES.get(arm, arm)} | {f['ratio']:.3f} | {ratio_range(f['round_ratios'])} |"
            for arm, f in figures.items()]
    return "\n".join([
        "",
        "The stream-ordered pair in one process: the program's own calls (under `--track`, the",
        "interposer's wrappers) against the driver's entry points, in alternating batches; the median",
        "of the batches' ratios, per arm. A process's fast or slow state falls on both sides; plain",
        "calls the driver both ways, so its row is what the method reads with nothing in between.",
        "",
        "| arm | own / direct | rounds |",
        "| --- | ---: | ---: |",
    ] + rows) + "\n"


def table_text(result, args):
    parts = any("preload" in f for f in result["figures"].values())
    at_once = any("at_once" in f for f in result["figures"].values())
    extra = (list(ARMS[2:]) if parts else []) + (["at_once"] if at_once else [])
    header = ("| figure | plain | --track | ratio | rounds' ratios | fastest rounds' ratio | target | verdict |"
              + "".join(f" {ARM_TITLES[a]} | ratio |" for a in extra))
    rule = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |" + " ---: | ---: |" * len(extra)
    rows = []
    for name, f in result["figures"].items():
        rows.append(f"| {name} | {f['plain']:.1f} | {f['track']:.1f} | {f['ratio']:.3f} | "
                    f"{ratio_range(f['round_ratios'])} | {f['fastest_ratio']:.3f} | {f['target']:.2f} | {f['verdict']} |"
                    + "".join(f" {f[a]:.1f} | {f[a + '_ratio']:.3f} |" for a in extra))
    command = f"python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH --rounds {args.rounds}"
    return "\n".join([
        f"`gpuguard run --track` against plain, {args.rounds} interleaved rounds, {result['date']}, "
        f"{machine_words(result['machine'])}",
        f"(`{command}{' --parts' if parts else ''}{' --at-once' if at_once else ''}`):",
        "",
        header,
        rule,
    ] + rows) + "\n" + in_one_process_text(result.get("in_one_process"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cli")
    parser.add_argument("preload")
    parser.add_argument("bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument("--append-section", metavar="NAME")
    parser.add_argument("--json-out")
    parser.add_argument("--parts", action="store_true",
                        help="also run each program with LD_PRELOAD only and under `gpuguard run` without --track")
    parser.add_argument("--at-once", action="store_true",
                        help="also run each program under --track with GPUGUARD_TRACK_DEFER=0 (no deferred recording)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    arms = list(ARMS if args.parts else ARMS[:2]) + (["at_once"] if args.at_once else [])
    runs = {arm: {} for arm in arms}
    for r in range(args.rounds):
        for program in ([args.bench], [sys.executable, STEP]):
            for arm in rotated(arms, r):
                for name, value in measure(program, arm, args.cli, args.preload).items():
                    runs[arm].setdefault(name, []).append(value)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name}: " + ", ".join(f"{runs[arm][name][-1]:.1f} {arm}" for arm in arms)
            for name, _ in FIGURES if name in runs["plain"]), flush=True)
    result = {"date": datetime.date.today().isoformat(), "machine": describe_machine(), "rounds": args.rounds,
              "figures": figures(runs), "in_one_process": in_one_process(runs), "per_round": runs}
    table = table_text(result, args)
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
