"""The figures ab_tracking.sh and ledger_cost_parts.sh read from one run of a tree variant's
gpuguard_tracking_bench (its Google Benchmark JSON, with repetitions): what tracking adds to a pair;
and of its gpuguard_ops_bench: what an operation scope adds to its body.
Imported by the two scripts' summaries; plain python3."""


def median_entry(run, name):
    """The median aggregate of benchmark `name` in `run`, or None if it is not there."""
    return next((b for b in run["benchmarks"]
                 if b.get("aggregate_name") == "median" and b["run_name"] == name), None)


def host_pair(run):
    """(added ns, tracked / untracked) of the one-thread host pair, from the two benchmarks'
    medians; None if either is missing."""
    tracked = median_entry(run, "BM_host_pair/tracked/real_time/threads:1")
    untracked = median_entry(run, "BM_host_pair/untracked/real_time/threads:1")
    if tracked is None or untracked is None:
        return None
    return tracked["real_time"] - untracked["real_time"], tracked["real_time"] / untracked["real_time"]


def async_pair(run):
    """(added ns, tracked / untracked) of the stream-ordered pair timed in one loop, from
    BM_cuda_async_pair/alternating's counters; None without them (no GPU: the benchmark skipped)."""
    entry = median_entry(run, "BM_cuda_async_pair/alternating/real_time")
    if entry is None or "tracked_ns" not in entry:
        return None
    return entry["tracked_ns"] - entry["untracked_ns"], entry["ratio"]


def scope_added(run, scoped, baseline):
    """Nanoseconds an operation scope adds to one body: benchmark `scoped` against `baseline`
    (names without /manual_time) in a gpuguard_ops_bench run, each as 1e9 / items_per_second of
    its median (items are bodies); None if either is missing or has no rate (it failed)."""
    rates = []
    for name in (scoped, baseline):
        entry = median_entry(run, name + "/manual_time")
        if entry is None or not entry.get("items_per_second"):
            return None
        rates.append(entry["items_per_second"])
    return 1e9 / rates[0] - 1e9 / rates[1]


def scope_alternating(run, body):
    """Nanoseconds an operation scope adds to one body timed in one loop:
    BM_op_scope_alternating/`body` (nvtx_on, nvtx_off, pair), the median of its iterations'
    differences; None if it is missing or has no such counter (it failed)."""
    entry = median_entry(run, "BM_op_scope_alternating/%s/manual_time" % body)
    if entry is None or "added_ns" not in entry:
        return None
    return entry["added_ns"]
