#!/usr/bin/env python3
"""Checks variant_figures.py (what ab_tracking.sh and ledger_cost_parts.sh read from a run) on
made-up Google Benchmark JSON, without a GPU. Plain python3; exits non-zero on the first failed
check."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import variant_figures as v  # noqa: E402


def median(name, **fields):
    return dict({"run_name": name, "aggregate_name": "median"}, **fields)


def main():
    run = {"benchmarks": [
        # A repetition's own entry must not be taken for the median.
        {"run_name": "BM_host_pair/tracked/real_time/threads:1", "real_time": 999.0},
        median("BM_host_pair/tracked/real_time/threads:1", real_time=60.0),
        median("BM_host_pair/untracked/real_time/threads:1", real_time=20.0),
        median("BM_cuda_async_pair/alternating/real_time", tracked_ns=660.0, untracked_ns=600.0, ratio=1.1),
        median("BM_op_scope/baseline/manual_time", items_per_second=1e9 / 2.0),
        median("BM_op_scope/scoped/manual_time", items_per_second=1e9 / 80.0),
        median("BM_op_scope/scoped_nvtx_off/manual_time", items_per_second=0.0),
        median("BM_op_scope_alternating/nvtx_on/manual_time", added_ns=71.5, scoped_ns=72.0),
        median("BM_op_scope_alternating/nvtx_off/manual_time", items_per_second=0.0),
    ]}
    assert v.host_pair(run) == (40.0, 3.0), v.host_pair(run)
    assert v.async_pair(run) == (60.0, 1.1), v.async_pair(run)
    added = v.scope_added(run, "BM_op_scope/scoped", "BM_op_scope/baseline")
    assert abs(added - 78.0) < 1e-9, added
    # A failed benchmark (no rate) or a missing one gives no figure rather than a wrong one.
    assert v.scope_added(run, "BM_op_scope/scoped_nvtx_off", "BM_op_scope/baseline") is None
    assert v.scope_added(run, "BM_op_scope_pair/scoped", "BM_op_scope_pair/baseline") is None
    # The scope in one loop: its own counter, or nothing where it failed or did not run.
    assert v.scope_alternating(run, "nvtx_on") == 71.5, v.scope_alternating(run, "nvtx_on")
    assert v.scope_alternating(run, "nvtx_off") is None and v.scope_alternating(run, "pair") is None
    # Without a GPU the stream-ordered benchmark skips: no counters.
    skipped = {"benchmarks": [median("BM_cuda_async_pair/alternating/real_time", real_time=0.0)]}
    assert v.async_pair(skipped) is None and v.host_pair(skipped) is None
    print("variant_figures: all checks passed")


if __name__ == "__main__":
    main()
