#!/usr/bin/env python3
"""`gpuguard report` as a process: exit statuses, what it prints, the files it leaves, and the data it
embeds in the page, checked against figures this test computes from the logs on its own.

usage: report_test.py GPUGUARD_BINARY REPO_ROOT
"""
import collections
import datetime
import html
import json
import os
import shutil
import random
import re
import subprocess
import sys
import tempfile
import unittest

import timeline_logs  # beside this file

GPUGUARD = None
ROOT = None
DATA = None
SVG_NS = "http://www.w3.org/2000/svg"   # the one URL the page may contain (createElementNS)


def run(*args, stdin=None):
    # 180 s: the million-event log is slow under ASan, and slower again with another build sharing
    # a small machine's cores; a shorter limit has timed out there.
    return subprocess.run([GPUGUARD, "report", *args], input=stdin, capture_output=True, timeout=180)


def read_log(path):
    """The log's lines as parsed JSON (None where a line is not JSON)."""
    events = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append(None)
    return events


def embedded_data(page):
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m, "no #report-data element in the page"
    return json.loads(m.group(1))


def op_totals(events):
    """Per-name totals computed from the op lines, the way the page's table should show them."""
    totals = {}
    for e in events:
        if not isinstance(e, dict) or e.get("type") != "op":
            continue
        t = totals.setdefault(e["name"], dict(calls=0, total_dur=0, max_dur=0, total_alloc=0, max_peak=0,
                                              total_net=0, exceptions=0))
        t["calls"] += 1
        t["total_dur"] += e["dur"]
        t["max_dur"] = max(t["max_dur"], e["dur"])
        t["total_alloc"] += e["alloc_bytes"]
        t["max_peak"] = max(t["max_peak"], e["peak_bytes"])
        t["total_net"] += e["net_bytes"]
        t["exceptions"] += 1 if e["exception"] else 0
    return totals


class report_test(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-report-test-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def render(self, log, *extra):
        out = self.path("report.html")
        r = run(log, "-o", out, *extra)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("report.html", os.listdir(self.dir))
        self.assertEqual([n for n in os.listdir(self.dir) if ".tmp." in n], [], "a temporary file was left behind")
        with open(out, encoding="utf-8") as f:
            page = f.read()
        return r, page, embedded_data(page)

    def assert_self_contained(self, page):
        # Nothing is loaded from anywhere: no src/href to a URL, no stylesheet link, no import.
        for m in re.finditer(r'\b(src|href|xlink:href|action|srcset)\s*=\s*["\']?([^"\'\s>]*)', page, re.I):
            self.assertFalse(re.match(r"(https?:)?//", m.group(2), re.I), "external reference: " + m.group(0))
        self.assertNotRegex(page, r"(?i)<link\b|<iframe\b|<img\b|<object\b|<embed\b|@import|url\(\s*['\"]?(https?:)?//")
        self.assertNotRegex(page, r"(?i)<script[^>]*\bsrc\s*=")
        self.assertNotRegex(page, r"\bimport\s*\(|\bimport\s+[\w{*]|\bfetch\s*\(|XMLHttpRequest|new\s+WebSocket")
        urls = set(re.findall(r"https?://[^\s\"'<>)]*", page))
        self.assertLessEqual(urls, {SVG_NS}, "URLs in the page")

    # ---- a good log --------------------------------------------------------------------------

    def test_good_log(self):
        log = os.path.join(DATA, "good.jsonl")
        events = read_log(log)
        r, page, data = self.render(log)
        out = self.path("report.html")
        n = len(events)
        self.assertEqual(r.stdout.decode(),
                         "gpuguard report: %d lines read, %d events used, 0 lines skipped; wrote %s\n" % (n, n, out))
        self.assertEqual(r.stderr.decode(), "")
        self.assert_self_contained(page)
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        self.assertIn("<title>gpuguard report: train_gpt</title>", page)

        start = events[0]
        self.assertEqual(data["schema"], "gpuguard.report")
        self.assertEqual(data["source"], dict(path=log, lines_read=n, events_used=n, lines_skipped=0, last_line_cut=False,
                                              unknown_type_lines=0, unknown_types={}))
        wall = datetime.datetime.fromtimestamp(start["unix_ns"] // 10**9, datetime.timezone.utc)
        self.assertEqual(data["run"]["start_wall"], wall.strftime("%Y-%m-%d %H:%M:%S") +
                         ".%03d UTC" % (start["unix_ns"] // 10**6 % 1000))
        self.assertEqual((data["run"]["program"], data["run"]["pid"]), (start["program"], start["pid"]))
        self.assertTrue(data["run"]["has_start"] and data["run"]["has_end"])
        end = [e for e in events if e["type"] == "end"][0]
        self.assertEqual(data["run"]["duration_ns"], end["t"])
        # The work: from the first to the last moment of a sample, an allocation, a free, a scope or an
        # alert (the start, sites, leaks and end lines are not work).
        moments = [m for e in events if e["type"] in ("mem", "alloc", "free", "op", "alert")
                   for m in (e["t"], e["t"] + e.get("dur", 0))]
        self.assertEqual(data["run"]["work"], dict(start_ns=min(moments), end_ns=max(moments)))
        self.assertGreater(min(moments), 0)
        self.assertLessEqual(max(moments), end["t"])

        # Devices: every mem sample is drawn (the log is short), with the right extremes.
        mem = collections.defaultdict(list)
        for e in events:
            if e["type"] == "mem":
                mem[e["device"]].append(e)
        self.assertEqual([d["device"] for d in data["devices"]], sorted(mem))
        for d in data["devices"]:
            samples = mem[d["device"]]
            self.assertEqual(d["samples"], len(samples))
            self.assertEqual(d["name"], "NVIDIA H200")
            self.assertEqual(d["total_bytes"], 150754820096)
            self.assertEqual(d["live"]["t"], [e["t"] for e in samples])
            self.assertEqual(d["live"]["v"], [e["live_bytes"] for e in samples])
            self.assertEqual(d["live"]["max"], max(e["live_bytes"] for e in samples))
            self.assertEqual(d["peak"]["max"], max(e["peak_bytes"] for e in samples))
            self.assertEqual(d["used"]["v"], [e["used_bytes"] for e in samples])
            self.assertEqual((d["allocations"], d["frees"]), (samples[-1]["allocations"], samples[-1]["frees"]))

        # Threads and every op band (no thinning at this size), in each thread's log order.
        ops = [e for e in events if e["type"] == "op"]
        self.assertEqual(data["op_events"], len(ops))
        self.assertEqual([(t["thread"], t["tid"], t["name"]) for t in data["threads"]],
                         [(1, 4242, "train"), (2, 4250, "loader")])
        for t in data["threads"]:
            mine = [o for o in ops if o["thread"] == t["thread"]]
            self.assertEqual((t["ops"], t["ops_drawn"]), (len(mine), len(mine)))
            self.assertEqual(t["max_depth"], max(o["depth"] for o in mine))
        key = lambda o: (o["thread"], o["t"], o["name"], o["depth"], o["dur"], o["net_bytes"], o["exception"])
        self.assertEqual(sorted(map(key, data["ops"])), sorted(map(key, ops)))
        with_device = [o for o in data["ops"] if "device" in o]
        self.assertEqual(len(with_device), len([o for o in ops if "device" in o]))
        self.assertTrue(all(o["device"] == 1 and "used_before" in o for o in with_device))

        # The per-name table, against totals computed here.
        expected = op_totals(events)
        got = {s["name"]: {k: s[k] for k in expected[s["name"]]} for s in data["op_summary"]}
        self.assertEqual(got, expected)
        self.assertEqual([s["total_dur"] for s in data["op_summary"]],
                         sorted((s["total_dur"] for s in data["op_summary"]), reverse=True))
        self.assertEqual(expected["backward"]["exceptions"], 1)

        alerts = [e for e in events if e["type"] == "alert"]
        self.assertEqual(data["alert_events"], len(alerts))
        self.assertEqual([(a["t"], a["kind"], a["message"]) for a in data["alerts"]],
                         [(a["t"], a["kind"], a["message"]) for a in alerts])
        self.assertEqual(data["dropped"], dict(events=12, lines=1))

        sites = [e for e in events if e["type"] == "sites"][0]
        self.assertEqual(data["sites"]["sites"], sites["sites"])
        self.assertFalse(data["sites"]["sampled"])
        leaks = [e for e in events if e["type"] == "leaks"][0]
        self.assertEqual(data["leaks"]["sites"], leaks["sites"])
        self.assertEqual((data["leaks"]["total_bytes"], data["leaks"]["total_count"]),
                         (leaks["total_bytes"], leaks["total_count"]))
        self.assertEqual(data["end"]["devices"], end["devices"])
        self.assertEqual(data["end"]["misuse"], end["misuse"])
        self.assertEqual(data["skipped"], dict(count=0, lines=[]))

    def test_testdata_follows_the_schema(self):
        try:
            import jsonschema
        except ImportError:
            print("report_test: jsonschema not installed (scripts/deps.sh test installs it): schema check skipped")
            return
        with open(os.path.join(ROOT, "docs", "schemas", "events-v1.schema.json")) as f:
            validator = jsonschema.Draft202012Validator(json.load(f))
        for name in ("good.jsonl", "start_only.jsonl"):
            for number, event in enumerate(read_log(os.path.join(DATA, name)), 1):
                errors = [e.message for e in validator.iter_errors(event)]
                self.assertEqual(errors, [], "%s:%d" % (name, number))

    # ---- bad lines -----------------------------------------------------------------------------

    def test_bad_lines_are_reported_and_the_rest_is_rendered(self):
        log = os.path.join(DATA, "bad_lines.jsonl")
        r, page, data = self.render(log)
        expected = [
            (5, "not JSON: syntax error while parsing value - invalid literal; last read: 'th' at column 2"),
            (6, "a JSON array, not an object"),
            (7, 'mem: field "live_bytes" is missing'),
            (8, "unknown version v=2 (this reader knows version 1)"),
            (9, 'field "v" is missing'),
            (10, 'field "t" must be a non-negative integer, not a JSON string'),
            (11, 'op: field "dur" must be a non-negative integer, not -5'),
            (15, "blank line"),
            (16, 'op: field "exception" must be true or false, not a JSON string'),
            (18, 'mem: field "used_bytes" without "total_bytes"'),
            (19, 'leaks: field "sites[0].frames[0].line" must be a non-negative integer, not a JSON string'),
            (20, "the last line was cut (the process ended while writing it): "
                 "syntax error while parsing object key - invalid string: missing closing quote; "
                 "last read: '\"live_by'; expected string literal at column 53"),
        ]
        self.assertEqual(r.stderr.decode().splitlines(),
                         ["gpuguard report: %s:%d: %s" % (log, n, why) for n, why in expected])
        self.assertEqual(r.stdout.decode(), "gpuguard report: 20 lines read, 7 events used, 12 lines skipped (the last line "
                         "was cut: the process ended while writing it); wrote %s\n" % self.path("report.html"))
        self.assertTrue(data["source"]["last_line_cut"])
        self.assertEqual(data["skipped"], dict(count=12, lines=[dict(line=n, reason=why) for n, why in expected]))
        self.assertEqual(data["source"]["unknown_types"], {"gpu_temperature": 1})
        self.assertEqual(data["source"]["unknown_type_lines"], 1)
        # What was good is still there: two mem samples (one with an unknown field), two ops.
        self.assertEqual(data["devices"][0]["live"]["v"], [1048576, 3145728])
        self.assertEqual(sorted((o["name"], o["exception"]) for o in data["ops"]), [("backward", False), ("forward", True)])
        self.assertIsNone(data["leaks"])
        self.assertFalse(data["run"]["has_end"])
        self.assert_self_contained(page)

    def test_skipped_lines_listed_in_the_page_are_capped(self):
        log = self.path("many_bad.jsonl")
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":1,"program":"p","unix_ns":0}\n')
            for i in range(120):
                f.write("garbage %d\n" % i)
        out = self.path("out.html")
        r = run(log, "-o", out)
        self.assertEqual(r.returncode, 0)
        err = r.stderr.decode().splitlines()
        self.assertEqual(len(err), 21, err)  # the first 20, then how many more
        self.assertIn("100 more lines skipped (not listed)", err[-1])
        with open(out, encoding="utf-8") as f:
            data = embedded_data(f.read())
        self.assertEqual(data["skipped"]["count"], 120)
        self.assertEqual([s["line"] for s in data["skipped"]["lines"]], list(range(2, 52)))

    # ---- small logs ----------------------------------------------------------------------------

    def test_files_that_are_no_event_log_exit_3_in_one_line(self):
        trace = self.path("trace.json")
        with open(trace, "w") as f:
            f.write('[\n{"name":"forward","ph":"X","ts":1,"dur":2,"pid":1,"tid":1},\n' * 3)
        noise = self.path("noise.jsonl")
        with open(noise, "wb") as f:
            f.write(bytes(random.Random(7).randrange(256) for _ in range(20000)))
        other = self.path("other.jsonl")
        with open(other, "w") as f:
            f.write('{"hello": 1}\n{"v": 1, "type": "op"}\n')
        cases = [
            (os.path.join(DATA, "empty.jsonl"), "is empty"),
            (trace, "is a Chrome trace (written by trace_file="),
            (noise, "binary data"),
            (other, "has no gpuguard event (schema gpuguard.events"),
        ]
        for log, message in cases:
            out = self.path("page.html")
            r = run(log, "-o", out)
            err = r.stderr.decode()
            self.assertEqual(r.returncode, 3, (log, err))
            self.assertIn(message, err.splitlines()[-1])
            self.assertLessEqual(len(err.splitlines()), 3, err)
            self.assertFalse(os.path.exists(out), log)

    def test_a_crash_line_reaches_the_page(self):
        log = self.path("crashed.jsonl")
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":9,"program":"/bin/train","unix_ns":0}\n')
            f.write('{"v":1,"type":"crash","t":5000000,"signal":"SIGSEGV","code":1,"address":"0x10","thread":77,'
                    '"crash_file":"/tmp/c.json","devices":[{"device":0,"live_bytes":1048576,"live_count":2,'
                    '"peak_bytes":2097152}],"sites":[{"site":3,"device":0,"bytes":1048576,"count":2}],'
                    '"frames":["0x401000","0x402000"]}\n')
        out = self.path("crashed.html")
        r = run(log, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        with open(out, encoding="utf-8") as f:
            data = embedded_data(f.read())
        self.assertEqual(data["crash"]["signal"], "SIGSEGV")
        self.assertEqual(data["crash"]["crash_file"], "/tmp/c.json")
        self.assertEqual(data["crash"]["devices"], [{"device": 0, "live_bytes": 1048576, "live_count": 2, "peak_bytes": 2097152}])
        self.assertEqual(data["source"]["lines_skipped"], 0)

    def test_default_output_is_next_to_the_log(self):
        log = self.path("run.jsonl")
        shutil.copy(os.path.join(DATA, "start_only.jsonl"), log)
        r = run(log)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertTrue(os.path.exists(self.path("run.html")))
        self.assertIn("wrote " + self.path("run.html"), r.stdout.decode())

    def test_start_only(self):
        r, page, data = self.render(os.path.join(DATA, "start_only.jsonl"))
        self.assertIn("1 lines read, 1 events used, 0 lines skipped", r.stdout.decode())
        self.assertTrue(data["run"]["has_start"])
        self.assertFalse(data["run"]["has_end"])
        self.assertEqual((data["run"]["pid"], data["run"]["program"]), (777, "/usr/bin/python3"))
        self.assertEqual(data["devices"], [])
        self.assertIsNone(data["end"])

    def test_stdin_and_stdout(self):
        with open(os.path.join(DATA, "start_only.jsonl"), "rb") as f:
            log = f.read()
        r = run("-", "-o", "-", stdin=log)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        page = r.stdout.decode()
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        self.assertEqual(embedded_data(page)["source"]["path"], "<stdin>")
        self.assertIn("1 lines read", r.stderr.decode())   # the summary moves to stderr
        self.assertEqual(os.listdir(self.dir), [])

    # ---- the page cannot be broken out of ------------------------------------------------------

    def test_title_and_hostile_strings_are_escaped(self):
        log = self.path("hostile.jsonl")
        name = "</script><script>alert(1)</script><!-- & \u2028 \"'"
        op = dict(v=1, type="op", t=5, name=name, thread=1, depth=0, dur=10, alloc_bytes=0, free_bytes=0, net_bytes=0,
                  peak_bytes=0, allocs=0, frees=0, exception=False)
        with open(log, "w", encoding="utf-8") as f:
            f.write(json.dumps(dict(v=1, type="start", t=0, schema="gpuguard.events", pid=1,
                                    program="/bin/</script>", unix_ns=0)) + "\n")
            f.write(json.dumps(op) + "\n")
        title = '<b>x</b> & "y" </title>'
        _, page, data = self.render(log, "--title", title)
        self.assertEqual(page.count("<title>"), 1)
        self.assertIn("<title>" + html.escape(title, quote=True).replace("&#x27;", "&#39;") + "</title>", page)
        self.assertEqual(data["title"], title)
        self.assertEqual(data["ops"][0]["name"], name)
        self.assertEqual(data["run"]["program"], "/bin/</script>")
        self.assertEqual(len(re.findall(r"</script", page, re.I)), 2, "only the page's own two scripts end")
        self.assertNotIn("<!--  &", page)
        self.assert_self_contained(page)

    def test_a_reason_quoting_the_log_stays_one_line(self):
        # Found by cli.report_fuzz: a start line's schema was quoted raw into its reason, so a log
        # could add lines (and terminal escapes) to stderr. It is quoted as JSON now.
        log = self.path("forged.jsonl")
        schema = "gpuguard.events\ngpuguard report: forged.jsonl:9: \x1b[31mforged"
        with open(log, "w", encoding="utf-8") as f:
            f.write(json.dumps(dict(v=1, type="start", t=0, schema=schema, pid=1, program="p", unix_ns=0)) + "\n")
            f.write(json.dumps(dict(v=1, type="start", t=0, schema="gpuguard.events", pid=1, program="p", unix_ns=0)) + "\n")
        r, _, data = self.render(log)
        self.assertEqual(r.stderr.decode().splitlines(),
                         ["gpuguard report: %s:1: start: schema is %s, not \"gpuguard.events\"" % (log, json.dumps(schema))])
        self.assertEqual(data["skipped"]["lines"][0]["reason"],
                         "start: schema is %s, not \"gpuguard.events\"" % json.dumps(schema))

    def test_a_reason_naming_a_hostile_key_is_one_bounded_line(self):
        # A key of the log quoted in a reason (the misuse counts are named by the log) is escaped as
        # in JSON, and a reason is cut at 400 bytes, so stderr gets one short line per skipped line.
        log = self.path("hostile-keys.jsonl")
        end = dict(v=1, type="end", t=9, reason="exit", dropped=0, devices=[])
        with open(log, "w", encoding="utf-8") as f:
            f.write(json.dumps(dict(v=1, type="start", t=0, schema="gpuguard.events", pid=1, program="p", unix_ns=0)) + "\n")
            f.write(json.dumps(dict(end, misuse={"double\nfree\x1b[31m": "x"})) + "\n")
            f.write(json.dumps(dict(end, misuse={"k" * 5000: -1})) + "\n")
        r, _, data = self.render(log)
        err = r.stderr.decode().splitlines()
        self.assertEqual(err[0], 'gpuguard report: %s:2: end: field "misuse.double\\nfree\\u001b[31m" must be a '
                                 'non-negative integer, not a JSON string' % log)
        self.assertEqual(len(err), 2, err)
        reason = data["skipped"]["lines"][1]["reason"]
        self.assertTrue(reason.startswith('end: field "misuse.kkkk'), reason)
        self.assertTrue(reason.endswith("..."), reason)
        self.assertLessEqual(len(reason.encode()), 400)
        self.assertIsNone(data["end"])

    # ---- thinning a long log -------------------------------------------------------------------

    def test_long_log_is_thinned_but_keeps_peaks_and_totals(self):
        log = self.path("long.jsonl")
        n_mem, n_ops = 30000, 6000
        spike_at, spike = 17321, 99 * 2**30
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":9,"program":"/bin/long","unix_ns":0}\n')
            for i in range(n_mem):
                live = spike if i == spike_at else (i % 97) * 2**20
                f.write('{"v":1,"type":"mem","t":%d,"device":0,"live_bytes":%d,"peak_bytes":%d,"allocations":%d,'
                        '"frees":0}\n' % (i * 1000000, live, live, i))
            for i in range(n_ops):
                dur = 5000000 if i == 4321 else 1000 + i % 50
                peak = 7 * 2**30 if i == 1234 else i % 1000
                f.write('{"v":1,"type":"op","t":%d,"name":"op%d","thread":1,"depth":0,"dur":%d,"alloc_bytes":%d,'
                        '"free_bytes":0,"net_bytes":%d,"peak_bytes":%d,"allocs":1,"frees":0,"exception":%s}\n'
                        % (i * 5000000, i % 7, dur, peak, peak, peak, "true" if i == 5555 else "false"))
        _, page, data = self.render(log)
        live = data["devices"][0]["live"]
        self.assertEqual(data["devices"][0]["samples"], n_mem)
        self.assertLessEqual(len(live["t"]), 4 * data["limits"]["max_buckets"])
        self.assertGreater(len(live["t"]), 1000)
        self.assertEqual(live["t"], sorted(live["t"]))
        self.assertIn(spike, live["v"], "the peak was lost in downsampling")
        self.assertEqual(live["t"][live["v"].index(spike)], spike_at * 1000000)
        self.assertEqual(live["max"], spike)
        self.assertEqual(min(live["v"]), 0)
        thread = data["threads"][0]
        self.assertEqual(thread["ops"], n_ops)
        self.assertEqual(thread["ops_drawn"], data["limits"]["max_ops_per_thread"])
        self.assertEqual(len(data["ops"]), data["limits"]["max_ops_per_thread"])
        kept = {(o["t"], o["dur"], o["peak_bytes"], o["exception"]) for o in data["ops"]}
        self.assertIn((4321 * 5000000, 5000000, 4321 % 1000, False), kept, "the longest op was thinned away")
        self.assertIn((1234 * 5000000, 1000 + 1234 % 50, 7 * 2**30, False), kept, "the biggest op was thinned away")
        self.assertIn(True, {o["exception"] for o in data["ops"]}, "the exception op was thinned away")
        self.assertEqual(sum(s["calls"] for s in data["op_summary"]), n_ops)
        self.assertLess(len(page), 2 * 2**20)

    def test_memory_timeline_draws_every_step_and_each_allocation(self):
        log = self.path("timeline.jsonl")
        bands, live = timeline_logs.small_log(log)
        _, page, data = self.render(log)
        device = data["devices"][0]
        # The live series is the timeline's: every step, and the mem_step's 20 MiB peak where it was.
        self.assertEqual(list(zip(device["live"]["t"], device["live"]["v"])), live)
        self.assertEqual(device["live"]["max"], 20 * 2**20)
        self.assertEqual(device["peak"]["t"], [], "no 'peak between samples' where the timeline has every step")
        tl = device["timeline"]
        self.assertEqual((tl["alloc_lines"], tl["step_lines"], tl["folded_allocs"], tl["unpaired_frees"]), (4, 1, 3, 0))
        self.assertEqual((tl["bands_total"], tl["bands_drawn"]), (4, 4))
        for key in ("t", "end", "bytes", "site", "thread", "live_at_end"):
            self.assertEqual(tl[key], [b[key] for b in bands], key)
        sites = {s["site"]: s["raw_sites"] for s in data["sites"]["sites"]}
        self.assertEqual(sites, {12: [12], 11: [11]})

    def test_the_work_span_leaves_out_a_late_exit(self):
        log = self.path("late.jsonl")
        first, last, end = timeline_logs.late_exit_log(log)
        _, _, data = self.render(log)
        self.assertEqual(data["run"]["work"], dict(start_ns=first, end_ns=last))
        self.assertEqual(data["run"]["duration_ns"], end)
        self.assertEqual(data["end"]["t"], end)
        _, _, data = self.render(os.path.join(DATA, "start_only.jsonl"))
        self.assertIsNone(data["run"]["work"], "no work without samples, allocations, scopes or alerts")

    def test_memory_timeline_lines_are_checked(self):
        log = self.path("bad-timeline.jsonl")
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":9,"program":"/bin/x","unix_ns":0}\n')
            f.write('{"v":1,"type":"alloc","t":5,"device":0,"address":"0xZZ","bytes":1,"live_bytes":1,"site":0,"thread":1}\n')
            f.write('{"v":1,"type":"free","t":6,"device":0,"address":"0x10","bytes":1,"live_bytes":0,"thread":1}\n')
            f.write('{"v":1,"type":"mem_step","t":7,"end":8,"device":0,"start_bytes":0,"end_bytes":0,"min_bytes":9,'
                    '"min_t":7,"max_bytes":1,"max_t":7,"allocs":1,"frees":1,"alloc_bytes":1,"free_bytes":1,"queue_full":false}\n')
            f.write('{"v":1,"type":"free","t":9,"device":0,"address":"0x10","bytes":1,"live_bytes":0,"site":0,"thread":1}\n')
        r, _, data = self.render(log)
        err = r.stderr.decode()
        self.assertIn(':2: alloc: field "address" must be a hexadecimal address ("0x..."), not "0xZZ"', err)
        self.assertIn(':3: free: field "site" is missing', err)
        self.assertIn(':4: mem_step: field "min_bytes" is above "max_bytes"', err)
        self.assertEqual(data["devices"][0]["timeline"]["unpaired_frees"], 1)

    def test_a_million_timeline_events_give_a_bounded_page_with_the_exact_peak(self):
        log = self.path("million.jsonl")
        peak, allocations = timeline_logs.million_log(log)
        r, page, data = self.render(log)
        self.assertEqual(r.returncode, 0)
        device = data["devices"][0]
        tl = device["timeline"]
        self.assertEqual(device["live"]["max"], peak, "the one-microsecond spike is the peak")
        self.assertLessEqual(len(device["live"]["t"]), 4 * data["limits"]["max_buckets"])
        self.assertEqual(tl["alloc_lines"], allocations)
        self.assertEqual(tl["bands_total"], allocations)
        self.assertLessEqual(tl["bands_drawn"], data["limits"]["max_bands"])
        self.assertGreater(tl["bands_drawn"], 900)
        spike = [i for i, b in enumerate(tl["bytes"]) if b == 96 * 2**20]
        self.assertEqual(len(spike), 1, "the spike's band was kept")
        self.assertEqual(tl["end"][spike[0]] - tl["t"][spike[0]], 1000)
        self.assertTrue(all(t <= e <= data["run"]["duration_ns"] for t, e in zip(tl["t"], tl["end"])))
        self.assertLess(len(page), 1 * 2**20, "the page stays small")

    def test_many_threads_and_deep_nesting_stay_bounded(self):
        log = self.path("threads.jsonl")
        n = 3000
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":9,"program":"/bin/t","unix_ns":0}\n')
            for i in range(n):
                f.write('{"v":1,"type":"op","t":%d,"name":"x","thread":%d,"depth":%d,"dur":1000,"alloc_bytes":1,'
                        '"free_bytes":0,"net_bytes":1,"peak_bytes":1,"allocs":1,"frees":0,"exception":false}\n'
                        % (i * 1000, i + 1, 10**9 if i == 0 else 0))
        _, _, data = self.render(log)
        self.assertEqual(data["op_summary"][0]["calls"], n)
        self.assertLessEqual(len(data["threads"]), 1024)
        self.assertEqual(data["ops_of_untracked_threads"], n - len(data["threads"]))
        self.assertEqual(len([t for t in data["threads"] if t["ops_drawn"]]), 64)
        self.assertEqual(len(data["ops"]), 64)

    def test_a_log_naming_ever_more_devices_and_threads_stays_bounded(self):
        log = self.path("devices.jsonl")
        devices, threads = 300, 3000
        with open(log, "w") as f:
            f.write('{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":9,"program":"/bin/t","unix_ns":0}\n')
            for d in range(devices):
                f.write('{"v":1,"type":"mem","t":%d,"device":%d,"live_bytes":%d,"peak_bytes":%d,"allocations":1,'
                        '"frees":0}\n' % (1000 + d, d, d + 1, d + 1))
            for i in range(threads):
                f.write('{"v":1,"type":"thread","t":%d,"thread":%d,"tid":%d,"name":"w%d"}\n' % (5000 + i, i + 1, i, i))
        r, _, data = self.render(log)
        self.assertEqual([d["device"] for d in data["devices"]], list(range(256)))
        self.assertEqual(data["devices"][255]["live"]["v"], [256])
        self.assertEqual(data["skipped"]["count"], devices - 256)
        self.assertEqual(data["skipped"]["lines"][0],
                         dict(line=258, reason="mem: device 256 is past the 256 devices a report keeps"))
        self.assertIn("%d lines read, %d events used, %d lines skipped" % (1 + devices + threads, 1 + 256 + threads,
                                                                           devices - 256), r.stdout.decode())
        self.assertLessEqual(len(data["threads"]), 1024)

    # ---- a last line cut by a process that ended mid-write ----------------------------------------

    def test_a_cut_last_line_is_skipped_and_the_summary_says_so(self):
        with open(os.path.join(DATA, "good.jsonl"), encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
        whole = "".join(lines[:-1])
        last = lines[-1].rstrip("\n")
        n = len(lines)
        # A SIGKILL can stop a write anywhere: after one byte, inside a key, a string, a number, a
        # multi-byte character, or one byte before the closing brace.
        tail = last + '{"v":1,"type":"thread","t":5,"thread":9,"tid":9,"name":"d\u00e9coder"}'
        cuts = [1, len(last) // 3, len(last) // 2, len(last) - 1]
        multi = len(last) + tail[len(last):].index("\u00e9") + 1  # inside the two bytes of \u00e9
        for i, cut in enumerate(cuts + [multi]):
            text = (whole + tail[:cut]).encode("utf-8") if cut != multi else \
                whole.encode("utf-8") + last.encode("utf-8") + b"\n" + tail[len(last):].encode("utf-8")[:multi - len(last) + 1]
            lines_read = n if cut != multi else n + 1
            with self.subTest(cut=cut):
                log = self.path("cut%d.jsonl" % i)
                with open(log, "wb") as f:
                    f.write(text)
                r, page, data = self.render(log)
                self.assertEqual(r.stdout.decode(), "gpuguard report: %d lines read, %d events used, 1 lines skipped (the last "
                                 "line was cut: the process ended while writing it); wrote %s\n"
                                 % (lines_read, lines_read - 1, self.path("report.html")))
                err = r.stderr.decode().splitlines()
                self.assertEqual(len(err), 1, err)
                self.assertTrue(err[0].startswith("gpuguard report: %s:%d: the last line was cut (the process ended while "
                                                  "writing it)" % (log, lines_read)), err)
                self.assertTrue(data["source"]["last_line_cut"])
                self.assertEqual([s["line"] for s in data["skipped"]["lines"]], [lines_read])
        # The whole line without its newline is used; a cut line followed by others is not JSON.
        log = self.path("no_newline.jsonl")
        with open(log, "w", encoding="utf-8") as f:
            f.write(whole + last)
        r, _, data = self.render(log)
        self.assertIn("%d lines read, %d events used, 0 lines skipped; wrote" % (n, n), r.stdout.decode())
        self.assertFalse(data["source"]["last_line_cut"])
        log = self.path("cut_inside.jsonl")
        with open(log, "w", encoding="utf-8") as f:
            f.write(lines[0] + lines[1][:20] + "\n" + "".join(lines[2:]))
        r, _, data = self.render(log)
        self.assertIn("%d lines read, %d events used, 1 lines skipped; wrote" % (n, n - 1), r.stdout.decode())
        self.assertRegex(r.stderr.decode(), r"^gpuguard report: %s:2: not JSON: .* at column 21\n$" % re.escape(log))
        self.assertFalse(data["source"]["last_line_cut"])

    # ---- long names ---------------------------------------------------------------------------------

    def test_long_names_are_cut_and_the_page_stays_bounded(self):
        # A hostile log of a few MB: every string the report keeps is long, and every name distinct.
        cap = 256

        def cut(s):
            b = s.encode("utf-8")
            if len(b) <= cap:
                return s
            return b[:cap].decode("utf-8", "ignore") + "\u2026 (%d bytes)" % len(b)

        names = ["op%04d_" % i + "n" * 20000 for i in range(160)]
        program = "/" + "p" * 5000
        thread = "w" * 3000
        tag = "t" * 4000
        function = "f" * 9000
        wide = "\u00e9" * 300        # 600 bytes of two-byte characters: cut at a character boundary
        exact = "e" * cap            # kept whole
        misuse_key = "k" * 7000
        log = self.path("long_names.jsonl")
        with open(log, "w", encoding="utf-8") as f:
            def line(**event):
                f.write(json.dumps(dict(v=1, **event), ensure_ascii=False) + "\n")
            line(type="start", t=0, schema="gpuguard.events", pid=1, program=program, unix_ns=0)
            line(type="thread", t=1, thread=1, tid=7, name=thread)
            line(type="device", t=1, device=0, name="d" * 5000, total_bytes=1 << 30)
            for i, name in enumerate(names + [wide, exact]):
                line(type="op", t=10 + i, name=name, thread=1, depth=0, dur=5, alloc_bytes=1, free_bytes=0, net_bytes=1,
                     peak_bytes=1, allocs=1, frees=0, exception=False)
            line(type="alert", t=500, kind="op_growth", suppressed=0, message="m" * 6000, name=names[0], thread=1,
                 net_bytes=1, limit_bytes=1)
            frames = [dict(address="0x1", function=function, file="/" + "s" * 5000, line=3)]
            line(type="leaks", t=600, total_bytes=8, total_count=1,
                 sites=[dict(site=1, device=0, tag=tag, bytes=8, count=1, frames=frames)])
            line(type="end", t=700, reason="exit", dropped=0, devices=[], misuse={misuse_key: 1})
        size = os.path.getsize(log)
        self.assertGreater(size, 3 << 20, "the log is meant to be a few MB")
        r, page, data = self.render(log)
        self.assertIn("0 lines skipped", r.stdout.decode())
        # Each cut string is its first 256 bytes, an ellipsis and its length.
        summary = {o["name"]: o["calls"] for o in data["op_summary"]}
        self.assertEqual(summary, {cut(n): 1 for n in names + [wide, exact]})
        self.assertTrue(cut(names[3]).endswith("n\u2026 (20007 bytes)"))
        self.assertEqual(cut(wide), "\u00e9" * 128 + "\u2026 (600 bytes)")
        self.assertIn(exact, summary)
        self.assertEqual(sorted(o["name"] for o in data["ops"]), sorted(summary))
        self.assertEqual(data["run"]["program"], cut(program))
        self.assertEqual(data["threads"][0]["name"], cut(thread))
        self.assertEqual(data["devices"][0]["name"], cut("d" * 5000))
        self.assertEqual(data["alerts"][0]["message"], cut("m" * 6000))
        self.assertEqual(data["alerts"][0]["name"], cut(names[0]))
        leak = data["leaks"]["sites"][0]
        self.assertEqual((leak["tag"], leak["frames"][0]["function"]), (cut(tag), cut(function)))
        self.assertEqual(data["end"]["misuse"], {cut(misuse_key): 1})
        # The page grows with the number of names, not their length: about 162 names of at most
        # 256 bytes, each written twice (table and band), plus the fixed page.
        fixed = len(run(os.path.join(DATA, "start_only.jsonl"), "-o", "-").stdout)
        self.assertLess(len(page.encode("utf-8")), fixed + 2 * 162 * 600 + 64 * 1024, "page of %d bytes" % len(page))

    # ---- usage and failures --------------------------------------------------------------------

    def test_help(self):
        for flag in ("--help", "-h"):
            r = run(flag)
            self.assertEqual(r.returncode, 0)
            text = r.stdout.decode()
            self.assertTrue(text.startswith("usage: gpuguard report LOG.jsonl [-o OUTPUT.html] [--title TEXT]\n"))
            for part in ("The page shows:", "exit status:", "  2  usage error", "gpuguard report: LOG:LINE: why"):
                self.assertIn(part, text)
        r = subprocess.run([GPUGUARD, "--help"], capture_output=True, timeout=60)
        self.assertIn("report", r.stdout.decode())

    def test_usage_errors_exit_2_and_write_nothing(self):
        log = os.path.join(DATA, "good.jsonl")
        out = self.path("report.html")
        cases = [
            ([], "missing LOG"),
            (["-"], "missing -o OUTPUT (needed when LOG is standard input)"),
            ([log, "-o"], "option '-o' needs a value"),
            ([log, "--output"], "option '--output' needs a value"),
            ([log, "-o", out, "--bogus"], "unknown option '--bogus'"),
            (["--frobnicate=1", log, "-o", out], "unknown option '--frobnicate=1'"),
            ([log, "-o", out, "extra.jsonl"], "unexpected argument 'extra.jsonl'"),
            ([log, "-o", out, "-o", out], "option '-o' given twice"),
            ([log, "--output=", ], "option '--output' needs a non-empty path"),
            ([log, "-o", out, "--title"], "option '--title' needs a value"),
            (["-o", out], "missing LOG"),
        ]
        for args, message in cases:
            r = run(*args)
            err = r.stderr.decode()
            self.assertEqual(r.returncode, 2, (args, err))
            self.assertEqual(len(err.splitlines()), 1, (args, err))
            self.assertIn(message, err)
            self.assertTrue(err.startswith("gpuguard report: "), err)
            self.assertEqual(r.stdout, b"")
            self.assertEqual(os.listdir(self.dir), [], args)

    def test_unreadable_log_exits_1_and_writes_nothing(self):
        out = self.path("report.html")
        missing = self.path("no-such-log.jsonl")
        r = run(missing, "-o", out)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.decode(), "gpuguard report: cannot open '%s': No such file or directory\n" % missing)
        self.assertEqual(os.listdir(self.dir), [])
        # A directory opens but cannot be read.
        os.mkdir(self.path("logdir"))
        r = run(self.path("logdir"), "-o", out)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.decode(), "gpuguard report: cannot read '%s': Is a directory\n" % self.path("logdir"))
        self.assertEqual(sorted(os.listdir(self.dir)), ["logdir"])

    def test_failure_leaves_an_existing_page_alone(self):
        out = self.path("report.html")
        with open(out, "w") as f:
            f.write("previous page")
        r = run(self.path("missing.jsonl"), "-o", out)
        self.assertEqual(r.returncode, 1)
        with open(out) as f:
            self.assertEqual(f.read(), "previous page")
        r = run(os.path.join(DATA, "start_only.jsonl"), "-o", out)
        self.assertEqual(r.returncode, 0)
        with open(out) as f:
            self.assertTrue(f.read().startswith("<!DOCTYPE html>"))
        self.assertEqual(os.listdir(self.dir), ["report.html"])

    def test_unwritable_output_exits_1(self):
        out = self.path("no-such-dir/report.html")
        r = run(os.path.join(DATA, "start_only.jsonl"), "-o", out)
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode()
        self.assertTrue(err.startswith("gpuguard report: cannot create '%s.tmp." % out), err)
        self.assertIn("No such file or directory", err)
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    GPUGUARD = os.path.abspath(sys.argv[1])
    ROOT = os.path.abspath(sys.argv[2])
    DATA = os.path.join(ROOT, "tests", "cli", "report", "testdata")
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
