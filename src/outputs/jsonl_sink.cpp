// The JSONL event log (jsonl_log): one JSON object per line, built by hand into a reused buffer,
// because the writer must keep up with a million events a second. Format: docs/formats.md.
#include "outputs/output_file.hpp"
#include "outputs/sinks.hpp"

#include "exit/exit_paths.hpp"
#include "util/format.hpp"
#include "ledger/postmortem.hpp"
#include "ledger/stacks.hpp"
#include "tracking/report_json.hpp"
#include "util/json_text.hpp"
#include "util/program_path.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>

namespace gpuguard::detail {

namespace {

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
    set_event_log_fd(file_.fd());  // a crash ends the log with its own line (exit/hooks.cpp)
    std::string& out = begin("start", 0);
    out += ",\"schema\":\"gpuguard.events\",\"pid\":";
    append_int(out, ::getpid());
    append_string_field(out, "program", program_path());
    append_field(out, "unix_ns", clock_start_unix_ns());
    end();
    // Where `gpuguard run` ends this log on the process's behalf if it dies unseen (SIGKILL).
    postmortem::note_log(path, clock_start_unix_ns());
    return true;
  }

  void device(const device_info& info, std::int64_t time_ns) override {
    line("device", time_ns, json_field{"device", info.device}, json_field{"name", info.name},
         json_field{"total_bytes", info.total_bytes});
  }

  void thread(const thread_info& info, std::int64_t time_ns) override {
    line("thread", time_ns, json_field{"thread", info.thread}, json_field{"tid", info.tid},
         json_field{"name", info.name});
  }

  void op(const op_result& op) override {
    std::string& out = begin("op", op.start_ns);
    append_string_field(out, "name", op.name_view());
    append_field(out, "thread", op.thread);
    append_field(out, "depth", op.depth);
    append_field(out, "dur", op.duration_ns);
    append_field(out, "alloc_bytes", op.alloc_bytes);
    append_field(out, "free_bytes", op.free_bytes);
    append_field(out, "net_bytes", op.net_bytes);
    append_field(out, "peak_bytes", op.peak_bytes);
    append_op_outcome(out, op, op_keys::event_log);
    end();
  }

  void mem(const mem_sample& sample) override {
    std::string& out = begin("mem", sample.time_ns);
    append_field(out, "device", sample.device);
    append_field(out, "live_bytes", sample.live_bytes);
    append_field(out, "peak_bytes", sample.interval_peak_bytes);
    append_field(out, "allocations", sample.allocations);
    append_field(out, "frees", sample.frees);
    if (sample.queried) {
      append_field(out, "used_bytes", sample.used_bytes);
      append_field(out, "total_bytes", sample.total_bytes);
    }
    end();
  }

  [[nodiscard]] bool wants_timeline() const override { return true; }
  void mem_event(const detail::mem_event& e) override {
    char address[32];
    std::snprintf(address, sizeof address, "0x%" PRIxPTR, e.address);
    line(e.alloc ? "alloc" : "free", e.time_ns, json_field{"device", e.device}, json_field{"address", address},
         json_field{"bytes", e.bytes}, json_field{"live_bytes", e.live_bytes}, json_field{"site", e.site},
         json_field{"thread", e.thread});
  }

  void mem_step(const detail::mem_step& step) override {
    line("mem_step", step.time_ns, json_field{"end", step.end_ns}, json_field{"device", step.device},
         json_field{"start_bytes", step.start_bytes}, json_field{"end_bytes", step.end_bytes},
         json_field{"min_bytes", step.min_bytes}, json_field{"min_t", step.min_ns},
         json_field{"max_bytes", step.max_bytes}, json_field{"max_t", step.max_ns},
         json_field{"allocs", step.allocs}, json_field{"frees", step.frees},
         json_field{"alloc_bytes", step.alloc_bytes}, json_field{"free_bytes", step.free_bytes},
         json_field{"queue_full", step.queue_full});
  }

  void alert(const gpuguard::alert& fired) override {
    std::string& out = begin("alert", fired.time_ns);
    out += ",\"kind\":\"";
    out += to_string(fired.kind);
    out += '"';
    if (fired.kind == alert_kind::op_growth) {
      append_fields(out, json_field{"name", fired.op}, json_field{"thread", fired.thread},
                    json_field{"net_bytes", fired.net_bytes}, json_field{"limit_bytes", fired.limit_bytes});
    } else {
      append_field(out, "device", fired.device);
      char number[64];
      std::snprintf(number, sizeof number, ",\"fraction\":%.4f,\"threshold\":%.4f", fired.fraction,
                    fired.threshold);
      out += number;
      append_fields(out, json_field{"used_bytes", fired.used_bytes}, json_field{"total_bytes", fired.total_bytes});
    }
    append_fields(out, json_field{"suppressed", fired.suppressed}, json_field{"message", fired.message});
    end();
  }

  void dropped(std::uint64_t count, std::uint64_t total, std::int64_t time_ns) override {
    line("dropped", time_ns, json_field{"count", count}, json_field{"total", total});
  }

  void finish(const end_info& last, const run_totals& /*totals*/) override {
    if (last.stacks_on) {
      std::string& out = begin("sites", last.time_ns);
      append_field(out, "sampled", last.sites_sampled);
      out += ",\"sites\":";
      append_array(out, last.sites, [](std::string& text, const resolved_site& site) {
        text += "{\"site\":";
        append_uint(text, site.totals.site);
        append_field(text, "allocs", site.totals.allocations);
        append_field(text, "bytes", site.totals.bytes);
        append_site_stack(text, site.raw_sites, site.frames);
        text += '}';
      });
      end();
    }
    if (last.leaks != nullptr) {
      std::string& out = begin("leaks", last.time_ns);
      append_field(out, "total_bytes", last.leaks->bytes);
      append_field(out, "total_count", last.leaks->count);
      out += ",\"sites\":";
      append_leak_sites(out, last.leaks->sites);
      append_held(out, *last.leaks);
      end();
    }
    std::string& out = begin("end", last.time_ns);
    append_string_field(out, "reason", last.reason);
    append_field(out, "dropped", last.dropped);
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
  // Ends the line begin() opened: a write never ends inside one.
  void end() {
    file_.buffer() += "}\n";
    file_.maybe_flush();
  }
  // A whole line of the given fields.
  template <class... Values>
  void line(const char* type, std::int64_t time_ns, const json_field<Values>&... fields) {
    append_fields(begin(type, time_ns), fields...);
    end();
  }
  output_file file_;
};

}  // namespace

void append_op_outcome(std::string& out, const op_result& op, op_keys keys) {
  const bool event_log = keys == op_keys::event_log;
  append_field(out, "allocs", op.allocs);
  append_field(out, "frees", op.frees);
  append_field(out, "exception", op.exception);
  if (op.device_queried) {
    if (event_log) { append_field(out, "device", op.device); }
    append_field(out, event_log ? "used_before" : "device_used_before", op.used_before);
    append_field(out, event_log ? "used_after" : "device_used_after", op.used_after);
    if (op.pool_queried) {
      append_field(out, "pool_reserved_delta", op.pool_reserved_delta);
      append_field(out, "pool_used_delta", op.pool_used_delta);
    }
  }
  if (op.framework != nullptr) {
    if (event_log && !op.device_queried) { append_field(out, "device", op.device); }
    append_string_field(out, "framework", op.framework);
    append_field(out, "framework_allocated_delta", op.framework_allocated_delta);
    append_field(out, "framework_reserved_delta", op.framework_reserved_delta);
  }
}

std::unique_ptr<sink> make_jsonl_sink(const std::string& path, failure_reporter report, std::string* error) {
  return opened(std::make_unique<jsonl_sink>(report), error, path);
}

}  // namespace gpuguard::detail
