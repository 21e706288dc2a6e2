/**
 * @file outputs.hpp
 * @brief Where operation results, memory samples and alerts go: a bounded queue that producers
 *        never wait on, drained by one writer thread into the sinks the options choose (text
 *        lines, JSONL event log, Chrome trace, Prometheus textfile). Needs the compiled core.
 *        Formats: docs/formats.md; behaviour and options: docs/outputs.md.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace gpuguard {

/// What kind of alert fired.
enum class alert_kind {
  device_full,       ///< a device's used fraction reached `alert_fraction`
  device_recovered,  ///< it fell below `alert_fraction - alert_hysteresis` after a device_full
  op_growth,         ///< one operation scope's net growth passed `alert_op_growth` bytes
};
GPUGUARD_API const char* to_string(alert_kind kind) noexcept;

/// An alert, as the callback and the sinks receive it.
struct alert {
  alert_kind kind = alert_kind::device_full;
  std::int64_t time_ns = 0;  ///< the ledger's clock
  // device_full, device_recovered:
  int device = host_device_id;
  double fraction = 0;         ///< used / total
  double threshold = 0;        ///< alert_fraction
  std::size_t used_bytes = 0;  ///< device-wide (cudaMemGetInfo's figure) or, for host memory, the ledger's
  std::size_t total_bytes = 0;
  // op_growth:
  std::string op;              ///< the operation's name
  std::uint32_t thread = 0;
  std::int64_t net_bytes = 0;
  std::size_t limit_bytes = 0;
  // both:
  std::uint64_t suppressed = 0;  ///< alerts of this key held back by hysteresis since the last one
  std::string message;           ///< the human line, as logged
};

/// Called on the writer thread for every alert. It must not block for long (the queue fills
/// meanwhile) and should not throw; an exception it throws is caught, counted and reported once.
using alert_callback = std::function<void(const alert&)>;

/**
 * Starts the writer thread and opens the sinks that `opts` names (text_log, jsonl_log, trace_file,
 * prometheus_file) and applies the scope options (nvtx, op_device_query, alerts). If outputs are
 * running already, they are stopped first (their files are finished) and started anew. A sink that
 * cannot be opened is reported on stderr, naming the path and the error, and left off; the others
 * still start. `enable_tracking()` calls this. Never throws.
 */
GPUGUARD_API void start_outputs(const options& opts = process_options()) noexcept;

/// True while the writer thread runs.
[[nodiscard]] GPUGUARD_API bool outputs_running() noexcept;

/// Sets (or, with an empty function, clears) the alert callback.
GPUGUARD_API void set_alert_callback(alert_callback callback);

/**
 * Waits until the writer has handled every event queued before the call and flushed the sinks,
 * or until `timeout`. Returns false on timeout or when the outputs are not running.
 */
GPUGUARD_API bool flush_outputs(std::chrono::milliseconds timeout = std::chrono::seconds(10)) noexcept;

/**
 * Drains the queue, takes a last memory sample, writes the end-of-run lines (allocation sites,
 * leaks and `end` in the JSONL log; the closing bracket of the trace; a last Prometheus file),
 * closes the sinks and joins the writer thread. `reason` goes into the `end` line. The exit
 * report calls this; calling it when nothing runs does nothing.
 */
GPUGUARD_API void stop_outputs(const char* reason = "exit") noexcept;

/// Counts since the outputs started (all zero when they never ran).
struct output_stats {
  std::uint64_t queued = 0;         ///< events accepted into the queue
  std::uint64_t dropped = 0;        ///< events dropped because the queue was full
  std::uint64_t written = 0;        ///< events the writer handled
  std::uint64_t sink_failures = 0;  ///< writes that failed (each failing sink is then turned off)
  std::uint64_t alerts = 0;
};
[[nodiscard]] GPUGUARD_API output_stats output_statistics() noexcept;

}  // namespace gpuguard
