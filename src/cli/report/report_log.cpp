#include "report/report_log.hpp"

#include "util/format.hpp"
#include "json.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpuguard::cli {

namespace {

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
// Nesting deeper than any event of version 1 needs (a frame inside a site inside an event is 4).
constexpr std::size_t event_max_depth = 32;
// Bounds on what one event may bring in, beyond the schema's own.
constexpr std::size_t max_sites_kept = 100;
constexpr std::size_t max_leak_sites_kept = 200;
constexpr std::size_t max_frames_kept = 64;
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

// Sums of byte counts from a hostile log must not overflow (undefined behaviour for int64).
std::int64_t add_saturated(std::int64_t a, std::int64_t b) noexcept {
  if (b > 0 && a > int64_max - b) { return int64_max; }
  if (b < 0 && a < int64_min - b) { return int64_min; }
  return a + b;
}

// ---- field access ------------------------------------------------------------------------------

// Reads the fields of one event (or of an object inside it), keeping the first thing wrong as the
// reason to skip the line. Getters return a harmless default once something is wrong, so callers
// read every field they need and check ok() once.
class fields {
 public:
  fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  [[nodiscard]] bool ok() const noexcept { return error_.empty(); }
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  void set_error(std::string message) {
    if (error_.empty()) { error_ = std::move(message); }
  }

  std::int64_t count(std::string_view name) { return at_least(name, 0, "a non-negative integer"); }
  std::int64_t device(std::string_view name) { return at_least(name, -1, "an integer >= -1"); }
  std::int64_t integer(std::string_view name) { return at_least(name, int64_min, "an integer"); }
  std::optional<std::int64_t> optional_count(std::string_view name) {
    if (member(object_, name) == nullptr) { return std::nullopt; }
    return count(name);
  }
  std::optional<std::int64_t> optional_device(std::string_view name) {
    if (member(object_, name) == nullptr) { return std::nullopt; }
    return device(name);
  }
  std::optional<std::int64_t> optional_integer(std::string_view name) {
    if (member(object_, name) == nullptr) { return std::nullopt; }
    return integer(name);
  }

  std::string string(std::string_view name) {
    const json* v = get(name);
    if (v == nullptr) { return {}; }
    if (!v->is_string()) {
      wrong(name, "a string", *v);
      return {};
    }
    return v->get<std::string>();
  }
  std::optional<std::string> optional_string(std::string_view name) {
    if (member(object_, name) == nullptr) { return std::nullopt; }
    return string(name);
  }

  bool boolean(std::string_view name) {
    const json* v = get(name);
    if (v == nullptr) { return false; }
    if (!v->is_boolean()) {
      wrong(name, "true or false", *v);
      return false;
    }
    return v->get<bool>();
  }

  double number(std::string_view name) {
    const json* v = get(name);
    if (v == nullptr) { return 0.0; }
    if (!v->is_number()) {
      wrong(name, "a number", *v);
      return 0.0;
    }
    return v->get<double>();
  }

  const json* array(std::string_view name) {
    const json* v = get(name);
    if (v == nullptr) { return nullptr; }
    if (!v->is_array()) {
      wrong(name, "an array", *v);
      return nullptr;
    }
    return v;
  }

  const json* object(std::string_view name) {
    const json* v = get(name);
    if (v == nullptr) { return nullptr; }
    if (!v->is_object()) {
      wrong(name, "an object", *v);
      return nullptr;
    }
    return v;
  }

  [[nodiscard]] std::string path(std::string_view name) const { return where_ + std::string(name); }
  [[nodiscard]] bool has(std::string_view name) const { return member(object_, name) != nullptr; }

 private:
  const json* get(std::string_view name) {
    const json* v = member(object_, name);
    if (v == nullptr) { set_error("field \"" + path(name) + "\" is missing"); }
    return v;
  }

  std::int64_t at_least(std::string_view name, std::int64_t minimum, const char* expected) {
    const json* v = get(name);
    if (v == nullptr) { return 0; }
    if (!v->is_number_integer() || v->get<std::int64_t>() < minimum) {
      wrong(name, expected, *v);
      return 0;
    }
    return v->get<std::int64_t>();
  }

  void wrong(std::string_view name, const char* expected, const json& v) {
    std::string actual;
    if (v.is_number_integer()) {
      actual = std::to_string(v.get<std::int64_t>());
    } else if (v.is_number()) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v.get<double>());
      actual = text;
    } else {
      actual = std::string("a JSON ") + kind_name(v);
    }
    set_error("field \"" + path(name) + "\" must be " + expected + ", not " + actual);
  }

  const json& object_;
  std::string where_;
  std::string error_;
};

// Walks the array `list`, the field `name` of an event (a path: "sites[2].frames"), calling
// `each(fields&, index)` on each element in order. The first element that is not an object, or
// for which `each` returns a reason, ends the walk with that reason; "" when all were read.
template <typename Each>
std::string for_each_object(const json& list, const std::string& name, Each&& each) {
  std::size_t index = 0;
  for (const json& item : list) {
    const std::string here = name + "[" + std::to_string(index) + "]";
    if (!item.is_object()) { return "\"" + here + "\" must be an object, not a JSON " + kind_name(item); }
    fields f(item, here + ".");
    std::string problem = each(f, index);
    if (!problem.empty()) { return problem; }
    ++index;
  }
  return {};
}

// Validates a site's `frames` array (at `where`, "sites[2]."): [{address, function, file, line}],
// innermost first. Returns the first max_frames_kept; what is wrong with them goes to `parent`.
json frames_json(fields& parent, const json* frames, const std::string& where) {
  json out = json::array();
  if (frames == nullptr) { return out; }
  std::string problem = for_each_object(*frames, where + "frames", [&](fields& f, std::size_t index) {
    std::string address = f.string("address");
    std::string function = f.string("function");
    std::string file = f.string("file");
    const std::int64_t line = f.count("line");
    if (!f.ok()) { return f.error(); }
    if (index < max_frames_kept) {
      out.push_back({{"address", std::move(address)}, {"function", std::move(function)}, {"file", std::move(file)},
                     {"line", line}});
    }
    return std::string();
  });
  if (!problem.empty()) { parent.set_error(std::move(problem)); }
  return out;
}

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

struct op_band {
  std::uint64_t seq = 0;
  std::string name;
  std::int64_t thread = 0;
  std::int64_t depth = 0;
  std::int64_t t = 0;
  std::int64_t dur = 0;
  std::int64_t alloc_bytes = 0;
  std::int64_t free_bytes = 0;
  std::int64_t net_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocs = 0;
  std::int64_t frees = 0;
  bool exception = false;
  std::optional<std::int64_t> device;
  std::int64_t used_before = 0;
  std::int64_t used_after = 0;
};

struct thread_state {
  bool described = false;  // a `thread` event was seen
  std::int64_t tid = 0;
  std::string name;
  std::vector<op_band> ops;
  std::size_t total_ops = 0;
  bool thinned = false;
};

struct op_stats {
  std::int64_t calls = 0;
  std::int64_t total_dur = 0;
  std::int64_t max_dur = 0;
  std::int64_t total_alloc = 0;
  std::int64_t max_peak = 0;
  std::int64_t total_net = 0;
  std::int64_t exceptions = 0;

  void add(const op_band& op) {
    ++calls;
    total_dur = add_saturated(total_dur, op.dur);
    max_dur = std::max(max_dur, op.dur);
    total_alloc = add_saturated(total_alloc, op.alloc_bytes);
    max_peak = std::max(max_peak, op.peak_bytes);
    total_net = add_saturated(total_net, op.net_bytes);
    if (op.exception) { ++exceptions; }
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
      if (!chosen[i] && (!exceptions_only || ops[i].exception)) { candidates.push_back(i); }
    }
    const std::size_t n = std::min(quota, candidates.size());
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n), candidates.end(),
                      [&](std::size_t a, std::size_t b) { return better(ops[a], ops[b]); });
    for (std::size_t k = 0; k < n; ++k) { chosen[candidates[k]] = true; }
    taken += n;
  };
  const auto longer = [](const op_band& a, const op_band& b) {
    return a.dur != b.dur ? a.dur > b.dur : a.seq < b.seq;
  };
  const auto bigger = [](const op_band& a, const op_band& b) {
    if (a.peak_bytes != b.peak_bytes) { return a.peak_bytes > b.peak_bytes; }
    if (a.alloc_bytes != b.alloc_bytes) { return a.alloc_bytes > b.alloc_bytes; }
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

}  // namespace

// ---- the aggregate ---------------------------------------------------------------------------------

struct log_aggregate::state {
  explicit state(report_limits l) : limits(l) {}

  report_limits limits;
  std::size_t lines_read = 0;
  std::size_t events_used = 0;
  std::size_t lines_skipped = 0;
  std::vector<std::pair<std::size_t, std::string>> skipped_shown;
  std::map<std::string, std::size_t, std::less<>> unknown_types;
  std::size_t unknown_type_lines = 0;

  // start
  std::size_t start_line = 0;
  std::int64_t pid = 0;
  std::string program;
  std::int64_t unix_ns = 0;
  std::string stack_backend;
  std::int64_t max_t = 0;

  std::map<std::int64_t, device_state> devices;
  std::map<std::int64_t, thread_state> threads;
  std::uint64_t op_seq = 0;
  std::size_t op_events = 0;
  std::size_t ops_of_untracked_threads = 0;
  std::map<std::string, op_stats, std::less<>> op_names;
  op_stats other_names;

  std::vector<json> alerts;
  std::size_t alert_events = 0;

  std::int64_t dropped_sum = 0;
  std::int64_t dropped_total = 0;
  std::size_t dropped_lines = 0;

  json sites;  // the `sites` event as the page shows it, null if none
  json leaks;  // the `leaks` event, null if none
  json end;    // the `end` event, null if none
  json crash;  // the `crash` event, null if none
  std::int64_t end_t = -1;
  std::int64_t end_dropped = 0;

  // Device `id`'s state, made on its first line; nullptr past max_devices_kept devices.
  device_state* device(std::int64_t id) {
    auto found = devices.find(id);
    if (found == devices.end()) {
      if (devices.size() >= max_devices_kept) { return nullptr; }
      found = devices.emplace(id, device_state(limits.max_buckets, limits.max_bands)).first;
    }
    return &found->second;
  }
  static std::string too_many_devices(std::int64_t id) {
    return "device " + std::to_string(id) + " is past the " + std::to_string(max_devices_kept) +
           " devices a report keeps";
  }

  void see_time(std::int64_t t) { max_t = std::max(max_t, t); }

  std::string event(const std::string& type, fields& f, std::int64_t t, std::size_t number);
  std::string on_start(fields& f, std::size_t number);
  std::string on_device(fields& f);
  std::string on_thread(fields& f);
  std::string on_mem(fields& f, std::int64_t t);
  std::string on_alloc_or_free(bool alloc, fields& f, std::int64_t t);
  std::string on_mem_step(fields& f, std::int64_t t);
  std::uint64_t alloc_seq = 0;
  std::size_t open_allocations = 0;  // over every device's `open`
  std::string on_op(fields& f, std::int64_t t);
  std::string on_alert(fields& f, std::int64_t t);
  std::string on_dropped(fields& f);
  std::string on_sites(fields& f);
  std::string on_leaks(fields& f);
  std::string on_end(fields& f, std::int64_t t);
  std::string on_crash(fields& f, std::int64_t t);
  void note_backend(fields& f) {
    std::optional<std::string> backend = f.optional_string("stack_backend");
    if (f.ok() && backend && !backend->empty()) { stack_backend = *backend; }
  }
};

log_aggregate::log_aggregate(report_limits limits) : state_(std::make_unique<state>(limits)) {}
log_aggregate::~log_aggregate() = default;
log_aggregate::log_aggregate(log_aggregate&&) noexcept = default;
log_aggregate& log_aggregate::operator=(log_aggregate&&) noexcept = default;

std::size_t log_aggregate::lines_read() const noexcept { return state_->lines_read; }
std::size_t log_aggregate::events_used() const noexcept { return state_->events_used; }
std::size_t log_aggregate::lines_skipped() const noexcept { return state_->lines_skipped; }
const std::string& log_aggregate::program() const noexcept { return state_->program; }

std::string log_aggregate::add_skipped_line(std::size_t number, std::string reason) {
  state& s = *state_;
  ++s.lines_read;
  ++s.lines_skipped;
  if (s.skipped_shown.size() < s.limits.max_skipped_shown) { s.skipped_shown.emplace_back(number, reason); }
  return reason;
}

std::string log_aggregate::add_line(std::string_view line, std::size_t number, bool unterminated) {
  state& s = *state_;
  const auto skip = [&](std::string reason) {
    --s.lines_read;  // add_skipped_line counts it again
    return add_skipped_line(number, std::move(reason));
  };
  ++s.lines_read;

  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return skip(unterminated ? "truncated last line (no newline at the end)" : "blank line");
  }
  json_error error;
  const std::optional<json> value = parse_json(line, &error, event_max_depth);
  if (!value) {
    const std::string where = error.message + " at column " + std::to_string(error.offset + 1);
    if (unterminated) {
      return skip("truncated last line (no newline at the end; the writer may have stopped mid-line): " + where);
    }
    return skip("not JSON: " + where);
  }
  if (!value->is_object()) {
    return skip(std::string("a JSON ") + kind_name(*value) + ", not an object");
  }
  fields header(*value, "");
  const std::int64_t version = header.integer("v");
  if (!header.ok()) { return skip(header.error()); }
  if (version != 1) {
    return skip("unknown version v=" + std::to_string(version) + " (this reader knows version 1)");
  }
  const std::string type = header.string("type");
  const std::int64_t t = header.count("t");
  if (!header.ok()) { return skip(header.error()); }

  fields f(*value, "");
  std::string problem = s.event(type, f, t, number);
  if (problem == "unknown") {
    ++s.unknown_type_lines;
    auto found = s.unknown_types.find(type);
    if (found != s.unknown_types.end()) {
      ++found->second;
    } else if (s.unknown_types.size() < max_unknown_types) {
      s.unknown_types.emplace(type, 1);
    }
    return {};
  }
  if (!problem.empty()) { return skip(type + ": " + problem); }
  ++s.events_used;
  s.see_time(t);
  return {};
}

std::string log_aggregate::state::event(const std::string& type, fields& f, std::int64_t t, std::size_t number) {
  if (type == "start") { return on_start(f, number); }
  if (type == "device") { return on_device(f); }
  if (type == "thread") { return on_thread(f); }
  if (type == "mem") { return on_mem(f, t); }
  if (type == "alloc" || type == "free") { return on_alloc_or_free(type == "alloc", f, t); }
  if (type == "mem_step") { return on_mem_step(f, t); }
  if (type == "op") { return on_op(f, t); }
  if (type == "alert") { return on_alert(f, t); }
  if (type == "dropped") { return on_dropped(f); }
  if (type == "sites") { return on_sites(f); }
  if (type == "leaks") { return on_leaks(f); }
  if (type == "end") { return on_end(f, t); }
  if (type == "crash") { return on_crash(f, t); }
  return "unknown";
}

std::string log_aggregate::state::on_start(fields& f, std::size_t number) {
  const std::string schema = f.string("schema");
  const std::int64_t new_pid = f.count("pid");
  std::string new_program = f.string("program");
  const std::int64_t new_unix_ns = f.count("unix_ns");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  // Quoted as JSON: the log's own text must not add lines (or terminal escapes) to stderr.
  if (schema != "gpuguard.events") { return "schema is " + detail::json_string(schema) + ", not \"gpuguard.events\""; }
  if (start_line != 0) { return "a second start line (the first is line " + std::to_string(start_line) + ")"; }
  start_line = number;
  pid = new_pid;
  program = std::move(new_program);
  unix_ns = new_unix_ns;
  return {};
}

std::string log_aggregate::state::on_device(fields& f) {
  const std::int64_t id = f.device("device");
  std::string name = f.string("name");
  const std::int64_t total = f.count("total_bytes");
  if (!f.ok()) { return f.error(); }
  device_state* const kept = device(id);
  if (kept == nullptr) { return too_many_devices(id); }
  device_state& d = *kept;
  d.described = true;
  d.name = std::move(name);
  d.total_bytes = total;
  return {};
}

std::string log_aggregate::state::on_thread(fields& f) {
  const std::int64_t id = f.count("thread");
  const std::int64_t tid = f.count("tid");
  std::string name = f.string("name");
  if (!f.ok()) { return f.error(); }
  if (threads.find(id) == threads.end() && threads.size() >= max_threads_kept) {
    return {};  // a thread past those kept: its ops are counted, not drawn, so nothing to name
  }
  thread_state& th = threads[id];
  th.described = true;
  th.tid = tid;
  th.name = std::move(name);
  return {};
}

std::string log_aggregate::state::on_mem(fields& f, std::int64_t t) {
  const std::int64_t id = f.device("device");
  const std::int64_t live = f.count("live_bytes");
  const std::int64_t peak = f.count("peak_bytes");
  const std::int64_t allocations = f.count("allocations");
  const std::int64_t frees = f.count("frees");
  const std::optional<std::int64_t> used = f.optional_count("used_bytes");
  const std::optional<std::int64_t> total = f.optional_count("total_bytes");
  if (!f.ok()) { return f.error(); }
  if (used.has_value() != total.has_value()) {
    return used ? "field \"used_bytes\" without \"total_bytes\"" : "field \"total_bytes\" without \"used_bytes\"";
  }
  device_state* const kept = device(id);
  if (kept == nullptr) { return too_many_devices(id); }
  device_state& d = *kept;
  d.live.add(t, live);
  d.peak.add(t, std::max(peak, live));
  if (used) {
    d.used.add(t, *used);
    d.mem_total_bytes = *total;
  }
  if (t >= d.last_mem_t) {
    d.last_mem_t = t;
    d.allocations = allocations;
    d.frees = frees;
  }
  return {};
}

std::string log_aggregate::state::on_alloc_or_free(bool alloc, fields& f, std::int64_t t) {
  const std::int64_t id = f.device("device");
  const std::string address_text = f.string("address");
  const std::int64_t bytes = f.count("bytes");
  const std::int64_t live = f.count("live_bytes");
  const std::int64_t site = f.count("site");
  const std::int64_t thread = f.count("thread");
  if (!f.ok()) { return f.error(); }
  std::uint64_t address = 0;
  if (address_text.rfind("0x", 0) != 0 || !detail::parse_hex(address_text, address)) {
    return "field \"address\" must be a hexadecimal address (\"0x...\"), not " + detail::json_string(address_text.substr(0, 40));
  }
  device_state* const kept = device(id);
  if (kept == nullptr) { return too_many_devices(id); }
  device_state& d = *kept;
  ++d.timeline_lines;
  d.live.add(t, live);
  auto found = d.open.find(address);
  if (found != d.open.end()) {  // freed (or, for an alloc, handed out again) here
    alloc_band band = found->second;
    band.end = std::max(t, band.t);
    d.bands.add(band);
    d.open.erase(found);
    --open_allocations;
  } else if (!alloc) {
    ++d.unpaired_frees;  // its alloc line is not in the log (or was past the pairing limit)
  }
  if (alloc) {
    ++d.alloc_lines;
    if (open_allocations >= max_open_allocations) {
      ++d.not_paired;
    } else {
      ++open_allocations;
      alloc_band band;
      band.seq = alloc_seq++;
      band.t = t;
      band.bytes = bytes;
      band.site = site;
      band.thread = thread;
      d.open.emplace(address, band);
    }
  }
  return {};
}

std::string log_aggregate::state::on_mem_step(fields& f, std::int64_t t) {
  const std::int64_t step_end = f.count("end");
  const std::int64_t id = f.device("device");
  const std::int64_t end_bytes = f.count("end_bytes");
  const std::int64_t min_bytes = f.count("min_bytes");
  const std::int64_t step_min_t = f.count("min_t");
  const std::int64_t max_bytes = f.count("max_bytes");
  const std::int64_t step_max_t = f.count("max_t");
  const std::int64_t allocs = f.count("allocs");
  static_cast<void>(f.count("start_bytes"));  // checked, not drawn: the line before ends there
  static_cast<void>(f.count("frees"));
  if (!f.ok()) { return f.error(); }
  if (min_bytes > max_bytes) { return "field \"min_bytes\" is above \"max_bytes\""; }
  device_state* const kept = device(id);
  if (kept == nullptr) { return too_many_devices(id); }
  device_state& d = *kept;
  ++d.timeline_lines;
  ++d.step_lines;
  d.folded_allocs = add_saturated(d.folded_allocs, allocs);
  d.live.add(step_min_t, min_bytes);
  d.live.add(step_max_t, max_bytes);
  d.live.add(std::max(step_end, t), end_bytes);
  see_time(step_end);
  return {};
}

std::string log_aggregate::state::on_op(fields& f, std::int64_t t) {
  op_band op;
  op.name = f.string("name");
  op.thread = f.count("thread");
  op.depth = f.count("depth");
  op.dur = f.count("dur");
  op.alloc_bytes = f.count("alloc_bytes");
  op.free_bytes = f.count("free_bytes");
  op.net_bytes = f.integer("net_bytes");
  op.peak_bytes = f.count("peak_bytes");
  op.allocs = f.count("allocs");
  op.frees = f.count("frees");
  op.exception = f.boolean("exception");
  op.device = f.optional_device("device");
  if (op.device) {
    op.used_before = f.count("used_before");
    op.used_after = f.count("used_after");
  }
  if (!f.ok()) { return f.error(); }
  op.t = t;
  op.seq = op_seq++;
  ++op_events;
  see_time(add_saturated(t, op.dur));

  auto found = op_names.find(op.name);
  if (found != op_names.end()) {
    found->second.add(op);
  } else if (op_names.size() < limits.max_op_names) {
    op_names[op.name].add(op);
  } else {
    other_names.add(op);
  }

  if (threads.find(op.thread) == threads.end() && threads.size() >= max_threads_kept) {
    ++ops_of_untracked_threads;  // counted in the summary above, not drawn
    return {};
  }
  thread_state& th = threads[op.thread];
  ++th.total_ops;
  th.ops.push_back(std::move(op));
  // Thin in batches: keeping up to twice the budget makes the cost per op constant on average.
  if (th.ops.size() > 2 * limits.max_ops_per_thread) {
    const std::vector<std::size_t> kept = select_bands(th.ops, limits.max_ops_per_thread);
    std::vector<op_band> thinned;
    thinned.reserve(kept.size());
    for (std::size_t i : kept) { thinned.push_back(std::move(th.ops[i])); }
    th.ops.swap(thinned);
    th.thinned = true;
  }
  return {};
}

std::string log_aggregate::state::on_alert(fields& f, std::int64_t t) {
  const std::string kind = f.string("kind");
  const std::int64_t suppressed = f.count("suppressed");
  const std::string message = f.string("message");
  if (!f.ok()) { return f.error(); }
  json out = {{"t", t}, {"kind", kind}, {"suppressed", suppressed}, {"message", message}};
  if (kind == "op_growth") {
    const std::string name = f.string("name");
    const std::int64_t thread = f.count("thread");
    const std::int64_t net = f.integer("net_bytes");
    const std::int64_t limit = f.count("limit_bytes");
    if (!f.ok()) { return f.error(); }
    out["name"] = name;
    out["thread"] = thread;
    out["net_bytes"] = net;
    out["limit_bytes"] = limit;
  } else if (kind == "device_full" || kind == "device_recovered") {
    const std::int64_t id = f.device("device");
    const double fraction = f.number("fraction");
    const double threshold = f.number("threshold");
    const std::int64_t used = f.count("used_bytes");
    const std::int64_t total = f.count("total_bytes");
    if (!f.ok()) { return f.error(); }
    out["device"] = id;
    out["fraction"] = fraction;
    out["threshold"] = threshold;
    out["used_bytes"] = used;
    out["total_bytes"] = total;
  } else {
    // A kind this reader does not know: shown with its message only.
    const std::optional<std::int64_t> id = f.optional_device("device");
    if (f.ok() && id) { out["device"] = *id; }
  }
  ++alert_events;
  if (alerts.size() < limits.max_alerts) { alerts.push_back(std::move(out)); }
  return {};
}

std::string log_aggregate::state::on_dropped(fields& f) {
  const std::int64_t count = f.count("count");
  const std::int64_t total = f.count("total");
  if (!f.ok()) { return f.error(); }
  ++dropped_lines;
  dropped_sum = add_saturated(dropped_sum, count);
  dropped_total = std::max(dropped_total, total);
  return {};
}

std::string log_aggregate::state::on_sites(fields& f) {
  const bool sampled = f.boolean("sampled");
  const json* list = f.array("sites");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json kept = json::array();
  std::string problem = for_each_object(*list, "sites", [&](fields& site, std::size_t index) {
    const std::int64_t id = site.count("site");
    const std::int64_t allocs = site.count("allocs");
    const std::int64_t bytes = site.count("bytes");
    json frames = frames_json(site, site.array("frames"), site.path(""));
    std::vector<std::int64_t> raw;  // optional (logs before sites were grouped have none)
    const bool has_raw = site.has("raw_sites");
    if (has_raw) {
      if (const json* list_of_raw = site.array("raw_sites")) {
        for (const json& r : *list_of_raw) {
          if (!r.is_number_integer() || r.get<std::int64_t>() < 0) {
            return "field \"" + site.path("raw_sites") + "\" must hold non-negative integers";
          }
          if (raw.size() < max_frames_kept) { raw.push_back(r.get<std::int64_t>()); }
        }
      }
    }
    if (!site.ok()) { return site.error(); }
    if (index < max_sites_kept) {
      json one = {{"site", id}, {"allocs", allocs}, {"bytes", bytes}};
      if (has_raw) { one["raw_sites"] = raw; }
      one["frames"] = std::move(frames);
      kept.push_back(std::move(one));
    }
    return std::string();
  });
  if (!problem.empty()) { return problem; }
  sites = {{"sampled", sampled}, {"count", list->size()}, {"sites", std::move(kept)}};
  return {};
}

std::string log_aggregate::state::on_leaks(fields& f) {
  const std::int64_t total_bytes = f.count("total_bytes");
  const std::int64_t total_count = f.count("total_count");
  const json* list = f.array("sites");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json kept = json::array();
  std::string problem = for_each_object(*list, "sites", [&](fields& site, std::size_t index) {
    const std::int64_t id = site.count("site");
    const std::int64_t dev = site.device("device");
    const std::string tag = site.string("tag");
    const std::int64_t bytes = site.count("bytes");
    const std::int64_t count = site.count("count");
    json frames = frames_json(site, site.array("frames"), site.path(""));
    if (!site.ok()) { return site.error(); }
    if (index < max_leak_sites_kept) {
      kept.push_back({{"site", id}, {"device", dev}, {"tag", tag}, {"bytes", bytes}, {"count", count},
                      {"frames", std::move(frames)}});
    }
    return std::string();
  });
  if (!problem.empty()) { return problem; }
  leaks = {{"total_bytes", total_bytes}, {"total_count", total_count}, {"site_count", list->size()},
           {"sites", std::move(kept)}};
  return {};
}

// The crash line the handler writes (hooks.cpp): kept whole but for the raw frames, which only
// the crash record's mappings can resolve (gpuguard symbolize).
std::string log_aggregate::state::on_crash(fields& f, std::int64_t t) {
  const std::string signal = f.string("signal");
  const std::int64_t code = f.integer("code");
  const std::string address = f.string("address");
  const std::int64_t thread = f.count("thread");
  const std::string crash_file = f.string("crash_file");
  const json* list = f.array("devices");
  if (!f.ok()) { return f.error(); }
  json listed = json::array();
  std::string problem = for_each_object(*list, "devices", [&](fields& d, std::size_t /*index*/) {
    const std::int64_t id = d.device("device");
    const std::int64_t live = d.count("live_bytes");
    const std::int64_t count = d.count("live_count");
    const std::int64_t peak = d.count("peak_bytes");
    if (!d.ok()) { return d.error(); }
    listed.push_back({{"device", id}, {"live_bytes", live}, {"live_count", count}, {"peak_bytes", peak}});
    return std::string();
  });
  if (!problem.empty()) { return problem; }
  crash = {{"t", t}, {"signal", signal}, {"code", code}, {"address", address}, {"thread", thread},
           {"crash_file", crash_file}, {"devices", std::move(listed)}};
  return {};
}

std::string log_aggregate::state::on_end(fields& f, std::int64_t t) {
  const std::string reason = f.string("reason");
  const std::int64_t dropped = f.count("dropped");
  const json* list = f.array("devices");
  const json* misuse = f.object("misuse");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json listed = json::array();
  std::string problem = for_each_object(*list, "devices", [&](fields& d, std::size_t /*index*/) {
    const std::int64_t id = d.device("device");
    const std::int64_t current = d.count("current_bytes");
    const std::int64_t peak = d.count("peak_bytes");
    const std::int64_t total = d.count("total_bytes");
    const std::int64_t allocations = d.count("allocations");
    const std::int64_t frees = d.count("frees");
    if (!d.ok()) { return d.error(); }
    listed.push_back({{"device", id}, {"current_bytes", current}, {"peak_bytes", peak}, {"total_bytes", total},
                       {"allocations", allocations}, {"frees", frees}});
    return std::string();
  });
  if (!problem.empty()) { return problem; }
  json counts = json::object();
  fields m(*misuse, "misuse.");
  for (const auto& [name, value] : misuse->items()) {
    const std::int64_t n = m.count(name);
    if (!m.ok()) { return m.error(); }
    counts[name] = n;
  }
  end = {{"t", t}, {"reason", reason}, {"dropped", dropped}, {"devices", std::move(listed)}, {"misuse", std::move(counts)}};
  end_t = t;
  end_dropped = dropped;
  return {};
}

std::string log_aggregate::data_json(std::string_view title, std::string_view log_path) const {
  const state& s = *state_;
  json out = {{"schema", "gpuguard.report"}, {"version", 1}, {"title", title}};
  json unknown_types = json::object();
  for (const auto& entry : s.unknown_types) { unknown_types[entry.first] = entry.second; }
  out["source"] = {{"path", log_path},
                   {"lines_read", s.lines_read},
                   {"events_used", s.events_used},
                   {"lines_skipped", s.lines_skipped},
                   {"unknown_type_lines", s.unknown_type_lines},
                   {"unknown_types", std::move(unknown_types)}};

  const std::int64_t duration = s.end_t >= 0 ? std::max(s.end_t, s.max_t) : s.max_t;
  out["run"] = {{"has_start", s.start_line != 0},
                {"has_end", !s.end.is_null()},
                {"program", s.program},
                {"pid", s.pid},
                {"unix_ns", s.unix_ns},
                {"start_wall", s.start_line != 0 ? format_utc(s.unix_ns) : std::string()},
                {"duration_ns", duration},
                {"stack_backend", s.stack_backend}};

  out["limits"] = {{"max_buckets", s.limits.max_buckets},
                   {"max_ops_per_thread", s.limits.max_ops_per_thread},
                   {"max_alerts", s.limits.max_alerts},
                   {"max_skipped_shown", s.limits.max_skipped_shown},
                   {"max_bands", s.limits.max_bands}};

  // Devices: real devices by id, host memory (-1) last.
  std::vector<std::int64_t> ids;
  for (const auto& entry : s.devices) { ids.push_back(entry.first); }
  std::stable_partition(ids.begin(), ids.end(), [](std::int64_t id) { return id >= 0; });
  const auto series = [](const downsampled_series& d) {
    const std::vector<sample> points = d.points();
    json t = json::array();
    json v = json::array();
    for (const sample& p : points) {
      t.push_back(p.t);
      v.push_back(p.v);
    }
    return json{{"samples", d.samples()}, {"max", d.max_value()}, {"t", std::move(t)}, {"v", std::move(v)}};
  };
  json devices = json::array();
  for (std::int64_t id : ids) {
    const device_state& d = s.devices.at(id);
    json device = {{"device", id},
                   {"described", d.described},
                   {"name", d.name},
                   {"total_bytes", d.total_bytes > 0 ? d.total_bytes : d.mem_total_bytes},
                   {"samples", d.live.samples()},
                   {"allocations", d.allocations},
                   {"frees", d.frees},
                   {"live", series(d.live)},
                   {"peak", series(d.timeline_lines > 0 ? downsampled_series(2) : d.peak)}};  // the timeline has every step
    // The allocations drawn as bands: those still open at the end run to it.
    band_selection bands = d.bands;
    for (const auto& entry : d.open) {
      alloc_band band = entry.second;
      band.end = std::max(duration, band.t);
      band.live_at_end = true;
      bands.add(band);
    }
    const std::vector<alloc_band> kept = bands.kept();
    json timeline = {{"lines", d.timeline_lines},
                     {"alloc_lines", d.alloc_lines},
                     {"step_lines", d.step_lines},
                     {"folded_allocs", d.folded_allocs},
                     {"unpaired_frees", d.unpaired_frees},
                     {"not_paired", d.not_paired},
                     {"bands_total", bands.seen()},
                     {"bands_drawn", kept.size()}};
    // Columns, not objects: a page of thousands of bands stays small.
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
    device["timeline"] = std::move(timeline);
    device["used"] = d.used.samples() > 0 ? series(d.used) : json(nullptr);
    devices.push_back(std::move(device));
  }
  out["devices"] = std::move(devices);

  // Threads and their (possibly thinned) operation bands.
  // Lanes go to the busiest threads when there are too many to draw.
  std::vector<std::pair<std::size_t, std::int64_t>> busiest;
  for (const auto& entry : s.threads) { busiest.emplace_back(entry.second.total_ops, entry.first); }
  std::stable_sort(busiest.begin(), busiest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> with_lane;
  for (std::size_t i = 0; i < busiest.size() && i < max_lanes; ++i) { with_lane.push_back(busiest[i].second); }
  std::vector<const op_band*> bands;
  json threads = json::array();
  for (const auto& entry : s.threads) {
    const thread_state& th = entry.second;
    const bool lane = std::find(with_lane.begin(), with_lane.end(), entry.first) != with_lane.end();
    const std::vector<std::size_t> kept =
        lane ? select_bands(th.ops, s.limits.max_ops_per_thread) : std::vector<std::size_t>{};
    std::int64_t max_depth = 0;
    for (std::size_t i : kept) {
      bands.push_back(&th.ops[i]);
      max_depth = std::max(max_depth, th.ops[i].depth);
    }
    threads.push_back({{"thread", entry.first},
                       {"described", th.described},
                       {"tid", th.tid},
                       {"name", th.name},
                       {"ops", th.total_ops},
                       {"ops_drawn", kept.size()},
                       {"max_depth", max_depth}});
  }
  out["threads"] = std::move(threads);
  std::stable_sort(bands.begin(), bands.end(), [](const op_band* a, const op_band* b) {
    return a->thread != b->thread ? a->thread < b->thread : a->seq < b->seq;
  });
  json ops = json::array();
  for (const op_band* op : bands) {
    json one = {{"name", op->name},
                {"thread", op->thread},
                {"depth", op->depth},
                {"t", op->t},
                {"dur", op->dur},
                {"alloc_bytes", op->alloc_bytes},
                {"free_bytes", op->free_bytes},
                {"net_bytes", op->net_bytes},
                {"peak_bytes", op->peak_bytes},
                {"allocs", op->allocs},
                {"frees", op->frees},
                {"exception", op->exception}};
    if (op->device) {
      one["device"] = *op->device;
      one["used_before"] = op->used_before;
      one["used_after"] = op->used_after;
    }
    ops.push_back(std::move(one));
  }
  out["ops"] = std::move(ops);
  out["op_events"] = s.op_events;
  out["ops_of_untracked_threads"] = s.ops_of_untracked_threads;

  // The per-name summary covers every op of the log, thinned or not; longest total time first.
  std::vector<std::pair<const std::string*, const op_stats*>> names;
  for (const auto& entry : s.op_names) { names.emplace_back(&entry.first, &entry.second); }
  std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return a.second->total_dur > b.second->total_dur;
  });
  const auto stats = [](std::string_view name, const op_stats& st, bool other) {
    return json{{"name", name},
                {"other", other},
                {"calls", st.calls},
                {"total_dur", st.total_dur},
                {"max_dur", st.max_dur},
                {"total_alloc", st.total_alloc},
                {"max_peak", st.max_peak},
                {"total_net", st.total_net},
                {"exceptions", st.exceptions}};
  };
  json summary = json::array();
  for (const auto& entry : names) { summary.push_back(stats(*entry.first, *entry.second, false)); }
  if (s.other_names.calls > 0) { summary.push_back(stats("(other names)", s.other_names, true)); }
  out["op_summary"] = std::move(summary);

  out["alerts"] = s.alerts;
  out["alert_events"] = s.alert_events;
  out["dropped"] = {{"events", std::max({s.dropped_sum, s.dropped_total, s.end_dropped})},
                    {"lines", s.dropped_lines}};
  out["sites"] = s.sites;
  out["leaks"] = s.leaks;
  out["end"] = s.end;
  out["crash"] = s.crash;

  json skipped = json::array();
  for (const auto& entry : s.skipped_shown) { skipped.push_back({{"line", entry.first}, {"reason", entry.second}}); }
  out["skipped"] = {{"count", s.lines_skipped}, {"lines", std::move(skipped)}};
  // Strings of a log are valid UTF-8 (the reader checked); the replacement covers any that are not.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace gpuguard::cli
