"""The statistics behind the benchmark scripts' figures (torch_bench.py, track_overhead.py): each
figure is the median of the rounds' paired ratios (a round runs the baseline and the measured arm
once each; its ratio is measured / baseline of that round), with a 95% confidence interval on that
median and a verdict against the target. Standard library only.

The interval is distribution-free: the order statistics x(k) and x(n+1-k) of the n rounds' ratios
bound the median with probability 1 - 2 P(B <= k-1), B ~ binomial(n, 1/2), whatever the ratios'
distribution (the sign-test interval). k is the largest that keeps that coverage at least 95%, so
the stated interval is never narrower than the rounds allow: 6 or 7 rounds give their smallest
and largest ratio (coverage 96.9% and 98.4%), 9 rounds the second smallest and second largest.
Fewer than 6 rounds cannot give a 95% interval this way.
"""
import math
import statistics

CONFIDENCE = 0.95
METHOD = ("median of the rounds' paired ratios; 95% interval: distribution-free, on that median "
          "(order statistics of the rounds, the sign test's binomial(n, 1/2))")
MIN_ROUNDS = 6
MET, MISSED, NOISE = "met", "missed", "within noise"


def paired_ratios(baseline, measured):
    """Each round's measured / baseline; the two lists are the rounds in one order."""
    if not baseline or len(baseline) != len(measured):
        raise ValueError("paired ratios need one baseline value per measured round, got %d and %d"
                         % (len(baseline), len(measured)))
    if any(b <= 0 for b in baseline):
        raise ValueError("a baseline round is not positive: %r" % (baseline,))
    return [m / b for b, m in zip(baseline, measured)]


def median_interval(values, confidence=CONFIDENCE):
    """(low, high, coverage) of the distribution-free interval on the median of `values`, or None
    where there are too few values for `confidence` (fewer than 6 for 95%)."""
    n = len(values)
    ordered = sorted(values)
    best = None
    below = 1.0 / 2.0 ** n  # P(B <= k - 1): the chance that x(k) lies above the median
    for k in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * below
        if coverage < confidence:
            break
        best = (ordered[k - 1], ordered[n - k], coverage)
        below += math.comb(n, k) / 2.0 ** n
    return best


def verdict(interval, limit):
    """met where the interval's upper end is at most `limit`, missed where its lower end is above
    it, within noise where it covers `limit`; "too few rounds" without an interval."""
    if interval is None:
        return "too few rounds"
    low, high = interval[0], interval[1]
    if high <= limit:
        return MET
    if low > limit:
        return MISSED
    return NOISE


def figure(values, limit=None):
    """A figure from the rounds' values (paired ratios, or any per-round figure): the median, the
    interval, each round's value, and with `limit` the target and the verdict."""
    interval = median_interval(values)
    out = {"median": statistics.median(values), "interval": list(interval[:2]) if interval else None,
           "coverage": interval[2] if interval else None, "rounds": list(values)}
    if limit is not None:
        out["target"] = limit
        out["verdict"] = verdict(interval, limit)
    return out


def schedule(arms, rounds):
    """The order the runs go in: round r runs every arm once, starting one arm later than round r-1,
    so that the arms alternate round by round (A B, B A, A B, ... for two) and no arm always runs
    first or last. A list of rounds, each a list of arms."""
    if rounds < 1 or not arms:
        raise ValueError("a schedule needs at least one round and one arm")
    return [list(arms[r % len(arms):]) + list(arms[:r % len(arms)]) for r in range(rounds)]


def interval_range(f):
    """"0.991 to 1.012" for a figure(), or "too few rounds" where it has no interval."""
    return "%.3f to %.3f" % tuple(f["interval"]) if f["interval"] else "too few rounds"


def target_row(name, f):
    """One judged target as the machine-readable summaries list it."""
    return {"figure": name, "target": "<= %g, the 95%% interval's upper end" % f["target"], "limit": f["target"],
            "median": f["median"], "interval": f["interval"], "rounds": len(f["rounds"]), "verdict": f["verdict"]}


def spread_row(name, f):
    """The baseline against itself (two baseline runs in each round) as the summaries list it."""
    return {"figure": name, "median": f["median"], "interval": f["interval"], "rounds": len(f["rounds"])}


def card_of(machine):
    """The first GPU's full name from a machine description ("NVIDIA H100 80GB HBM3"), or "no GPU"."""
    gpus = (machine or {}).get("gpus") or []
    return gpus[0]["name"] if gpus else "no GPU"
