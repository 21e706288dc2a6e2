"""Metrics of the evidence harness (docs/evidence.md), computed from recorded trials.

A trial is a dict as harness.py writes it (one JSON object per line of trials.jsonl):

    {"scenario": "kill", "arm": "plain", "trial": 3,
     "baseline_mib": 512.0,            # device memory used before the job started
     "fault_s": 12.02,                 # the fault: the signal sent, or the job's own "about to
                                       # fail" line (contention: the round's last job's end)
     "end_s": 12.41,                   # when the job's command returned (for plain, the job was
                                       # reaped; under gpuguard run, after its clean-up), on the
                                       # same clock as the samples
     "settled": true,                  # sampling stopped early: nothing of the trial alive and
                                       # memory back (so it stays back); absent in old records
     "samples": [[t_s, used_mib], ...],  # device memory over time, t ascending
     "status": "signal 9" | "exit 1" | ...,   # how the job's main process ended
     "errors": ["out_of_memory", ...]} # kinds of error the job logged

Every function here is pure: the CPU tests check them on recorded samples.
"""
import statistics

# Memory within this of the baseline counts as "back": the driver's own use moves by a few MiB.
TOLERANCE_MIB = 64.0


def used_at(samples, t):
    """The last sample at or before t (the level the device was at then); None before the first."""
    level = None
    for ts, used in samples:
        if ts > t:
            break
        level = used
    return level


def baseline_mib(trial):
    """The device's level with nothing of the trial alive: the level measured before the job, or,
    for a trial that settled (nothing of it alive at the end) and ended more than the tolerance
    below it, the level it settled at. That happens when the level before the job was taken while
    the driver was still giving back the previous trial's memory (baseline_corrected says so)."""
    recorded = trial["baseline_mib"]
    if trial.get("settled") and trial["samples"] and trial["samples"][-1][1] < recorded - TOLERANCE_MIB:
        return trial["samples"][-1][1]
    return recorded


def baseline_corrected(trial):
    return baseline_mib(trial) != trial["baseline_mib"]


def peak_mib(trial):
    """Most device memory the job used above its baseline."""
    if not trial["samples"]:
        return 0.0
    return max(0.0, max(u for _, u in trial["samples"]) - baseline_mib(trial))


def origin_s(trial, since="fault"):
    """Where residue and time back count from: the fault (the default), or "end", the moment the
    job's command returned. Records without a fault count from the end."""
    if since == "fault" and trial.get("fault_s") is not None:
        return trial["fault_s"]
    return trial["end_s"]


def residual_mib(trial, after_s, since="fault"):
    """Memory above the baseline `after_s` seconds after the fault (0 when back, None when the
    samples stop before then, unless the trial settled: then nothing was left to hold memory)."""
    t = origin_s(trial, since) + after_s
    if not trial["samples"]:
        return None
    if trial["samples"][-1][0] < t:
        return 0.0 if trial.get("settled") else None
    level = used_at(trial["samples"], t)
    if level is None:
        return None
    above = level - baseline_mib(trial)
    return above if above > TOLERANCE_MIB else 0.0


def time_to_baseline_s(trial, since="fault"):
    """Seconds from the fault (or the end) until memory was back at the baseline and stayed there;
    None if it never came back while sampled."""
    start = origin_s(trial, since)
    baseline = baseline_mib(trial)
    back_since = None
    for ts, used in trial["samples"]:
        if ts < start:
            continue
        if used - baseline <= TOLERANCE_MIB:
            if back_since is None:
                back_since = ts
        else:
            back_since = None
    return None if back_since is None else max(0.0, back_since - start)


def percent(part, whole):
    return 100.0 * part / whole if whole > 0 else 0.0


def summarize(trials):
    """The figures of one scenario and arm (docs/evidence.md lists them)."""
    peaks = [peak_mib(t) for t in trials]
    r1 = [residual_mib(t, 1.0) for t in trials]
    r10 = [residual_mib(t, 10.0) for t in trials]
    back = [time_to_baseline_s(t) for t in trials]
    came_back = [b for b in back if b is not None]
    after_end = [b for b in (time_to_baseline_s(t, "end") for t in trials) if b is not None]
    statuses, errors, doctor = {}, {}, {}
    for t in trials:
        for status in t.get("statuses", [t["status"]]):  # a contention round: each job's
            statuses[status] = statuses.get(status, 0) + 1
        for kind in t.get("errors", []):
            errors[kind] = errors.get(kind, 0) + 1
        for action, n in t.get("doctor", {}).get("actions", {}).items():
            doctor[action] = doctor.get(action, 0) + n

    def mean_known(values):
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known else None

    def share_with_residue(values):
        known = [v for v in values if v is not None]
        return percent(sum(1 for v in known if v > 0), len(known)) if known else None

    residue_pct_of_peak = [percent(r, p) for r, p in zip(r1, peaks) if r is not None]
    return {
        "trials": len(trials),
        "peak_mib": statistics.median(peaks) if peaks else 0.0,
        "residual_1s_mib": mean_known(r1),
        "residual_10s_mib": mean_known(r10),
        "residual_1s_pct_of_peak": statistics.fmean(residue_pct_of_peak) if residue_pct_of_peak else None,
        "residue_share_1s_pct": share_with_residue(r1),
        "residue_share_10s_pct": share_with_residue(r10),
        "back_median_s": statistics.median(came_back) if came_back else None,
        "back_max_s": max(came_back) if came_back else None,
        "back_mean_s": statistics.fmean(came_back) if came_back else None,
        "back_after_end_median_s": statistics.median(after_end) if after_end else None,
        "never_back": len(back) - len(came_back),
        "baselines_corrected": sum(1 for t in trials if baseline_corrected(t)),
        "statuses": dict(sorted(statuses.items())),
        "errors": dict(sorted(errors.items())),
        "doctor": dict(sorted(doctor.items())),
    }
