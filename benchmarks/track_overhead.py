#!/usr/bin/env python3
"""What `gpuguard run --track` costs, as ratios against the same program run plain, and what
PyTorch's own allocation history costs the same PyTorch step, measured in one run with the arms
alternating round by round (so drift falls on all alike):
  - gpuguard_track_bench: a cudaMalloc/cudaFree pair and a cuMemAllocAsync/cuMemFreeAsync pair
    (target: each at most 1.02 of plain, the 95% interval's upper end);
  - track_step.py: a PyTorch training step (target: at most 1.02 of plain, the interval's upper
    end), which inside each process also alternates blocks of steps under
    `torch.cuda.memory._record_memory_history()` with its default arguments: the peer arm. Its
    figure: --track's overhead on the step over _record_memory_history's (target: at most 0.5).

    python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH [--rounds 7] [--parts]
        [--at-once] [--out FILE.md --append-section NAME] [--json-out FILE]

`--track` needs its own process (the interposer is preloaded), so every round runs each program
once per arm, each round starting one arm later than the one before (A B C, B C A, C A B, ...):
never all of one arm before another. Every round also runs the plain program a second time (the
arm "plain again"): plain again / plain is the spread of the baseline itself, the ratio a run
reads where nothing differs. A figure is the median of the rounds' paired ratios (an arm's value
over plain's in the same round) with a distribution-free 95% interval on that median
(figure_stats.py); the verdict: met where the interval's upper end is at most the target, missed
where its lower end is above it, within noise where it covers the target. At least 6 rounds (a
95% interval needs them); 7 by default. _record_memory_history's overhead comes from the plain
processes' own blocks (recording block / plain block, in one process); a round's peer figure is
(--track / plain - 1) / (that ratio - 1).

--json-out keeps the figures, the judged targets ("targets"), the baseline's spread
("baseline_spread"), the card's name ("card") and every arm's value in every round ("per_round").
Exits 77 without a GPU, 2 on a bad argument, 0 otherwise; a missed target is reported in the
table, not as a failure of this script.

Each run of gpuguard_track_bench also prints the stream-ordered pair's ratio within its own
process (its own calls against the driver's entry points, alternating batches): a second table
gives it per arm, the process's fast or slow state falling on both sides of each ratio.

--at-once adds the arm `--track` with GPUGUARD_TRACK_DEFER=0: the interposer records every call at
once, on the calling thread, instead of handing a lone allocating thread's calls to its drainer
(docs/run.md, "What --track costs"), so that one run shows what deferring saves.

--parts adds two more arms to every round, to tell where a --track cost comes from: the program
with only LD_PRELOAD=PRELOAD (the interposer and the ledger in the process, no supervisor), and
the program under `gpuguard run` without --track (the supervisor alone). Their ratios against
plain are written next to --track's.
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

STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "track_step.py")
STEP_FIGURE = "median step ms"
FIGURES = (("cudaMalloc pair ns", 1.02), ("cuMemAllocAsync pair ns", 1.02), (STEP_FIGURE, 1.02))
TARGET_TITLES = {"cudaMalloc pair ns": "`--track` cudaMalloc pair / plain",
                 "cuMemAllocAsync pair ns": "`--track` cuMemAllocAsync pair / plain",
                 STEP_FIGURE: "`--track` PyTorch step / plain"}
# gpuguard_track_bench's stream-ordered pair through its own calls against the driver's entry
# points, in alternating batches of one process: per arm, not against plain.
IN_ONE_PROCESS = "cuMemAllocAsync pair in one process ratio"
# track_step.py's peer: the step under PyTorch's _record_memory_history, in blocks of one process.
PEER_STEP = "record_memory_history step ms"
PEER_RATIO = "record_memory_history ratio in one process"
PEER_LIMIT = 0.5
PEER_TITLE = "`--track` overhead / `_record_memory_history()` overhead, PyTorch step"
PRINTED = [n for n, _ in FIGURES] + [IN_ONE_PROCESS, PEER_STEP, PEER_RATIO]


# The arms: how the program is started. plain, track and plain_again (the baseline's spread)
# always run; preload and run with --parts, at_once with --at-once.
ARMS = ("plain", "track", "plain_again")
PARTS = ("preload", "run")
ARM_TITLES = {"plain": "plain", "track": "--track", "plain_again": "plain again", "preload": "LD_PRELOAD only",
              "run": "run, no --track", "at_once": "--track, recorded at once"}


def arms_for(parts, at_once):
    return list(ARMS) + (list(PARTS) if parts else []) + (["at_once"] if at_once else [])


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


def parse_figures(stdout):
    """The figures a program printed ("NAME VALUE" lines), by name."""
    return {name: float(m.group(1)) for name in PRINTED
            for m in [re.search(r"^" + re.escape(name) + r" ([0-9.]+)", stdout, re.MULTILINE)] if m}


def measure(argv, arm, cli, preload):
    env = environment_for(arm, preload, os.environ)
    command = command_for(arm, argv, cli)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode == 77:
        raise SystemExit(77)
    found = parse_figures(done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{command}: status {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}")
    return found


def figures(runs):
    """Each figure's median per arm, --track's paired ratio against plain with its interval and
    verdict, every other arm's paired ratio, and the baseline's spread (plain again / plain)."""
    out = {}
    for name, target in FIGURES:
        if name not in runs["plain"] or name not in runs["track"]:
            continue
        plain = runs["plain"][name]
        figure = {"plain": statistics.median(plain)}
        for arm in [a for a in runs if a != "plain"]:
            if name in runs[arm]:
                figure[arm] = statistics.median(runs[arm][name])
                if arm not in ("track", "plain_again"):
                    figure[arm + "_ratio"] = statistics.median(stats.paired_ratios(plain, runs[arm][name]))
        figure.update(stats.figure(stats.paired_ratios(plain, runs["track"][name]), target))
        if name in runs.get("plain_again", {}):
            figure["baseline_spread"] = stats.figure(stats.paired_ratios(plain, runs["plain_again"][name]))
        out[name] = figure
    return out


def peer(runs):
    """The peer arm: the step under _record_memory_history in the plain processes (its step time,
    its in-process ratio with an interval), and --track's overhead over its overhead per round,
    judged against PEER_LIMIT. None where the step did not print the peer's figures."""
    plain, track = runs["plain"], runs.get("track", {})
    if not plain.get(PEER_RATIO) or STEP_FIGURE not in track:
        return None
    ratios = plain[PEER_RATIO]
    out = {"arguments": "default: enabled='all', context='all', stacks='all', max_entries=sys.maxsize",
           "step_ms": statistics.median(plain[PEER_STEP]), "ratio": stats.figure(ratios)}
    track_ratios = stats.paired_ratios(plain[STEP_FIGURE], track[STEP_FIGURE])
    if min(ratios) <= 1.0:
        # A round where recording cost nothing measurable gives no quotient to judge.
        out["track_over_peer"] = None
    else:
        out["track_over_peer"] = stats.figure([(t - 1.0) / (r - 1.0) for t, r in zip(track_ratios, ratios)],
                                              PEER_LIMIT)
    return out


def in_one_process(runs):
    """Each arm's in-process ratio (its own calls against the driver's entry points): the median
    over rounds with its interval, for the arms whose program printed it."""
    return {arm: stats.figure(values[IN_ONE_PROCESS]) for arm, values in runs.items() if values.get(IN_ONE_PROCESS)}


def judged(result):
    """(targets, baseline spread): the rows the summaries list."""
    targets, spread = [], []
    for name, f in result["figures"].items():
        targets.append(stats.target_row(TARGET_TITLES[name], f))
        if "baseline_spread" in f:
            spread.append(stats.spread_row("plain again / plain: " + name, f["baseline_spread"]))
    p = result.get("peer")
    if p and p["track_over_peer"]:
        targets.append(stats.target_row(PEER_TITLE, p["track_over_peer"]))
    elif p:
        targets.append({"figure": PEER_TITLE, "target": "<= %g" % PEER_LIMIT, "limit": PEER_LIMIT, "median": None,
                        "interval": None, "rounds": len(p["ratio"]["rounds"]),
                        "verdict": "not measurable (recording cost nothing in a round)"})
    return targets, spread


def in_one_process_text(figures):
    if not figures:
        return ""
    rows = [f"| {ARM_TITLES.get(arm, arm)} | {f['median']:.3f} | {stats.interval_range(f)} |" for arm, f in figures.items()]
    return "\n".join([
        "",
        "The stream-ordered pair in one process: the program's own calls (under `--track`, the",
        "interposer's wrappers) against the driver's entry points, in alternating batches; the median",
        "of the rounds' ratios and its 95% interval, per arm. A process's fast or slow state falls on",
        "both sides; plain calls the driver both ways, so its row is what the method reads with",
        "nothing in between.",
        "",
        "| arm | own / direct | 95% interval |",
        "| --- | ---: | ---: |",
    ] + rows) + "\n"


def peer_text(result):
    p = result.get("peer")
    step = result["figures"].get(STEP_FIGURE)
    if not p or not step:
        return ""
    rows = [f"| plain | {step['plain']:.3f} | 1.000 | | | |",
            f"| `--track` | {step['track']:.3f} | {step['median']:.3f} | {stats.interval_range(step)} | "
            f"<= {step['target']:g} | {step['verdict']} |",
            f"| `_record_memory_history()`, default arguments, same processes | {p['step_ms']:.3f} | "
            f"{p['ratio']['median']:.3f} | {stats.interval_range(p['ratio'])} | | |"]
    q = p["track_over_peer"]
    if q:
        rows.append(f"| `--track` overhead / `_record_memory_history()` overhead | | {q['median']:.3f} | "
                    f"{stats.interval_range(q)} | <= {q['target']:g} | {q['verdict']} |")
    else:
        rows.append(f"| `--track` overhead / `_record_memory_history()` overhead | | | | <= {PEER_LIMIT:g} | "
                    "not measurable (recording cost nothing in a round) |")
    return "\n".join([
        "",
        "The PyTorch step beside PyTorch's own allocation history (`torch.cuda.memory._record_memory_history()`",
        f"with {p['arguments']}), switched on and off in alternating blocks of the plain processes:",
        "",
        "| PyTorch step | median ms | / plain | 95% interval | target | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ] + rows) + "\n"


def table_text(result, rounds):
    figures = result["figures"]
    parts = any("preload" in f for f in figures.values())
    at_once = any("at_once" in f for f in figures.values())
    extra = (list(PARTS) if parts else []) + (["at_once"] if at_once else [])
    header = ("| figure | plain | --track | --track / plain | 95% interval | target | verdict | plain again / plain |"
              + "".join(f" {ARM_TITLES[a]} | ratio |" for a in extra))
    rule = "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |" + " ---: | ---: |" * len(extra)
    rows = []
    for name, f in figures.items():
        spread = f.get("baseline_spread")
        spread_cell = f"{spread['median']:.3f} ({stats.interval_range(spread)})" if spread else ""
        rows.append(f"| {name} | {f['plain']:.1f} | {f['track']:.1f} | {f['median']:.3f} | {stats.interval_range(f)} | "
                    f"<= {f['target']:.2f} | {f['verdict']} | {spread_cell} |"
                    + "".join(f" {f[a]:.1f} | {f[a + '_ratio']:.3f} |" for a in extra))
    command = f"python3 benchmarks/track_overhead.py GPUGUARD PRELOAD TRACK_BENCH --rounds {rounds}"
    return "\n".join([
        f"`gpuguard run --track` against plain, {rounds} rounds with the arms alternating, {result['date']}, "
        f"{machine_words(result['machine'])}",
        f"(`{command}{' --parts' if parts else ''}{' --at-once' if at_once else ''}`). Figures: {stats.METHOD}.",
        "",
        header,
        rule,
    ] + rows) + "\n" + peer_text(result) + in_one_process_text(result.get("in_one_process"))


def result_of(runs, rounds, machine, date):
    """The run's document (what --json-out writes)."""
    result = {"date": date, "machine": machine, "card": stats.card_of(machine), "rounds": rounds,
              "method": stats.METHOD, "figures": figures(runs), "peer": peer(runs),
              "in_one_process": in_one_process(runs), "per_round": runs}
    result["targets"], result["baseline_spread"] = judged(result)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cli")
    parser.add_argument("preload")
    parser.add_argument("bench")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    parser.add_argument("--append-section", metavar="NAME")
    parser.add_argument("--json-out")
    parser.add_argument("--parts", action="store_true",
                        help="also run each program with LD_PRELOAD only and under `gpuguard run` without --track")
    parser.add_argument("--at-once", action="store_true",
                        help="also run each program under --track with GPUGUARD_TRACK_DEFER=0 (no deferred recording)")
    args = parser.parse_args()
    if args.rounds < stats.MIN_ROUNDS:
        parser.error(f"--rounds must be at least {stats.MIN_ROUNDS}: fewer rounds cannot give a 95% interval "
                     f"on the median (got {args.rounds})")
    for name, path in (("GPUGUARD", args.cli), ("PRELOAD", args.preload), ("TRACK_BENCH", args.bench)):
        if not os.path.isfile(path):
            parser.error(f"{name} {path}: no such file")
    arms = arms_for(args.parts, args.at_once)
    runs = {arm: {} for arm in arms}
    for r, order in enumerate(stats.schedule(arms, args.rounds)):
        for program in ([args.bench], [sys.executable, STEP]):
            for arm in order:
                for name, value in measure(program, arm, args.cli, args.preload).items():
                    runs[arm].setdefault(name, []).append(value)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name}: " + ", ".join(f"{runs[arm][name][-1]:.1f} {arm}" for arm in arms)
            for name, _ in FIGURES if name in runs["plain"]), flush=True)
    result = result_of(runs, args.rounds, describe_machine(), datetime.date.today().isoformat())
    table = table_text(result, args.rounds)
    print(table)
    if args.out:
        text = open(args.out).read() if os.path.exists(args.out) else ""
        with open(args.out, "w") as f:
            f.write(with_section(text, args.append_section or "--track overhead", table))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
