#!/usr/bin/env python3
"""Checks torch_bench.py's arithmetic, verdicts and table on made-up rounds, without a GPU. Plain
python3; exits non-zero on the first failed check."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as t  # noqa: E402


def main():
    per_mode = {
        "native": [2.0, 2.2, 2.1],
        "observe": [2.1, 2.1, 2.1],        # rounds' ratios 1.050, 0.955, 1.000: they disagree on 1.01
        "swap_in": [2.4, 2.6, 2.5],        # 1.200, 1.182, 1.190: every round misses 1.05
        "native_async": [2.2, 2.2, 2.2],
        "swap_in_async": [2.6, 2.6, 2.6],
    }
    machine = {"cpu": "Test CPU", "cores": 16, "gpus": [{"name": "Test GPU", "driver": "1.0"}]}
    doc = t.summarize(per_mode, 3, 110, machine, "2026-12-05")
    assert doc["median_ms"] == {"native": 2.1, "observe": 2.1, "swap_in": 2.5, "native_async": 2.2,
                                "swap_in_async": 2.6}, doc
    assert doc["ratios"]["observe"] == 1.0 and abs(doc["ratios"]["swap_in"] - 2.5 / 2.1) < 1e-12, doc
    assert doc["verdicts"] == {"observe": "within noise", "swap_in": "MISS"}, doc
    assert [round(r, 3) for r in doc["round_ratios"]["observe"]] == [1.05, 0.955, 1.0], doc
    lines = t.table_lines(doc, "torch_cnn")
    assert lines[0] == "Machine: Test CPU, 16 cores, Test GPU (driver 1.0); 2026-12-05.", lines
    assert "| observe | 2.100 ms | 1.000 | 0.955 to 1.050 | at most 1.01 | within noise |" in lines, lines
    assert "| swap_in | 2.500 ms | 1.190 | 1.182 to 1.200 | at most 1.05 | MISS |" in lines, lines
    assert "| swap_in_async (swap-in over cudaMallocAsync, torch_upstream=async) | 2.600 ms | 1.238 | | (comparison) | |" \
        in lines, lines

    # Every round within its target: PASS, though the median alone would say the same.
    doc = t.summarize(dict(per_mode, observe=[2.0, 2.2, 2.1], swap_in=[2.0, 2.3, 2.2]), 3, 110, machine, "2026-12-05")
    assert doc["verdicts"] == {"observe": "PASS", "swap_in": "PASS"}, doc

    # Each round starts one mode later; every mode runs once a round.
    assert [t.rotated(t.MODES, r)[0] for r in range(5)] == ["native", "observe", "swap_in", "native_async", "swap_in_async"]
    assert sorted(t.rotated(t.MODES, 3)) == sorted(t.MODES)
    # --json-in: the table of a recorded run, with the verdicts of its rounds; a file that is not
    # one is refused by name, with status 2.
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "torch_bench.py")
    recorded = os.path.join(here, "testdata", "h100_torch_bench_2026-12-05_1524.json")
    done = subprocess.run([sys.executable, script, "--json-in", recorded], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| observe | 1.608 ms | 0.936 | 0.830 to 1.182 | at most 1.01 | within noise |" in done.stdout, done.stdout
    done = subprocess.run([sys.executable, script, "--json-in", script], capture_output=True, text=True)
    assert done.returncode == 2, done
    assert f"{script}: not a recorded run" in done.stderr, done.stderr
    assert "allocations per step" not in subprocess.run([sys.executable, script, "--json-in", recorded],
                                                        capture_output=True, text=True).stdout  # none recorded then

    # Observe judged inside processes: a round's figure is observe's after/before over native's.
    halves = {"native": [(2.0, 2.1), (2.0, 2.0)], "observe_split": [(2.0, 2.1), (2.0, 2.06)]}
    doc = t.summarize(per_mode, 2, 110, machine, "2026-12-05", halves, 55)
    assert [round(r, 3) for r in doc["observe_split"]["round_ratios"]] == [1.0, 1.03], doc
    assert doc["observe_split"]["verdict"] == "within noise", doc
    assert "| observe, attached at step 55 (inside processes) | | 1.015 | 1.000 to 1.030 | at most 1.01 | within noise |" \
        in t.table_lines(doc, "torch_cnn")
    assert t.split_step(110) == 55 and t.split_step(39) is None and t.split_step(40) == 20

    # A whole run against a stand-in for torch_cnn that answers from its arguments: the split
    # runs get --split, the others not, and the JSON keeps each round's halves.
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "torch_cnn")
        with open(fake, "w") as f:
            f.write("#!/usr/bin/env python3\n"
                    "import os, sys\n"
                    "a = sys.argv[1:]\n"
                    "mode = a[a.index('--mode') + 1]\n"
                    "base = {'native': 2.0, 'observe': 2.04, 'swap_in': 2.2}[mode]\n"
                    "if os.environ.get('PYTORCH_CUDA_ALLOC_CONF'): base = 2.1\n"
                    "print('median step ms %.4f over 100 steps' % base)\n"
                    "if mode != 'native' and '--split' not in a:\n"
                    "    print('allocations per step %.1f' % {'observe': 50.0, 'swap_in': 48.0}[mode])\n"
                    "if '--split' in a:\n"
                    "    s = a[a.index('--split') + 1]\n"
                    "    print('median step ms before step %s 2.0000 over 45 steps' % s)\n"
                    "    print('median step ms after step %s %.4f over 45 steps' % (s, 2.01 if mode == 'observe' else 2.0))\n")
        os.chmod(fake, 0o755)
        out = os.path.join(tmp, "run.json")
        done = subprocess.run([sys.executable, script, fake, "--rounds", "2", "--steps", "110", "--inside",
                               "--json-out", out], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        with open(out) as f:
            run = json.load(f)
        assert run["split_step"] == 55 and run["halves_ms"]["observe_split"] == [[2.0, 2.01], [2.0, 2.01]], run
        assert run["per_round_ms"]["observe"] == [2.04, 2.04] and run["per_round_ms"]["native_async"] == [2.1, 2.1], run
        assert run["per_round_ms"]["swap_in_async"] == [2.2, 2.2], run  # swap-in's figure, torch_upstream=async
        assert abs(run["observe_split"]["ratio"] - 1.005) < 1e-9 and run["observe_split"]["verdict"] == "PASS", run
        # Its table again from the file: the same line.
        again = subprocess.run([sys.executable, script, "--json-in", out], capture_output=True, text=True)
        assert again.returncode == 0, again.stderr
        assert "| observe, attached at step 55 (inside processes) | | 1.005 | 1.005 to 1.005 | at most 1.01 | PASS |" \
            in again.stdout, again.stdout
        assert "--steps 110 --inside`" in again.stdout, again.stdout
        # The allocations per step of the modes that record them, and what observe adds per event:
        # (2.04 - 2.0) ms over 50 allocations and 50 frees.
        assert run["allocations_per_step"] == {"observe": 50.0, "swap_in": 48.0}, run
        line = ("Observe recorded 50.0 allocations per step (and as many frees): its added 40.0 us per step is "
                "400 ns per allocation or free: all that observe adds to a step (PyTorch's three trace entries per "
                "tensor, the ledger's records, gpuguard's writer thread), spread over the events.")
        assert line in again.stdout, again.stdout
        # Without --inside: no split runs, no halves, no inside row.
        done = subprocess.run([sys.executable, script, fake, "--rounds", "1", "--steps", "110", "--json-out", out],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        with open(out) as f:
            run = json.load(f)
        assert "halves_ms" not in run and "observe_split" not in run, run
        assert "inside processes" not in done.stdout, done.stdout
        # --inside with too few steps for two halves is refused by name.
        done = subprocess.run([sys.executable, script, fake, "--steps", "30", "--inside"], capture_output=True, text=True)
        assert done.returncode == 2 and "--inside needs --steps of at least 40" in done.stderr, done
    print("test_torch_bench.py: all checks passed")


if __name__ == "__main__":
    main()
