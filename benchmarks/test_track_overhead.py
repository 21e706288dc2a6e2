#!/usr/bin/env python3
"""Checks track_overhead.py's figures, intervals, verdicts, peer arm, table and JSON on made-up
rounds, its arms' commands, environments and order, a whole run against stand-in programs, its
argument errors, and that track_step.py skips cleanly without a GPU. Plain python3; exits non-zero
on the first failed check."""
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import track_overhead as t  # noqa: E402
import track_step  # noqa: E402

SCRIPT = os.path.join(HERE, "track_overhead.py")
MACHINE = {"cpu": "x", "cores": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580"}]}


def made_up_runs():
    plain = [1000.0, 1100.0, 1050.0, 1000.0, 1020.0, 1080.0, 1060.0]
    step = [2.0, 2.2, 2.1, 2.0, 2.1, 2.2, 2.0]
    return {
        "plain": {"cuMemAllocAsync pair ns": plain, "median step ms": step,
                  t.PEER_STEP: [3.0] * 7, t.PEER_RATIO: [1.5, 1.4, 1.6, 1.5, 1.5, 1.45, 1.55]},
        # --track: every round 4% over plain on the pair (missed), the step 1% over (met at 1.02).
        "track": {"cuMemAllocAsync pair ns": [p * 1.04 for p in plain], "median step ms": [s * 1.01 for s in step]},
        "plain_again": {"cuMemAllocAsync pair ns": [p * r for p, r in zip(plain, (1.0, 0.99, 1.01, 1.0, 1.02, 0.98, 1.0))],
                        "median step ms": list(step)},
    }


def check_figures():
    result = t.result_of(made_up_runs(), 7, MACHINE, "2026-12-07")
    pair = result["figures"]["cuMemAllocAsync pair ns"]
    assert abs(pair["median"] - 1.04) < 1e-12 and pair["verdict"] == "missed", pair
    assert pair["plain"] == 1050.0 and abs(pair["track"] - 1092.0) < 1e-9, pair
    assert [round(v, 2) for v in pair["baseline_spread"]["interval"]] == [0.98, 1.02], pair
    step = result["figures"]["median step ms"]
    assert abs(step["median"] - 1.01) < 1e-12 and step["verdict"] == "met" and step["target"] == 1.02, step
    assert "cudaMalloc pair ns" not in result["figures"], "a figure no program printed"
    # The peer: --track's 1% over recording's 50% (rounds 0.4 to 0.6 over): 0.02, met at 0.5.
    peer = result["peer"]
    assert peer["step_ms"] == 3.0 and peer["ratio"]["median"] == 1.5, peer
    q = peer["track_over_peer"]
    assert abs(q["median"] - 0.02) < 1e-9 and q["verdict"] == "met" and q["target"] == 0.5, q
    assert [round(v, 4) for v in q["interval"]] == [round(0.01 / 0.6, 4), 0.025], q
    assert "enabled='all'" in peer["arguments"] and "max_entries=sys.maxsize" in peer["arguments"], peer
    # The JSON: the card's name, the method, the judged targets and the baseline's spread.
    assert result["card"] == "NVIDIA H100 80GB HBM3" and "distribution-free" in result["method"], result
    names = [(r["figure"], r["verdict"]) for r in result["targets"]]
    assert names == [("`--track` cuMemAllocAsync pair / plain", "missed"), ("`--track` PyTorch step / plain", "met"),
                     (t.PEER_TITLE, "met")], names
    assert all(r["rounds"] == 7 and len(r["interval"]) == 2 for r in result["targets"]), result["targets"]
    assert [r["figure"] for r in result["baseline_spread"]] == [
        "plain again / plain: cuMemAllocAsync pair ns", "plain again / plain: median step ms"], result["baseline_spread"]
    json.loads(json.dumps(result))  # plain JSON: no NaN or infinity

    table = t.table_text(result, 7)
    assert "| cuMemAllocAsync pair ns | 1050.0 | 1092.0 | 1.040 | 1.040 to 1.040 | <= 1.02 | missed | 1.000 (0.980 to 1.020) |" \
        in table, table
    assert "| `--track` | 2.100 | 2.121 | 1.010 | 1.010 to 1.010 | <= 1.02 | met |" not in table  # medians of arms, not rounds
    assert "| `_record_memory_history()`, default arguments, same processes | 3.000 | 1.500 | 1.400 to 1.600 | | |" in table, table
    assert "| `--track` overhead / `_record_memory_history()` overhead | | 0.020 | 0.017 to 0.025 | <= 0.5 | met |" in table, table
    assert "7 rounds with the arms alternating" in table and "--parts" not in table, table

    # A round where recording cost nothing: no quotient, and the target says why.
    runs = made_up_runs()
    runs["plain"][t.PEER_RATIO][3] = 0.999
    result = t.result_of(runs, 7, MACHINE, "2026-12-07")
    assert result["peer"]["track_over_peer"] is None, result["peer"]
    assert result["targets"][-1]["verdict"].startswith("not measurable"), result["targets"]
    assert "not measurable" in t.table_text(result, 7)
    # Without the peer's lines (a step program that did not print them): no peer at all.
    runs = made_up_runs()
    del runs["plain"][t.PEER_RATIO], runs["plain"][t.PEER_STEP]
    result = t.result_of(runs, 7, MACHINE, "2026-12-07")
    assert result["peer"] is None and len(result["targets"]) == 2 and "_record_memory_history" not in t.table_text(result, 7)

    # --parts and --at-once: each extra arm's median and paired ratio after the baseline's spread.
    runs = made_up_runs()
    runs["preload"] = {"median step ms": [s * 1.03 for s in runs["plain"]["median step ms"]],
                       "cuMemAllocAsync pair ns": list(runs["plain"]["cuMemAllocAsync pair ns"])}
    runs["run"] = {k: list(v) for k, v in runs["preload"].items()}
    runs["at_once"] = {k: list(v) for k, v in runs["preload"].items()}
    result = t.result_of(runs, 7, MACHINE, "2026-12-07")
    assert abs(result["figures"]["median step ms"]["preload_ratio"] - 1.03) < 1e-12, result["figures"]
    table = t.table_text(result, 7)
    assert "--rounds 7 --parts --at-once`" in table and "| LD_PRELOAD only | ratio | run, no --track | ratio |" in table, table

    # The in-process pair: per arm, the median with its interval.
    runs = made_up_runs()
    runs["plain"][t.IN_ONE_PROCESS] = [1.0, 1.001, 0.999, 1.0, 1.0, 1.002, 0.998]
    runs["track"][t.IN_ONE_PROCESS] = [1.02, 1.03, 1.025, 1.02, 1.021, 1.03, 1.04]
    within = t.in_one_process(runs)
    assert sorted(within) == ["plain", "track"] and within["track"]["median"] == 1.025, within
    assert "| --track | 1.025 | 1.020 to 1.040 |" in t.table_text(t.result_of(runs, 7, MACHINE, "d"), 7)


def check_arms():
    argv = ["prog", "arg"]
    assert t.arms_for(False, False) == ["plain", "track", "plain_again"]
    assert t.arms_for(True, True) == ["plain", "track", "plain_again", "preload", "run", "at_once"]
    for arm in ("plain", "plain_again", "preload"):
        assert t.command_for(arm, argv, "gg") == argv
    assert t.command_for("track", argv, "gg") == ["gg", "run", "--track", "--", "prog", "arg"]
    assert t.command_for("at_once", argv, "gg") == ["gg", "run", "--track", "--", "prog", "arg"]
    assert t.command_for("run", argv, "gg") == ["gg", "run", "--", "prog", "arg"]
    base = {"LD_PRELOAD": "/other.so", "PATH": "/bin", "GPUGUARD_RUN_OPTIONS": "track=1"}
    for arm in t.arms_for(True, True):
        env = t.environment_for(arm, "/p.so", base)
        assert env.get("LD_PRELOAD") == ("/p.so" if arm == "preload" else None), (arm, env)
        assert env["GPUGUARD_PRELOAD_LIBRARY"] == "/p.so" and env["PATH"] == "/bin", env
        assert "GPUGUARD_RUN_OPTIONS" not in env, env
        assert ("GPUGUARD_TRACK_DEFER" in env) == (arm == "at_once"), env
    assert base["LD_PRELOAD"] == "/other.so", "the caller's environment is left alone"
    found = t.parse_figures("median step ms 2.5\nrecord_memory_history step ms 3.5\n"
                            "record_memory_history ratio in one process 1.4\n")
    assert found == {"median step ms": 2.5, t.PEER_STEP: 3.5, t.PEER_RATIO: 1.4}, found
    # The step's blocks alternate which runs first.
    assert track_step.block_order(4) == [(False, True), (True, False), (False, True), (True, False)]


STAND_IN = r"""#!/usr/bin/env python3
import os, sys
log = os.environ["ORDER_LOG"]
arm = "track" if os.environ.get("GPUGUARD_UNDER_RUN") else "plain"
with open(log, "a") as f:
    f.write(arm + " " + os.path.basename(sys.argv[-1]) + "\n")
print("cudaMalloc pair ns %.1f" % (1000.0 * (1.01 if arm == "track" else 1.0)))
print("cuMemAllocAsync pair ns %.1f" % (500.0 * (1.05 if arm == "track" else 1.0)))
"""
STAND_IN_CLI = r"""#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
assert args[0] == "run"
command = args[args.index("--") + 1:]
os.environ["GPUGUARD_UNDER_RUN"] = "1"
os.execvp(command[0], command)
"""


def check_whole_run():
    """A whole run against stand-ins: the CLI execs the program marking it tracked; the bench and
    the step stand-in log their order. The JSON has every round of every arm, in ABAB order."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, text in (("bench", STAND_IN), ("gpuguard", STAND_IN_CLI), ("preload.so", "")):
            paths[name] = os.path.join(tmp, name)
            with open(paths[name], "w") as f:
                f.write(text)
            os.chmod(paths[name], stat.S_IRWXU)
        log = os.path.join(tmp, "order.log")
        out = os.path.join(tmp, "run.json")
        md = os.path.join(tmp, "run.md")
        env = dict(os.environ, ORDER_LOG=log)
        # The step program is track_step.py: without a GPU it exits 77, and so does the run.
        done = subprocess.run([sys.executable, SCRIPT, paths["gpuguard"], paths["preload.so"], paths["bench"],
                               "--json-out", out], capture_output=True, text=True, env=env, timeout=120)
        gpu = done.returncode == 0
        assert done.returncode in (0, 77), done
        if not gpu:
            assert not os.path.exists(out), "no result without a GPU"
        # The order the bench program ran in: 7 rounds of plain, track, plain again, rotated.
        with open(log) as f:
            order = [line.split()[0] for line in f if line.split()[1] == "bench"]
        expected = ["plain", "track", "plain", "track", "plain", "plain", "plain", "plain", "track"]
        assert order[:len(expected)] == expected[:len(order)], order
        # Stand in for the step too (a copy of the bench stand-in that prints a step), so the run completes.
        step = os.path.join(tmp, "track_step.py")
        with open(step, "w") as f:
            f.write(STAND_IN.split('print("cudaMalloc')[0] + 'print("median step ms %.2f" % (2.02 if arm == "track" else 2.0))\n'
                    'print("record_memory_history step ms 3.0")\nprint("record_memory_history ratio in one process 1.5")\n')
        copy = os.path.join(tmp, "track_overhead.py")
        with open(SCRIPT) as f, open(copy, "w") as g:
            g.write(f.read().replace('sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))',
                                     'sys.path.insert(0, %r)' % HERE))
        os.remove(log)
        done = subprocess.run([sys.executable, copy, paths["gpuguard"], paths["preload.so"], paths["bench"],
                               "--json-out", out, "--out", md, "--append-section", "H100 machine: --track"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        with open(log) as f:
            runs = [line.split() for line in f]
        bench = [arm for arm, program in runs if program == "bench"]
        assert len(bench) == 21 and bench[:6] == ["plain", "track", "plain", "track", "plain", "plain"], bench
        with open(out) as f:
            result = json.load(f)
        assert result["rounds"] == 7 and len(result["per_round"]["plain_again"]["cuMemAllocAsync pair ns"]) == 7, result
        pair = result["figures"]["cuMemAllocAsync pair ns"]
        assert abs(pair["median"] - 1.05) < 1e-9 and pair["verdict"] == "missed", pair
        assert result["figures"]["cudaMalloc pair ns"]["verdict"] == "met", result["figures"]
        assert abs(result["peer"]["track_over_peer"]["median"] - 0.02) < 1e-9, result["peer"]  # 1% over 50%
        assert result["peer"]["track_over_peer"]["verdict"] == "met", result["peer"]
        assert {"card", "targets", "baseline_spread", "method"} <= set(result), sorted(result)
        with open(md) as f:
            assert "\n## H100 machine: --track\n" in f.read(), "the section names the card"

        # Argument errors: too few rounds for an interval, a program that is not there; exit 2.
        for extra, words in ((["--rounds", "5"], "--rounds must be at least 6"),
                             (["--rounds", "x"], "invalid int value")):
            done = subprocess.run([sys.executable, SCRIPT, paths["gpuguard"], paths["preload.so"], paths["bench"]]
                                  + extra, capture_output=True, text=True, timeout=60)
            assert done.returncode == 2 and words in done.stderr, done
        done = subprocess.run([sys.executable, SCRIPT, paths["gpuguard"], paths["preload.so"],
                               os.path.join(tmp, "missing")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "TRACK_BENCH %s: no such file" % os.path.join(tmp, "missing") in done.stderr, done


def check_step_arguments():
    step = os.path.join(HERE, "track_step.py")
    done = subprocess.run([sys.executable, step, "--block-steps", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--block-steps more than 2" in done.stderr, done


def main():
    check_figures()
    check_arms()
    check_step_arguments()
    check_whole_run()
    print("test_track_overhead.py: all checks passed")


if __name__ == "__main__":
    main()
