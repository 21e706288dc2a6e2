#!/usr/bin/env python3
"""Writes tests/cli/report/testdata/good.jsonl: a plausible gpuguard.events v1 log of a training run that
runs out of memory (docs/formats.md). Deterministic: run it again after changing it and commit the
result. The other logs in testdata/ are written by hand.

What is in it: two H200 devices; thread 1 ("train") runs steps of nested operations
(step > forward > attention/mlp, backward, optimizer) that leak 1 GiB each, until device 0 fills,
an alert fires and a backward pass throws; thread 2 ("loader") loads batches onto device 1 with
op_device_query fields. Memory samples every 10 ms with device-wide figures, op_growth and
device_full/device_recovered alerts, a dropped-events line, sites, leaks and end.

usage: make_testdata.py [OUTPUT]   (default: testdata/good.jsonl beside this script)
"""
import json
import os
import sys

GIB = 1 << 30
MIB = 1 << 20
MS = 1_000_000
TOTAL = 150754820096          # an H200's cudaMemGetInfo total
FULL, RECOVERED = 0.90, 0.80  # alert thresholds (fraction of total)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "testdata", "good.jsonl")
    events = []  # (write_time, order, event)
    order = [0]

    def emit(write_t, event):
        order[0] += 1
        events.append((write_t, order[0], event))

    # ---- memory model: a list of (t, device, delta) allocation changes --------------------------
    changes = []

    def alloc(t, dev, nbytes):
        changes.append((t, dev, nbytes))

    ops = []  # op events (t = start)

    def op(name, thread, depth, t, dur, alloc_b, free_b, allocs, frees, exception=False, peak=None, **extra):
        ops.append(dict(v=1, type="op", t=t, name=name, thread=thread, depth=depth, dur=dur,
                        alloc_bytes=alloc_b, free_bytes=free_b, net_bytes=alloc_b - free_b,
                        peak_bytes=alloc_b if peak is None else peak, allocs=allocs, frees=frees,
                        exception=exception, **extra))

    # Thread 1: load the model, then train until device 0 runs out.
    alloc(5 * MS, 0, 30 * GIB)
    op("load_model", 1, 0, 2 * MS, 60 * MS, 30 * GIB, 0, 12, 0)
    step_t = 100 * MS
    failed_step = 11
    leak = 0
    for s in range(failed_step + 1):
        t = step_t + s * 110 * MS
        act = 60 * GIB
        # forward: activations grow over 40 ms (attention 0-22 ms, mlp 22-38 ms)
        for k in range(8):
            alloc(t + 1 * MS + k * 5 * MS, 0, act // 8)
        op("attention", 1, 2, t + 1 * MS, 21 * MS, act // 2, 2 * GIB, 4, 1, peak=act // 2)
        op("mlp", 1, 2, t + 22 * MS, 16 * MS, act // 2 + 2 * GIB, 2 * GIB, 5, 1)
        op("forward", 1, 1, t, 40 * MS, act + 4 * GIB, 4 * GIB, 9, 2, peak=act)
        if s == failed_step:
            # backward runs out of memory halfway (a 24 GiB request fails): what it held is given back
            alloc(t + 45 * MS, 0, 10 * GIB)
            alloc(t + 52 * MS, 0, -10 * GIB)
            alloc(t + 53 * MS, 0, -act)
            op("backward", 1, 1, t + 40 * MS, 13 * MS, 10 * GIB, 10 * GIB + act, 3, 11, exception=True, peak=10 * GIB)
            op("step", 1, 0, t, 53 * MS, act + 14 * GIB, act + 14 * GIB, 12, 13, exception=True, peak=act)
            break
        # backward: gradients 20 GiB, activations freed
        alloc(t + 45 * MS, 0, 20 * GIB)
        for k in range(4):
            alloc(t + 50 * MS + k * 8 * MS, 0, -act // 4)
        op("backward", 1, 1, t + 40 * MS, 45 * MS, 20 * GIB, act, 6, 8, peak=20 * GIB)
        # optimizer: gradients freed; 1 GiB of cache stays (the leak)
        alloc(t + 90 * MS, 0, -20 * GIB)
        alloc(t + 95 * MS, 0, 1 * GIB)
        leak += 1 * GIB
        op("optimizer", 1, 1, t + 85 * MS, 13 * MS, 1 * GIB, 20 * GIB, 1, 6, peak=1 * GIB)
        op("step", 1, 0, t, 100 * MS, act + 25 * GIB, act + 24 * GIB, 22, 16, peak=act + 20 * GIB)
    fail_t = step_t + failed_step * 110 * MS
    op("save_checkpoint", 1, 0, fail_t + 70 * MS, 40 * MS, 0, 0, 0, 0)
    end_t = fail_t + 160 * MS

    # Thread 2: a loader putting batches on device 1, every 50 ms.
    alloc(3 * MS, 1, 8 * GIB)
    t = 20 * MS
    n = 0
    used_1 = 8 * GIB + 800 * MIB
    while t + 40 * MS < end_t:
        size = (2 + (n % 3)) * GIB
        alloc(t + 2 * MS, 1, size)
        alloc(t + 30 * MS, 1, -size + (32 * MIB if n in (5, 17) else 0))
        kept = 32 * MIB if n in (5, 17) else 0
        op("decode", 2, 1, t + 1 * MS, 12 * MS, size, 0, 1, 0)
        op("pin_memory", 2, 1, t + 14 * MS, 6 * MS, 64 * MIB, 64 * MIB, 1, 1)
        op("load_batch", 2, 0, t, 31 * MS, size + 64 * MIB + kept, size + 64 * MIB, 2, 2, peak=size + 64 * MIB,
           device=1, used_before=used_1, used_after=used_1 + kept)
        used_1 += kept
        t += 50 * MS
        n += 1

    alloc(end_t - 20 * MS, 1, -8 * GIB)  # the replica on device 1 is freed at exit

    # ---- sample memory every 10 ms -------------------------------------------------------------
    changes.sort()
    live = {0: 0, 1: 0}
    peak = {0: 0, 1: 0}
    maxima = {0: 0, 1: 0}
    counts = {0: [0, 0], 1: [0, 0]}
    other = {0: 1200 * MIB + 21 * GIB, 1: 800 * MIB}   # CUDA contexts and another process
    i = 0
    state = {"full": False, "held": 0, "below": False}
    for sample_t in range(10 * MS, end_t + 1, 10 * MS):
        while i < len(changes) and changes[i][0] <= sample_t:
            ct, dev, delta = changes[i]
            live[dev] += delta
            peak[dev] = max(peak[dev], live[dev])
            maxima[dev] = max(maxima[dev], live[dev])
            counts[dev][0 if delta > 0 else 1] += 1
            i += 1
        for dev in (0, 1):
            used = live[dev] + other[dev]
            emit(sample_t, dict(v=1, type="mem", t=sample_t, device=dev, live_bytes=live[dev],
                                peak_bytes=max(peak[dev], live[dev]), allocations=counts[dev][0],
                                frees=counts[dev][1], used_bytes=used, total_bytes=TOTAL))
            peak[dev] = live[dev]
            fraction = used / TOTAL
            if dev == 0 and state["full"] and fraction >= FULL and state["below"]:
                state["held"] += 1
            if dev == 0:
                state["below"] = fraction < FULL
            if dev == 0 and not state["full"] and fraction >= FULL:
                state["full"] = True
                emit(sample_t + 1, dict(v=1, type="alert", t=sample_t + 1, kind="device_full", device=0,
                                        fraction=round(fraction, 4), threshold=FULL, used_bytes=used, total_bytes=TOTAL,
                                        suppressed=0,
                                        message="device 0 is %.1f%% full (%d of %d bytes), above 90%%" %
                                                (100 * fraction, used, TOTAL)))
            elif dev == 0 and state["full"] and fraction < RECOVERED and sample_t > fail_t + 55 * MS:
                state["full"] = False
                emit(sample_t + 1, dict(v=1, type="alert", t=sample_t + 1, kind="device_recovered", device=0,
                                        fraction=round(fraction, 4), threshold=RECOVERED, used_bytes=used,
                                        total_bytes=TOTAL, suppressed=state["held"],
                                        message="device 0 is back to %.1f%% full" % (100 * fraction)))

    for o in ops:
        emit(o["t"] + o["dur"], o)
    # op_growth alerts: the first step that grew, and a later one after hysteresis held 6 back
    for s, suppressed in ((0, 0), (7, 6)):
        at = step_t + s * 110 * MS + 100 * MS
        emit(at + 1, dict(v=1, type="alert", t=at + 1, kind="op_growth", name="step", thread=1, net_bytes=1 * GIB,
                          limit_bytes=512 * MIB, suppressed=suppressed,
                          message="operation 'step' on thread 1 grew by 1.00 GiB (limit 512.0 MiB)"))
    emit(905 * MS, dict(v=1, type="dropped", t=905 * MS, count=12, total=12))

    # thread lines come before each thread's first op
    for thread, tid, name in ((1, 4242, "train"), (2, 4250, "loader")):
        first = min(o["t"] + o["dur"] for o in ops if o["thread"] == thread)
        first_start = min(o["t"] for o in ops if o["thread"] == thread)
        emit(first - 1, dict(v=1, type="thread", t=first_start, thread=thread, tid=tid, name=name))

    def frames(*spec):
        return [dict(address="0x%x" % (0x401000 + 0x40 * k + len(fn)), function=fn, file=path, line=line)
                for k, (fn, path, line) in enumerate(spec)]

    train = "/src/train/train.cpp"
    sites = [
        dict(site=3, allocs=8 * failed_step, bytes=75 * GIB * failed_step // 1, frames=frames(
            ("model::attention_block::forward(tensor const&)", "/src/train/model.cpp", 212),
            ("model::forward(batch const&)", "/src/train/model.cpp", 98),
            ("train_step(model&, batch const&)", train, 57), ("main", train, 140))),
        dict(site=5, allocs=failed_step + 1, bytes=30 * GIB * failed_step + 10 * GIB, frames=frames(
            ("model::backward(tensor const&)", "/src/train/model.cpp", 305),
            ("train_step(model&, batch const&)", train, 63), ("main", train, 140))),
        dict(site=1, allocs=12, bytes=30 * GIB, frames=frames(
            ("load_weights(std::string const&)", "/src/train/checkpoint.cpp", 41), ("main", train, 121))),
        dict(site=7, allocs=n, bytes=sum((2 + (k % 3)) * GIB for k in range(n)), frames=frames(
            ("loader::decode(sample const&)", "/src/train/loader.cpp", 77),
            ("loader::run()", "/src/train/loader.cpp", 30), ("start_thread", "", 0))),
        dict(site=9, allocs=failed_step, bytes=failed_step * GIB, frames=frames(
            ("kv_cache::grow(unsigned long)", "/src/train/cache.cpp", 19),
            ("optimizer::step()", "/src/train/optim.cpp", 88), ("train_step(model&, batch const&)", train, 71),
            ("main", train, 140), ("__libc_start_call_main", "", 0), ("__libc_start_main_impl", "", 0))),
    ]
    emit(end_t - 3 * MS, dict(v=1, type="sites", t=end_t - 3 * MS, sampled=False, sites=sites))
    leak_sites = [
        dict(site=9, device=0, tag="kv_cache", bytes=leak, count=failed_step, frames=sites[4]["frames"]),
        dict(site=7, device=1, tag="", bytes=64 * MIB, count=2, frames=sites[3]["frames"]),
        dict(site=1, device=0, tag="weights", bytes=30 * GIB, count=12, frames=sites[2]["frames"]),
    ]
    leak_sites.sort(key=lambda s: -s["bytes"])
    emit(end_t - 2 * MS, dict(v=1, type="leaks", t=end_t - 2 * MS, total_bytes=sum(s["bytes"] for s in leak_sites),
                              total_count=sum(s["count"] for s in leak_sites), sites=leak_sites))
    devices = [dict(device=d, current_bytes=live[d], peak_bytes=maxima[d],
                    total_bytes=sum(c[2] for c in changes if c[1] == d and c[2] > 0),
                    allocations=counts[d][0], frees=counts[d][1]) for d in (0, 1)]
    emit(end_t, dict(v=1, type="end", t=end_t, reason="exit", dropped=12, devices=devices,
                     misuse=dict(unknown_pointer=0, double_free=1, wrong_size=0, wrong_device=0)))

    head = [dict(v=1, type="start", t=0, schema="gpuguard.events", pid=4242, program="/opt/train/bin/train_gpt",
                 unix_ns=1795000000000000000),
            dict(v=1, type="device", t=1 * MS, device=0, name="NVIDIA H200", total_bytes=TOTAL),
            dict(v=1, type="device", t=1 * MS + 1000, device=1, name="NVIDIA H200", total_bytes=TOTAL)]
    events.sort(key=lambda e: (e[0], e[1]))
    with open(out, "w", encoding="utf-8") as f:
        for e in head + [e[2] for e in events]:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
    print("wrote %s: %d lines" % (out, len(head) + len(events)))


if __name__ == "__main__":
    main()
