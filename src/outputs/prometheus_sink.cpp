// The Prometheus textfile sink (prometheus_file): the counters and gauges rewritten whole every
// prometheus_interval_ms, for node_exporter's textfile collector. Every sample names the process
// (pid) and, where known, the job (job_id: prometheus_job, else $SLURM_JOB_ID), so that a query
// can sum one job over its nodes; every per-device sample names the device by its CUDA index and
// its GPU's UUID (NVML). The node is the scrape target's. Format: docs/outputs.md, docs/formats.md.
#include "outputs/output_file.hpp"
#include "outputs/sinks.hpp"

#include "util/format.hpp"
#include "tracking/report_json.hpp"
#include "util/file.hpp"
#include "util/nvml.hpp"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

namespace gpuguard::detail {

namespace {

// The labels every sample carries: pid="PID", and job_id="JOB" where `job` (prometheus_job) or
// else $SLURM_JOB_ID names the job; without either, no job_id label.
std::string process_labels(const std::string& job) {
  std::string labels = "pid=\"" + std::to_string(::getpid()) + '"';
  const char* slurm = std::getenv("SLURM_JOB_ID");
  const std::string_view id = !job.empty() ? std::string_view(job) : slurm != nullptr ? std::string_view(slurm) : "";
  if (!id.empty()) {
    labels += ",job_id=\"";
    append_prometheus_label_value(labels, id);
    labels += '"';
  }
  return labels;
}

// The UUID of CUDA device `device` (its GPU's, under MIG) through NVML, "" where unknown: no
// CUDA device of that index, or NVML cannot say. Host memory (-1) has none.
std::string cuda_device_uuid(int device) {
  std::array<char, 32> bus{};
  if (device < 0 || cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not sticky, but leave no error behind for the program
    return "";
  }
  return util::nvml_uuid_of_bus(bus.data());
}

// ---- Prometheus textfile ------------------------------------------------------------------------

class prometheus_sink final : public sink {
 public:
  prometheus_sink(std::string path, std::int64_t interval_ns, failure_reporter report, const std::string& job)
      : path_(std::move(path)), interval_ns_(interval_ns), report_(report), labels_(process_labels(job)) {}

  bool open(std::string* error) {
    std::string failure;
    if (!write_file_atomically(path_, "", &failure)) {
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
  // A sample with the process's labels, then `label`="`value`" (none when `label` is null).
  template <class Number>
  void sample(const char* name, const char* label, std::string_view value, Number number) {
    open_sample(name);
    if (label != nullptr) {
      text_ += ',';
      text_ += label;
      text_ += "=\"";
      append_prometheus_label_value(text_, value);
      text_ += '"';
    }
    close_sample(number);
  }

  // A sample of device `device`: the process's labels, then device="N",uuid="UUID".
  template <class Number>
  void device_sample(const char* name, int device, Number number) {
    open_sample(name);
    text_ += ',';
    append_prometheus_device_labels(text_, device, uuid_of(device));
    close_sample(number);
  }

  void open_sample(const char* name) {
    text_ += name;
    text_ += '{';
    text_ += labels_;
  }

  template <class Number>
  void close_sample(Number number) {
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

  // NVML's UUID of a device, asked once per device: a GPU's identity does not change in a run.
  const std::string& uuid_of(int device) {
    auto it = uuids_.find(device);
    if (it == uuids_.end()) { it = uuids_.emplace(device, cuda_device_uuid(device)).first; }
    return it->second;
  }

  void write(const run_totals& totals) {
    if (failed_) { return; }
    text_.clear();
    const ledger_snapshot snap = snapshot(false);
    const auto per_device = [&](const char* name, const char* type, const char* help, auto value) {
      header(name, type, help);
      for (const auto& [device, c] : snap.devices) {
        device_sample(name, device, value(c));
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
      header("gpuguard_device_used_bytes", "gauge", "Device memory in use by every process (cudaMemGetInfo's figure) at the last sample.");
      for (const mem_sample& s : totals.last_samples) {
        if (s.queried) { device_sample("gpuguard_device_used_bytes", s.device, static_cast<std::uint64_t>(s.used_bytes)); }
      }
      header("gpuguard_device_total_bytes", "gauge", "Device memory in all (cudaMemGetInfo's figure).");
      for (const mem_sample& s : totals.last_samples) {
        if (s.queried) { device_sample("gpuguard_device_total_bytes", s.device, static_cast<std::uint64_t>(s.total_bytes)); }
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

    if (std::string failure; !write_file_atomically(path_, text_, &failure)) {
      failed_ = true;
      report_("prometheus_file: " + failure + "; this output is off from now on");
    }
  }

  std::string path_;
  std::int64_t interval_ns_;
  failure_reporter report_;
  std::string labels_;                     // pid="...", and job_id="..." where known
  std::map<int, std::string> uuids_;       // device -> NVML's UUID ("" unknown)
  std::string text_;
  std::int64_t last_write_ns_ = 0;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<sink> make_prometheus_sink(const std::string& path, std::int64_t interval_ns, const std::string& job,
                                           failure_reporter report, std::string* error) {
  return opened(std::make_unique<prometheus_sink>(path, interval_ns, report, job), error);
}

}  // namespace gpuguard::detail
