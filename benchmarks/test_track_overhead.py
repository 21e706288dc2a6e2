#!/usr/bin/env python3
"""Checks track_overhead.py's arithmetic and table on made-up rounds, and its arms' commands and
environments, without a GPU. Plain python3; exits non-zero on the first failed check."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import track_overhead as t  # noqa: E402


def main():
    runs = {
        "plain": {"cuMemAllocAsync pair ns": [1000.0, 1100.0, 1050.0], "median step ms": [2.0, 2.2, 2.1]},
        "track": {"cuMemAllocAsync pair ns": [1040.0, 1090.0, 1070.0], "median step ms": [2.1, 2.3, 2.2]},
    }
    figures = t.figures(runs)
    async_pair = figures["cuMemAllocAsync pair ns"]
    assert async_pair["plain"] == 1050.0 and async_pair["track"] == 1070.0, async_pair
    assert abs(async_pair["ratio"] - 1070.0 / 1050.0) < 1e-12 and async_pair["target"] == 1.02, async_pair
    assert "preload" not in async_pair and "cudaMalloc pair ns" not in figures, figures
    # Each round's own ratio decides: 1.040, 0.991 and 1.019 against 1.02 disagree; the step's
    # 1.050, 1.045 and 1.048 against 1.01 all miss.
    assert async_pair["verdict"] == "within noise", async_pair
    assert [round(r, 3) for r in async_pair["round_ratios"]] == [1.04, 0.991, 1.019], async_pair
    assert figures["median step ms"]["verdict"] == "MISS", figures
    # The fastest rounds: 1040 / 1000 and 2.1 / 2.0.
    assert abs(async_pair["fastest_ratio"] - 1.04) < 1e-12, async_pair
    assert abs(figures["median step ms"]["fastest_ratio"] - 1.05) < 1e-12, figures
    args = argparse.Namespace(rounds=3)
    result = {"date": "2026-12-05", "machine": {"cpu": "x"}, "rounds": 3, "figures": figures}
    table = t.table_text(result, args)
    assert "| cuMemAllocAsync pair ns | 1050.0 | 1070.0 | 1.019 | 0.991 to 1.040 | 1.040 | 1.02 | within noise |\n" in table, table
    assert "| median step ms | 2.1 | 2.2 | 1.048 | 1.045 to 1.050 | 1.050 | 1.01 | MISS |\n" in table, table
    assert "--parts" not in table and "LD_PRELOAD" not in table, table
    assert "interleaved rounds, 2026-12-05, x, ? cores, no GPU\n" in table, table

    # With --parts: each arm's median and ratio, in the table after --track's verdict.
    runs["preload"] = {"cuMemAllocAsync pair ns": [1060.0, 1080.0, 1000.0], "median step ms": [2.1, 2.2, 2.4]}
    runs["run"] = {"cuMemAllocAsync pair ns": [1050.0, 1050.0, 1050.0], "median step ms": [2.1, 2.1, 2.1]}
    figures = t.figures(runs)
    step = figures["median step ms"]
    assert step["preload"] == 2.2 and abs(step["preload_ratio"] - 2.2 / 2.1) < 1e-12, step
    assert step["run"] == 2.1 and step["run_ratio"] == 1.0, step
    table = t.table_text(dict(result, figures=figures), args)
    assert "--rounds 3 --parts`" in table, table
    assert ("| figure | plain | --track | ratio | rounds' ratios | fastest rounds' ratio | target | verdict "
            "| LD_PRELOAD only | ratio "
            "| run, no --track | ratio |\n") in table, table
    assert "| median step ms | 2.1 | 2.2 | 1.048 | 1.045 to 1.050 | 1.050 | 1.01 | MISS | 2.2 | 1.048 | 2.1 | 1.000 |\n" in table, table

    # With --at-once: --track recording at once, after the other arms.
    runs["at_once"] = {"cuMemAllocAsync pair ns": [1150.0, 1100.0, 1200.0], "median step ms": [2.3, 2.3, 2.3]}
    figures = t.figures(runs)
    assert figures["cuMemAllocAsync pair ns"]["at_once"] == 1150.0, figures
    table = t.table_text(dict(result, figures=figures), args)
    assert "--rounds 3 --parts --at-once`" in table and "| --track, recorded at once | ratio |\n" in table, table
    assert "| 2.2 | 1.048 | 2.1 | 1.000 | 2.3 | 1.095 |\n" in table, table
    assert t.command_for("at_once", ["prog"], "gg") == ["gg", "run", "--track", "--", "prog"]
    assert t.environment_for("at_once", "/p.so", {})["GPUGUARD_TRACK_DEFER"] == "0"
    assert "GPUGUARD_TRACK_DEFER" not in t.environment_for("track", "/p.so", {})

    # The in-process ratio: per arm, the median of its rounds, in a table of its own; an arm whose
    # program did not print it (the PyTorch step) has no row, and without any there is no table.
    runs["plain"][t.IN_ONE_PROCESS] = [1.002, 0.998, 1.001]
    runs["track"][t.IN_ONE_PROCESS] = [1.031, 1.045, 1.038]
    within = t.in_one_process(runs)
    assert sorted(within) == ["plain", "track"], within
    assert within["track"]["ratio"] == 1.038 and within["plain"]["ratio"] == 1.001, within
    table = t.table_text(dict(result, figures=t.figures(runs), in_one_process=within), args)
    assert "| arm | own / direct | rounds |\n" in table, table
    assert "| plain | 1.001 | 0.998 to 1.002 |\n| --track | 1.038 | 1.031 to 1.045 |\n" in table, table
    assert "own / direct" not in t.table_text(dict(result, figures=figures), args)
    assert t.figures(runs)["cuMemAllocAsync pair ns"]["ratio"] == figures["cuMemAllocAsync pair ns"]["ratio"]

    # The verdict on rounds: PASS only if every round is within the target.
    assert t.rounds_verdict([100.0, 100.0], [101.0, 102.0], 1.02)[0] == "PASS"
    assert t.rounds_verdict([100.0, 100.0], [101.0, 102.1], 1.02)[0] == "within noise"
    assert t.rounds_verdict([100.0], [103.0], 1.02)[0] == "MISS"
    for bad in (([], []), ([1.0, 2.0], [1.0])):
        try:
            t.rounds_verdict(*bad, 1.02)
        except ValueError:
            continue
        raise AssertionError(f"rounds_verdict{bad} was accepted")

    # The arms' commands: only --track and run go through the CLI; only preload sets LD_PRELOAD here.
    argv = ["prog", "arg"]
    assert t.command_for("plain", argv, "gg") == argv and t.command_for("preload", argv, "gg") == argv
    assert t.command_for("track", argv, "gg") == ["gg", "run", "--track", "--", "prog", "arg"]
    assert t.command_for("run", argv, "gg") == ["gg", "run", "--", "prog", "arg"]
    # Each round starts one arm later, so no arm always runs first.
    assert [t.rotated(t.ARMS, r)[0] for r in range(5)] == ["plain", "track", "preload", "run", "plain"]
    assert sorted(t.rotated(t.ARMS, 2)) == sorted(t.ARMS)
    base = {"LD_PRELOAD": "/other.so", "PATH": "/bin", "GPUGUARD_RUN_OPTIONS": "track=1"}
    for arm in t.ARMS:
        env = t.environment_for(arm, "/p.so", base)
        assert env.get("LD_PRELOAD") == ("/p.so" if arm == "preload" else None), (arm, env)
        assert env["GPUGUARD_PRELOAD_LIBRARY"] == "/p.so" and env["PATH"] == "/bin", env
        assert "GPUGUARD_RUN_OPTIONS" not in env, env
    assert base["LD_PRELOAD"] == "/other.so", "the caller's environment is left alone"
    print("test_track_overhead.py: all checks passed")


if __name__ == "__main__":
    main()
