// Folding the log's records into the page's data (report_page_data.hpp): one fold per event type
// into per-device, per-thread and per-name state, each bounded, then one JSON object for the page.
#include "report/report_page_data.hpp"

#include "json.hpp"
#include "util/op_totals.hpp"
#include "util/saturating.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpuguard::cli::report {

namespace {

using detail::add_saturated;
using detail::op_totals;

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::size_t max_unknown_types = 50;
// Threads whose bands are kept while reading, and threads given a lane in the page (the busiest).
// gpuguard numbers threads 1, 2, ...; only a broken or hostile log comes near these.
constexpr std::size_t max_threads_kept = 1024;
constexpr std::size_t max_lanes = 64;
// Devices the report keeps (each with its series and bands): a node has a few, -1 is the host.
// Lines about further devices are skipped with the reason, so that a hostile log naming a new
// device on every line cannot grow the reader without bound.
constexpr std::size_t max_devices_kept = 256;
// Allocations open at once (all devices) that the reader pairs with their frees, about 100 bytes
// each; past it (a hostile log, or a program with more live allocations than this), further ones
// are counted, not drawn.
constexpr std::size_t max_open_allocations = std::size_t{1} << 20;

// ---- downsampling ------------------------------------------------------------------------------

struct sample {
  std::int64_t t = 0;
  std::int64_t v = 0;
};

// A time series reduced to at most `max_buckets` buckets of equal width, each keeping its first,
// last, lowest and highest sample (the "M4" reduction): drawn as a line, it looks like the full
// series at that many pixels, and no peak is lost. The width doubles whenever the buckets overflow,
// so samples may come in any order and the memory used stays bounded.
class downsampled_series {
 public:
  explicit downsampled_series(std::size_t max_buckets) : max_buckets_(std::max<std::size_t>(max_buckets, 2)) {}

  void add(std::int64_t t, std::int64_t v) {
    ++samples_;
    max_ = std::max(max_, v);
    const sample s{t, v};
    const bucket one{s, s, s, s};
    auto [found, inserted] = buckets_.emplace(t / width_, one);
    if (!inserted) { merge(found->second, one); }
    while (buckets_.size() > max_buckets_) { widen(); }
  }

  [[nodiscard]] std::size_t samples() const noexcept { return samples_; }
  [[nodiscard]] std::int64_t max_value() const noexcept { return max_; }

  // The kept samples in time order.
  [[nodiscard]] std::vector<sample> points() const {
    std::vector<sample> out;
    out.reserve(buckets_.size() * 4);
    for (const auto& entry : buckets_) {
      const bucket& b = entry.second;
      sample four[4] = {b.first, b.low, b.high, b.last};
      std::stable_sort(std::begin(four), std::end(four),
                       [](const sample& x, const sample& y) { return x.t < y.t; });
      for (const sample& s : four) {
        if (!out.empty() && out.back().t == s.t && out.back().v == s.v) { continue; }
        out.push_back(s);
      }
    }
    return out;
  }

 private:
  struct bucket {
    sample first, last, low, high;
  };

  static void merge(bucket& into, const bucket& from) {
    if (from.first.t < into.first.t) { into.first = from.first; }
    if (from.last.t >= into.last.t) { into.last = from.last; }
    if (from.low.v < into.low.v || (from.low.v == into.low.v && from.low.t < into.low.t)) { into.low = from.low; }
    if (from.high.v > into.high.v || (from.high.v == into.high.v && from.high.t < into.high.t)) {
      into.high = from.high;
    }
  }

  void widen() {
    width_ = width_ > int64_max / 2 ? int64_max : width_ * 2;
    std::map<std::int64_t, bucket> wider;
    for (const auto& entry : buckets_) {
      const std::int64_t key = entry.second.first.t / width_;
      auto found = wider.find(key);
      if (found == wider.end()) {
        wider.emplace(key, entry.second);
      } else {
        merge(found->second, entry.second);
      }
    }
    buckets_.swap(wider);
  }

  std::size_t max_buckets_;
  std::int64_t width_ = 1;
  std::map<std::int64_t, bucket> buckets_;
  std::size_t samples_ = 0;
  std::int64_t max_ = 0;
};

// ---- allocations as bands --------------------------------------------------------------------

// One allocation over its lifetime, from its `alloc` line to its `free` line (or the end).
struct alloc_band {
  std::uint64_t seq = 0;  // order of the alloc lines
  std::int64_t t = 0;
  std::int64_t end = 0;
  std::int64_t bytes = 0;
  std::int64_t site = 0;
  std::int64_t thread = 0;
  bool live_at_end = false;
};

// Keeps, out of any number of bands, the `keep / 2` largest (bytes) and the `keep / 2` with the
// most area on the chart (bytes times lifetime): the allocations a reader can see, including a
// short spike that makes the peak. Memory stays bounded by `keep`.
class band_selection {
 public:
  explicit band_selection(std::size_t keep) : quota_(std::max<std::size_t>(keep / 2, 1)) {}

  void add(const alloc_band& b) {
    ++seen_;
    offer(by_bytes_, b, static_cast<long double>(b.bytes));
    offer(by_area_, b, static_cast<long double>(b.bytes) * static_cast<long double>(std::max<std::int64_t>(b.end - b.t, 1)));
  }
  [[nodiscard]] std::size_t seen() const noexcept { return seen_; }

  // The kept bands, once each, in the order they were allocated.
  [[nodiscard]] std::vector<alloc_band> kept() const {
    std::vector<alloc_band> out;
    for (const auto* h : {&by_bytes_, &by_area_}) {
      auto copy = *h;
      while (!copy.empty()) {
        out.push_back(copy.top().band);
        copy.pop();
      }
    }
    std::sort(out.begin(), out.end(), [](const alloc_band& a, const alloc_band& b) { return a.seq < b.seq; });
    out.erase(std::unique(out.begin(), out.end(), [](const alloc_band& a, const alloc_band& b) { return a.seq == b.seq; }),
              out.end());
    return out;
  }

 private:
  struct entry {
    long double key;
    alloc_band band;
    // The smallest on top; of equal ones the latest allocated, so the earlier stay.
    bool operator>(const entry& o) const { return key != o.key ? key > o.key : band.seq < o.band.seq; }
  };
  using heap = std::priority_queue<entry, std::vector<entry>, std::greater<>>;

  void offer(heap& h, const alloc_band& b, long double key) const {
    if (h.size() < quota_) {
      h.push({key, b});
    } else if (entry{key, b} > h.top()) {
      h.pop();
      h.push({key, b});
    }
  }

  std::size_t quota_;
  std::size_t seen_ = 0;
  heap by_bytes_;
  heap by_area_;
};

// ---- per-device, per-thread and per-name state ---------------------------------------------------

struct device_state {
  device_state(std::size_t max_buckets, std::size_t max_bands)
      : live(max_buckets), peak(max_buckets), used(max_buckets), bands(max_bands) {}
  bool described = false;     // a `device` event was seen
  std::string name;
  std::int64_t total_bytes = 0;  // from `device`
  std::int64_t mem_total_bytes = 0;  // latest device-wide total from `mem`
  std::int64_t last_mem_t = -1;
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
  downsampled_series live;
  downsampled_series peak;
  downsampled_series used;
  // The memory timeline (`alloc`, `free`, `mem_step`): it draws the live series exactly, and
  // the allocations drawn as bands.
  std::int64_t timeline_lines = 0;
  std::int64_t alloc_lines = 0;
  std::int64_t step_lines = 0;
  std::int64_t folded_allocs = 0;
  std::int64_t unpaired_frees = 0;
  std::int64_t not_paired = 0;  // alloc lines past max_open_allocations
  std::unordered_map<std::uint64_t, alloc_band> open;
  band_selection bands;
};

// An operation drawn as a band: its line's record, when it started, and its place in the log. Its
// name is kept once, in the per-name table: `op.name` is empty and `name` points at the table's
// key, or at "(other names)" for a name past the table's limit, so that the bands of a long log
// take no memory per name.
struct op_band {
  std::uint64_t seq = 0;
  std::int64_t t = 0;
  const std::string* name = nullptr;
  op_event op;
};

struct thread_state {
  bool described = false;  // a `thread` event was seen
  std::int64_t tid = 0;
  std::string name;
  std::vector<op_band> ops;
  std::size_t total_ops = 0;
  bool thinned = false;
};

// The first and last moment of the run's work: its samples, allocations, frees, steps, operation
// scopes and alerts. The page's time axis spans it; the exit (which may come long after) is not in it.
struct time_span {
  bool any = false;
  std::int64_t first = 0;
  std::int64_t last = 0;

  void see(std::int64_t t) {
    first = any ? std::min(first, t) : t;
    last = any ? std::max(last, t) : t;
    any = true;
  }
};

// Which of `ops` to keep when at most `keep` may stay: a quarter of the room goes to operations
// that ended by an exception (longest first), then half of what is left to the longest, and the
// rest to the biggest (peak bytes, then allocated bytes). Returns the kept indices in input order.
std::vector<std::size_t> select_bands(const std::vector<op_band>& ops, std::size_t keep) {
  std::vector<std::size_t> kept;
  if (ops.size() <= keep) {
    kept.resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) { kept[i] = i; }
    return kept;
  }
  std::vector<bool> chosen(ops.size(), false);
  std::size_t taken = 0;
  const auto take_best = [&](std::size_t quota, const auto& better, bool exceptions_only) {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!chosen[i] && (!exceptions_only || ops[i].op.exception)) { candidates.push_back(i); }
    }
    const std::size_t n = std::min(quota, candidates.size());
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n), candidates.end(),
                      [&](std::size_t a, std::size_t b) { return better(ops[a], ops[b]); });
    for (std::size_t k = 0; k < n; ++k) { chosen[candidates[k]] = true; }
    taken += n;
  };
  const auto longer = [](const op_band& a, const op_band& b) {
    return a.op.dur != b.op.dur ? a.op.dur > b.op.dur : a.seq < b.seq;
  };
  const auto bigger = [](const op_band& a, const op_band& b) {
    if (a.op.peak_bytes != b.op.peak_bytes) { return a.op.peak_bytes > b.op.peak_bytes; }
    if (a.op.alloc_bytes != b.op.alloc_bytes) { return a.op.alloc_bytes > b.op.alloc_bytes; }
    return a.seq < b.seq;
  };
  take_best(keep / 4, longer, true);
  take_best((keep - taken) / 2, longer, false);
  take_best(keep - taken, bigger, false);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (chosen[i]) { kept.push_back(i); }
  }
  return kept;
}

std::string format_utc(std::int64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  if (gmtime_r(&seconds, &tm) == nullptr) { return {}; }
  char text[64];
  const int millis = static_cast<int>((unix_ns / 1000000) % 1000);
  std::snprintf(text, sizeof text, "%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return text;
}

// Sets `*error` (when not null) to `reason` and returns false: the line is not used.
bool refuse(std::string* error, std::string reason) {
  if (error != nullptr) { *error = std::move(reason); }
  return false;
}

// ---- records as the page shows them ------------------------------------------------------------

json frames_json(const std::vector<frame>& frames) {
  json out = json::array();
  for (const frame& f : frames) {
    out.push_back({{"address", f.address}, {"function", f.function}, {"file", f.file}, {"line", f.line}});
  }
  return out;
}

json sites_json(const sites_event& e) {
  json kept = json::array();
  for (const site_row& row : e.sites.rows) {
    json one = {{"site", row.site}, {"allocs", row.allocs}, {"bytes", row.bytes}};
    if (row.raw_sites) { one["raw_sites"] = *row.raw_sites; }
    one["frames"] = frames_json(row.frames);
    kept.push_back(std::move(one));
  }
  return {{"sampled", e.sampled}, {"count", e.sites.total}, {"sites", std::move(kept)}};
}

json leaks_json(const leaks_event& e) {
  json kept = json::array();
  for (const leak_row& row : e.sites.rows) {
    kept.push_back({{"site", row.site}, {"device", row.device}, {"tag", row.tag}, {"bytes", row.bytes},
                    {"count", row.count}, {"frames", frames_json(row.frames)}});
  }
  return {{"total_bytes", e.total_bytes}, {"total_count", e.total_count}, {"site_count", e.sites.total},
          {"sites", std::move(kept)}};
}

json end_json(std::int64_t t, const end_event& e) {
  json devices = json::array();
  for (const end_device& d : e.devices) {
    devices.push_back({{"device", d.device}, {"current_bytes", d.current_bytes}, {"peak_bytes", d.peak_bytes},
                       {"total_bytes", d.total_bytes}, {"allocations", d.allocations}, {"frees", d.frees}});
  }
  json misuse = json::object();
  for (const auto& [name, count] : e.misuse) { misuse[name] = count; }
  return {{"t", t}, {"reason", e.reason}, {"dropped", e.dropped}, {"devices", std::move(devices)}, {"misuse", std::move(misuse)}};
}

json crash_json(std::int64_t t, const crash_event& e) {
  json devices = json::array();
  for (const crash_device& d : e.devices) {
    devices.push_back({{"device", d.device}, {"live_bytes", d.live_bytes}, {"live_count", d.live_count},
                       {"peak_bytes", d.peak_bytes}});
  }
  return {{"t", t}, {"signal", e.signal}, {"code", e.code}, {"address", e.address}, {"thread", e.thread},
          {"crash_file", e.crash_file}, {"devices", std::move(devices)}};
}

json alert_json(std::int64_t t, const alert_event& e) {
  json out = {{"t", t}, {"kind", e.kind}, {"suppressed", e.suppressed}, {"message", e.message}};
  if (const auto& g = e.op_growth) {
    out["name"] = g->name;
    out["thread"] = g->thread;
    out["net_bytes"] = g->net_bytes;
    out["limit_bytes"] = g->limit_bytes;
  } else if (const auto& d = e.device_fill) {
    out["device"] = d->device;
    out["fraction"] = d->fraction;
    out["threshold"] = d->threshold;
    out["used_bytes"] = d->used_bytes;
    out["total_bytes"] = d->total_bytes;
  } else if (e.device) {
    out["device"] = *e.device;
  }
  return out;
}

json op_json(const op_band& band) {
  const op_event& op = band.op;
  json one = {{"name", *band.name},           {"thread", op.thread},         {"depth", op.depth},
              {"t", band.t},               {"dur", op.dur},               {"alloc_bytes", op.alloc_bytes},
              {"free_bytes", op.free_bytes}, {"net_bytes", op.net_bytes}, {"peak_bytes", op.peak_bytes},
              {"allocs", op.allocs},       {"frees", op.frees},           {"exception", op.exception}};
  if (op.device) {
    one["device"] = *op.device;
    one["used_before"] = op.used_before;
    one["used_after"] = op.used_after;
  }
  return one;
}

// The per-name table's figures: each column's name in the page's data and the total it shows.
constexpr std::pair<const char*, std::int64_t op_totals::*> op_total_columns[] = {
    {"calls", &op_totals::calls},        {"total_dur", &op_totals::duration_ns}, {"max_dur", &op_totals::max_duration_ns},
    {"total_alloc", &op_totals::alloc_bytes}, {"max_peak", &op_totals::max_peak_bytes}, {"total_net", &op_totals::net_bytes},
    {"exceptions", &op_totals::exceptions}};

json op_totals_json(std::string_view name, const op_totals& st, bool other) {
  json row = {{"name", name}, {"other", other}};
  for (const auto& [column, total] : op_total_columns) { row[column] = st.*total; }
  return row;
}

json series_json(const downsampled_series& d) {
  json t = json::array();
  json v = json::array();
  for (const sample& p : d.points()) {
    t.push_back(p.t);
    v.push_back(p.v);
  }
  return {{"samples", d.samples()}, {"max", d.max_value()}, {"t", std::move(t)}, {"v", std::move(v)}};
}

// A device's allocations drawn as bands: those still open at the end run to `run_end`. Columns,
// not objects: a page of thousands of bands stays small.
json timeline_json(const device_state& d, std::int64_t run_end) {
  band_selection bands = d.bands;
  for (const auto& entry : d.open) {
    alloc_band band = entry.second;
    band.end = std::max(run_end, band.t);
    band.live_at_end = true;
    bands.add(band);
  }
  const std::vector<alloc_band> kept = bands.kept();
  json timeline = {{"lines", d.timeline_lines},         {"alloc_lines", d.alloc_lines},
                   {"step_lines", d.step_lines},        {"folded_allocs", d.folded_allocs},
                   {"unpaired_frees", d.unpaired_frees}, {"not_paired", d.not_paired},
                   {"bands_total", bands.seen()},       {"bands_drawn", kept.size()}};
  const auto column = [&](const char* name, auto get) {
    json values = json::array();
    for (const alloc_band& b : kept) { values.push_back(get(b)); }
    timeline[name] = std::move(values);
  };
  column("t", [](const alloc_band& b) { return b.t; });
  column("end", [](const alloc_band& b) { return b.end; });
  column("bytes", [](const alloc_band& b) { return b.bytes; });
  column("site", [](const alloc_band& b) { return b.site; });
  column("thread", [](const alloc_band& b) { return b.thread; });
  column("live_at_end", [](const alloc_band& b) { return static_cast<std::int64_t>(b.live_at_end); });
  return timeline;
}

json device_json(std::int64_t id, const device_state& d, std::int64_t run_end) {
  json device = {{"device", id},
                 {"described", d.described},
                 {"name", d.name},
                 {"total_bytes", d.total_bytes > 0 ? d.total_bytes : d.mem_total_bytes},
                 {"samples", d.live.samples()},
                 {"allocations", d.allocations},
                 {"frees", d.frees},
                 {"live", series_json(d.live)},
                 // The timeline has every step: no peak between samples to draw.
                 {"peak", series_json(d.timeline_lines > 0 ? downsampled_series(2) : d.peak)}};
  device["timeline"] = timeline_json(d, run_end);
  device["used"] = d.used.samples() > 0 ? series_json(d.used) : json(nullptr);
  return device;
}

}  // namespace

// ---- the page's data ---------------------------------------------------------------------------

struct page_data::state {
  explicit state(report_limits l) : limits(l) {}

  report_limits limits;
  std::size_t lines_read = 0;
  std::size_t events_used = 0;
  std::size_t lines_skipped = 0;
  bool last_line_cut = false;  // the last line was cut short (and is among the skipped)
  std::vector<std::pair<std::size_t, std::string>> skipped_shown;
  std::map<std::string, std::size_t, std::less<>> unknown_types;
  std::size_t unknown_type_lines = 0;

  // start
  std::size_t start_line = 0;
  std::int64_t pid = 0;
  std::string program;
  std::int64_t unix_ns = 0;
  std::string stack_backend;
  std::int64_t max_t = 0;  // the latest moment any line names
  time_span work;

  std::map<std::int64_t, device_state> devices;
  std::uint64_t alloc_seq = 0;
  std::size_t open_allocations = 0;  // over every device's `open`
  std::map<std::int64_t, thread_state> threads;
  std::uint64_t op_seq = 0;
  std::size_t op_events = 0;
  std::size_t ops_of_untracked_threads = 0;
  std::map<std::string, op_totals, std::less<>> op_names;  // keys stay put: bands point at them
  op_totals other_names;
  const std::string other_names_label = "(other names)";

  std::vector<std::pair<std::int64_t, alert_event>> alerts;
  std::size_t alert_events = 0;

  std::int64_t dropped_sum = 0;
  std::int64_t dropped_total = 0;
  std::size_t dropped_lines = 0;

  std::optional<sites_event> sites;
  std::optional<leaks_event> leaks;
  std::optional<std::pair<std::int64_t, end_event>> end;
  std::optional<std::pair<std::int64_t, crash_event>> crash;

  void see_time(std::int64_t t) { max_t = std::max(max_t, t); }
  void note_backend(const std::string& backend) {
    if (!backend.empty()) { stack_backend = backend; }
  }
  void count_unknown(const std::string& type) {
    ++unknown_type_lines;
    auto found = unknown_types.find(type);
    if (found != unknown_types.end()) {
      ++found->second;
    } else if (unknown_types.size() < max_unknown_types) {
      unknown_types.emplace(type, 1);
    }
  }

  // Device `id`'s state, made on its first line; nullptr past max_devices_kept devices, with
  // `*error` saying so.
  device_state* device(std::int64_t id, std::string* error) {
    auto found = devices.find(id);
    if (found == devices.end()) {
      if (devices.size() >= max_devices_kept) {
        refuse(error, "device " + std::to_string(id) + " is past the " + std::to_string(max_devices_kept) +
                          " devices a report keeps");
        return nullptr;
      }
      found = devices.emplace(id, device_state(limits.max_buckets, limits.max_bands)).first;
    }
    return &found->second;
  }

  // One fold per event type (specialised below): true when the event was used, else false with
  // `*error` saying why.
  template <typename Event>
  bool fold(const Event& e, std::int64_t t, std::size_t line, std::string* error);

  void pair_alloc(device_state& d, const alloc_event& e, std::int64_t t);
  void keep_op_band(op_band band);

  [[nodiscard]] std::int64_t run_end() const;
  [[nodiscard]] json source_json(std::string_view log_path) const;
  [[nodiscard]] json run_json() const;
  [[nodiscard]] json limits_json() const;
  [[nodiscard]] json devices_json() const;
  [[nodiscard]] json threads_json(std::vector<const op_band*>& drawn) const;
  [[nodiscard]] json op_summary_json() const;
  [[nodiscard]] json skipped_json() const;
};

template <>
bool page_data::state::fold(const start_event& e, std::int64_t /*t*/, std::size_t line, std::string* error) {
  if (start_line != 0) { return refuse(error, "a second start line (the first is line " + std::to_string(start_line) + ")"); }
  note_backend(e.stack_backend);
  start_line = line;
  pid = e.pid;
  program = e.program;
  unix_ns = e.unix_ns;
  return true;
}

template <>
bool page_data::state::fold(const device_event& e, std::int64_t /*t*/, std::size_t /*line*/, std::string* error) {
  device_state* const d = device(e.device, error);
  if (d == nullptr) { return false; }
  d->described = true;
  d->name = e.name;
  d->total_bytes = e.total_bytes;
  return true;
}

template <>
bool page_data::state::fold(const thread_event& e, std::int64_t /*t*/, std::size_t /*line*/, std::string* /*error*/) {
  if (threads.find(e.thread) == threads.end() && threads.size() >= max_threads_kept) {
    return true;  // a thread past those kept: its ops are counted, not drawn, so nothing to name
  }
  thread_state& th = threads[e.thread];
  th.described = true;
  th.tid = e.tid;
  th.name = e.name;
  return true;
}

template <>
bool page_data::state::fold(const mem_event& e, std::int64_t t, std::size_t /*line*/, std::string* error) {
  device_state* const d = device(e.device, error);
  if (d == nullptr) { return false; }
  d->live.add(t, e.live_bytes);
  d->peak.add(t, std::max(e.peak_bytes, e.live_bytes));
  if (e.used_bytes) {
    d->used.add(t, *e.used_bytes);
    d->mem_total_bytes = e.total_bytes.value_or(0);
  }
  if (t >= d->last_mem_t) {
    d->last_mem_t = t;
    d->allocations = e.allocations;
    d->frees = e.frees;
  }
  work.see(t);
  return true;
}

template <>
bool page_data::state::fold(const alloc_event& e, std::int64_t t, std::size_t /*line*/, std::string* error) {
  device_state* const d = device(e.device, error);
  if (d == nullptr) { return false; }
  ++d->timeline_lines;
  d->live.add(t, e.live_bytes);
  pair_alloc(*d, e, t);
  work.see(t);
  return true;
}

// Ends the band open at the line's address (freed here, or, for an alloc, handed out again), and
// opens one for an alloc, up to max_open_allocations.
void page_data::state::pair_alloc(device_state& d, const alloc_event& e, std::int64_t t) {
  auto found = d.open.find(e.address);
  if (found != d.open.end()) {
    alloc_band band = found->second;
    band.end = std::max(t, band.t);
    d.bands.add(band);
    d.open.erase(found);
    --open_allocations;
  } else if (!e.alloc) {
    ++d.unpaired_frees;  // its alloc line is not in the log (or was past the pairing limit)
  }
  if (!e.alloc) { return; }
  ++d.alloc_lines;
  if (open_allocations >= max_open_allocations) {
    ++d.not_paired;
    return;
  }
  ++open_allocations;
  alloc_band band;
  band.seq = alloc_seq++;
  band.t = t;
  band.bytes = e.bytes;
  band.site = e.site;
  band.thread = e.thread;
  d.open.emplace(e.address, band);
}

template <>
bool page_data::state::fold(const mem_step_event& e, std::int64_t t, std::size_t /*line*/, std::string* error) {
  device_state* const d = device(e.device, error);
  if (d == nullptr) { return false; }
  ++d->timeline_lines;
  ++d->step_lines;
  d->folded_allocs = add_saturated(d->folded_allocs, e.allocs);
  const std::int64_t step_end = std::max(e.end, t);
  d->live.add(e.min_t, e.min_bytes);
  d->live.add(e.max_t, e.max_bytes);
  d->live.add(step_end, e.end_bytes);
  see_time(step_end);
  for (const std::int64_t moment : {t, e.min_t, e.max_t, step_end}) { work.see(moment); }
  return true;
}

template <>
bool page_data::state::fold(const op_event& e, std::int64_t t, std::size_t /*line*/, std::string* /*error*/) {
  ++op_events;
  const std::int64_t op_end = add_saturated(t, e.dur);
  see_time(op_end);
  work.see(t);
  work.see(op_end);
  auto found = op_names.find(e.name);
  if (found == op_names.end() && op_names.size() < limits.max_op_names) {
    found = op_names.emplace(e.name, op_totals{}).first;
  }
  const bool named = found != op_names.end();
  op_totals& totals = named ? found->second : other_names;
  totals.add(e.dur, e.alloc_bytes, e.free_bytes, e.peak_bytes, e.net_bytes, e.exception);
  op_band band{op_seq++, t, named ? &found->first : &other_names_label, e};
  band.op.name = std::string();
  keep_op_band(std::move(band));
  return true;
}

// Keeps an operation's band on its thread's lane, thinning the lane in batches: keeping up to
// twice the budget makes the cost per operation constant on average.
void page_data::state::keep_op_band(op_band band) {
  const std::int64_t thread = band.op.thread;
  if (threads.find(thread) == threads.end() && threads.size() >= max_threads_kept) {
    ++ops_of_untracked_threads;  // counted in the summary, not drawn
    return;
  }
  thread_state& th = threads[thread];
  ++th.total_ops;
  th.ops.push_back(std::move(band));
  if (th.ops.size() <= 2 * limits.max_ops_per_thread) { return; }
  const std::vector<std::size_t> kept = select_bands(th.ops, limits.max_ops_per_thread);
  std::vector<op_band> thinned;
  thinned.reserve(kept.size());
  for (std::size_t i : kept) { thinned.push_back(std::move(th.ops[i])); }
  th.ops.swap(thinned);
  th.thinned = true;
}

template <>
bool page_data::state::fold(const alert_event& e, std::int64_t t, std::size_t /*line*/, std::string* /*error*/) {
  ++alert_events;
  if (alerts.size() < limits.max_alerts) { alerts.emplace_back(t, e); }
  work.see(t);
  return true;
}

template <>
bool page_data::state::fold(const dropped_event& e, std::int64_t /*t*/, std::size_t /*line*/, std::string* /*error*/) {
  ++dropped_lines;
  dropped_sum = add_saturated(dropped_sum, e.count);
  dropped_total = std::max(dropped_total, e.total);
  return true;
}

template <>
bool page_data::state::fold(const sites_event& e, std::int64_t /*t*/, std::size_t /*line*/, std::string* /*error*/) {
  note_backend(e.stack_backend);
  sites = e;
  return true;
}

template <>
bool page_data::state::fold(const leaks_event& e, std::int64_t /*t*/, std::size_t /*line*/, std::string* /*error*/) {
  note_backend(e.stack_backend);
  leaks = e;
  return true;
}

template <>
bool page_data::state::fold(const end_event& e, std::int64_t t, std::size_t /*line*/, std::string* /*error*/) {
  note_backend(e.stack_backend);
  end.emplace(t, e);
  return true;
}

template <>
bool page_data::state::fold(const crash_event& e, std::int64_t t, std::size_t /*line*/, std::string* /*error*/) {
  crash.emplace(t, e);
  return true;
}

page_data::page_data(report_limits limits) : state_(std::make_unique<state>(limits)) {}
page_data::~page_data() = default;
page_data::page_data(page_data&&) noexcept = default;
page_data& page_data::operator=(page_data&&) noexcept = default;

std::size_t page_data::lines_read() const noexcept { return state_->lines_read; }
std::size_t page_data::events_used() const noexcept { return state_->events_used; }
std::size_t page_data::lines_skipped() const noexcept { return state_->lines_skipped; }
bool page_data::last_line_cut() const noexcept { return state_->last_line_cut; }
const std::string& page_data::program() const noexcept { return state_->program; }

void page_data::add_skipped_line(std::size_t number, const std::string& reason) {
  state& s = *state_;
  ++s.lines_read;
  ++s.lines_skipped;
  if (s.skipped_shown.size() < s.limits.max_skipped_shown) { s.skipped_shown.emplace_back(number, reason); }
}

bool page_data::add_line(std::string_view line, std::size_t number, bool unterminated, std::string* error) {
  refusal why;
  const std::optional<log_event> event = parse_event(line, unterminated, &why);
  if (!event) {
    state_->last_line_cut = why.cut;
    add_skipped_line(number, why.reason);
    return refuse(error, std::move(why.reason));
  }
  return add_event(*event, number, error);
}

bool page_data::add_event(const log_event& event, std::size_t number, std::string* error) {
  state& s = *state_;
  if (std::holds_alternative<unknown_event>(event.body)) {
    ++s.lines_read;
    s.count_unknown(event.type);
    return true;
  }
  std::string why;
  const bool used = std::visit(
      [&](const auto& body) {
        if constexpr (std::is_same_v<std::decay_t<decltype(body)>, unknown_event>) {
          return true;  // handled above
        } else {
          return s.fold(body, event.t, number, &why);
        }
      },
      event.body);
  if (!used) {
    why = event.type + ": " + why;
    add_skipped_line(number, why);
    return refuse(error, std::move(why));
  }
  ++s.lines_read;
  ++s.events_used;
  s.see_time(event.t);
  return true;
}

// ---- the page's data as JSON -------------------------------------------------------------------

// When the run ended: its end line, or the last moment any line names when that is later (or when
// there is no end line).
std::int64_t page_data::state::run_end() const { return end ? std::max(end->first, max_t) : max_t; }

json page_data::state::source_json(std::string_view log_path) const {
  json types = json::object();
  for (const auto& entry : unknown_types) { types[entry.first] = entry.second; }
  return {{"path", log_path},
          {"lines_read", lines_read},
          {"events_used", events_used},
          {"lines_skipped", lines_skipped},
          {"last_line_cut", last_line_cut},
          {"unknown_type_lines", unknown_type_lines},
          {"unknown_types", std::move(types)}};
}

json page_data::state::run_json() const {
  return {{"has_start", start_line != 0},
          {"has_end", end.has_value()},
          {"program", program},
          {"pid", pid},
          {"unix_ns", unix_ns},
          {"start_wall", start_line != 0 ? format_utc(unix_ns) : std::string()},
          {"duration_ns", run_end()},
          // The span of the work (samples, allocations, frees, scopes, alerts): the time axis.
          {"work", work.any ? json{{"start_ns", work.first}, {"end_ns", work.last}} : json(nullptr)},
          {"stack_backend", stack_backend}};
}

json page_data::state::limits_json() const {
  return {{"max_buckets", limits.max_buckets},
          {"max_ops_per_thread", limits.max_ops_per_thread},
          {"max_alerts", limits.max_alerts},
          {"max_skipped_shown", limits.max_skipped_shown},
          {"max_bands", limits.max_bands}};
}

// Real devices by id, host memory (-1) last.
json page_data::state::devices_json() const {
  std::vector<std::int64_t> ids;
  for (const auto& entry : devices) { ids.push_back(entry.first); }
  std::stable_partition(ids.begin(), ids.end(), [](std::int64_t id) { return id >= 0; });
  json out = json::array();
  for (std::int64_t id : ids) { out.push_back(device_json(id, devices.at(id), run_end())); }
  return out;
}

// Threads, each with how many of its (possibly thinned) bands are drawn; `drawn` gets those bands.
// Lanes go to the busiest threads when there are too many to draw.
json page_data::state::threads_json(std::vector<const op_band*>& drawn) const {
  std::vector<std::pair<std::size_t, std::int64_t>> busiest;
  for (const auto& entry : threads) { busiest.emplace_back(entry.second.total_ops, entry.first); }
  std::stable_sort(busiest.begin(), busiest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> with_lane;
  for (std::size_t i = 0; i < busiest.size() && i < max_lanes; ++i) { with_lane.push_back(busiest[i].second); }
  json out = json::array();
  for (const auto& [id, th] : threads) {
    const bool lane = std::find(with_lane.begin(), with_lane.end(), id) != with_lane.end();
    const std::vector<std::size_t> kept = lane ? select_bands(th.ops, limits.max_ops_per_thread) : std::vector<std::size_t>{};
    std::int64_t max_depth = 0;
    for (std::size_t i : kept) {
      drawn.push_back(&th.ops[i]);
      max_depth = std::max(max_depth, th.ops[i].op.depth);
    }
    out.push_back({{"thread", id}, {"described", th.described}, {"tid", th.tid}, {"name", th.name},
                   {"ops", th.total_ops}, {"ops_drawn", kept.size()}, {"max_depth", max_depth}});
  }
  std::stable_sort(drawn.begin(), drawn.end(), [](const op_band* a, const op_band* b) {
    return a->op.thread != b->op.thread ? a->op.thread < b->op.thread : a->seq < b->seq;
  });
  return out;
}

// The per-name summary covers every op of the log, thinned or not; longest total time first.
json page_data::state::op_summary_json() const {
  std::vector<std::pair<const std::string*, const op_totals*>> names;
  for (const auto& entry : op_names) { names.emplace_back(&entry.first, &entry.second); }
  std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return a.second->duration_ns > b.second->duration_ns;
  });
  json summary = json::array();
  for (const auto& entry : names) { summary.push_back(op_totals_json(*entry.first, *entry.second, false)); }
  if (other_names.calls > 0) { summary.push_back(op_totals_json(other_names_label, other_names, true)); }
  return summary;
}

json page_data::state::skipped_json() const {
  json lines = json::array();
  for (const auto& [line, reason] : skipped_shown) { lines.push_back({{"line", line}, {"reason", reason}}); }
  return {{"count", lines_skipped}, {"lines", std::move(lines)}};
}

std::string page_data::data_json(std::string_view title, std::string_view log_path) const {
  const state& s = *state_;
  json out = {{"schema", "gpuguard.report"}, {"version", 1}, {"title", title}};
  out["source"] = s.source_json(log_path);
  out["run"] = s.run_json();
  out["limits"] = s.limits_json();
  out["devices"] = s.devices_json();
  std::vector<const op_band*> drawn;
  out["threads"] = s.threads_json(drawn);
  json ops = json::array();
  for (const op_band* band : drawn) { ops.push_back(op_json(*band)); }
  out["ops"] = std::move(ops);
  out["op_events"] = s.op_events;
  out["ops_of_untracked_threads"] = s.ops_of_untracked_threads;
  out["op_summary"] = s.op_summary_json();
  json alerts = json::array();
  for (const auto& [t, alert] : s.alerts) { alerts.push_back(alert_json(t, alert)); }
  out["alerts"] = std::move(alerts);
  out["alert_events"] = s.alert_events;
  const std::int64_t end_dropped = s.end ? s.end->second.dropped : 0;
  out["dropped"] = {{"events", std::max({s.dropped_sum, s.dropped_total, end_dropped})}, {"lines", s.dropped_lines}};
  out["sites"] = s.sites ? sites_json(*s.sites) : json(nullptr);
  out["leaks"] = s.leaks ? leaks_json(*s.leaks) : json(nullptr);
  out["end"] = s.end ? end_json(s.end->first, s.end->second) : json(nullptr);
  out["crash"] = s.crash ? crash_json(s.crash->first, s.crash->second) : json(nullptr);
  out["skipped"] = s.skipped_json();
  // Strings of a log are valid UTF-8 (the reader checked); the replacement covers any that are not.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace gpuguard::cli::report
