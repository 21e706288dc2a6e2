// The sinks: text lines, JSONL event log, Chrome trace-event JSON and the Prometheus textfile.
// Formats are documented in docs/formats.md; each is built by hand into a reused buffer, because
// the writer must keep up with a million events a second.
#include "outputs/sinks.hpp"

#include "exit/exit_paths.hpp"

#include "format.hpp"
#include "outputs/report_json.hpp"
#include "ledger/stacks.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string_view>
#include <unistd.h>

namespace gpuguard::detail {

namespace {

constexpr std::size_t flush_threshold = std::size_t{64} * 1024;

std::string program_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string();
}

/// A buffered file the writer owns. A failed write turns it off for good, reported once.
class output_file {
 public:
  output_file(std::string label, failure_reporter report) : label_(std::move(label)), report_(report) {}
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;
  output_file(output_file&&) = delete;
  output_file& operator=(output_file&&) = delete;
  ~output_file() {
    flush();
    if (owned_ && fd_ >= 0) { ::close(fd_); }
  }

  /// "stderr" and "stdout" (when allowed) name the streams; anything else is a path, truncated.
  bool open(const std::string& where, bool allow_streams, std::string* error) {
    path_ = where;
    if (allow_streams && (where == "stderr" || where == "stdout")) {
      fd_ = where == "stderr" ? STDERR_FILENO : STDOUT_FILENO;
      owned_ = false;
      return true;
    }
    fd_ = ::open(where.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      *error = label_ + ": cannot open '" + where + "': " + std::strerror(errno);
      return false;
    }
    owned_ = true;
    return true;
  }

  std::string& buffer() noexcept { return buffer_; }
  [[nodiscard]] bool failed() const noexcept { return failed_; }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  /// Call after appending to buffer(): writes out once enough has gathered.
  void maybe_flush() {
    if (buffer_.size() >= flush_threshold) { flush(); }
  }

  void flush() {
    if (failed_ || fd_ < 0) {
      buffer_.clear();
      return;
    }
    std::size_t written = 0;
    while (written < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + written, buffer_.size() - written);
      if (n < 0 && errno == EINTR) { continue; }
      if (n <= 0) {
        failed_ = true;
        report_(label_ + ": cannot write '" + path_ + "': " +
                (n < 0 ? std::strerror(errno) : "nothing written") + "; this output is off from now on");
        break;
      }
      written += static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }

 private:
  std::string label_;
  failure_reporter report_;
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
  bool owned_ = false;
  bool failed_ = false;
};

// ---- text lines ---------------------------------------------------------------------------------

class text_sink final : public sink {
 public:
  explicit text_sink(failure_reporter report) : file_("text_log", report) {}
  bool open(const std::string& where, std::string* error) { return file_.open(where, true, error); }

  void op(const op_result& op) override {
    file_.buffer() += op_line(op);
    file_.buffer() += '\n';
    file_.maybe_flush();
  }
  void alert(const gpuguard::alert& fired) override {
    file_.buffer() += fired.message;
    file_.buffer() += '\n';
  }
  void dropped(std::uint64_t count, std::uint64_t total, std::int64_t /*time_ns*/) override {
    char line[160];
    std::snprintf(line, sizeof line,
                  "[gpuguard] %" PRIu64 " events dropped: the output queue was full (%" PRIu64
                  " since the start; raise queue_capacity)\n", count, total);
    file_.buffer() += line;
  }
  void flush() override { file_.flush(); }

 private:
  output_file file_;
};

// ---- JSONL event log ----------------------------------------------------------------------------

class jsonl_sink final : public sink {
 public:
  explicit jsonl_sink(failure_reporter report) : file_("jsonl_log", report) {}
  jsonl_sink(const jsonl_sink&) = delete;
  jsonl_sink& operator=(const jsonl_sink&) = delete;
  jsonl_sink(jsonl_sink&&) = delete;
  jsonl_sink& operator=(jsonl_sink&&) = delete;
  ~jsonl_sink() override { set_event_log_fd(-1); }

  bool open(const std::string& path, std::string* error) {
    if (!file_.open(path, false, error)) { return false; }
    set_event_log_fd(file_.fd());  // a crash ends the log with its own line (hooks.cpp)
    std::string& out = begin("start", 0);
    out += ",\"schema\":\"gpuguard.events\",\"pid\":";
    append_int(out, ::getpid());
    out += ",\"program\":";
    append_json_string(out, program_path());
    out += ",\"unix_ns\":";
    append_int(out, clock_start_unix_ns());
    end();
    return true;
  }

  void device(const device_info& info, std::int64_t time_ns) override {
    std::string& out = begin("device", time_ns);
    field(out, "device", info.device);
    out += ",\"name\":";
    append_json_string(out, info.name);
    field(out, "total_bytes", info.total_bytes);
    end();
  }

  void thread(const thread_info& info, std::int64_t time_ns) override {
    std::string& out = begin("thread", time_ns);
    field(out, "thread", info.thread);
    field(out, "tid", info.tid);
    out += ",\"name\":";
    append_json_string(out, info.name);
    end();
  }

  void op(const op_result& op) override {
    std::string& out = begin("op", op.start_ns);
    out += ",\"name\":";
    append_json_string(out, op.name_view());
    field(out, "thread", op.thread);
    field(out, "depth", op.depth);
    field(out, "dur", op.duration_ns);
    field(out, "alloc_bytes", op.alloc_bytes);
    field(out, "free_bytes", op.free_bytes);
    field(out, "net_bytes", op.net_bytes);
    field(out, "peak_bytes", op.peak_bytes);
    field(out, "allocs", op.allocs);
    field(out, "frees", op.frees);
    out += op.exception ? ",\"exception\":true" : ",\"exception\":false";
    if (op.device_queried) {
      field(out, "device", op.device);
      field(out, "used_before", op.used_before);
      field(out, "used_after", op.used_after);
      if (op.pool_queried) {
        field(out, "pool_reserved_delta", op.pool_reserved_delta);
        field(out, "pool_used_delta", op.pool_used_delta);
      }
    }
    if (op.framework != nullptr) {
      if (!op.device_queried) { field(out, "device", op.device); }
      out += ",\"framework\":";
      append_json_string(out, op.framework);
      field(out, "framework_allocated_delta", op.framework_allocated_delta);
      field(out, "framework_reserved_delta", op.framework_reserved_delta);
    }
    end();
  }

  void mem(const mem_sample& sample) override {
    std::string& out = begin("mem", sample.time_ns);
    field(out, "device", sample.device);
    field(out, "live_bytes", sample.live_bytes);
    field(out, "peak_bytes", sample.interval_peak_bytes);
    field(out, "allocations", sample.allocations);
    field(out, "frees", sample.frees);
    if (sample.queried) {
      field(out, "used_bytes", sample.used_bytes);
      field(out, "total_bytes", sample.total_bytes);
    }
    end();
  }

  [[nodiscard]] bool wants_timeline() const override { return true; }
  void mem_event(const detail::mem_event& e) override {
    std::string& out = begin(e.alloc ? "alloc" : "free", e.time_ns);
    field(out, "device", e.device);
    char address[32];
    std::snprintf(address, sizeof address, ",\"address\":\"0x%" PRIxPTR "\"", e.address);
    out += address;
    field(out, "bytes", e.bytes);
    field(out, "live_bytes", e.live_bytes);
    field(out, "site", e.site);
    field(out, "thread", e.thread);
    end();
  }

  void mem_step(const detail::mem_step& step) override {
    std::string& out = begin("mem_step", step.time_ns);
    field(out, "end", step.end_ns);
    field(out, "device", step.device);
    field(out, "start_bytes", step.start_bytes);
    field(out, "end_bytes", step.end_bytes);
    field(out, "min_bytes", step.min_bytes);
    field(out, "min_t", step.min_ns);
    field(out, "max_bytes", step.max_bytes);
    field(out, "max_t", step.max_ns);
    field(out, "allocs", step.allocs);
    field(out, "frees", step.frees);
    field(out, "alloc_bytes", step.alloc_bytes);
    field(out, "free_bytes", step.free_bytes);
    out += step.queue_full ? ",\"queue_full\":true" : ",\"queue_full\":false";
    end();
  }

  void alert(const gpuguard::alert& fired) override {
    std::string& out = begin("alert", fired.time_ns);
    out += ",\"kind\":\"";
    out += to_string(fired.kind);
    out += '"';
    if (fired.kind == alert_kind::op_growth) {
      out += ",\"name\":";
      append_json_string(out, fired.op);
      field(out, "thread", fired.thread);
      field(out, "net_bytes", fired.net_bytes);
      field(out, "limit_bytes", fired.limit_bytes);
    } else {
      field(out, "device", fired.device);
      char number[64];
      std::snprintf(number, sizeof number, ",\"fraction\":%.4f,\"threshold\":%.4f", fired.fraction,
                    fired.threshold);
      out += number;
      field(out, "used_bytes", fired.used_bytes);
      field(out, "total_bytes", fired.total_bytes);
    }
    field(out, "suppressed", fired.suppressed);
    out += ",\"message\":";
    append_json_string(out, fired.message);
    end();
  }

  void dropped(std::uint64_t count, std::uint64_t total, std::int64_t time_ns) override {
    std::string& out = begin("dropped", time_ns);
    field(out, "count", count);
    field(out, "total", total);
    end();
  }

  void finish(const end_info& last, const run_totals& /*totals*/) override {
    if (last.stacks_on) {
      std::string& out = begin("sites", last.time_ns);
      out += last.sites_sampled ? ",\"sampled\":true,\"sites\":[" : ",\"sampled\":false,\"sites\":[";
      bool first = true;
      for (const resolved_site& site : last.sites) {
        out += first ? "{\"site\":" : ",{\"site\":";
        first = false;
        append_uint(out, site.totals.site);
        field(out, "allocs", site.totals.allocations);
        field(out, "bytes", site.totals.bytes);
        out += ",\"raw_sites\":[";
        for (std::size_t i = 0; i < site.raw_sites.size(); ++i) {
          if (i != 0) { out += ','; }
          append_uint(out, site.raw_sites[i]);
        }
        out += "],\"frames\":";
        append_frames(out, site.frames);
        out += '}';
      }
      out += ']';
      end();
    }
    if (last.leaks != nullptr) {
      std::string& out = begin("leaks", last.time_ns);
      field(out, "total_bytes", last.leaks->bytes);
      field(out, "total_count", last.leaks->count);
      out += ",\"sites\":";
      append_leak_sites(out, last.leaks->sites);
      field(out, "held_bytes", last.leaks->held_bytes);
      field(out, "held_count", last.leaks->held_count);
      out += ",\"held\":";
      append_leak_sites(out, last.leaks->held);
      end();
    }
    std::string& out = begin("end", last.time_ns);
    out += ",\"reason\":";
    append_json_string(out, last.reason);
    field(out, "dropped", last.dropped);
    out += ",\"devices\":";
    append_device_counters(out, last.ledger.devices);
    out += ",\"misuse\":";
    append_misuse(out, last.ledger.misuse);
    end();
  }

  void flush() override { file_.flush(); }

 private:
  std::string& begin(const char* type, std::int64_t time_ns) {
    std::string& out = file_.buffer();
    out += "{\"v\":1,\"type\":\"";
    out += type;
    out += "\",\"t\":";
    append_int(out, time_ns < 0 ? 0 : time_ns);
    return out;
  }
  void end() {
    file_.buffer() += "}\n";
    file_.maybe_flush();
  }
  template <class Int>
  static void field(std::string& out, const char* name, Int value) {
    out += ",\"";
    out += name;
    out += "\":";
    if constexpr (std::is_signed_v<Int>) {
      append_int(out, value);
    } else {
      append_uint(out, value);
    }
  }

  output_file file_;
};

// ---- Chrome trace-event JSON --------------------------------------------------------------------

// The JSON Array Format of the trace-event format: viewers accept a file whose closing bracket is
// missing, so a trace of a process that died is still readable.
class trace_sink final : public sink {
 public:
  explicit trace_sink(failure_reporter report) : file_("trace_file", report), pid_(::getpid()) {}

  bool open(const std::string& path, std::string* error) {
    if (!file_.open(path, false, error)) { return false; }
    file_.buffer() += "[\n";
    std::string& out = event("process_name", "M", 0, 0);
    std::string program = program_path();
    const std::size_t slash = program.rfind('/');
    if (slash != std::string::npos) { program = program.substr(slash + 1); }
    out += ",\"args\":{\"name\":";
    append_json_string(out, "gpuguard: " + program);
    out += "}}";
    return true;
  }

  void thread(const thread_info& info, std::int64_t /*time_ns*/) override {
    std::string& out = event("thread_name", "M", 0, info.thread);
    std::string name = info.name.empty() ? "thread" : info.name;
    name += " (tid " + std::to_string(info.tid) + ")";
    out += ",\"args\":{\"name\":";
    append_json_string(out, name);
    out += "}}";
    std::string& sort = event("thread_sort_index", "M", 0, info.thread);
    sort += ",\"args\":{\"sort_index\":";
    append_uint(sort, info.thread);
    sort += "}}";
  }

  void op(const op_result& op) override {
    std::string& out = event(op.name_view(), "X", op.start_ns, op.thread);
    out += ",\"cat\":\"op\",\"dur\":";
    append_us(out, op.duration_ns);
    out += ",\"args\":{\"net_bytes\":";
    append_int(out, op.net_bytes);
    out += ",\"peak_bytes\":";
    append_uint(out, op.peak_bytes);
    out += ",\"alloc_bytes\":";
    append_uint(out, op.alloc_bytes);
    out += ",\"free_bytes\":";
    append_uint(out, op.free_bytes);
    out += ",\"allocs\":";
    append_uint(out, op.allocs);
    out += ",\"frees\":";
    append_uint(out, op.frees);
    out += op.exception ? ",\"exception\":true" : ",\"exception\":false";
    if (op.device_queried) {
      out += ",\"device_used_before\":";
      append_uint(out, op.used_before);
      out += ",\"device_used_after\":";
      append_uint(out, op.used_after);
      if (op.pool_queried) {
        out += ",\"pool_reserved_delta\":";
        append_int(out, op.pool_reserved_delta);
        out += ",\"pool_used_delta\":";
        append_int(out, op.pool_used_delta);
      }
    }
    if (op.framework != nullptr) {
      out += ",\"framework\":";
      append_json_string(out, op.framework);
      out += ",\"framework_allocated_delta\":";
      append_int(out, op.framework_allocated_delta);
      out += ",\"framework_reserved_delta\":";
      append_int(out, op.framework_reserved_delta);
    }
    out += "}}";
    file_.maybe_flush();
  }

  static std::string where(int device) {
    return device == host_device_id ? std::string("host memory") : "device " + std::to_string(device);
  }
  static std::string live_name(int device) { return where(device) + " live bytes (gpuguard)"; }

  // One counter track per device and figure: viewers stack the series of one counter event, so
  // the ledger's bytes and the device's own are kept apart.
  void mem(const mem_sample& sample) override {
    counter(live_name(sample.device), sample.time_ns, sample.live_bytes);
    const std::string where = trace_sink::where(sample.device);
    if (sample.queried) { counter(where + " used bytes (device-wide)", sample.time_ns, sample.used_bytes); }
    file_.maybe_flush();
  }

  // The ledger's own events on the same counter track: every step, and for a folded record its
  // lowest and highest at the moments they happened, so the peak is drawn where it was.
  [[nodiscard]] bool wants_timeline() const override { return true; }
  void mem_event(const detail::mem_event& e) override {
    counter(live_name(e.device), e.time_ns, e.live_bytes);
    file_.maybe_flush();
  }
  void mem_step(const detail::mem_step& step) override {
    std::pair<std::int64_t, std::uint64_t> points[3] = {
        {step.min_ns, step.min_bytes}, {step.max_ns, step.max_bytes}, {step.end_ns, step.end_bytes}};
    std::stable_sort(std::begin(points), std::end(points),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string name = live_name(step.device);
    for (std::size_t i = 0; i < 3; ++i) {
      if (i != 0 && points[i] == points[i - 1]) { continue; }
      counter(name, points[i].first, points[i].second);
    }
    file_.maybe_flush();
  }

  void alert(const gpuguard::alert& fired) override {
    std::string& out = event(std::string("alert: ") + to_string(fired.kind), "i", fired.time_ns, 0);
    out += ",\"s\":\"g\",\"args\":{\"message\":";
    append_json_string(out, fired.message);
    out += "}}";
  }

  void dropped(std::uint64_t count, std::uint64_t /*total*/, std::int64_t time_ns) override {
    std::string& out = event("events dropped", "i", time_ns, 0);
    out += ",\"s\":\"g\",\"args\":{\"count\":";
    append_uint(out, count);
    out += "}}";
  }

  void finish(const end_info& /*last*/, const run_totals& /*totals*/) override { file_.buffer() += "\n]\n"; }
  void flush() override { file_.flush(); }

 private:
  static void append_us(std::string& out, std::int64_t ns) {
    if (ns < 0) { ns = 0; }
    append_int(out, ns / 1000);
    char fraction[8];
    std::snprintf(fraction, sizeof fraction, ".%03d", static_cast<int>(ns % 1000));
    out += fraction;
  }

  // Opens an event object (left open for the caller's remaining fields).
  std::string& event(std::string_view name, const char* phase, std::int64_t time_ns, std::uint32_t tid) {
    std::string& out = file_.buffer();
    out += first_ ? "" : ",\n";
    first_ = false;
    out += "{\"name\":";
    append_json_string(out, name);
    out += ",\"ph\":\"";
    out += phase;
    out += "\",\"ts\":";
    append_us(out, time_ns);
    out += ",\"pid\":";
    append_int(out, pid_);
    out += ",\"tid\":";
    append_uint(out, tid);
    return out;
  }

  void counter(const std::string& name, std::int64_t time_ns, std::size_t bytes) {
    std::string& out = event(name, "C", time_ns, 0);
    out += ",\"args\":{\"bytes\":";
    append_uint(out, bytes);
    out += "}}";
  }

  output_file file_;
  int pid_;
  bool first_ = true;
};

// ---- Prometheus textfile ------------------------------------------------------------------------

class prometheus_sink final : public sink {
 public:
  prometheus_sink(std::string path, std::int64_t interval_ns, failure_reporter report)
      : path_(std::move(path)), interval_ns_(interval_ns), report_(report), pid_(std::to_string(::getpid())) {}

  bool open(std::string* error) {
    std::string failure = write_file_atomically(path_, "");
    if (!failure.empty()) {
      *error = "prometheus_file: " + failure;
      return false;
    }
    return true;
  }

  void tick(std::int64_t time_ns, const run_totals& totals) override {
    if (time_ns - last_write_ns_ < interval_ns_) { return; }
    write(totals);
    last_write_ns_ = time_ns;
  }
  void finish(const end_info& /*last*/, const run_totals& totals) override { write(totals); }
  void flush() override {}

 private:
  void header(const char* name, const char* type, const char* help) { append_prometheus_family(text_, name, type, help); }
  template <class Number>
  void sample(const char* name, const char* label, std::string_view value, Number number) {
    text_ += name;
    text_ += "{pid=\"";
    text_ += pid_;
    text_ += '"';
    if (label != nullptr) {
      text_ += ',';
      text_ += label;
      text_ += "=\"";
      append_prometheus_label_value(text_, value);
      text_ += '"';
    }
    text_ += "} ";
    if constexpr (std::is_floating_point_v<Number>) {
      char digits[40];
      std::snprintf(digits, sizeof digits, "%.9g", number);
      text_ += digits;
    } else if constexpr (std::is_signed_v<Number>) {
      append_int(text_, number);
    } else {
      append_uint(text_, number);
    }
    text_ += '\n';
  }

  void write(const run_totals& totals) {
    if (failed_) { return; }
    text_.clear();
    const ledger_snapshot snap = snapshot(false);
    const auto per_device = [&](const char* name, const char* type, const char* help, auto value) {
      header(name, type, help);
      for (const auto& [device, c] : snap.devices) {
        sample(name, "device", std::to_string(device), value(c));
      }
    };
    per_device("gpuguard_live_bytes", "gauge", "Bytes the ledger holds live, per device (-1: host memory).",
               [](const counters& c) { return static_cast<std::uint64_t>(c.current_bytes); });
    per_device("gpuguard_peak_bytes", "gauge", "Most bytes the ledger held live at once, per device.",
               [](const counters& c) { return static_cast<std::uint64_t>(c.peak_bytes); });
    per_device("gpuguard_allocated_bytes_total", "counter", "Bytes allocated through the ledger, per device.",
               [](const counters& c) { return static_cast<std::uint64_t>(c.total_bytes); });
    per_device("gpuguard_allocations_total", "counter", "Allocations recorded, per device.",
               [](const counters& c) { return c.allocations; });
    per_device("gpuguard_frees_total", "counter", "Frees recorded, per device.",
               [](const counters& c) { return c.frees; });

    bool any_queried = false;
    for (const mem_sample& s : totals.last_samples) { any_queried = any_queried || s.queried; }
    if (any_queried) {
      header("gpuguard_device_used_bytes", "gauge", "Device memory in use by every process (cudaMemGetInfo) at the last sample.");
      for (const mem_sample& s : totals.last_samples) {
        if (s.queried) { sample("gpuguard_device_used_bytes", "device", std::to_string(s.device), static_cast<std::uint64_t>(s.used_bytes)); }
      }
      header("gpuguard_device_total_bytes", "gauge", "Device memory in all (cudaMemGetInfo).");
      for (const mem_sample& s : totals.last_samples) {
        if (s.queried) { sample("gpuguard_device_total_bytes", "device", std::to_string(s.device), static_cast<std::uint64_t>(s.total_bytes)); }
      }
    }

    const auto per_op = [&](const char* name, const char* type, const char* help, auto value) {
      if (totals.ops.empty()) { return; }
      header(name, type, help);
      for (const auto& [op, t] : totals.ops) { sample(name, "op", op, value(t)); }
    };
    per_op("gpuguard_op_calls_total", "counter", "Operation scopes ended, per operation name.",
           [](const op_totals& t) { return t.calls; });
    per_op("gpuguard_op_allocated_bytes_total", "counter", "Bytes allocated inside the operation's scopes.",
           [](const op_totals& t) { return t.alloc_bytes; });
    per_op("gpuguard_op_freed_bytes_total", "counter", "Bytes freed inside the operation's scopes.",
           [](const op_totals& t) { return t.free_bytes; });
    per_op("gpuguard_op_peak_bytes", "gauge", "Largest peak above its start of any scope of the operation.",
           [](const op_totals& t) { return t.max_peak_bytes; });
    per_op("gpuguard_op_last_net_bytes", "gauge", "Net bytes the latest scope of the operation left behind.",
           [](const op_totals& t) { return t.last_net_bytes; });
    per_op("gpuguard_op_duration_seconds_total", "counter", "Time spent inside the operation's scopes.",
           [](const op_totals& t) { return static_cast<double>(t.duration_ns) / 1e9; });
    per_op("gpuguard_op_exceptions_total", "counter", "Scopes of the operation that ended by an exception.",
           [](const op_totals& t) { return t.exceptions; });

    header("gpuguard_alerts_total", "counter", "Alerts fired, per kind.");
    for (const alert_kind kind : {alert_kind::device_full, alert_kind::device_recovered, alert_kind::op_growth}) {
      sample("gpuguard_alerts_total", "kind", to_string(kind), totals.alerts[static_cast<int>(kind)]);
    }
    header("gpuguard_events_dropped_total", "counter", "Output events dropped because the queue was full.");
    sample("gpuguard_events_dropped_total", nullptr, {}, totals.dropped);
    header("gpuguard_misuse_total", "counter", "Misuse seen at free time, per kind.");
    sample("gpuguard_misuse_total", "kind", "unknown_pointer", snap.misuse.unknown_pointer);
    sample("gpuguard_misuse_total", "kind", "double_free", snap.misuse.double_free);
    sample("gpuguard_misuse_total", "kind", "wrong_size", snap.misuse.wrong_size);
    sample("gpuguard_misuse_total", "kind", "wrong_device", snap.misuse.wrong_device);

    const std::string failure = write_file_atomically(path_, text_);
    if (!failure.empty()) {
      failed_ = true;
      report_("prometheus_file: " + failure + "; this output is off from now on");
    }
  }

  std::string path_;
  std::int64_t interval_ns_;
  failure_reporter report_;
  std::string pid_;
  std::string text_;
  std::int64_t last_write_ns_ = 0;
  bool failed_ = false;
};

template <class Sink, class... Args>
std::unique_ptr<sink> opened(std::unique_ptr<Sink> made, std::string* error, const Args&... args) {
  if (!made->open(args..., error)) { return nullptr; }
  return made;
}

}  // namespace

std::string op_line(const op_result& op) {
  std::string line = "[gpuguard] ";
  line.append(std::size_t{2} * op.depth, ' ');
  line += op.name_view();
  line += ": ";
  line += format_signed_bytes(op.net_bytes);
  line += " (peak +";
  line += format_bytes(op.peak_bytes);
  line += ", ";
  line += std::to_string(op.allocs);
  line += op.allocs == 1 ? " alloc" : " allocs";
  if (op.frees != 0) {
    line += ", ";
    line += std::to_string(op.frees);
    line += op.frees == 1 ? " free" : " frees";
  }
  line += ") ";
  line += format_duration(op.duration_ns);
  if (op.device_queried) {
    line += ", device " + std::to_string(op.device) + " used " + format_bytes(op.used_before) +
            " -> " + format_bytes(op.used_after);
    if (op.pool_queried) {
      line += " (pool reserved " + format_signed_bytes(op.pool_reserved_delta) + ", pool used " +
              format_signed_bytes(op.pool_used_delta) + ")";
    }
  }
  if (op.framework != nullptr) {
    line += "; ";
    line += op.framework;
    line += " allocated " + format_signed_bytes(op.framework_allocated_delta) + ", reserved " +
            format_signed_bytes(op.framework_reserved_delta);
  }
  if (op.exception) { line += " [exception]"; }
  return line;
}

std::unique_ptr<sink> make_text_sink(const std::string& where, failure_reporter report, std::string* error) {
  return opened(std::make_unique<text_sink>(report), error, where);
}
std::unique_ptr<sink> make_jsonl_sink(const std::string& path, failure_reporter report, std::string* error) {
  return opened(std::make_unique<jsonl_sink>(report), error, path);
}
std::unique_ptr<sink> make_trace_sink(const std::string& path, failure_reporter report, std::string* error) {
  return opened(std::make_unique<trace_sink>(report), error, path);
}
std::unique_ptr<sink> make_prometheus_sink(const std::string& path, std::int64_t interval_ns,
                                           failure_reporter report, std::string* error) {
  return opened(std::make_unique<prometheus_sink>(path, interval_ns, report), error);
}

}  // namespace gpuguard::detail
