#!/usr/bin/env python3
"""`gpuguard report`'s page in a real browser: headless Chromium runs the page's script, and the test
reads the DOM it leaves (the timeline drawn into the SVG, the op bands, the tables) and a screenshot
(decoded here with zlib alone: the timeline must not be blank).

Chromium is installed by scripts/deps.sh test (Debian package `chromium`); without it this test fails.

usage: report_browser_test.py GPUGUARD_BINARY REPO_ROOT
"""
import collections
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

import timeline_logs  # beside this file

GPUGUARD = None
DATA = None
CHROMIUM = None
WINDOW = (1400, 1800)


def chromium(*args):
    """Runs headless Chromium with a throwaway profile; returns its stdout, or fails with its stderr.
    The page's console goes to stderr (--enable-logging): an uncaught JavaScript error fails the test."""
    profile = tempfile.mkdtemp(prefix="gpuguard-chromium-")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--window-size=%d,%d" % WINDOW, "--virtual-time-budget=5000", "--no-first-run",
           "--enable-logging=stderr", "--v=0", "--user-data-dir=" + profile, *args]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=90)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if r.returncode != 0:
        raise AssertionError("chromium failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-2000:]))
    errors = [l for l in r.stderr.decode(errors="replace").splitlines() if "CONSOLE" in l and "Uncaught" in l]
    if errors:
        raise AssertionError("the page's script failed: " + "\n".join(errors[:5]))
    return r.stdout.decode("utf-8")


# ---- a small DOM from Chromium's --dump-dom output ---------------------------------------------------

class node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def classes(self):
        return set((self.attrs.get("class") or "").split())

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag=None, cls=None):
        return [n for n in self.walk() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes())]

    def by_id(self, id_):
        return next((n for n in self.walk() if n.attrs.get("id") == id_), None)

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)


class dom_builder(html.parser.HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        n = node(tag, attrs, self.current)
        self.current.children.append(n)
        if tag not in self.VOID:
            self.current = n

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(node(tag, attrs, self.current))

    def handle_endtag(self, tag):
        n = self.current
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.current = n.parent

    def handle_data(self, data):
        self.current.text += data


def parse_dom(text):
    b = dom_builder()
    b.feed(text)
    return b.root


# ---- PNG decoding, enough for Chromium's screenshots (8-bit RGB or RGBA, not interlaced) --------------

def decode_png(path, max_rows):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format"
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(min(height, max_rows)):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


class browser_test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="gpuguard-browser-test-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def render(self, log_name):
        out = os.path.join(self.tmp.name, os.path.basename(log_name).replace(".jsonl", ".html"))
        r = subprocess.run([GPUGUARD, "report", os.path.join(DATA, log_name), "-o", out], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return out

    def events(self, log_name):
        with open(os.path.join(DATA, log_name), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_good_log_draws_timelines_and_tables(self):
        page = self.render("good.jsonl")
        dom = parse_dom(chromium("--dump-dom", "file://" + page))
        body = dom.find_all("body")[0]
        self.assertEqual(body.attrs.get("data-rendered"), "true", "the page's script did not finish")
        events = self.events("good.jsonl")
        ops = [e for e in events if e["type"] == "op"]

        for device in (0, 1):
            svg = dom.by_id("timeline-device-%d" % device)
            self.assertIsNotNone(svg, "no svg#timeline-device-%d" % device)
            self.assertEqual(svg.tag, "svg")
            paths = {}
            for p in svg.find_all("path"):
                for c in p.classes():
                    if c.startswith("series-"):
                        paths[c] = p.attrs.get("d", "")
            self.assertIn("series-live", paths)
            self.assertIn("series-peak", paths)
            self.assertIn("series-used", paths)
            samples = len([e for e in events if e["type"] == "mem" and e["device"] == device])
            for cls in ("series-live", "series-peak", "series-used"):
                points = re.findall(r"[ML]\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)", paths[cls])
                # live and used: one point per sample; peak: a step per sample after the first
                self.assertEqual(len(points), 2 * samples - 1 if cls == "series-peak" else samples, cls)
                ys = {float(y) for _, y in points}
                self.assertGreater(len(ys), 10, cls + " is flat")
                xs = [float(x) for x, _ in points]
                self.assertEqual(xs, sorted(xs), cls + " goes back in time")
            bands = svg.find_all("rect", "op-band")
            self.assertEqual(len(bands), len(ops), "op bands in device %d's timeline" % device)
            self.assertEqual(len([b for b in bands if "exception" in b.classes()]),
                             len([o for o in ops if o["exception"]]))
            self.assertTrue(all(float(b.attrs["width"]) > 0 for b in bands))
            titles = [b.find_all("title")[0].all_text() for b in bands]
            self.assertTrue(any("ended by an exception" in t for t in titles))
            self.assertTrue(all(re.search(r"net [+-]?[\d.]+ (B|KiB|MiB|GiB)", t) for t in titles), titles[:3])
            self.assertGreaterEqual(len(svg.find_all("text", "tick-label")), 6)
            self.assertTrue(any(re.fullmatch(r"\d+(\.\d+)? GiB", t.all_text()) for t in svg.find_all("text", "tick-label")))
        # Device 0 is nearly full, so its chart is scaled to capacity and draws the capacity line.
        svg0 = dom.by_id("timeline-device-0")
        self.assertEqual(len(svg0.find_all("path", "series-total")), 1)
        markers = svg0.find_all("g", "alert-marker")
        self.assertEqual(sorted(next(iter(m.classes() - {"alert-marker"})) for m in markers),
                         ["device_full", "device_recovered", "op_growth", "op_growth"])

        def rows(table_id):
            table = dom.by_id(table_id)
            self.assertIsNotNone(table, table_id)
            return table.find_all("tbody")[0].find_all("tr")

        sites = [e for e in events if e["type"] == "sites"][0]["sites"]
        leaks = [e for e in events if e["type"] == "leaks"][0]["sites"]
        self.assertEqual(len(rows("top-sites")), len(sites))
        self.assertEqual(len(rows("leaks")), len(leaks))
        self.assertIn("kv_cache::grow(unsigned long)", dom.by_id("leaks").all_text())
        self.assertIn("cache.cpp:19", dom.by_id("leaks").all_text())
        self.assertEqual(len(rows("op-summary")), len({o["name"] for o in ops}))
        self.assertEqual(len(rows("alerts")), len([e for e in events if e["type"] == "alert"]))
        self.assertEqual(len(rows("exit-devices")), 2)
        self.assertEqual(dom.by_id("skipped-lines").find_all("li"), [])
        first = rows("op-summary")[0].find_all("td")
        self.assertEqual(first[0].all_text(), "step")   # sorted by total time
        self.assertEqual(first[2].all_text(), "1.15 s")

        # The screenshot: the timeline of device 0 is really drawn, not a blank box.
        shot = os.path.join(self.tmp.name, "good.png")
        chromium("--screenshot=" + shot, "file://" + page)
        left, top, width, height = (int(v) for v in svg0.attrs["data-bbox"].split(","))
        self.assertGreater(width, 600)
        self.assertLessEqual(top + height, WINDOW[1], "the timeline is below the screenshot")
        w, h, bpp, png_rows = decode_png(shot, top + height)
        self.assertEqual((w, h), WINDOW)
        pixels = collections.Counter()
        for y in range(top, top + height):
            row = png_rows[y]
            for x in range(left, min(left + width, w)):
                pixels[row[x * bpp:x * bpp + 3]] += 1
        total = sum(pixels.values())
        background, _ = pixels.most_common(1)[0]

        def differs(colour, by):
            return max(abs(a - b) for a, b in zip(colour, background)) > by

        drawn = sum(n for c, n in pixels.items() if differs(c, 12))
        ink = sum(n for c, n in pixels.items() if differs(c, 80))
        self.assertGreater(len(pixels), 64, "too few distinct colours: the chart looks blank")
        self.assertGreater(drawn / total, 0.2, "less than a fifth of the chart area is drawn on")
        self.assertGreater(ink / total, 0.01, "hardly any lines or text in the chart area")
        blue = sum(n for c, n in pixels.items() if c[2] > 180 and c[0] < 90 and c[1] < 140)
        orange = sum(n for c, n in pixels.items() if c[0] > 180 and 80 < c[1] < 150 and c[2] < 60)
        self.assertGreater(blue, 500, "the live-bytes line (blue) is not visible")
        self.assertGreater(orange, 500, "the used-bytes line (orange) is not visible")

    def test_allocation_bands_are_stacked_exactly(self):
        log = os.path.join(self.tmp.name, "timeline.jsonl")
        bands, live = timeline_logs.small_log(log)
        page = self.render(log)
        dom = parse_dom(chromium("--dump-dom", "file://" + page))
        self.assertEqual(dom.find_all("body")[0].attrs.get("data-rendered"), "true")
        svg = dom.by_id("allocations-device-0")
        self.assertIsNotNone(svg, "no svg#allocations-device-0")
        drawn = svg.find_all("path", "alloc-band")
        self.assertEqual(len(drawn), len(bands))
        y_max = float(svg.attrs["data-y-max"])
        top, height = 12, 260   # MARGIN.top and ALLOC_H of report_script.js

        def y(v):
            return round(top + height - v / y_max * height, 1)

        for band, path in zip(bands, drawn):
            a = path.attrs
            self.assertEqual((int(a["data-t"]), int(a["data-end"]), int(a["data-bytes"]), int(a["data-site"])),
                             (band["t"], band["end"], band["bytes"], band["site"]))
            self.assertEqual(int(a["data-offset"]), band["moves"][0][1], "where the band starts on the stack")
            self.assertEqual("live-at-end" in path.classes(), bool(band["live_at_end"]))
            # Its outline: the bottom at each offset it takes as bands below it are freed, the top a
            # band's size above.
            ys = {float(v) for v in re.findall(r"[ML]\s*-?[\d.]+\s*,\s*(-?[\d.]+)", a["d"])}
            expected = {y(o) for _, o in band["moves"]} | {y(o + band["bytes"]) for _, o in band["moves"]}
            self.assertEqual(ys, expected, "band at %d" % band["t"])
            title = path.find_all("title")[0].all_text()
            self.assertIn("%d.0 MiB allocated at" % (band["bytes"] // 2**20), title)
            self.assertIn("by thread %d" % band["thread"], title)
            if band["site"] == 11:
                self.assertIn("make_activations() train.cpp:21", title)
            if band["site"] == 0:
                self.assertIn("no stack", title)
            self.assertIn("still live at the end" if band["live_at_end"] else "freed at", title)
        colours = [p.attrs["fill"] for p in drawn]
        self.assertEqual(colours[0], colours[2], "one site, one colour")
        self.assertNotEqual(colours[0], colours[1])
        # The grey total and the memory chart's live line hold each value until the next event.
        total = svg.find_all("path", "alloc-total")[0].attrs["d"]
        self.assertEqual(sorted({float(v) for v in re.findall(r"[ML]\s*-?[\d.]+\s*,\s*(-?[\d.]+)", total)}),
                         sorted({y(v) for _, v in live} | {y(0)}))
        chart = dom.by_id("timeline-device-0")
        line = next(p for p in chart.find_all("path") if "series-live" in p.classes())
        points = re.findall(r"[ML]\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)", line.attrs["d"])
        self.assertEqual(len(points), 2 * len(live) - 1, "a step per event")
        self.assertEqual(chart.find_all("path", "series-peak")[0].attrs.get("d", ""), "")

    def test_a_band_freed_the_moment_it_was_made_is_stacked_on_top(self):
        log = os.path.join(self.tmp.name, "instant.jsonl")
        mib = 2**20
        lines = ['{"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":7,"program":"/bin/x","unix_ns":0}']
        for kind, t, address, size, live in (("alloc", 100, "0x10", mib, mib), ("alloc", 200, "0x20", 2 * mib, 3 * mib),
                                             ("free", 200, "0x20", 2 * mib, mib), ("alloc", 250, "0x30", mib, 2 * mib),
                                             ("free", 280, "0x30", mib, mib), ("free", 300, "0x10", mib, 0)):
            lines.append('{"v":1,"type":"%s","t":%d,"device":0,"address":"%s","bytes":%d,"live_bytes":%d,"site":0,'
                         '"thread":1}' % (kind, t, address, size, live))
        with open(log, "w") as f:
            f.write("\n".join(lines) + "\n")
        dom = parse_dom(chromium("--dump-dom", "file://" + self.render(log)))
        drawn = dom.by_id("allocations-device-0").find_all("path", "alloc-band")
        self.assertEqual([(int(p.attrs["data-t"]), int(p.attrs["data-end"]), int(p.attrs["data-offset"])) for p in drawn],
                         [(100, 300, 0), (200, 200, mib), (250, 280, mib)], "the instant band is off the stack at once")

    def test_the_time_axis_spans_the_work_and_the_exit_is_drawn_apart(self):
        # Work from 2 s to 4 s into the run, the exit at 61.5 s: each chart's axis runs from the first
        # event to the last, and the exit is a marker right of a break, labelled with how long after.
        log = os.path.join(self.tmp.name, "late_exit.jsonl")
        first, last, end = timeline_logs.late_exit_log(log)
        dom = parse_dom(chromium("--dump-dom", "file://" + self.render(log)))
        self.assertEqual(dom.find_all("body")[0].attrs.get("data-rendered"), "true")
        xy = r"[ML]\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)"
        for chart_id in ("timeline-device-0", "allocations-device-0"):
            svg = dom.by_id(chart_id)
            self.assertIsNotNone(svg, chart_id)
            self.assertEqual((int(svg.attrs["data-t0"]), int(svg.attrs["data-t1"])), (first, last), chart_id)
            left, right = (float(v) for v in svg.attrs["data-plot"].split(","))
            # Every time tick lies on the axis and names a moment between the first and the last event.
            ticks = [t for t in svg.find_all("text", "tick-label") if t.attrs.get("text-anchor") == "middle"]
            self.assertGreaterEqual(len(ticks), 3, chart_id)
            for tick in ticks:
                self.assertTrue(left - 0.5 <= float(tick.attrs["x"]) <= right + 0.5, chart_id)
                value, unit = tick.all_text().split()
                self.assertTrue(first <= float(value) * {"s": 10**9, "ms": 10**6}[unit] <= last, tick.all_text())
            # The exit: apart from the axis (right of the plot), after a break, labelled.
            endings = svg.find_all("g", "run-ending")
            self.assertEqual(len(endings), 1, chart_id)
            ending = endings[0]
            self.assertIn("exit", ending.classes())
            self.assertEqual((int(ending.attrs["data-t"]), int(ending.attrs["data-after"])), (end, end - last))
            self.assertEqual(len(ending.find_all("path", "axis-break")), 1)
            rule = ending.find_all("line", "ending-rule")[0]
            self.assertGreater(float(rule.attrs["x1"]), right + 20, "the exit is drawn on the axis, not apart")
            self.assertLessEqual(float(rule.attrs["x1"]), float(svg.attrs["width"]))
            self.assertEqual(ending.find_all("text", "ending-label")[0].all_text(), "exit")
            self.assertEqual(ending.find_all("text", "ending-after")[0].all_text(), "57.50 s later")
        # The memory chart's live line starts at the left edge (the first event) and ends at the right
        # (the last); the operation band sits where 2.6 s to 3.4 s fall on a 2 s to 4 s axis.
        chart = dom.by_id("timeline-device-0")
        left, right = (float(v) for v in chart.attrs["data-plot"].split(","))
        line = next(p for p in chart.find_all("path") if "series-live" in p.classes())
        xs = [float(x) for x, _ in re.findall(xy, line.attrs["d"])]
        self.assertAlmostEqual(min(xs), left, delta=0.11)
        self.assertAlmostEqual(max(xs), right, delta=0.11)
        band = chart.find_all("rect", "op-band")[0]
        at = lambda t: left + (t - first) / (last - first) * (right - left)
        self.assertAlmostEqual(float(band.attrs["x"]), at(2600000000), delta=0.11)
        self.assertAlmostEqual(float(band.attrs["width"]), at(3400000000) - at(2600000000), delta=0.2)
        note = dom.by_id("work-span-note").all_text()
        self.assertIn("from the first event, 2.00 s after the start, to the last, at 4.00 s", note)
        self.assertIn("exited 57.50 s after that", note)
        # The allocation still live at exit runs to the exit in the data, and is cut at the axis's end.
        live = [p for p in dom.by_id("allocations-device-0").find_all("path", "alloc-band") if "live-at-end" in p.classes()]
        self.assertEqual([int(p.attrs["data-end"]) for p in live], [end])

        # A crash a minute after the last event is drawn apart the same way, named by its signal.
        crashed = os.path.join(self.tmp.name, "late_crash.jsonl")
        timeline_logs.late_exit_log(crashed, crash=True)
        dom = parse_dom(chromium("--dump-dom", "file://" + self.render(crashed)))
        svg = dom.by_id("timeline-device-0")
        self.assertEqual((int(svg.attrs["data-t0"]), int(svg.attrs["data-t1"])), (first, last))
        ending = svg.find_all("g", "run-ending")[0]
        self.assertIn("crash", ending.classes())
        self.assertEqual(ending.find_all("text", "ending-label")[0].all_text(), "SIGSEGV")
        self.assertEqual(ending.find_all("text", "ending-after")[0].all_text(), "57.50 s later")

    def test_a_million_allocation_events_load_quickly_and_render(self):
        log = os.path.join(self.tmp.name, "million.jsonl")
        peak, allocations = timeline_logs.million_log(log)
        started = time.monotonic()
        page = self.render(log)
        written = time.monotonic() - started
        size = os.path.getsize(page)
        self.assertLess(size, 1 * 2**20, "the page of a million events stays under 1 MiB")
        started = time.monotonic()
        dom = parse_dom(chromium("--dump-dom", "file://" + page))
        loaded = time.monotonic() - started
        self.assertEqual(dom.find_all("body")[0].attrs.get("data-rendered"), "true", "the page's script did not finish")
        svg = dom.by_id("allocations-device-0")
        bands = svg.find_all("path", "alloc-band")
        self.assertGreater(len(bands), 900)
        self.assertLessEqual(len(bands), 2000)
        self.assertIn(96 * 2**20, [int(b.attrs["data-bytes"]) for b in bands], "the spike's band is drawn")
        notes = dom.by_id("allocation-timelines").all_text()
        self.assertIn("of %s allocations drawn as bands" % format(allocations, ","), notes)
        # Loading and drawing a million events' page, Chromium's start included: well under the
        # 90 s the helper allows, so a page that makes the browser work hard fails here.
        self.assertLess(loaded, 30, "Chromium took %.1f s to load and draw the page" % loaded)
        shot = os.path.join(self.tmp.name, "million.png")
        chromium("--screenshot=" + shot, "file://" + page)
        left, top, width, height = (int(v) for v in svg.attrs["data-bbox"].split(","))
        self.assertLessEqual(top + height, WINDOW[1], "the allocations chart is below the screenshot")
        w, h, bpp, png_rows = decode_png(shot, top + height)
        colours = collections.Counter()
        for yy in range(top, top + height):
            row = png_rows[yy]
            for xx in range(left, min(left + width, w)):
                colours[row[xx * bpp:xx * bpp + 3]] += 1
        self.assertGreater(len(colours), 20, "the allocations chart looks blank")
        print("million: %d allocations; page %d bytes written in %.1f s, loaded and drawn by Chromium in %.1f s"
              % (allocations, size, written, loaded), file=sys.stderr)

    def test_bad_lines_are_listed(self):
        page = self.render("bad_lines.jsonl")
        dom = parse_dom(chromium("--dump-dom", "file://" + page))
        items = dom.by_id("skipped-lines").find_all("li", "skipped")
        self.assertEqual([int(li.attrs["data-line"]) for li in items], [5, 6, 7, 8, 9, 10, 11, 15, 16, 18, 19, 20])
        self.assertIn("the last line was cut (the process ended while writing it)", items[-1].all_text())
        banners = dom.by_id("banners").all_text()
        self.assertIn("12 lines of the log could not be used", banners)
        self.assertIn("The last line was cut: the process ended while writing it.", banners)
        self.assertIn("The last line was cut (the process ended while writing it).", dom.by_id("log-note").all_text())
        self.assertIn("No end line", banners)
        svg = dom.by_id("timeline-device-0")
        self.assertEqual(len(svg.find_all("rect", "op-band")), 2)

    def test_a_log_without_samples_says_there_is_nothing_to_draw(self):
        # (An empty log gets no page at all: gpuguard report exits 3.)
        page = self.render("start_only.jsonl")
        dom = parse_dom(chromium("--dump-dom", "file://" + page))
        self.assertEqual(dom.find_all("body")[0].attrs.get("data-rendered"), "true")
        self.assertIsNotNone(dom.by_id("no-memory"))
        self.assertEqual(dom.find_all("svg"), [])


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    GPUGUARD = os.path.abspath(sys.argv[1])
    DATA = os.path.join(os.path.abspath(sys.argv[2]), "tests", "cli", "report", "testdata")
    CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
    if CHROMIUM is None:
        print("browser.report: chromium is not installed; scripts/deps.sh test installs it "
              "(Debian package 'chromium'). This test needs it and fails without it.", file=sys.stderr)
        sys.exit(1)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
