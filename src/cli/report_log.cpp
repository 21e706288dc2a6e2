#include "report_log.hpp"

#include "format.hpp"
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

// ---- JSON output -----------------------------------------------------------------------------

// Appends compact JSON; commas are placed by the writer. Strings go through detail::json_string,
// the one escaper every gpuguard output uses.
class json_out {
 public:
  json_out& begin_object() { return open('{'); }
  json_out& end_object() { return close('}'); }
  json_out& begin_array() { return open('['); }
  json_out& end_array() { return close(']'); }
  json_out& key(std::string_view name) {
    separate();
    out_ += detail::json_string(name);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  json_out& integer(std::int64_t v) {
    separate();
    out_ += std::to_string(v);
    return *this;
  }
  json_out& number(double v) {
    separate();
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", v);
    out_ += text;
    return *this;
  }
  json_out& boolean(bool v) {
    separate();
    out_ += v ? "true" : "false";
    return *this;
  }
  json_out& string(std::string_view v) {
    separate();
    out_ += detail::json_string(v);
    return *this;
  }
  json_out& null() {
    separate();
    out_ += "null";
    return *this;
  }
  /// A value already serialised by another json_out.
  json_out& raw(std::string_view json) {
    separate();
    out_ += json;
    return *this;
  }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  json_out& open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  json_out& close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) { return; }
    if (!first_.back()) { out_ += ','; }
    first_.back() = false;
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

// ---- field access ------------------------------------------------------------------------------

// Reads the fields of one event (or of an object inside it), keeping the first thing wrong as the
// reason to skip the line. Getters return a harmless default once something is wrong, so callers
// read every field they need and check ok() once.
class fields {
 public:
  fields(const json_value& object, std::string where) : object_(object), where_(std::move(where)) {}

  [[nodiscard]] bool ok() const noexcept { return error_.empty(); }
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  void set_error(std::string message) {
    if (error_.empty()) { error_ = std::move(message); }
  }

  std::int64_t count(std::string_view name) { return at_least(name, 0, "a non-negative integer"); }
  std::int64_t device(std::string_view name) { return at_least(name, -1, "an integer >= -1"); }
  std::int64_t integer(std::string_view name) { return at_least(name, int64_min, "an integer"); }
  std::optional<std::int64_t> optional_count(std::string_view name) {
    if (object_.find(name) == nullptr) { return std::nullopt; }
    return count(name);
  }
  std::optional<std::int64_t> optional_device(std::string_view name) {
    if (object_.find(name) == nullptr) { return std::nullopt; }
    return device(name);
  }
  std::optional<std::int64_t> optional_integer(std::string_view name) {
    if (object_.find(name) == nullptr) { return std::nullopt; }
    return integer(name);
  }

  std::string string(std::string_view name) {
    const json_value* v = get(name);
    if (v == nullptr) { return {}; }
    if (!v->is_string()) {
      wrong(name, "a string", *v);
      return {};
    }
    return v->as_string();
  }
  std::optional<std::string> optional_string(std::string_view name) {
    if (object_.find(name) == nullptr) { return std::nullopt; }
    return string(name);
  }

  bool boolean(std::string_view name) {
    const json_value* v = get(name);
    if (v == nullptr) { return false; }
    if (!v->is_bool()) {
      wrong(name, "true or false", *v);
      return false;
    }
    return v->as_bool();
  }

  double number(std::string_view name) {
    const json_value* v = get(name);
    if (v == nullptr) { return 0.0; }
    if (!v->is_number()) {
      wrong(name, "a number", *v);
      return 0.0;
    }
    return v->as_double();
  }

  const json_array* array(std::string_view name) {
    const json_value* v = get(name);
    if (v == nullptr) { return nullptr; }
    if (!v->is_array()) {
      wrong(name, "an array", *v);
      return nullptr;
    }
    return &v->as_array();
  }

  const json_value* object(std::string_view name) {
    const json_value* v = get(name);
    if (v == nullptr) { return nullptr; }
    if (!v->is_object()) {
      wrong(name, "an object", *v);
      return nullptr;
    }
    return v;
  }

  [[nodiscard]] std::string path(std::string_view name) const { return where_ + std::string(name); }

 private:
  const json_value* get(std::string_view name) {
    const json_value* v = object_.find(name);
    if (v == nullptr) { set_error("field \"" + path(name) + "\" is missing"); }
    return v;
  }

  std::int64_t at_least(std::string_view name, std::int64_t minimum, const char* expected) {
    const json_value* v = get(name);
    if (v == nullptr) { return 0; }
    if (!v->is_integer() || v->as_integer() < minimum) {
      wrong(name, expected, *v);
      return 0;
    }
    return v->as_integer();
  }

  void wrong(std::string_view name, const char* expected, const json_value& v) {
    std::string actual;
    if (v.is_integer()) {
      actual = std::to_string(v.as_integer());
    } else if (v.is_number()) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v.as_double());
      actual = text;
    } else {
      actual = std::string("a JSON ") + kind_name(v.type());
    }
    set_error("field \"" + path(name) + "\" must be " + expected + ", not " + actual);
  }

  const json_value& object_;
  std::string where_;
  std::string error_;
};

// Validates and re-serialises a frames array: [{address, function, file, line}], innermost first.
std::string frames_json(fields& parent, const json_array* frames, const std::string& where) {
  json_out out;
  out.begin_array();
  if (frames != nullptr) {
    std::size_t index = 0;
    for (const json_value& frame : *frames) {
      const std::string here = where + "frames[" + std::to_string(index) + "]";
      if (!frame.is_object()) {
        parent.set_error("\"" + here + "\" must be an object, not a JSON " + kind_name(frame.type()));
        break;
      }
      fields f(frame, here + ".");
      std::string address = f.string("address");
      std::string function = f.string("function");
      std::string file = f.string("file");
      const std::int64_t line = f.count("line");
      if (!f.ok()) {
        parent.set_error(f.error());
        break;
      }
      if (index < max_frames_kept) {
        out.begin_object()
            .key("address").string(address)
            .key("function").string(function)
            .key("file").string(file)
            .key("line").integer(line)
            .end_object();
      }
      ++index;
    }
  }
  out.end_array();
  return out.take();
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

  std::vector<std::string> alerts;  // serialised
  std::size_t alert_events = 0;

  std::int64_t dropped_sum = 0;
  std::int64_t dropped_total = 0;
  std::size_t dropped_lines = 0;

  std::string sites;   // serialised `sites` event, "" if none
  std::string leaks;   // serialised `leaks` event, "" if none
  std::string end;     // serialised `end` event, "" if none
  std::string crash;   // serialised `crash` event, "" if none
  std::int64_t end_t = -1;
  std::int64_t end_dropped = 0;

  device_state& device(std::int64_t id) {
    auto found = devices.find(id);
    if (found == devices.end()) {
      found = devices.emplace(id, device_state(limits.max_buckets, limits.max_bands)).first;
    }
    return found->second;
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
  const std::optional<json_value> value = parse_json(line, &error, event_max_depth);
  if (!value) {
    const std::string where = error.message + " at column " + std::to_string(error.offset + 1);
    if (unterminated) {
      return skip("truncated last line (no newline at the end; the writer may have stopped mid-line): " + where);
    }
    return skip("not JSON: " + where);
  }
  if (!value->is_object()) {
    return skip(std::string("a JSON ") + kind_name(value->type()) + ", not an object");
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
  device_state& d = device(id);
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
  device_state& d = device(id);
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
  device_state& d = device(id);
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
  device_state& d = device(id);
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
  json_out out;
  out.begin_object().key("t").integer(t).key("kind").string(kind).key("suppressed").integer(suppressed)
      .key("message").string(message);
  if (kind == "op_growth") {
    const std::string name = f.string("name");
    const std::int64_t thread = f.count("thread");
    const std::int64_t net = f.integer("net_bytes");
    const std::int64_t limit = f.count("limit_bytes");
    if (!f.ok()) { return f.error(); }
    out.key("name").string(name).key("thread").integer(thread).key("net_bytes").integer(net)
        .key("limit_bytes").integer(limit);
  } else if (kind == "device_full" || kind == "device_recovered") {
    const std::int64_t id = f.device("device");
    const double fraction = f.number("fraction");
    const double threshold = f.number("threshold");
    const std::int64_t used = f.count("used_bytes");
    const std::int64_t total = f.count("total_bytes");
    if (!f.ok()) { return f.error(); }
    out.key("device").integer(id).key("fraction").number(fraction).key("threshold").number(threshold)
        .key("used_bytes").integer(used).key("total_bytes").integer(total);
  } else {
    // A kind this reader does not know: shown with its message only.
    const std::optional<std::int64_t> id = f.optional_device("device");
    if (f.ok() && id) { out.key("device").integer(*id); }
  }
  out.end_object();
  ++alert_events;
  if (alerts.size() < limits.max_alerts) { alerts.push_back(out.take()); }
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
  const json_array* list = f.array("sites");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json_out out;
  out.begin_object().key("sampled").boolean(sampled).key("count").integer(static_cast<std::int64_t>(list->size()));
  out.key("sites").begin_array();
  std::size_t index = 0;
  for (const json_value& item : *list) {
    const std::string where = "sites[" + std::to_string(index) + "].";
    if (!item.is_object()) { return "\"sites[" + std::to_string(index) + "]\" must be an object"; }
    fields site(item, where);
    const std::int64_t id = site.count("site");
    const std::int64_t allocs = site.count("allocs");
    const std::int64_t bytes = site.count("bytes");
    const std::string frames = frames_json(site, site.array("frames"), where);
    std::vector<std::int64_t> raw;  // optional (logs before sites were grouped have none)
    if (item.find("raw_sites") != nullptr) {
      if (const json_array* list_of_raw = site.array("raw_sites")) {
        for (const json_value& r : *list_of_raw) {
          if (!r.is_integer() || r.as_integer() < 0) { return "field \"" + where + "raw_sites\" must hold non-negative integers"; }
          if (raw.size() < max_frames_kept) { raw.push_back(r.as_integer()); }
        }
      }
    }
    if (!site.ok()) { return site.error(); }
    if (index < max_sites_kept) {
      out.begin_object().key("site").integer(id).key("allocs").integer(allocs).key("bytes").integer(bytes);
      if (item.find("raw_sites") != nullptr) {
        out.key("raw_sites").begin_array();
        for (const std::int64_t r : raw) { out.integer(r); }
        out.end_array();
      }
      out.key("frames").raw(frames).end_object();
    }
    ++index;
  }
  out.end_array().end_object();
  sites = out.take();
  return {};
}

std::string log_aggregate::state::on_leaks(fields& f) {
  const std::int64_t total_bytes = f.count("total_bytes");
  const std::int64_t total_count = f.count("total_count");
  const json_array* list = f.array("sites");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json_out out;
  out.begin_object().key("total_bytes").integer(total_bytes).key("total_count").integer(total_count)
      .key("site_count").integer(static_cast<std::int64_t>(list->size()));
  out.key("sites").begin_array();
  std::size_t index = 0;
  for (const json_value& item : *list) {
    const std::string where = "sites[" + std::to_string(index) + "].";
    if (!item.is_object()) { return "\"sites[" + std::to_string(index) + "]\" must be an object"; }
    fields site(item, where);
    const std::int64_t id = site.count("site");
    const std::int64_t dev = site.device("device");
    const std::string tag = site.string("tag");
    const std::int64_t bytes = site.count("bytes");
    const std::int64_t count = site.count("count");
    const std::string frames = frames_json(site, site.array("frames"), where);
    if (!site.ok()) { return site.error(); }
    if (index < max_leak_sites_kept) {
      out.begin_object().key("site").integer(id).key("device").integer(dev).key("tag").string(tag)
          .key("bytes").integer(bytes).key("count").integer(count).key("frames").raw(frames).end_object();
    }
    ++index;
  }
  out.end_array().end_object();
  leaks = out.take();
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
  const json_array* list = f.array("devices");
  if (!f.ok()) { return f.error(); }
  json_out out;
  out.begin_object().key("t").integer(t).key("signal").string(signal).key("code").integer(code)
      .key("address").string(address).key("thread").integer(thread).key("crash_file").string(crash_file);
  out.key("devices").begin_array();
  std::size_t index = 0;
  for (const json_value& item : *list) {
    if (!item.is_object()) { return "\"devices[" + std::to_string(index) + "]\" must be an object"; }
    fields d(item, "devices[" + std::to_string(index) + "].");
    const std::int64_t id = d.device("device");
    const std::int64_t live = d.count("live_bytes");
    const std::int64_t count = d.count("live_count");
    const std::int64_t peak = d.count("peak_bytes");
    if (!d.ok()) { return d.error(); }
    out.begin_object().key("device").integer(id).key("live_bytes").integer(live).key("live_count").integer(count)
        .key("peak_bytes").integer(peak).end_object();
    ++index;
  }
  out.end_array().end_object();
  crash = out.take();
  return {};
}

std::string log_aggregate::state::on_end(fields& f, std::int64_t t) {
  const std::string reason = f.string("reason");
  const std::int64_t dropped = f.count("dropped");
  const json_array* list = f.array("devices");
  const json_value* misuse = f.object("misuse");
  note_backend(f);
  if (!f.ok()) { return f.error(); }
  json_out out;
  out.begin_object().key("t").integer(t).key("reason").string(reason).key("dropped").integer(dropped);
  out.key("devices").begin_array();
  std::size_t index = 0;
  for (const json_value& item : *list) {
    const std::string where = "devices[" + std::to_string(index) + "].";
    if (!item.is_object()) { return "\"devices[" + std::to_string(index) + "]\" must be an object"; }
    fields d(item, where);
    const std::int64_t id = d.device("device");
    const std::int64_t current = d.count("current_bytes");
    const std::int64_t peak = d.count("peak_bytes");
    const std::int64_t total = d.count("total_bytes");
    const std::int64_t allocations = d.count("allocations");
    const std::int64_t frees = d.count("frees");
    if (!d.ok()) { return d.error(); }
    out.begin_object().key("device").integer(id).key("current_bytes").integer(current)
        .key("peak_bytes").integer(peak).key("total_bytes").integer(total)
        .key("allocations").integer(allocations).key("frees").integer(frees).end_object();
    ++index;
  }
  out.end_array();
  out.key("misuse").begin_object();
  fields m(*misuse, "misuse.");
  for (const auto& member : misuse->as_object()) {
    const std::int64_t n = m.count(member.first);
    if (!m.ok()) { return m.error(); }
    out.key(member.first).integer(n);
  }
  out.end_object().end_object();
  end = out.take();
  end_t = t;
  end_dropped = dropped;
  return {};
}

std::string log_aggregate::data_json(std::string_view title, std::string_view log_path) const {
  const state& s = *state_;
  json_out out;
  out.begin_object();
  out.key("schema").string("gpuguard.report").key("version").integer(1);
  out.key("title").string(title);
  out.key("source").begin_object()
      .key("path").string(log_path)
      .key("lines_read").integer(static_cast<std::int64_t>(s.lines_read))
      .key("events_used").integer(static_cast<std::int64_t>(s.events_used))
      .key("lines_skipped").integer(static_cast<std::int64_t>(s.lines_skipped))
      .key("unknown_type_lines").integer(static_cast<std::int64_t>(s.unknown_type_lines));
  out.key("unknown_types").begin_object();
  for (const auto& entry : s.unknown_types) { out.key(entry.first).integer(static_cast<std::int64_t>(entry.second)); }
  out.end_object().end_object();

  const std::int64_t duration = s.end_t >= 0 ? std::max(s.end_t, s.max_t) : s.max_t;
  out.key("run").begin_object()
      .key("has_start").boolean(s.start_line != 0)
      .key("has_end").boolean(!s.end.empty())
      .key("program").string(s.program)
      .key("pid").integer(s.pid)
      .key("unix_ns").integer(s.unix_ns)
      .key("start_wall").string(s.start_line != 0 ? format_utc(s.unix_ns) : std::string())
      .key("duration_ns").integer(duration)
      .key("stack_backend").string(s.stack_backend)
      .end_object();

  out.key("limits").begin_object()
      .key("max_buckets").integer(static_cast<std::int64_t>(s.limits.max_buckets))
      .key("max_ops_per_thread").integer(static_cast<std::int64_t>(s.limits.max_ops_per_thread))
      .key("max_alerts").integer(static_cast<std::int64_t>(s.limits.max_alerts))
      .key("max_skipped_shown").integer(static_cast<std::int64_t>(s.limits.max_skipped_shown))
      .key("max_bands").integer(static_cast<std::int64_t>(s.limits.max_bands))
      .end_object();

  // Devices: real devices by id, host memory (-1) last.
  std::vector<std::int64_t> ids;
  for (const auto& entry : s.devices) { ids.push_back(entry.first); }
  std::stable_partition(ids.begin(), ids.end(), [](std::int64_t id) { return id >= 0; });
  const auto series = [&](const downsampled_series& d) {
    const std::vector<sample> points = d.points();
    out.begin_object().key("samples").integer(static_cast<std::int64_t>(d.samples()))
        .key("max").integer(d.max_value()).key("t").begin_array();
    for (const sample& p : points) { out.integer(p.t); }
    out.end_array().key("v").begin_array();
    for (const sample& p : points) { out.integer(p.v); }
    out.end_array().end_object();
  };
  out.key("devices").begin_array();
  for (std::int64_t id : ids) {
    const device_state& d = s.devices.at(id);
    out.begin_object().key("device").integer(id).key("described").boolean(d.described).key("name").string(d.name)
        .key("total_bytes").integer(d.total_bytes > 0 ? d.total_bytes : d.mem_total_bytes)
        .key("samples").integer(static_cast<std::int64_t>(d.live.samples()))
        .key("allocations").integer(d.allocations).key("frees").integer(d.frees);
    out.key("live");
    series(d.live);
    out.key("peak");
    series(d.timeline_lines > 0 ? downsampled_series(2) : d.peak);  // the timeline has every step
    // The allocations drawn as bands: those still open at the end run to it.
    band_selection bands = d.bands;
    for (const auto& entry : d.open) {
      alloc_band band = entry.second;
      band.end = std::max(duration, band.t);
      band.live_at_end = true;
      bands.add(band);
    }
    const std::vector<alloc_band> kept = bands.kept();
    out.key("timeline").begin_object()
        .key("lines").integer(d.timeline_lines).key("alloc_lines").integer(d.alloc_lines)
        .key("step_lines").integer(d.step_lines).key("folded_allocs").integer(d.folded_allocs)
        .key("unpaired_frees").integer(d.unpaired_frees).key("not_paired").integer(d.not_paired)
        .key("bands_total").integer(static_cast<std::int64_t>(bands.seen()))
        .key("bands_drawn").integer(static_cast<std::int64_t>(kept.size()));
    // Columns, not objects: a page of thousands of bands stays small.
    const auto column = [&](const char* name, auto get) {
      out.key(name).begin_array();
      for (const alloc_band& b : kept) { out.integer(get(b)); }
      out.end_array();
    };
    column("t", [](const alloc_band& b) { return b.t; });
    column("end", [](const alloc_band& b) { return b.end; });
    column("bytes", [](const alloc_band& b) { return b.bytes; });
    column("site", [](const alloc_band& b) { return b.site; });
    column("thread", [](const alloc_band& b) { return b.thread; });
    column("live_at_end", [](const alloc_band& b) { return static_cast<std::int64_t>(b.live_at_end); });
    out.end_object();
    out.key("used");
    if (d.used.samples() > 0) {
      series(d.used);
    } else {
      out.null();
    }
    out.end_object();
  }
  out.end_array();

  // Threads and their (possibly thinned) operation bands.
  // Lanes go to the busiest threads when there are too many to draw.
  std::vector<std::pair<std::size_t, std::int64_t>> busiest;
  for (const auto& entry : s.threads) { busiest.emplace_back(entry.second.total_ops, entry.first); }
  std::stable_sort(busiest.begin(), busiest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> with_lane;
  for (std::size_t i = 0; i < busiest.size() && i < max_lanes; ++i) { with_lane.push_back(busiest[i].second); }
  std::vector<const op_band*> bands;
  out.key("threads").begin_array();
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
    out.begin_object().key("thread").integer(entry.first).key("described").boolean(th.described)
        .key("tid").integer(th.tid).key("name").string(th.name)
        .key("ops").integer(static_cast<std::int64_t>(th.total_ops))
        .key("ops_drawn").integer(static_cast<std::int64_t>(kept.size()))
        .key("max_depth").integer(max_depth).end_object();
  }
  out.end_array();
  std::stable_sort(bands.begin(), bands.end(), [](const op_band* a, const op_band* b) {
    return a->thread != b->thread ? a->thread < b->thread : a->seq < b->seq;
  });
  out.key("ops").begin_array();
  for (const op_band* op : bands) {
    out.begin_object().key("name").string(op->name).key("thread").integer(op->thread)
        .key("depth").integer(op->depth).key("t").integer(op->t).key("dur").integer(op->dur)
        .key("alloc_bytes").integer(op->alloc_bytes).key("free_bytes").integer(op->free_bytes)
        .key("net_bytes").integer(op->net_bytes).key("peak_bytes").integer(op->peak_bytes)
        .key("allocs").integer(op->allocs).key("frees").integer(op->frees)
        .key("exception").boolean(op->exception);
    if (op->device) {
      out.key("device").integer(*op->device).key("used_before").integer(op->used_before)
          .key("used_after").integer(op->used_after);
    }
    out.end_object();
  }
  out.end_array();
  out.key("op_events").integer(static_cast<std::int64_t>(s.op_events));
  out.key("ops_of_untracked_threads").integer(static_cast<std::int64_t>(s.ops_of_untracked_threads));

  // The per-name summary covers every op of the log, thinned or not; longest total time first.
  std::vector<std::pair<const std::string*, const op_stats*>> names;
  for (const auto& entry : s.op_names) { names.emplace_back(&entry.first, &entry.second); }
  std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return a.second->total_dur > b.second->total_dur;
  });
  const auto stats = [&](std::string_view name, const op_stats& st, bool other) {
    out.begin_object().key("name").string(name).key("other").boolean(other)
        .key("calls").integer(st.calls).key("total_dur").integer(st.total_dur).key("max_dur").integer(st.max_dur)
        .key("total_alloc").integer(st.total_alloc).key("max_peak").integer(st.max_peak)
        .key("total_net").integer(st.total_net).key("exceptions").integer(st.exceptions).end_object();
  };
  out.key("op_summary").begin_array();
  for (const auto& entry : names) { stats(*entry.first, *entry.second, false); }
  if (s.other_names.calls > 0) { stats("(other names)", s.other_names, true); }
  out.end_array();

  out.key("alerts").begin_array();
  for (const std::string& alert : s.alerts) { out.raw(alert); }
  out.end_array();
  out.key("alert_events").integer(static_cast<std::int64_t>(s.alert_events));

  out.key("dropped").begin_object()
      .key("events").integer(std::max({s.dropped_sum, s.dropped_total, s.end_dropped}))
      .key("lines").integer(static_cast<std::int64_t>(s.dropped_lines)).end_object();

  const auto optional_raw = [&](std::string_view name, const std::string& json) {
    out.key(name);
    if (json.empty()) {
      out.null();
    } else {
      out.raw(json);
    }
  };
  optional_raw("sites", s.sites);
  optional_raw("leaks", s.leaks);
  optional_raw("end", s.end);
  optional_raw("crash", s.crash);

  out.key("skipped").begin_object().key("count").integer(static_cast<std::int64_t>(s.lines_skipped));
  out.key("lines").begin_array();
  for (const auto& entry : s.skipped_shown) {
    out.begin_object().key("line").integer(static_cast<std::int64_t>(entry.first))
        .key("reason").string(entry.second).end_object();
  }
  out.end_array().end_object();
  out.end_object();
  return out.take();
}

}  // namespace gpuguard::cli
