// The Chrome trace-event JSON sink (trace_file): slices for operation scopes, counters for memory,
// instant events for alerts. Format: docs/formats.md.
#include "outputs/output_file.hpp"
#include "outputs/sinks.hpp"

#include "util/format.hpp"
#include "ledger/stacks.hpp"
#include "tracking/report_json.hpp"
#include "util/program_path.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>

namespace gpuguard::detail {

namespace {

// ---- Chrome trace-event JSON --------------------------------------------------------------------

// The JSON Array Format of the trace-event format, one event a line (from the second on led by its
// comma), so that every write ends with a whole line: viewers accept a file whose closing bracket
// is missing, and Perfetto drops a last event that a killed write cut short (docs/formats.md).
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
    end();
    return true;
  }

  void thread(const thread_info& info, std::int64_t /*time_ns*/) override {
    std::string& out = event("thread_name", "M", 0, info.thread);
    std::string name = info.name.empty() ? "thread" : info.name;
    name += " (tid " + std::to_string(info.tid) + ")";
    out += ",\"args\":{\"name\":";
    append_json_string(out, name);
    end();
    std::string& sort = event("thread_sort_index", "M", 0, info.thread);
    sort += ",\"args\":{\"sort_index\":";
    append_uint(sort, info.thread);
    end();
  }

  void op(const op_result& op) override {
    std::string& out = event(op.name_view(), "X", op.start_ns, op.thread);
    out += ",\"cat\":\"op\",\"dur\":";
    append_us(out, op.duration_ns);
    out += ",\"args\":{\"net_bytes\":";
    append_int(out, op.net_bytes);
    append_field(out, "peak_bytes", op.peak_bytes);
    append_field(out, "alloc_bytes", op.alloc_bytes);
    append_field(out, "free_bytes", op.free_bytes);
    append_op_outcome(out, op, op_keys::trace);
    end();
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
  }

  // The ledger's own events on the same counter track: every step, and for a folded record its
  // lowest and highest at the moments they happened, so the peak is drawn where it was.
  [[nodiscard]] bool wants_timeline() const override { return true; }
  void mem_event(const detail::mem_event& e) override {
    counter(live_name(e.device), e.time_ns, e.live_bytes);
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
  }

  void alert(const gpuguard::alert& fired) override {
    std::string& out = event(std::string("alert: ") + to_string(fired.kind), "i", fired.time_ns, 0);
    out += ",\"s\":\"g\",\"args\":{\"message\":";
    append_json_string(out, fired.message);
    end();
  }

  void dropped(std::uint64_t count, std::uint64_t /*total*/, std::int64_t time_ns) override {
    std::string& out = event("events dropped", "i", time_ns, 0);
    out += ",\"s\":\"g\",\"args\":{\"count\":";
    append_uint(out, count);
    end();
  }

  void finish(const end_info& /*last*/, const run_totals& /*totals*/) override { file_.buffer() += "]\n"; }
  void flush() override { file_.flush(); }

 private:
  static void append_us(std::string& out, std::int64_t ns) {
    if (ns < 0) { ns = 0; }
    append_int(out, ns / 1000);
    char fraction[8];
    std::snprintf(fraction, sizeof fraction, ".%03d", static_cast<int>(ns % 1000));
    out += fraction;
  }

  // Opens an event object, left open for the caller's remaining fields and its `args`; end() closes
  // both.
  std::string& event(std::string_view name, const char* phase, std::int64_t time_ns, std::uint32_t tid) {
    std::string& out = file_.buffer();
    out += first_ ? "" : ",";
    first_ = false;
    out += "{\"name\":";
    append_json_string(out, name);
    out += ",\"ph\":\"";
    out += phase;
    out += "\",\"ts\":";
    append_us(out, time_ns);
    append_field(out, "pid", pid_);
    append_field(out, "tid", tid);
    return out;
  }

  void counter(const std::string& name, std::int64_t time_ns, std::size_t bytes) {
    std::string& out = event(name, "C", time_ns, 0);
    out += ",\"args\":{\"bytes\":";
    append_uint(out, bytes);
    end();
  }

  // Closes the event's `args` and the event, and ends its line: a write never ends inside one.
  void end() {
    file_.buffer() += "}}\n";
    file_.maybe_flush();
  }

  output_file file_;
  int pid_;
  bool first_ = true;
};

}  // namespace

std::unique_ptr<sink> make_trace_sink(const std::string& path, failure_reporter report, std::string* error) {
  return opened(std::make_unique<trace_sink>(report), error, path);
}

}  // namespace gpuguard::detail
