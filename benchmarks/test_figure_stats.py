#!/usr/bin/env python3
"""Checks figure_stats.py, the statistics of the benchmark scripts' figures, without a GPU: the
interval on known data drawn from a seeded generator, its coverage, the verdict at its edges, the
paired ratios and the order of the rounds. Plain python3; exits non-zero on the first failed check."""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figure_stats as s  # noqa: E402


def check_interval():
    rng = random.Random(48)
    # 7 and 6 rounds: the smallest and the largest value; 9: the second smallest and second
    # largest; 20: the 6th and the 15th (P(B <= 5) = 21700 / 2^20).
    for n, k in ((6, 1), (7, 1), (9, 2), (20, 6)):
        values = [rng.lognormvariate(0.0, 0.05) for _ in range(n)]
        low, high, coverage = s.median_interval(values)
        ordered = sorted(values)
        assert (low, high) == (ordered[k - 1], ordered[n - k]), (n, k, low, high, ordered)
        expected = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        assert abs(coverage - expected) < 1e-12 and coverage >= 0.95, (n, coverage, expected)
    assert abs(s.median_interval(list(range(20)))[2] - (1 - 2 * 21700 / 2 ** 20)) < 1e-12
    # Fewer than 6 rounds cannot give 95%: no interval, and the verdict says why.
    assert s.median_interval([1.0, 1.1, 0.9, 1.05, 0.95]) is None
    assert s.verdict(None, 1.02) == "too few rounds"
    # The order of the values does not matter; ties are kept.
    assert s.median_interval([3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 2.0])[:2] == (1.0, 5.0)
    # Another confidence: 9 rounds at 90% still give the 2nd and 8th (the 3rd and 7th cover only
    # 1 - 2 * 46/512 = 0.820); 12 rounds give the 3rd and 10th (0.961; the 4th and 9th cover 0.854).
    assert s.median_interval(list(range(9)), 0.90)[:2] == (1, 7)
    assert s.median_interval(list(range(12)), 0.90)[:2] == (2, 9)

    # Coverage: over 4000 seeded samples of 7 rounds from a skewed distribution with a known median,
    # the interval holds that median in about 98.4% of them (at least 95%, as stated).
    rng = random.Random(7)
    true_median = math.exp(0.01)
    held = 0
    trials = 4000
    for _ in range(trials):
        low, high, _ = s.median_interval([rng.lognormvariate(0.01, 0.03) for _ in range(7)])
        held += low <= true_median <= high
    assert 0.975 <= held / trials <= 0.992, held / trials
    # And at 20 rounds (stated 95.9%).
    held = sum(lo <= true_median <= hi for lo, hi, _ in
               (s.median_interval([rng.lognormvariate(0.01, 0.03) for _ in range(20)]) for _ in range(trials)))
    assert 0.945 <= held / trials <= 0.972, held / trials


def check_verdict():
    # met only where the upper end is within the target; missed only where the lower end is over it.
    assert s.verdict((0.98, 1.02), 1.02) == "met"       # upper end on the target
    assert s.verdict((0.98, 1.0201), 1.02) == "within noise"
    assert s.verdict((1.02, 1.05), 1.02) == "within noise"  # lower end on the target: covered
    assert s.verdict((1.0201, 1.05), 1.02) == "missed"
    assert s.verdict((0.9, 0.95), 1.02) == "met"
    assert s.verdict((1.01, 1.01), 1.01) == "met"
    f = s.figure([1.0, 1.01, 0.99, 1.03, 1.02, 1.0, 1.005], 1.02)
    assert f["median"] == 1.005 and f["interval"] == [0.99, 1.03] and f["verdict"] == "within noise", f
    assert f["rounds"] == [1.0, 1.01, 0.99, 1.03, 1.02, 1.0, 1.005] and f["target"] == 1.02, f
    assert "verdict" not in s.figure([1.0] * 7) and "target" not in s.figure([1.0] * 7)
    row = s.target_row("x", f)
    assert row == {"figure": "x", "target": "<= 1.02, the 95% interval's upper end", "limit": 1.02, "median": 1.005,
                   "interval": [0.99, 1.03], "rounds": 7, "verdict": "within noise"}, row
    assert s.interval_range(f) == "0.990 to 1.030", s.interval_range(f)
    assert s.interval_range(s.figure([1.0, 2.0])) == "too few rounds"


def check_pairs_and_schedule():
    assert s.paired_ratios([2.0, 4.0], [3.0, 2.0]) == [1.5, 0.5]
    for baseline, measured in (([], []), ([1.0, 2.0], [1.0]), ([0.0], [1.0])):
        try:
            s.paired_ratios(baseline, measured)
        except ValueError as error:
            assert "baseline" in str(error), error
            continue
        raise AssertionError("paired_ratios%r was accepted" % ((baseline, measured),))
    # Two arms alternate round by round: A B, B A, A B, ... never all of one before the other.
    order = s.schedule(["A", "B"], 7)
    assert order == [["A", "B"], ["B", "A"]] * 3 + [["A", "B"]], order
    flat = [arm for r in order for arm in r]
    assert flat.index("B") < len(flat) - flat[::-1].index("A") - 1, "B runs before A's last run"
    # Three arms: every round runs each once, and each arm leads rounds in turn.
    order = s.schedule(["A", "B", "C"], 7)
    assert all(sorted(r) == ["A", "B", "C"] for r in order), order
    assert [r[0] for r in order] == ["A", "B", "C", "A", "B", "C", "A"], order
    for bad in (([], 3), (["A"], 0)):
        try:
            s.schedule(*bad)
        except ValueError:
            continue
        raise AssertionError("schedule%r was accepted" % (bad,))
    assert s.card_of({"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}) == "NVIDIA H100 80GB HBM3"
    assert s.card_of({"gpus": []}) == "no GPU" and s.card_of(None) == "no GPU"


def main():
    check_interval()
    check_verdict()
    check_pairs_and_schedule()
    print("test_figure_stats.py: all checks passed")


if __name__ == "__main__":
    main()
