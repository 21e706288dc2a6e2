"""Event logs with a memory timeline (`alloc`, `free`, `mem_step` lines, docs/formats.md) for the report
tests, with what the page must make of them worked out here, independently of gpuguard report.

small_log(path): four allocations on device 0 whose stacking is known band by band, and a mem_step
whose 20 MiB peak is the run's. million_log(path): a million alloc and free lines. late_exit_log(path):
two seconds of work that start two seconds into the run, and an exit (or a crash) a minute later.
"""
import json

MIB = 1024 * 1024


def _line(out, **fields):
    out.append(json.dumps(dict(v=1, **fields), separators=(",", ":")))


def small_log(path):
    """Writes the small log; returns what the page must show: the bands (in allocation order, with the
    offsets they take on the stack over time) and the live series (t, bytes)."""
    out = []
    _line(out, type="start", t=0, schema="gpuguard.events", pid=4242, program="/opt/train", unix_ns=1795000000000000000)
    _line(out, type="device", t=500, device=0, name="Test GPU", total_bytes=1024 * MIB)

    def event(kind, t, address, size, live, site, thread):
        _line(out, type=kind, t=t, device=0, address=address, bytes=size, live_bytes=live, site=site, thread=thread)

    event("alloc", 1000, "0x1000", 4 * MIB, 4 * MIB, 11, 1)    # A
    event("alloc", 2000, "0x2000", 8 * MIB, 12 * MIB, 12, 1)   # B
    event("alloc", 3000, "0x3000", 2 * MIB, 14 * MIB, 11, 2)   # C
    event("free", 4000, "0x1000", 4 * MIB, 10 * MIB, 11, 1)    # A freed: B and C move down 4 MiB
    event("alloc", 5000, "0x1000", 1 * MIB, 11 * MIB, 0, 1)    # D, at A's address, no stack
    event("free", 6000, "0x3000", 2 * MIB, 9 * MIB, 11, 2)     # C freed: D moves down 2 MiB
    _line(out, type="mem_step", t=7000, end=7500, device=0, start_bytes=9 * MIB, end_bytes=9 * MIB,
          min_bytes=9 * MIB, min_t=7100, max_bytes=20 * MIB, max_t=7200, allocs=3, frees=3,
          alloc_bytes=11 * MIB, free_bytes=11 * MIB, queue_full=False)
    event("free", 8000, "0x2000", 8 * MIB, 1 * MIB, 12, 1)     # B freed: D moves to the bottom
    frame = lambda fn, line: {"address": "0x4011a0", "function": fn, "file": "/src/train.cpp", "line": line}
    _line(out, type="sites", t=9000, sampled=False, sites=[
        {"site": 12, "allocs": 1, "bytes": 8 * MIB, "raw_sites": [12], "frames": [frame("load_weights()", 40)]},
        {"site": 11, "allocs": 2, "bytes": 6 * MIB, "raw_sites": [11], "frames": [frame("make_activations()", 21)]},
    ])
    _line(out, type="end", t=10000, reason="exit", dropped=0,
          devices=[{"device": 0, "current_bytes": 1 * MIB, "peak_bytes": 20 * MIB, "total_bytes": 26 * MIB,
                    "allocations": 7, "frees": 6}],
          misuse={"unknown_pointer": 0, "double_free": 0, "wrong_size": 0, "wrong_device": 0})
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    bands = [  # t, end, bytes, site, thread, live_at_end, [(time, offset) as it moves down]
        dict(t=1000, end=4000, bytes=4 * MIB, site=11, thread=1, live_at_end=0, moves=[(1000, 0)]),
        dict(t=2000, end=8000, bytes=8 * MIB, site=12, thread=1, live_at_end=0, moves=[(2000, 4 * MIB), (4000, 0)]),
        dict(t=3000, end=6000, bytes=2 * MIB, site=11, thread=2, live_at_end=0, moves=[(3000, 12 * MIB), (4000, 8 * MIB)]),
        dict(t=5000, end=10000, bytes=1 * MIB, site=0, thread=1, live_at_end=1,
             moves=[(5000, 10 * MIB), (6000, 8 * MIB), (8000, 0)]),
    ]
    live = [(1000, 4 * MIB), (2000, 12 * MIB), (3000, 14 * MIB), (4000, 10 * MIB), (5000, 11 * MIB),
            (6000, 9 * MIB), (7100, 9 * MIB), (7200, 20 * MIB), (7500, 9 * MIB), (8000, 1 * MIB)]
    return bands, live


S = 10**9


def late_exit_log(path, crash=False):
    """Writes a run whose work (samples, allocations, frees, an operation) lies between 2 s and 4 s,
    whose sites and leaks lines come at exit, and whose end line (or crash line, with crash=True)
    comes at 61.5 s. Returns (first event, last event, the end's t), in nanoseconds."""
    out = []
    _line(out, type="start", t=0, schema="gpuguard.events", pid=4244, program="/opt/late", unix_ns=1795000000000000000)
    _line(out, type="device", t=100, device=0, name="Test GPU", total_bytes=1024 * MIB)
    _line(out, type="thread", t=200, thread=1, tid=4244, name="main")

    def event(kind, t, address, size, live):
        _line(out, type=kind, t=t, device=0, address=address, bytes=size, live_bytes=live, site=0, thread=1)

    def mem(t, live):
        _line(out, type="mem", t=t, device=0, live_bytes=live, peak_bytes=live, allocations=2, frees=1,
              used_bytes=live + 300 * MIB, total_bytes=1024 * MIB)

    event("alloc", 2 * S, "0x1000", 64 * MIB, 64 * MIB)            # the first event
    mem(2500000000, 64 * MIB)
    _line(out, type="op", t=2600000000, name="step", thread=1, depth=0, dur=800000000, alloc_bytes=32 * MIB,
          free_bytes=0, net_bytes=32 * MIB, peak_bytes=32 * MIB, allocs=1, frees=0, exception=False)
    event("alloc", 3 * S, "0x2000", 32 * MIB, 96 * MIB)            # live until the exit
    event("free", 3500000000, "0x1000", 64 * MIB, 32 * MIB)
    mem(4 * S, 32 * MIB)                                           # the last event
    end = 61500000000
    if crash:
        _line(out, type="crash", t=end, signal="SIGSEGV", code=1, address="0x0", thread=1, crash_file="/tmp/late.crash",
              devices=[{"device": 0, "live_bytes": 32 * MIB, "live_count": 1, "peak_bytes": 96 * MIB}], sites=[],
              frames=["0x401000"])
    else:
        _line(out, type="sites", t=end - 100000000, sampled=False, sites=[])
        _line(out, type="leaks", t=end - 50000000, total_bytes=32 * MIB, total_count=1,
              sites=[{"site": 0, "device": 0, "tag": "", "bytes": 32 * MIB, "count": 1, "frames": []}])
        _line(out, type="end", t=end, reason="exit", dropped=0,
              devices=[{"device": 0, "current_bytes": 32 * MIB, "peak_bytes": 96 * MIB, "total_bytes": 96 * MIB,
                        "allocations": 2, "frees": 1}],
              misuse={"unknown_pointer": 0, "double_free": 0, "wrong_size": 0, "wrong_device": 0})
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return 2 * S, 4 * S, end


def million_log(path, events=1000000):
    """A run of `events` alloc and free lines (half each) on device 0: 64 allocations live at a time,
    sizes 4 KiB .. 1 MiB from 40 sites, and one 96 MiB allocation freed right after it was made (a
    spike of one microsecond in half a second). Returns (peak bytes, allocations)."""
    allocs = events // 2
    ring = [None] * 64
    live = 0
    peak = 0
    t = 0
    chunks = []
    buf = []
    write_alloc = '{"v":1,"type":"alloc","t":%d,"device":0,"address":"0x%x","bytes":%d,"live_bytes":%d,"site":%d,"thread":1}'
    write_free = '{"v":1,"type":"free","t":%d,"device":0,"address":"0x%x","bytes":%d,"live_bytes":%d,"site":%d,"thread":1}'
    buf.append('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":4243,"program":"/opt/big","unix_ns":1795000000000000000}')
    buf.append('{"v":1,"type":"device","t":1,"device":0,"name":"Test GPU","total_bytes":%d}' % (141 * 1024 * MIB))
    made = 0
    i = 0
    while made < allocs:
        slot = i % 64
        if ring[slot] is not None:
            address, size, site = ring[slot]
            live -= size
            t += 500
            buf.append(write_free % (t, address, size, live, site))
            ring[slot] = None
        if i == allocs // 2:  # the spike
            t += 500
            live += 96 * MIB
            peak = max(peak, live)
            buf.append(write_alloc % (t, 0x7f0000000000, 96 * MIB, live, 41))
            live -= 96 * MIB
            t += 1000
            buf.append(write_free % (t, 0x7f0000000000, 96 * MIB, live, 41))
            made += 1
        size = 4096 << ((i * 7919) % 9)       # 4 KiB .. 1 MiB
        site = 1 + (i * 31) % 40
        address = 0x10000000 + (i % 100000) * 0x200000
        live += size
        peak = max(peak, live)
        t += 500
        buf.append(write_alloc % (t, address, size, live, site))
        ring[slot] = (address, size, site)
        made += 1
        i += 1
        if len(buf) >= 100000:
            chunks.append("\n".join(buf))
            buf = []
    buf.append('{"v":1,"type":"end","t":%d,"reason":"exit","dropped":0,"devices":[{"device":0,"current_bytes":%d,'
               '"peak_bytes":%d,"total_bytes":0,"allocations":%d,"frees":%d}],"misuse":{"unknown_pointer":0,'
               '"double_free":0,"wrong_size":0,"wrong_device":0}}' % (t + 1000, live, peak, made, made - 64))
    chunks.append("\n".join(buf))
    with open(path, "w") as f:
        f.write("\n".join(chunks) + "\n")
    return peak, made
