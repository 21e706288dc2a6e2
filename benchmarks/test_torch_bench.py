#!/usr/bin/env python3
"""Checks torch_bench.py's figures, intervals, verdicts, table and JSON on made-up rounds, a
recorded run read back, a whole run against a stand-in for torch_cnn (the modes' order, the
baseline's second run, the split runs), and its argument errors, without a GPU. Plain python3;
exits non-zero on the first failed check."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as t  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_bench.py")
MACHINE = {"cpu": "Test CPU", "cores": 16, "gpus": [{"name": "Test GPU", "driver": "1.0"}]}


def check_summary():
    native = [2.0, 2.2, 2.1, 2.0, 2.05, 2.15, 2.1]
    per_mode = {
        "native": native,
        # observe: rounds' ratios 1.00 to 1.03, covering 1.02: within noise.
        "observe": [n * r for n, r in zip(native, (1.0, 1.03, 1.01, 1.0, 1.02, 1.01, 1.005))],
        # swap-in: every round 1.10 to 1.12: the interval's lower end is over 1.05: missed.
        "swap_in": [n * r for n, r in zip(native, (1.10, 1.12, 1.11, 1.10, 1.11, 1.12, 1.115))],
        "native_async": [n * 1.05 for n in native],
        "swap_in_async": [n * 1.2 for n in native],
        "native_again": [n * r for n, r in zip(native, (1.0, 0.99, 1.01, 1.0, 1.0, 1.02, 0.98))],
    }
    doc = t.summarize(per_mode, 7, 310, MACHINE, "2026-12-07")
    observe, swap_in = doc["figures"]["observe"], doc["figures"]["swap_in"]
    assert abs(observe["median"] - 1.01) < 1e-12 and observe["verdict"] == "within noise", observe
    assert [round(v, 3) for v in observe["interval"]] == [1.0, 1.03] and observe["target"] == 1.02, observe
    assert swap_in["verdict"] == "missed" and swap_in["target"] == 1.05, swap_in
    assert "verdict" not in doc["figures"]["native_async"], "a comparison has no target"
    assert abs(doc["figures"]["swap_in_over_native_async"]["median"] - 1.11 / 1.05) < 1e-12, doc["figures"]
    assert [round(v, 3) for v in doc["native_spread"]["interval"]] == [0.98, 1.02], doc["native_spread"]
    assert doc["card"] == "Test GPU" and "distribution-free" in doc["method"], doc
    assert [(r["figure"], r["verdict"]) for r in doc["targets"]] == [
        ("LibTorch adapter, observe / native step", "within noise"),
        ("LibTorch adapter, swap-in / native step", "missed")], doc["targets"]
    assert doc["baseline_spread"] == [{"figure": "native again / native step", "median": 1.0,
                                       "interval": doc["native_spread"]["interval"], "rounds": 7}], doc["baseline_spread"]
    json.loads(json.dumps(doc))
    lines = t.table_lines(doc, "torch_cnn")
    assert lines[0] == "Machine: Test CPU, 16 cores, Test GPU (driver 1.0); 2026-12-07.", lines
    assert "| observe | 2.111 ms | 1.010 | 1.000 to 1.030 | at most 1.02 | within noise |" in lines, lines
    assert "| swap_in_async (swap-in over cudaMallocAsync, torch_upstream=async) | 2.520 ms | 1.200 | 1.200 to 1.200 | " \
        "(comparison) | |" in lines, lines
    assert "verdict" not in doc["figures"]["swap_in_async"], "a comparison has no target"
    assert "| native again (the baseline's spread) | 2.058 ms | 1.000 | 0.980 to 1.020 | | |" in lines, lines
    assert any(line.startswith("| swap_in | ") and line.endswith("| at most 1.05 | missed |") for line in lines), lines

    # Every round well within: met.
    doc = t.summarize(dict(per_mode, observe=list(native)), 7, 310, MACHINE, "2026-12-07")
    assert doc["figures"]["observe"]["verdict"] == "met", doc

    # Observe judged inside processes: a round's figure is observe's after/before over native's.
    halves = {"native": [(2.0, 2.1)] * 7, "observe_split": [(2.0, 2.1)] * 3 + [(2.0, 2.163)] * 4}
    doc = t.summarize(per_mode, 7, 310, MACHINE, "2026-12-07", halves, 155)
    inside = doc["observe_split"]
    assert [round(v, 3) for v in inside["interval"]] == [1.0, 1.03] and inside["verdict"] == "within noise", inside
    assert doc["targets"][-1]["figure"] == "LibTorch adapter, observe / native step, attached inside processes"
    assert "| observe, attached at step 155 (inside processes) | | 1.030 | 1.000 to 1.030 | at most 1.02 | within noise |" \
        in t.table_lines(doc, "torch_cnn"), t.table_lines(doc, "torch_cnn")
    assert t.split_step(110) == 55 and t.split_step(39) is None and t.split_step(40) == 20


def check_recorded():
    """--json-in: a run recorded before the intervals (5 rounds, no native_again): too few rounds
    for an interval, said so; a file that is not a run is refused by name with status 2."""
    recorded = os.path.join(HERE, "testdata", "h100_torch_bench_2026-12-05_1524.json")
    done = subprocess.run([sys.executable, SCRIPT, "--json-in", recorded], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "| observe | 1.608 ms | 0.900 | too few rounds | at most 1.02 | too few rounds |" in done.stdout, done.stdout
    assert "native again" not in done.stdout and "allocations per step" not in done.stdout, done.stdout
    done = subprocess.run([sys.executable, SCRIPT, "--json-in", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{SCRIPT}: not a recorded run" in done.stderr, done


FAKE = r"""#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
mode = a[a.index('--mode') + 1]
if os.environ.get('PYTORCH_CUDA_ALLOC_CONF'): mode = 'native_async'
if 'torch_upstream=async' in os.environ.get('GPUGUARD_OPTIONS', ''): mode = 'swap_in_async'
with open(os.environ['ORDER_LOG'], 'a') as f:
    f.write(mode + (' split' if '--split' in a else '') + '\n')
base = {'native': 2.0, 'observe': 2.04, 'swap_in': 2.2, 'native_async': 2.1, 'swap_in_async': 2.3}[mode]
print('median step ms %.4f over 100 steps' % base)
if mode in ('observe', 'swap_in') and '--split' not in a:
    print('allocations per step %.1f' % {'observe': 50.0, 'swap_in': 48.0}[mode])
if '--split' in a:
    s = a[a.index('--split') + 1]
    print('median step ms before step %s 2.0000 over 45 steps' % s)
    print('median step ms after step %s %.4f over 45 steps' % (s, 2.01 if mode == 'observe' else 2.0))
"""


def check_whole_run():
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "torch_cnn")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        log = os.path.join(tmp, "order.log")
        env = dict(os.environ, ORDER_LOG=log)
        out = os.path.join(tmp, "run.json")
        done = subprocess.run([sys.executable, SCRIPT, fake, "--steps", "110", "--inside", "--json-out", out],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        with open(log) as f:
            order = f.read().split("\n")[:-1]
        # 7 rounds of 7 runs, each round starting one run later: the modes alternate round by round.
        assert len(order) == 49, order
        runs = ["native split", "observe", "swap_in", "native_async", "swap_in_async", "native", "observe split"]
        assert order[:7] == runs and order[7:14] == runs[1:] + runs[:1], order
        assert order.count("swap_in_async") == 7, order
        with open(out) as f:
            run = json.load(f)
        assert run["rounds"] == 7 and run["split_step"] == 55, run
        assert run["halves_ms"]["observe_split"] == [[2.0, 2.01]] * 7, run
        assert run["per_round_ms"]["native_again"] == [2.0] * 7 and run["per_round_ms"]["native_async"] == [2.1] * 7, run
        assert abs(run["observe_split"]["median"] - 1.005) < 1e-9 and run["observe_split"]["verdict"] == "met", run
        # observe 2.04 / 2.0 in every round: the interval's upper end on the target is met; swap-in's 1.1 missed.
        assert run["figures"]["observe"]["verdict"] == "met" and run["figures"]["swap_in"]["verdict"] == "missed", run
        assert run["allocations_per_step"] == {"observe": 50.0, "swap_in": 48.0}, run
        # Its table again from the file: the same lines.
        again = subprocess.run([sys.executable, SCRIPT, "--json-in", out], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert "| observe, attached at step 55 (inside processes) | | 1.005 | 1.005 to 1.005 | at most 1.02 | met |" \
            in again.stdout, again.stdout
        assert "--rounds 7 --steps 110 --inside`" in again.stdout, again.stdout
        line = ("Observe recorded 50.0 allocations per step (and as many frees): its added 40.0 us per step is "
                "400 ns per allocation or free")
        assert line in again.stdout, again.stdout

        # Argument errors, each refused by name with status 2 before anything runs.
        for extra, words in ((["--rounds", "5"], "--rounds must be at least 6"),
                             (["--steps", "10"], "--steps must be more than 10"),
                             (["--steps", "30", "--inside"], "--inside needs --steps of at least 40")):
            os.remove(log) if os.path.exists(log) else None
            done = subprocess.run([sys.executable, SCRIPT, fake] + extra, capture_output=True, text=True, env=env,
                                  timeout=60)
            assert done.returncode == 2 and words in done.stderr, (extra, done)
            assert not os.path.exists(log), "nothing ran"
        missing = os.path.join(tmp, "missing")
        done = subprocess.run([sys.executable, SCRIPT, missing], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and f"TORCH_CNN {missing}: no such file" in done.stderr, done
        done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "give either TORCH_CNN or --json-in FILE" in done.stderr, done
        # A program that says there is no GPU (77): the script exits 77, writing nothing.
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nexit 77\n")
        done = subprocess.run([sys.executable, SCRIPT, fake, "--json-out", out + ".none"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 77 and not os.path.exists(out + ".none"), done


def main():
    check_summary()
    check_recorded()
    check_whole_run()
    print("test_torch_bench.py: all checks passed")


if __name__ == "__main__":
    main()
