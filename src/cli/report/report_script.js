// gpuguard report: draws the page from the JSON embedded in it (element #report-data). Inlined
// into the HTML by `gpuguard report`; it loads nothing and sets text only through textContent, so
// nothing in a log can inject markup.
(function () {
  'use strict';

  var SVG_NS = 'http://www.w3.org/2000/svg';
  var data = JSON.parse(document.getElementById('report-data').textContent);

  // ---- formatting (sizes spelled as gpuguard's C++ format_bytes spells them) -----------------
  var UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  function fmtBytes(n) {
    var neg = n < 0;
    var b = Math.abs(n);
    var text;
    if (b < 1024) {
      text = b + ' B';
    } else {
      var v = b / 1024;
      var u = 0;
      while (v >= 1024 && u < 4) { v /= 1024; ++u; }
      text = v.toFixed(u >= 2 ? 2 : 1) + ' ' + UNITS[u];
    }
    return (neg ? '-' : '') + text;
  }
  function fmtSigned(n) { return (n > 0 ? '+' : '') + fmtBytes(n); }
  // Axis labels: the same units, trailing zeros dropped ("512 MiB", "1.5 GiB").
  function fmtAxisBytes(n) {
    if (n < 1024) { return n + ' B'; }
    var v = n / 1024;
    var u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; ++u; }
    return String(+v.toFixed(2)) + ' ' + UNITS[u];
  }
  function fmtDur(ns) {
    if (ns < 1000) { return ns + ' ns'; }
    if (ns < 1e6) { return (ns / 1e3).toFixed(1) + ' \u00b5s'; }
    if (ns < 1e9) { return (ns / 1e6).toFixed(1) + ' ms'; }
    if (ns < 60e9) { return (ns / 1e9).toFixed(2) + ' s'; }
    var m = Math.floor(ns / 60e9);
    if (m < 60) { return m + ' min ' + ((ns - m * 60e9) / 1e9).toFixed(0) + ' s'; }
    var h = Math.floor(m / 60);
    return h + ' h ' + (m - h * 60) + ' min';
  }
  function fmtInt(n) { return Number(n).toLocaleString('en-US'); }
  function plural(n, one, many) { return fmtInt(n) + ' ' + (n === 1 ? one : (many || one + 's')); }
  function deviceLabel(d) { return d < 0 ? 'host memory' : 'device ' + d; }
  function percent(part, whole) {
    if (!(whole > 0)) { return ''; }
    if (part > 0 && part / whole < 0.001) { return '<0.1%'; }
    return (100 * part / whole).toFixed(part / whole < 0.1 ? 1 : 0) + '%';
  }

  // ---- DOM helpers -------------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; ++i) { append(node, arguments[i]); }
    return node;
  }
  function sv(tag, attrs, parent) {
    var node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) { return; }
    Object.keys(attrs).forEach(function (k) {
      if (attrs[k] === undefined || attrs[k] === null) { return; }
      if (k === 'text') { node.textContent = attrs[k]; } else { node.setAttribute(k, attrs[k]); }
    });
  }
  function append(node, child) {
    if (child === undefined || child === null || child === false) { return; }
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
  function svgTitle(node, text) { sv('title', { text: text }, node); }
  function byId(id) { return document.getElementById(id); }

  // Stable colour per operation name, so a name has the same colour in every lane and table.
  var PALETTE = ['#4e79a7', '#59a14f', '#9c755f', '#76b7b2', '#b07aa1', '#edc948', '#ff9da7', '#8cd17d',
                 '#86bcb6', '#f28e2b', '#a0cbe8', '#d4a6c8'];
  function nameColor(name) {
    var h = 2166136261;
    for (var i = 0; i < name.length; ++i) { h = Math.imul(h ^ name.charCodeAt(i), 16777619) >>> 0; }
    return PALETTE[h % PALETTE.length];
  }

  // Band labels are dark on light colours and white on dark ones.
  function isLight(hex) {
    var n = parseInt(hex.slice(1), 16);
    return 0.299 * (n >> 16) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255) > 150;
  }

  // ---- derived facts -----------------------------------------------------------------------
  var run = data.run;
  var devices = data.devices;
  var threads = data.threads;
  var ops = data.ops;
  var alerts = data.alerts;
  var threadById = {};
  threads.forEach(function (t) { threadById[t.thread] = t; });
  var memDevices = devices.filter(function (d) { return d.samples > 0; });
  // The time axis spans the run's work, from its first event to its last (samples, allocations,
  // frees, scopes, alerts). How the process ended (its end line, or a crash), which may come long
  // after, is drawn apart, right of a break in the axis, so that a long wait before exit does not
  // squeeze the work into a corner.
  var work = run.work;
  var domainStart = work ? work.start_ns : 0;
  var domainEnd = work ? Math.max(work.end_ns, domainStart + 1) : Math.max(1, run.duration_ns);
  var ending = null;
  if (work && (data.end || data.crash)) {
    ending = data.end ? { kind: 'exit', label: 'exit', t: data.end.t }
                      : { kind: 'crash', label: data.crash.signal || 'crash', t: data.crash.t };
    ending.after = Math.max(0, ending.t - work.end_ns);
  }
  var view = { t0: domainStart, t1: domainEnd, scaleToCapacity: null };

  // ---- header --------------------------------------------------------------------------------
  (function header() {
    var dl = byId('run');
    function item(label, value) {
      if (value === '' || value === undefined || value === null) { return; }
      dl.appendChild(el('div', null, el('dt', { text: label }), el('dd', { text: String(value) })));
    }
    if (run.has_start) {
      item('program', run.program);
      item('pid', run.pid);
      item('started', run.start_wall);
    }
    if (data.source.events_used > 0) { item('duration', fmtDur(run.duration_ns) + (run.has_end ? '' : ' (no end line)')); }
    item('stack backend', run.stack_backend);
    item('log', data.source.path);
  })();

  // ---- banners ---------------------------------------------------------------------------------
  (function banners() {
    var box = byId('banners');
    function banner(kind, text) { box.appendChild(el('p', { 'class': 'banner ' + kind }, text)); }
    var src = data.source;
    if (src.lines_read === 0) {
      banner('warn', 'The log is empty: the process wrote no events (was jsonl_log set, and did it start?).');
      return;
    }
    if (!run.has_start) {
      banner('warn', 'The log has no usable start line: program, pid and start time are unknown.');
    }
    if (data.crash) {
      var c = data.crash;
      var live = c.devices.map(function (d) {
        return (d.device < 0 ? 'host' : 'device ' + d.device) + ' ' + fmtBytes(d.live_bytes) + ' in ' + plural(d.live_count, 'allocation');
      }).join(', ');
      banner('error', 'The process crashed: ' + c.signal + ' (code ' + c.code + ', address ' + c.address + ') in thread ' +
             c.thread + ' at ' + fmtDur(c.t) + (live ? '; live then: ' + live : '') +
             (c.crash_file ? '. Resolve its frames with: gpuguard symbolize ' + c.crash_file : '') + '.');
    } else if (run.has_start && !run.has_end) {
      banner('error', 'No end line: the process did not exit through a path gpuguard saw (a crash, a kill, ' +
             '_exit, or it is still running). Leaks and allocation sites are written at exit, so they may be missing.');
    }
    if (src.lines_skipped > 0) {
      var b = el('p', { 'class': 'banner warn' },
        plural(src.lines_skipped, 'line') + ' of the log could not be used and ' +
        (src.lines_skipped === 1 ? 'was' : 'were') + ' skipped; see ');
      b.appendChild(el('a', { href: '#log-panel', text: 'Log' }));
      b.appendChild(document.createTextNode(' below for which and why. Everything else is shown.' +
        (src.last_line_cut ? ' The last line was cut: the process ended while writing it.' : '')));
      box.appendChild(b);
    }
    if (data.dropped.events > 0) {
      banner('warn', plural(data.dropped.events, 'event') + ' were dropped because gpuguard\'s queue was full: ' +
             'the timeline and the operation totals miss them.');
    }
    if (src.unknown_type_lines > 0) {
      banner('info', plural(src.unknown_type_lines, 'line') + ' of types this reader does not know (' +
             Object.keys(src.unknown_types).join(', ') + ') ' + (src.unknown_type_lines === 1 ? 'was' : 'were') +
             ' ignored: the log may come from a newer gpuguard.');
    }
  })();

  // ---- summary cards ---------------------------------------------------------------------------
  (function cards() {
    var box = byId('cards');
    function card(kind, label, value, sub, title) {
      box.appendChild(el('div', { 'class': 'card ' + (kind || ''), title: title },
        el('div', { 'class': 'label', text: label }), el('div', { 'class': 'value', text: value }),
        sub ? el('div', { 'class': 'sub', text: sub }) : null));
    }
    memDevices.forEach(function (d) {
      var peak = Math.max(d.peak.max, d.live.max);
      var sub = d.total_bytes > 0 ? percent(peak, d.total_bytes) + ' of ' + fmtBytes(d.total_bytes) : '';
      if (d.used) { sub += (sub ? '; ' : '') + 'device-wide ' + fmtBytes(d.used.max); }
      var full = d.used && d.total_bytes > 0 && d.used.max >= 0.9 * d.total_bytes;
      card(full ? 'bad' : '', 'Peak live, ' + deviceLabel(d.device), fmtBytes(peak), sub,
        'Most bytes live in gpuguard\'s ledger at once (peak between samples included); ' +
        'device-wide: the most used by every process, from cudaMemGetInfo');
    });
    var leaks = data.leaks;
    if (leaks) {
      card(leaks.total_bytes > 0 ? 'bad' : 'good', 'Leaked at exit', leaks.total_count ? fmtBytes(leaks.total_bytes) : 'none',
        leaks.total_count ? plural(leaks.total_count, 'allocation') + ' from ' + plural(leaks.site_count, 'site') : 'every allocation was freed');
    } else if (run.has_start) {
      card('warn', 'Leaked at exit', 'unknown', 'no leaks line in the log');
    }
    var exceptions = 0;
    data.op_summary.forEach(function (s) { exceptions += s.exceptions; });
    if (data.op_events > 0) {
      card(exceptions ? 'bad' : '', 'Operations', fmtInt(data.op_events),
        plural(data.op_summary.length, 'name') + (exceptions ? ', ' + plural(exceptions, 'exception') : ''));
    }
    if (data.alert_events > 0) {
      card('bad', 'Alerts', fmtInt(data.alert_events), alertKinds());
    }
    if (data.dropped.events > 0) {
      card('warn', 'Dropped events', fmtInt(data.dropped.events), 'queue full');
    }
    if (data.source.events_used > 0) {
      card('', 'Duration', fmtDur(run.duration_ns), run.has_end ? 'to the end line' : 'to the last event');
    }
  })();

  function alertKinds() {
    var counts = {};
    alerts.forEach(function (a) { counts[a.kind] = (counts[a.kind] || 0) + 1; });
    return Object.keys(counts).map(function (k) { return counts[k] + ' ' + k; }).join(', ');
  }

  // ---- timelines -------------------------------------------------------------------------------
  var ROW = 17;           // height of one depth row of a lane
  var MAX_ROWS = 24;      // deeper scopes share the last row
  var LANE_PAD = 6;
  var MARGIN = { left: 92, right: 18, top: 12 };
  var CHART_H = 230;
  var AXIS_H = 26;
  var ENDING_W = ending ? 112 : 0;  // right of the plot: the break and the ending
  var charts = [];

  // The ending, right of a plot whose time axis ends at `plotRight`: a break in the axis, then a
  // rule where the process ended, labelled with how long after the last event that was (the gap
  // is not to scale).
  function drawEnding(root, plotRight, top, axisY, bottom) {
    if (!ending) { return; }
    var g = sv('g', { 'class': 'run-ending ' + ending.kind, 'data-t': ending.t, 'data-after': ending.after }, root);
    var bx = plotRight + 10;
    var ex = plotRight + ENDING_W - 8;
    sv('path', { 'class': 'axis-break', d: 'M' + (bx - 6) + ',' + (axisY + 5) + 'L' + (bx - 2) + ',' + (axisY - 5) +
                 'M' + (bx - 1) + ',' + (axisY + 5) + 'L' + (bx + 3) + ',' + (axisY - 5) }, g);
    sv('line', { 'class': 'ending-axis', x1: bx + 5, x2: ex, y1: axisY + 0.5, y2: axisY + 0.5 }, g);
    sv('line', { 'class': 'ending-rule', x1: ex + 0.5, x2: ex + 0.5, y1: top, y2: bottom }, g);
    sv('text', { 'class': 'ending-label', x: ex - 5, y: top + 11, 'text-anchor': 'end', text: ending.label }, g);
    sv('text', { 'class': 'ending-after', x: ex - 5, y: top + 25, 'text-anchor': 'end',
                 text: fmtDur(ending.after) + ' later' }, g);
    svgTitle(g, (ending.kind === 'exit' ? 'The process exited (reason: ' + data.end.reason + ')'
                                        : 'The process crashed (' + ending.label + ')') +
             ' at ' + fmtDur(ending.t) + ', ' + fmtDur(ending.after) + ' after its last event. The time axis ' +
             'ends at the last event; this gap is not to scale.');
  }
  function workNote() {
    var text = 'The time axis runs from the first event, ' + fmtDur(work.start_ns) + ' after the start, to the last, at ' +
               fmtDur(work.end_ns) + '.';
    if (ending) {
      text += ' The process ' + (ending.kind === 'exit' ? 'exited' : 'crashed') +
              (ending.after > 0 ? ' ' + fmtDur(ending.after) + ' after that' : ' with the last event') +
              ': drawn apart, right of the break in the axis.';
    }
    return el('p', { 'class': 'chart-note', id: 'work-span-note', text: text });
  }

  function niceTimeStep(span, maxTicks) {
    var raw = span / Math.max(1, maxTicks);
    var p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; ++i) { if (steps[i] * p >= raw) { return steps[i] * p; } }
    return 10 * p;
  }
  function fmtTimeTick(t, step) {
    var units = [[1e9, 's'], [1e6, 'ms'], [1e3, '\u00b5s'], [1, 'ns']];
    for (var i = 0; i < units.length; ++i) {
      if (step * 2 >= units[i][0] || i === units.length - 1) {
        var div = units[i][0];
        var decimals = Math.max(0, Math.min(3, -Math.floor(Math.log10(step / div) + 1e-9)));
        return (t / div).toFixed(decimals) + ' ' + units[i][1];
      }
    }
    return String(t);
  }
  // Byte ticks at powers of two (256 MiB, 512 MiB, 1 GiB ...): 3 to 6 of them.
  function niceByteStep(max) {
    var raw = Math.max(1, max / 5);
    return Math.pow(2, Math.ceil(Math.log2(raw)));
  }
  function lowerBound(arr, x) {
    var lo = 0;
    var hi = arr.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < x) { lo = mid + 1; } else { hi = mid; } }
    return lo;
  }

  function Chart(container, device) {
    this.device = device;   // null: a chart of operations only
    this.id = device ? 'timeline-device-' + device.device : 'timeline-ops';
    this.box = el('div', { 'class': 'chart-box' });
    this.readout = el('div', { 'class': 'readout' });
    var wrap = el('div', { 'class': 'device-chart', id: this.id + '-box' });
    var head = el('div', { 'class': 'chart-head' });
    if (device) {
      head.appendChild(el('h3', { text: deviceLabel(device.device) + (device.name ? ' \u00b7 ' + device.name : '') }));
      var meta = [];
      if (device.total_bytes > 0) { meta.push(fmtBytes(device.total_bytes) + ' capacity'); }
      meta.push(device.timeline.lines ? plural(device.samples, 'point') + ' (' + plural(device.timeline.lines, 'timeline line') + ')'
                                      : plural(device.samples, 'sample'));
      if (device.allocations || device.frees || !device.timeline.lines) {
        meta.push(fmtInt(device.allocations) + ' allocations, ' + fmtInt(device.frees) + ' frees');
      }
      head.appendChild(el('span', { 'class': 'meta', text: meta.join(' \u00b7 ') }));
    } else {
      head.appendChild(el('h3', { text: 'Operations' }));
    }
    wrap.appendChild(head);
    wrap.appendChild(this.box);
    wrap.appendChild(this.readout);
    var notes = [];
    if (device) {
      var points = device.live.t.length;
      if (points < device.live.samples) {
        notes.push(fmtInt(device.live.samples) + ' memory ' + (device.timeline.lines ? 'points' : 'samples') + ' drawn as ' + fmtInt(points) +
                   ' points (each time bucket keeps its first, last, lowest and highest sample, so peaks survive).');
      }
    }
    // Notes about the operation lanes, which every chart repeats, go under the first chart only.
    (charts.length === 0 ? threads : []).forEach(function (t) {
      if (t.ops_drawn < t.ops) {
        notes.push('Thread ' + t.thread + ': ' + fmtInt(t.ops_drawn) + ' of ' + fmtInt(t.ops) +
                   ' operations drawn (the longest and the biggest; the table below counts them all).');
      }
    });
    var laneless = threads.filter(function (t) { return t.ops > 0 && t.ops_drawn === 0; }).length;
    if (charts.length === 0 && (laneless > 0 || data.ops_of_untracked_threads > 0)) {
      notes.push('Operations of ' + (laneless ? plural(laneless, 'thread') : 'some threads') +
                 ' are not drawn: only the busiest threads get a lane (the table below counts every operation).');
    }
    if (charts.length === 0 && data.alert_events > alerts.length) {
      notes.push('The first ' + fmtInt(alerts.length) + ' of ' + fmtInt(data.alert_events) + ' alerts are drawn.');
    }
    notes.forEach(function (n) { wrap.appendChild(el('p', { 'class': 'chart-note', text: n })); });
    if (charts.length === 0 && work) { wrap.appendChild(workNote()); }
    container.appendChild(wrap);
    this.ops = ops;  // every chart shows every operation, on the same time axis as its memory
    this.lanes = threads.filter(function (t) { return t.ops_drawn > 0; });
  }

  Chart.prototype.yMax = function () {
    var d = this.device;
    var max = Math.max(d.live.max, d.peak.max, d.used ? d.used.max : 0, 1);
    var cap = d.total_bytes;
    var toCap = view.scaleToCapacity;
    if (toCap === null) { toCap = cap > 0 && max >= 0.5 * cap; }
    if (toCap && cap > 0) { max = Math.max(max, cap); }
    var step = niceByteStep(max * 1.04);
    return { max: Math.ceil(max * 1.04 / step) * step, step: step };
  };

  Chart.prototype.render = function () {
    var self = this;
    var d = this.device;
    var width = Math.max(640, Math.floor(this.box.clientWidth || 1200));
    var plotW = width - MARGIN.left - MARGIN.right - ENDING_W;
    var chartH = d ? CHART_H : 0;
    var chartTop = MARGIN.top;
    var axisY = chartTop + chartH;
    var lanesTop = axisY + AXIS_H;
    var laneBoxes = [];
    var y = lanesTop;
    this.lanes.forEach(function (t) {
      var h = Math.max(32, (Math.min(t.max_depth, MAX_ROWS - 1) + 1) * ROW + LANE_PAD);
      laneBoxes.push({ thread: t, top: y, height: h });
      y += h + 2;
    });
    var height = Math.max(y, lanesTop) + 6;
    var t0 = view.t0;
    var t1 = view.t1;
    var span = Math.max(1, t1 - t0);
    function x(t) { return MARGIN.left + (t - t0) / span * plotW; }
    this.x = x;
    this.tAt = function (px) { return t0 + (px - MARGIN.left) / plotW * span; };
    this.plot = { left: MARGIN.left, right: MARGIN.left + plotW, top: chartTop, bottom: axisY };

    var root = sv('svg', { id: this.id, 'class': 'timeline', width: width, height: height,
                           viewBox: '0 0 ' + width + ' ' + height, role: 'img',
                           'aria-label': d ? 'memory timeline of ' + deviceLabel(d.device) : 'operations timeline',
                           'data-t0': t0, 'data-t1': t1, 'data-plot': MARGIN.left + ',' + (MARGIN.left + plotW) });
    var defs = sv('defs', null, root);
    var clipId = this.id + '-clip';
    var clip = sv('clipPath', { id: clipId }, defs);
    sv('rect', { x: MARGIN.left, y: chartTop - 2, width: plotW, height: chartH + 4 }, clip);
    var laneClipId = this.id + '-lane-clip';
    var laneClip = sv('clipPath', { id: laneClipId }, defs);
    sv('rect', { x: MARGIN.left, y: lanesTop - 2, width: plotW, height: Math.max(0, height - lanesTop) }, laneClip);

    // Time grid and axis.
    var tStep = niceTimeStep(span, Math.max(2, Math.floor(plotW / 110)));
    var gridBottom = Math.max(axisY, height - 6);
    for (var tk = Math.ceil(t0 / tStep) * tStep; tk <= t1 + 1e-6; tk += tStep) {
      var gx = Math.round(x(tk)) + 0.5;
      sv('line', { 'class': 'grid', x1: gx, x2: gx, y1: chartTop, y2: gridBottom }, root);
      sv('text', { 'class': 'tick-label', x: gx, y: axisY + 16, 'text-anchor': 'middle', text: fmtTimeTick(tk, tStep) }, root);
    }
    sv('line', { 'class': 'axis', x1: MARGIN.left, x2: MARGIN.left + plotW, y1: axisY + 0.5, y2: axisY + 0.5 }, root);

    if (d) {
      var ys = this.yMax();
      var yMax = ys.max;
      var yOf = function (v) { return chartTop + chartH - v / yMax * chartH; };
      sv('rect', { 'class': 'plot-bg', x: MARGIN.left, y: chartTop, width: plotW, height: chartH }, root);
      for (var v = 0; v <= yMax + 0.5; v += ys.step) {
        var gy = Math.round(yOf(v)) + 0.5;
        sv('line', { 'class': 'grid', x1: MARGIN.left, x2: MARGIN.left + plotW, y1: gy, y2: gy }, root);
        sv('text', { 'class': 'tick-label', x: MARGIN.left - 8, y: gy + 4, 'text-anchor': 'end', text: fmtAxisBytes(v) }, root);
      }
      // Re-draw the vertical grid over the background.
      for (var tk2 = Math.ceil(t0 / tStep) * tStep; tk2 <= t1 + 1e-6; tk2 += tStep) {
        var gx2 = Math.round(x(tk2)) + 0.5;
        sv('line', { 'class': 'grid', x1: gx2, x2: gx2, y1: chartTop, y2: axisY }, root);
      }
      var g = sv('g', { 'clip-path': 'url(#' + clipId + ')' }, root);
      // A series as a polyline; `steps`: each value holds over the interval that ends at its sample
      // (the ledger's peak_bytes is the most since the previous sample), drawn as a step; `hold`:
      // each value holds until the next point (the timeline's live bytes, exact after each event).
      var pathOf = function (series, steps, hold) {
        var ts = series.t;
        var vs = series.v;
        var lo = Math.max(0, lowerBound(ts, t0) - 1);
        var hi = Math.min(ts.length, lowerBound(ts, t1) + 1);
        var parts = [];
        for (var i = lo; i < hi; ++i) {
          var py = yOf(vs[i]).toFixed(1);
          if (steps && i > lo) { parts.push('L' + x(ts[i - 1]).toFixed(1) + ',' + py); }
          if (hold && i > lo) { parts.push('L' + x(ts[i]).toFixed(1) + ',' + yOf(vs[i - 1]).toFixed(1)); }
          parts.push((parts.length ? 'L' : 'M') + x(ts[i]).toFixed(1) + ',' + py);
        }
        return { d: parts.join(''), first: lo, last: hi - 1 };
      };
      var live = pathOf(d.live, false, d.timeline.lines > 0);
      if (live.d) {
        var ts = d.live.t;
        var area = live.d + 'L' + x(ts[live.last]).toFixed(1) + ',' + yOf(0).toFixed(1) +
                   'L' + x(ts[live.first]).toFixed(1) + ',' + yOf(0).toFixed(1) + 'Z';
        sv('path', { 'class': 'area-live', d: area }, g);
      }
      if (d.used) { sv('path', { 'class': 'series-used', d: pathOf(d.used).d }, g); }
      sv('path', { 'class': 'series-peak', d: pathOf(d.peak, true).d }, g);
      sv('path', { 'class': 'series-live', d: live.d }, g);
      if (d.total_bytes > 0) {
        if (d.total_bytes <= yMax) {
          var cy = yOf(d.total_bytes).toFixed(1);
          sv('path', { 'class': 'series-total', d: 'M' + MARGIN.left + ',' + cy + 'L' + (MARGIN.left + plotW) + ',' + cy }, g);
          sv('text', { 'class': 'capacity-label', x: MARGIN.left + plotW - 4, y: +cy - 5, 'text-anchor': 'end',
                       text: 'capacity ' + fmtBytes(d.total_bytes) }, root);
        } else {
          sv('text', { 'class': 'capacity-label', x: MARGIN.left + plotW - 4, y: chartTop + 13, 'text-anchor': 'end',
                       text: 'capacity ' + fmtBytes(d.total_bytes) + ' \u2191 above this scale' }, root);
        }
      }
      sv('line', { 'class': 'axis', x1: MARGIN.left + 0.5, x2: MARGIN.left + 0.5, y1: chartTop, y2: axisY }, root);
      // Device alerts: a rule across the chart and a marker at its top.
      alerts.forEach(function (a) {
        if (a.device !== d.device || a.kind === 'op_growth' || a.t < t0 || a.t > t1) { return; }
        var ax = x(a.t);
        var m = sv('g', { 'class': 'alert-marker ' + a.kind }, root);
        sv('line', { 'class': 'rule', x1: ax, x2: ax, y1: chartTop, y2: axisY }, m);
        sv('path', { 'class': 'mark', d: 'M' + (ax - 6) + ',' + (chartTop - 1) + 'L' + (ax + 6) + ',' + (chartTop - 1) +
                     'L' + ax + ',' + (chartTop + 9) + 'Z' }, m);
        svgTitle(m, a.kind + ' at ' + fmtDur(a.t) + ': ' + a.message +
                 (a.suppressed ? ' (' + a.suppressed + ' similar alerts held back)' : ''));
      });
      sv('text', { 'class': 'axis-title', x: 4, y: chartTop + 10, text: 'bytes' }, root);
    }
    sv('text', { 'class': 'axis-title', x: 4, y: axisY + 16, text: 'time' }, root);

    // Lanes: one per thread, one row per depth.
    var bandsG = sv('g', { 'clip-path': 'url(#' + laneClipId + ')' }, root);
    var laneOf = {};
    laneBoxes.forEach(function (lb, i) {
      laneOf[lb.thread.thread] = lb;
      sv('rect', { 'class': 'lane-bg' + (i % 2 ? ' odd' : ''), x: 0, y: lb.top, width: width - MARGIN.right, height: lb.height }, root);
      var t = lb.thread;
      var name = t.name ? t.name : 'thread ' + t.thread;
      var label = sv('text', { 'class': 'lane-label', x: 8, y: lb.top + 13,
                               text: name.length > 12 ? name.slice(0, 11) + '\u2026' : name }, root);
      svgTitle(label, 'thread ' + t.thread + (t.name ? ' "' + t.name + '"' : '') + (t.tid ? ', tid ' + t.tid : '') +
               ': ' + plural(t.ops, 'operation'));
      sv('text', { 'class': 'lane-sub', x: 8, y: lb.top + 26, text: 'T' + t.thread + (t.tid ? ' \u00b7 ' + t.tid : '') }, root);
    });
    root.appendChild(bandsG);  // bands above the lane backgrounds
    this.ops.forEach(function (o) {
      var lb = laneOf[o.thread];
      if (!lb || o.t > t1 || o.t + o.dur < t0) { return; }
      var bx = x(Math.max(o.t, t0 - span));
      var bw = Math.max(1.5, x(Math.min(o.t + o.dur, t1 + span)) - bx);
      var by = lb.top + 3 + Math.min(o.depth, MAX_ROWS - 1) * ROW;
      var r = sv('rect', { 'class': 'op-band' + (o.exception ? ' exception' : ''), x: bx.toFixed(1), y: by,
                           width: bw.toFixed(1), height: ROW - 3, rx: 2, fill: nameColor(o.name),
                           'data-name': o.name, 'data-thread': o.thread, 'data-depth': o.depth }, bandsG);
      var tip = o.name + ' (thread ' + o.thread + ', depth ' + o.depth + ')\n' +
                'time ' + fmtDur(o.dur) + ', at ' + fmtDur(o.t) + '\n' +
                'net ' + fmtSigned(o.net_bytes) + ', peak ' + fmtBytes(o.peak_bytes) + '\n' +
                'allocated ' + fmtBytes(o.alloc_bytes) + ' in ' + plural(o.allocs, 'allocation') +
                ', freed ' + fmtBytes(o.free_bytes) + ' in ' + plural(o.frees, 'free');
      if (o.device !== undefined) {
        tip += '\n' + deviceLabel(o.device) + ' used ' + fmtBytes(o.used_before) + ' \u2192 ' + fmtBytes(o.used_after);
      }
      if (o.exception) { tip += '\nended by an exception'; }
      svgTitle(r, tip);
      var visibleW = Math.min(bx + bw, MARGIN.left + plotW) - Math.max(bx, MARGIN.left);
      if (visibleW > 34) {
        var chars = Math.floor((visibleW - 8) / 6.2);
        var text = o.name.length > chars ? o.name.slice(0, Math.max(1, chars - 1)) + '\u2026' : o.name;
        var dark = o.exception ? ' on-exception' : (isLight(nameColor(o.name)) ? ' dark' : '');
        sv('text', { 'class': 'band-label' + dark, x: Math.max(bx, MARGIN.left) + 4, y: by + ROW - 7, text: text }, bandsG);
      }
    });
    alerts.forEach(function (a) {
      if (a.kind !== 'op_growth' || a.t < t0 || a.t > t1) { return; }
      var lb = laneOf[a.thread];
      if (!lb) { return; }
      var ax = x(a.t);
      var ay = lb.top + 1;
      var m = sv('g', { 'class': 'alert-marker op_growth' }, root);
      sv('path', { 'class': 'mark', d: 'M' + ax + ',' + (ay - 4) + 'L' + (ax + 5) + ',' + (ay + 2) + 'L' + ax + ',' +
                   (ay + 8) + 'L' + (ax - 5) + ',' + (ay + 2) + 'Z' }, m);
      svgTitle(m, 'op_growth at ' + fmtDur(a.t) + ': ' + a.message);
    });

    drawEnding(root, MARGIN.left + plotW, chartTop, axisY, gridBottom);  // over the lanes

    // Interaction over the memory chart: hover readout, drag to zoom, double-click to reset.
    if (d) {
      var cursor = sv('line', { 'class': 'cursor', x1: 0, x2: 0, y1: chartTop, y2: gridBottom, visibility: 'hidden' }, root);
      var sel = sv('rect', { 'class': 'selection', x: 0, y: chartTop, width: 0, height: chartH, visibility: 'hidden' }, root);
      var overlay = sv('rect', { 'class': 'overlay', x: MARGIN.left, y: chartTop, width: plotW, height: chartH }, root);
      var dragFrom = null;
      var localX = function (ev) { return ev.clientX - root.getBoundingClientRect().left; };
      overlay.addEventListener('mousemove', function (ev) {
        var px = Math.min(Math.max(localX(ev), MARGIN.left), MARGIN.left + plotW);
        cursor.setAttribute('x1', px);
        cursor.setAttribute('x2', px);
        cursor.setAttribute('visibility', 'visible');
        if (dragFrom !== null) {
          sel.setAttribute('x', Math.min(dragFrom, px));
          sel.setAttribute('width', Math.abs(px - dragFrom));
          sel.setAttribute('visibility', 'visible');
        }
        self.showReadout(self.tAt(px), px, ev);
      });
      overlay.addEventListener('mouseleave', function () {
        cursor.setAttribute('visibility', 'hidden');
        self.readout.style.display = 'none';
      });
      overlay.addEventListener('mousedown', function (ev) { dragFrom = localX(ev); ev.preventDefault(); });
      overlay.addEventListener('mouseup', function (ev) {
        if (dragFrom === null) { return; }
        var a = self.tAt(Math.min(dragFrom, localX(ev)));
        var b = self.tAt(Math.max(dragFrom, localX(ev)));
        dragFrom = null;
        sel.setAttribute('visibility', 'hidden');
        if (Math.abs(x(b) - x(a)) > 4) { zoomTo(a, b); }
      });
      overlay.addEventListener('dblclick', function () { zoomTo(domainStart, domainEnd); });
    }

    this.box.textContent = '';
    this.box.appendChild(root);
    // Where the chart landed on the page, for tests that look at a screenshot.
    var rect = root.getBoundingClientRect();
    root.setAttribute('data-bbox', [Math.round(rect.left + window.scrollX), Math.round(rect.top + window.scrollY),
                                    Math.round(rect.width), Math.round(chartH + MARGIN.top)].join(','));
  };

  Chart.prototype.showReadout = function (t, px, ev) {
    var d = this.device;
    var series = d.live;
    if (!series.t.length) { return; }
    var i = lowerBound(series.t, t);
    if (i >= series.t.length || (i > 0 && t - series.t[i - 1] < series.t[i] - t)) { i = Math.max(0, i - 1); }
    var st = series.t[i];
    var rows = [['time', fmtDur(st)], ['live', fmtBytes(series.v[i])]];
    var pi = lowerBound(d.peak.t, st);
    if (pi < d.peak.t.length && d.peak.t[pi] === st) { rows.push(['peak', fmtBytes(d.peak.v[pi])]); }
    if (d.used) {
      var ui = Math.min(d.used.t.length - 1, lowerBound(d.used.t, st));
      if (ui >= 0) { rows.push(['used', fmtBytes(d.used.v[ui]) + (d.total_bytes ? ' (' + percent(d.used.v[ui], d.total_bytes) + ')' : '')]); }
    }
    var box = this.readout;
    box.textContent = '';
    rows.forEach(function (r) { box.appendChild(el('div', null, el('span', { 'class': 'k', text: r[0] }), el('b', { text: r[1] }))); });
    box.style.display = 'block';
    var wrapRect = box.parentNode.getBoundingClientRect();
    var left = ev.clientX - wrapRect.left + 14;
    if (left + 190 > wrapRect.width) { left = ev.clientX - wrapRect.left - 190; }
    box.style.left = left + 'px';
    box.style.top = (ev.clientY - wrapRect.top + 12) + 'px';
  };

  // ---- allocations over time: each allocation a band over its lifetime --------------------------
  // The layout of PyTorch's memory_viz: bands stacked in the order they were allocated; when one is
  // freed, those above it move down, so the top of the stack is the sum of the drawn bands. Behind
  // them, grey, the exact live bytes of every allocation (folded ones too): what no band covers is
  // memory of allocations not drawn. The layout is computed once; zooming only redraws.
  var ALLOC_H = 260;
  var sitesByRaw = {};
  if (data.sites) {
    data.sites.sites.forEach(function (st) {
      sitesByRaw[st.site] = st;
      (st.raw_sites || []).forEach(function (r) { sitesByRaw[r] = st; });
    });
  }
  function siteKey(raw) { return sitesByRaw[raw] ? 'site ' + sitesByRaw[raw].site : 'raw ' + raw; }
  function siteColor(raw) { return raw === 0 ? '#7d8797' : nameColor(siteKey(raw)); }
  function siteText(raw) {
    if (raw === 0) { return 'no stack (stacks were off, or this allocation was not sampled)'; }
    var st = sitesByRaw[raw];
    if (!st) { return 'site #' + raw + ' (its frames are not in the log: only the top sites are)'; }
    return 'site #' + st.site + ':\n' + st.frames.slice(0, 8).map(function (f) {
      return '  ' + (f.function || f.address) + (f.file ? ' ' + f.file.split('/').pop() + (f.line ? ':' + f.line : '') : '');
    }).join('\n') + (st.frames.length > 8 ? '\n  ...' : '');
  }

  function AllocChart(container, device) {
    this.device = device;
    this.id = 'allocations-device-' + device.device;
    var tl = device.timeline;
    var n = tl.t.length;
    // Stack the bands: events in time order (at one moment frees first, then allocations).
    var events = [];
    for (var i = 0; i < n; ++i) {
      events.push([tl.t[i], 1, i]);
      // (A band freed at the moment it was made is freed just after, not before, its allocation.)
      if (!tl.live_at_end[i]) { events.push([tl.end[i] > tl.t[i] ? tl.end[i] : tl.t[i] + 0.5, 0, i]); }
    }
    events.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1] || a[2] - b[2]; });
    var stack = [];
    var offset = new Array(n);
    var moves = new Array(n);  // per band: [time, offset] after each move down
    var top = 0;
    var highest = 0;
    events.forEach(function (e) {
      var b = e[2];
      if (e[1] === 1) {
        offset[b] = top;
        moves[b] = [[tl.t[b], top]];
        stack.push(b);
        top += tl.bytes[b];
        highest = Math.max(highest, top);
        return;
      }
      var at = stack.indexOf(b);
      if (at < 0) { return; }
      stack.splice(at, 1);
      top -= tl.bytes[b];
      for (var k = at; k < stack.length; ++k) {
        var m = moves[stack[k]];
        var now = m[m.length - 1][1] - tl.bytes[b];
        if (m[m.length - 1][0] === e[0]) { m[m.length - 1][1] = now; } else { m.push([e[0], now]); }
      }
    });
    this.moves = moves;
    this.offset = offset;
    this.highest = highest;
    this.box = el('div', { 'class': 'chart-box' });
    var wrap = el('div', { 'class': 'device-chart', id: this.id + '-box' });
    var head = el('div', { 'class': 'chart-head' });
    head.appendChild(el('h3', { text: deviceLabel(device.device) + (device.name ? ' \u00b7 ' + device.name : '') }));
    head.appendChild(el('span', { 'class': 'meta', text: plural(tl.alloc_lines, 'alloc line') + ', ' +
      plural(tl.step_lines, 'mem_step line') }));
    wrap.appendChild(head);
    wrap.appendChild(this.box);
    var notes = [];
    if (tl.bands_drawn < tl.bands_total) {
      notes.push(fmtInt(tl.bands_drawn) + ' of ' + fmtInt(tl.bands_total) + ' allocations drawn as bands (the largest, ' +
                 'and those longest on the chart: bytes times lifetime); grey is every allocation\'s memory, exact.');
    }
    if (tl.folded_allocs > 0) {
      notes.push(fmtInt(tl.folded_allocs) + ' allocations came faster than timeline_events per millisecond and were ' +
                 'folded into mem_step lines: they are in the grey total, not drawn one by one.');
    }
    if (tl.unpaired_frees > 0 || tl.not_paired > 0) {
      notes.push(fmtInt(tl.unpaired_frees) + ' free lines without their alloc line, ' + fmtInt(tl.not_paired) +
                 ' allocations past the pairing limit: not drawn.');
    }
    notes.forEach(function (t) { wrap.appendChild(el('p', { 'class': 'chart-note', text: t })); });
    container.appendChild(wrap);
  }

  AllocChart.prototype.render = function () {
    var d = this.device;
    var tl = d.timeline;
    var width = Math.max(640, Math.floor(this.box.clientWidth || 1200));
    var plotW = width - MARGIN.left - MARGIN.right - ENDING_W;
    var top = MARGIN.top;
    var bottom = top + ALLOC_H;
    var height = bottom + AXIS_H + 4;
    var t0 = view.t0;
    var t1 = view.t1;
    var span = Math.max(1, t1 - t0);
    function x(t) { return MARGIN.left + (t - t0) / span * plotW; }
    var max = Math.max(d.live.max, this.highest, 1);
    var yStep = niceByteStep(max * 1.04);
    var yMax = Math.ceil(max * 1.04 / yStep) * yStep;
    function y(v) { return bottom - v / yMax * ALLOC_H; }
    var root = sv('svg', { id: this.id, 'class': 'timeline allocations', width: width, height: height,
                           viewBox: '0 0 ' + width + ' ' + height, role: 'img',
                           'aria-label': 'allocations over time on ' + deviceLabel(d.device),
                           'data-t0': t0, 'data-t1': t1, 'data-plot': MARGIN.left + ',' + (MARGIN.left + plotW) });
    var clipId = this.id + '-clip';
    var clip = sv('clipPath', { id: clipId }, sv('defs', null, root));
    sv('rect', { x: MARGIN.left, y: top - 2, width: plotW, height: ALLOC_H + 4 }, clip);
    sv('rect', { 'class': 'plot-bg', x: MARGIN.left, y: top, width: plotW, height: ALLOC_H }, root);
    for (var v = 0; v <= yMax + 0.5; v += yStep) {
      var gy = Math.round(y(v)) + 0.5;
      sv('line', { 'class': 'grid', x1: MARGIN.left, x2: MARGIN.left + plotW, y1: gy, y2: gy }, root);
      sv('text', { 'class': 'tick-label', x: MARGIN.left - 8, y: gy + 4, 'text-anchor': 'end', text: fmtAxisBytes(v) }, root);
    }
    var tStep = niceTimeStep(span, Math.max(2, Math.floor(plotW / 110)));
    for (var tk = Math.ceil(t0 / tStep) * tStep; tk <= t1 + 1e-6; tk += tStep) {
      var gx = Math.round(x(tk)) + 0.5;
      sv('line', { 'class': 'grid', x1: gx, x2: gx, y1: top, y2: bottom }, root);
      sv('text', { 'class': 'tick-label', x: gx, y: bottom + 16, 'text-anchor': 'middle', text: fmtTimeTick(tk, tStep) }, root);
    }
    var g = sv('g', { 'clip-path': 'url(#' + clipId + ')' }, root);
    // Every allocation's live bytes, as steps: a value holds until the next event.
    var ts = d.live.t;
    var vs = d.live.v;
    if (ts.length) {
      var parts = ['M' + x(ts[0]).toFixed(1) + ',' + y(0).toFixed(1)];
      for (var i = 0; i < ts.length; ++i) {
        var px = x(ts[i]).toFixed(1);
        if (i > 0) { parts.push('L' + px + ',' + y(vs[i - 1]).toFixed(1)); }
        parts.push('L' + px + ',' + y(vs[i]).toFixed(1));
      }
      parts.push('L' + x(Math.max(ts[ts.length - 1], domainEnd)).toFixed(1) + ',' + y(vs[vs.length - 1]).toFixed(1));
      parts.push('L' + x(Math.max(ts[ts.length - 1], domainEnd)).toFixed(1) + ',' + y(0).toFixed(1) + 'Z');
      sv('path', { 'class': 'alloc-total', d: parts.join('') }, g);
    }
    var moves = this.moves;
    var offset = this.offset;
    for (var b = 0; b < tl.t.length; ++b) {
      var start = tl.t[b];
      var end = tl.end[b];
      if (end < t0 || start > t1) { continue; }
      var m = moves[b];
      var bytes = tl.bytes[b];
      var lower = [];
      var upper = [];
      var xEnd = x(Math.min(end, t1 + span)).toFixed(1);
      for (var k = 0; k < m.length; ++k) {
        var mx = x(Math.max(m[k][0], t0 - span)).toFixed(1);
        if (k > 0) {
          lower.push('L' + mx + ',' + y(m[k - 1][1]).toFixed(1));
          upper.push(mx + ',' + y(m[k - 1][1] + bytes).toFixed(1));
        }
        lower.push((k ? 'L' : 'M') + mx + ',' + y(m[k][1]).toFixed(1));
        upper.push(mx + ',' + y(m[k][1] + bytes).toFixed(1));
      }
      var last = m[m.length - 1][1];
      lower.push('L' + xEnd + ',' + y(last).toFixed(1));
      upper.push(xEnd + ',' + y(last + bytes).toFixed(1));
      var path = lower.join('') + 'L' + upper.reverse().join('L') + 'Z';
      var site = tl.site[b];
      var band = sv('path', { 'class': 'alloc-band' + (tl.live_at_end[b] ? ' live-at-end' : ''), d: path,
                              fill: siteColor(site), 'data-index': b, 'data-t': start, 'data-end': end,
                              'data-bytes': bytes, 'data-offset': offset[b], 'data-site': site }, g);
      svgTitle(band, fmtBytes(bytes) + ' allocated at ' + fmtDur(start) + ' by thread ' + tl.thread[b] + ', ' +
               (tl.live_at_end[b] ? 'still live at the end' : 'freed at ' + fmtDur(end) + ' (lived ' + fmtDur(end - start) + ')') +
               '\n' + siteText(site));
    }
    sv('line', { 'class': 'axis', x1: MARGIN.left, x2: MARGIN.left + plotW, y1: bottom + 0.5, y2: bottom + 0.5 }, root);
    drawEnding(root, MARGIN.left + plotW, top, bottom, bottom);
    sv('line', { 'class': 'axis', x1: MARGIN.left + 0.5, x2: MARGIN.left + 0.5, y1: top, y2: bottom }, root);
    sv('text', { 'class': 'axis-title', x: 4, y: top + 10, text: 'bytes' }, root);
    sv('text', { 'class': 'axis-title', x: 4, y: bottom + 16, text: 'time' }, root);
    this.box.textContent = '';
    this.box.appendChild(root);
    var rect = root.getBoundingClientRect();
    root.setAttribute('data-bbox', [Math.round(rect.left + window.scrollX), Math.round(rect.top + window.scrollY),
                                    Math.round(rect.width), Math.round(ALLOC_H + MARGIN.top)].join(','));
    root.setAttribute('data-y-max', yMax);
  };

  function renderCharts() { charts.forEach(function (c) { c.render(); }); }
  var resetButton = null;
  function zoomTo(a, b) {
    view.t0 = Math.max(domainStart, a);
    view.t1 = Math.min(domainEnd, Math.max(b, view.t0 + 1));
    if (resetButton) { resetButton.disabled = view.t0 === domainStart && view.t1 === domainEnd; }
    renderCharts();
  }

  (function timelines() {
    var box = byId('timelines');
    var legend = byId('legend');
    function item(cls, text) { legend.appendChild(el('span', { 'class': 'item' }, el('span', { 'class': 'sw ' + cls }), text)); }
    if (memDevices.length === 0) {
      box.appendChild(el('p', { 'class': 'empty-note', id: 'no-memory',
        text: 'No memory samples: the log has no mem events' + (data.source.lines_read ? '' : ' (it is empty)') +
              ', so there is no memory timeline to draw.' }));
    } else {
      item('live', 'live bytes (ledger)');
      if (memDevices.some(function (d) { return !d.timeline.lines; })) { item('peak', 'peak between samples'); }
      if (memDevices.some(function (d) { return d.used; })) { item('used', 'used bytes, device-wide'); }
      if (memDevices.some(function (d) { return d.total_bytes > 0; })) { item('capacity', 'capacity'); }
    }
    if (ops.length) {
      item('box band', 'operation (hover for its bytes)');
      if (ops.some(function (o) { return o.exception; })) { item('box exc', 'ended by an exception'); }
    }
    if (alerts.length) { item('alert', 'alert'); }
    memDevices.forEach(function (d) { charts.push(new Chart(box, d)); });
    if (memDevices.length === 0 && ops.length) { charts.push(new Chart(box, null)); }

    var tools = byId('timeline-tools');
    if (charts.length) {
      tools.appendChild(el('span', { text: 'drag across a chart to zoom' }));
      resetButton = el('button', { type: 'button', id: 'reset-zoom', text: 'Reset zoom' });
      resetButton.disabled = true;
      resetButton.addEventListener('click', function () { zoomTo(domainStart, domainEnd); });
      tools.appendChild(resetButton);
    }
    if (memDevices.some(function (d) { return d.total_bytes > 0; })) {
      var cb = el('input', { type: 'checkbox', id: 'scale-capacity' });
      cb.addEventListener('change', function () { view.scaleToCapacity = cb.checked; renderCharts(); });
      tools.appendChild(el('label', null, cb, 'scale to capacity'));
      view.scaleToCapacity = null;  // automatic until the box is used
    }
    renderCharts();
    var pending = 0;
    window.addEventListener('resize', function () {
      clearTimeout(pending);
      pending = setTimeout(renderCharts, 120);
    });
  })();

  (function allocationTimelines() {
    var box = byId('allocation-timelines');
    var withBands = devices.filter(function (d) { return d.timeline && d.timeline.alloc_lines > 0; });
    if (withBands.length === 0) {
      box.appendChild(el('p', { 'class': 'empty-note', id: 'no-allocations',
        text: 'No alloc lines in the log (a log written with timeline_events=0, or by a gpuguard from before the ' +
              'memory timeline): there are no allocations to draw.' }));
      return;
    }
    byId('allocations-note').textContent = 'Each allocation a band from its allocation to its free, stacked in the ' +
      'order they were made, coloured by allocation site; hover a band for its size, lifetime and stack. ' +
      'Grey: the live bytes of every allocation. The charts zoom with the ones above.';
    withBands.forEach(function (d) {
      var c = new AllocChart(box, d);
      charts.push(c);
      c.render();
    });
  })();

  // ---- tables ----------------------------------------------------------------------------------
  function table(id, columns, rows, emptyText, noteId, note) {
    var t = byId(id);
    var thead = el('thead');
    var tr = el('tr');
    columns.forEach(function (c) { tr.appendChild(el('th', { 'class': c.num ? 'num' : null, text: c.label, title: c.title })); });
    thead.appendChild(tr);
    var tbody = el('tbody');
    t.appendChild(thead);
    t.appendChild(tbody);
    rows.forEach(function (r) { tbody.appendChild(r); });
    if (noteId) { byId(noteId).textContent = rows.length ? (note || '') : emptyText; }
    if (!rows.length) { t.parentNode.classList.add('empty'); }
    return { table: t, head: tr, body: tbody };
  }
  function td(content, cls, title) {
    var cell = el('td', { 'class': cls, title: title });
    append(cell, content);
    return cell;
  }
  function framesCell(frames) {
    var box = el('div', { 'class': 'frames' });
    if (!frames.length) {
      box.appendChild(el('span', { 'class': 'none', text: 'no stack (stacks were off or not sampled)' }));
      return td(box, 'site-cell');
    }
    function frame(f) {
      var fn = f.function || f.address;
      var loc = f.file ? f.file.split('/').pop() + (f.line ? ':' + f.line : '') : '';
      return el('div', { 'class': 'frame', title: fn + (f.file ? '\n' + f.file + (f.line ? ':' + f.line : '') : '') + '\n' + f.address },
        el('span', { 'class': 'fn', text: fn }), loc ? el('span', { 'class': 'loc', text: loc }) : null);
    }
    var shown = 3;
    frames.slice(0, shown).forEach(function (f) { box.appendChild(frame(f)); });
    if (frames.length > shown) {
      var more = el('details', null, el('summary', { text: '+ ' + plural(frames.length - shown, 'more frame') }));
      frames.slice(shown).forEach(function (f) { more.appendChild(frame(f)); });
      box.appendChild(more);
    }
    return td(box, 'site-cell');
  }

  (function opSummary() {
    var rows = data.op_summary.map(function (s) {
      var r = el('tr');
      var name = td([el('span', { 'class': 'swatch', style: 'background:' + (s.other ? '#bbb' : nameColor(s.name)) }), s.name], 'name');
      r.appendChild(name);
      r.appendChild(td(fmtInt(s.calls), 'num'));
      r.appendChild(td(fmtDur(s.total_dur), 'num'));
      r.appendChild(td(fmtDur(Math.round(s.total_dur / Math.max(1, s.calls))), 'num'));
      r.appendChild(td(fmtDur(s.max_dur), 'num'));
      r.appendChild(td(fmtBytes(s.total_alloc), 'num'));
      r.appendChild(td(fmtBytes(s.max_peak), 'num'));
      r.appendChild(td(fmtSigned(s.total_net), 'num' + (s.total_net > 0 ? ' growth' : '')));
      r.appendChild(td(s.exceptions ? fmtInt(s.exceptions) : '\u2013', 'num' + (s.exceptions ? ' bad' : ' dim')));
      r.sortKeys = [s.name, s.calls, s.total_dur, s.total_dur / Math.max(1, s.calls), s.max_dur, s.total_alloc, s.max_peak, s.total_net, s.exceptions];
      return r;
    });
    var columns = [
      { label: 'Operation' }, { label: 'Calls', num: true }, { label: 'Total time', num: true },
      { label: 'Mean', num: true }, { label: 'Longest', num: true },
      { label: 'Allocated', num: true, title: 'bytes allocated inside the scope, over all calls (nested scopes included)' },
      { label: 'Largest peak', num: true, title: 'the most any one call rose above its starting point' },
      { label: 'Net', num: true, title: 'allocated minus freed over all calls: growth that stayed' },
      { label: 'Exceptions', num: true }];
    var t = table('op-summary', columns, rows,
      data.op_events ? '' : 'No op events in the log: no operation scopes were recorded.', 'op-note',
      fmtInt(data.op_events) + ' operations over ' + plural(data.op_summary.length, 'name') +
      '; click a column to sort. Times and bytes are per scope and include nested scopes.');
    // Sorting by clicking a header: numbers largest first, names A to Z.
    var current = 2;
    var arrows = [];
    Array.prototype.forEach.call(t.head.children, function (th, i) {
      th.classList.add('sortable');
      var arrow = el('span', { 'class': 'arrow' });
      th.appendChild(arrow);
      arrows.push(arrow);
      th.addEventListener('click', function () { sortBy(i); });
    });
    function sortBy(i) {
      current = i;
      rows.sort(function (a, b) {
        var x = a.sortKeys[i];
        var y = b.sortKeys[i];
        return i === 0 ? String(x).localeCompare(String(y)) : y - x;
      });
      rows.forEach(function (r) { t.body.appendChild(r); });
      arrows.forEach(function (a, k) { a.textContent = k === current ? (k === 0 ? '\u25b4' : '\u25be') : ''; });
    }
    if (rows.length) { sortBy(current); }
  })();

  // A table's rows for a list of sites, largest first: the rank, then the cells `cellsOf` makes.
  function rankedRows(list, cellsOf) {
    return (list || []).map(function (item, i) {
      var r = el('tr');
      r.appendChild(td(String(i + 1), 'num rank'));
      cellsOf(item).forEach(function (cell) { r.appendChild(cell); });
      return r;
    });
  }

  (function sites() {
    var s = data.sites;
    var rows = rankedRows(s && s.sites, function (site) {
      return [td(fmtBytes(site.bytes), 'num'), td(fmtInt(site.allocs), 'num'), framesCell(site.frames)];
    });
    table('top-sites', [{ label: '#', num: true }, { label: 'Allocated', num: true }, { label: 'Allocations', num: true },
                        { label: 'Allocation site (innermost frame first)' }], rows,
      s ? 'The sites line lists no site.' : 'No sites line in the log: stacks were off (stacks=off), or the process did not exit normally.',
      'sites-note',
      s ? 'Sites that allocated the most bytes over the run' + (s.sampled ? ' (stacks=sampled: sampled allocations only)' : '') +
          (s.count > s.sites.length ? '; the first ' + s.sites.length + ' of ' + s.count : '') + '.' : '');
  })();

  (function leaksTable() {
    var l = data.leaks;
    var rows = rankedRows(l && l.sites, function (site) {
      return [td(fmtBytes(site.bytes), 'num bad'), td(fmtInt(site.count), 'num'), td(deviceLabel(site.device), 'nowrap'),
              td(site.tag ? el('span', { 'class': 'tag', text: site.tag }) : el('span', { 'class': 'dim', text: '\u2013' })),
              framesCell(site.frames)];
    });
    var note = '';
    if (l) {
      note = l.total_count ? fmtBytes(l.total_bytes) + ' in ' + plural(l.total_count, 'allocation') + ' still live at exit, from ' +
             plural(l.site_count, 'site') + (l.site_count > l.sites.length ? ' (the largest ' + l.sites.length + ' shown)' : '') + '.' : '';
    }
    table('leaks', [{ label: '#', num: true }, { label: 'Bytes', num: true }, { label: 'Count', num: true }, { label: 'Device' },
                    { label: 'Tag' }, { label: 'Allocation site' }], rows,
      l ? 'No leaks: every tracked allocation was freed before exit.' : 'No leaks line in the log: the process did not reach gpuguard\'s exit report.',
      'leaks-note', note);
    if (l && !l.total_count) { byId('leaks-note').classList.add('ok-text'); }
  })();

  (function alertsTable() {
    var rows = alerts.map(function (a) {
      var r = el('tr');
      r.appendChild(td(fmtDur(a.t), 'num'));
      var known = a.kind === 'device_full' || a.kind === 'device_recovered' || a.kind === 'op_growth';
      r.appendChild(td(el('span', { 'class': 'pill ' + (known ? a.kind : 'other'), text: a.kind })));
      var where = a.kind === 'op_growth' ? 'thread ' + a.thread : (a.device !== undefined ? deviceLabel(a.device) : '');
      r.appendChild(td(where, 'nowrap'));
      r.appendChild(td(a.message));
      r.appendChild(td(a.suppressed ? fmtInt(a.suppressed) : '\u2013', 'num' + (a.suppressed ? '' : ' dim')));
      return r;
    });
    table('alerts', [{ label: 'At', num: true }, { label: 'Kind' }, { label: 'Where' }, { label: 'Message' },
                     { label: 'Held back', num: true, title: 'alerts of the same key suppressed by hysteresis since the previous one' }],
      rows, 'No alerts fired.', 'alerts-note',
      data.alert_events > alerts.length ? 'The first ' + alerts.length + ' of ' + fmtInt(data.alert_events) + ' alerts.' : '');
  })();

  (function exitTable() {
    var e = data.end;
    var rows = [];
    if (e) {
      rows = e.devices.map(function (d) {
        var r = el('tr');
        r.appendChild(td(deviceLabel(d.device)));
        r.appendChild(td(fmtBytes(d.current_bytes), 'num' + (d.current_bytes > 0 ? ' bad' : '')));
        r.appendChild(td(fmtBytes(d.peak_bytes), 'num'));
        r.appendChild(td(fmtBytes(d.total_bytes), 'num'));
        r.appendChild(td(fmtInt(d.allocations), 'num'));
        r.appendChild(td(fmtInt(d.frees), 'num'));
        return r;
      });
    }
    table('exit-devices', [{ label: 'Device' }, { label: 'Live at exit', num: true }, { label: 'Peak', num: true },
                           { label: 'Allocated in all', num: true }, { label: 'Allocations', num: true }, { label: 'Frees', num: true }],
      rows, e ? 'No device allocated anything.' : 'No end line in the log: the counters at exit are unknown.', 'exit-note',
      e ? 'Ledger counters at exit (reason: ' + e.reason + (e.dropped ? ', ' + plural(e.dropped, 'event') + ' dropped' : '') + ').' : '');
    var p = byId('misuse');
    if (e) {
      var bad = Object.keys(e.misuse).filter(function (k) { return e.misuse[k] > 0; });
      if (bad.length) {
        p.appendChild(document.createTextNode('Misuse: '));
        bad.forEach(function (k, i) {
          p.appendChild(el('span', { 'class': 'bad', text: e.misuse[k] + ' ' + k.replace(/_/g, ' ') }));
          if (i + 1 < bad.length) { p.appendChild(document.createTextNode(', ')); }
        });
        p.appendChild(document.createTextNode(' (see the program\'s stderr for the stacks).'));
      } else {
        p.textContent = 'Misuse: none (no double free, unknown pointer, wrong size or wrong device).';
      }
    }
  })();

  (function logPanel() {
    var src = data.source;
    var note = byId('log-note');
    note.textContent = 'Read ' + plural(src.lines_read, 'line') + ' from ' + src.path + ': ' +
      plural(src.events_used, 'event') + ' used, ' + plural(src.lines_skipped, 'line') + ' skipped' +
      (src.unknown_type_lines ? ', ' + fmtInt(src.unknown_type_lines) + ' of unknown types ignored' : '') + '.' +
      (src.last_line_cut ? ' The last line was cut (the process ended while writing it).' : '');
    var ul = byId('skipped-lines');
    data.skipped.lines.forEach(function (s) {
      ul.appendChild(el('li', { 'class': 'skipped', 'data-line': s.line },
        el('span', { 'class': 'ln', text: 'line ' + s.line }), s.reason));
    });
    var rest = data.skipped.count - data.skipped.lines.length;
    if (rest > 0) {
      ul.appendChild(el('li', { 'class': 'more', text: 'and ' + plural(rest, 'more line') +
        ' (all are named on gpuguard report\'s stderr)' }));
    }
  })();

  document.body.setAttribute('data-rendered', 'true');
})();
