// The outputs the writer thread feeds: text lines, the JSONL event log, the Chrome trace and the
// Prometheus textfile. Only the writer thread calls a sink (and, after it has been joined, the
// thread that stops the outputs), so sinks need no locks. A sink never throws: a failed write is
// reported once on stderr, counted, and the sink is off from then on. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking.hpp>

#include "ledger/ledger_internal.hpp"
#include "outputs/timeline.hpp"
#include "util/op_totals.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpuguard::detail {

/// What a producer queues: the operation's result and the OS id of its thread; the first event of
/// each thread also carries the thread's name (read there: the thread may be gone when the writer
/// gets to it).
struct queued_op {
  op_result op;
  std::int32_t tid = 0;
  char thread_name[16] = {};
};

struct device_info {
  int device = host_device_id;
  std::string name;             ///< "" for host memory
  std::size_t total_bytes = 0;  ///< 0 = unknown
};

struct thread_info {
  std::uint32_t thread = 0;
  std::int32_t tid = 0;
  std::string name;
};

/// One memory sample of one device: the ledger's figures and, when queried, the device's own.
struct mem_sample {
  std::int64_t time_ns = 0;
  int device = host_device_id;
  std::size_t live_bytes = 0;
  std::size_t interval_peak_bytes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  bool queried = false;
  std::size_t used_bytes = 0;
  std::size_t total_bytes = 0;
};

/// A site with its totals and resolved frames, for the `sites` line.
struct resolved_site {
  site_total totals;
  std::vector<frame_info> frames;
  std::vector<site_id> raw_sites;  ///< the raw stack ids grouped here (same resolved location)
};

/// What the end of the run hands the sinks.
struct end_info {
  std::int64_t time_ns = 0;
  std::string reason;
  std::uint64_t dropped = 0;
  ledger_snapshot ledger;  ///< counters only
  const leak_report* leaks = nullptr;
  bool stacks_on = false;      ///< write the `sites` line
  bool sites_sampled = false;  ///< stacks=sampled: site figures cover sampled allocations only
  std::vector<resolved_site> sites;
};

/// Figures that summarising sinks read when they write (owned by the writer).
struct run_totals {
  std::vector<std::pair<std::string, op_totals>> ops;  ///< per operation since the start, by name, in first-seen order
  std::vector<mem_sample> last_samples;                ///< latest per device
  std::uint64_t alerts[3] = {};                        ///< by alert_kind
  std::uint64_t dropped = 0;
};

/// Reports a failing sink once on stderr and counts it.
using failure_reporter = void (*)(const std::string& message);

class sink {
 public:
  sink() = default;
  sink(const sink&) = delete;
  sink& operator=(const sink&) = delete;
  sink(sink&&) = delete;
  sink& operator=(sink&&) = delete;
  virtual ~sink() = default;

  virtual void device(const device_info& /*info*/, std::int64_t /*time_ns*/) {}
  virtual void thread(const thread_info& /*info*/, std::int64_t /*time_ns*/) {}
  virtual void op(const op_result& /*op*/) {}
  virtual void mem(const mem_sample& /*sample*/) {}
  /// One allocation or free written as it is (the memory timeline, timeline.hpp).
  virtual void mem_event(const detail::mem_event& /*event*/) {}
  /// Allocations and frees folded into one record.
  virtual void mem_step(const detail::mem_step& /*step*/) {}
  /// The sink writes the memory timeline: the ledger queues its events only when one does.
  [[nodiscard]] virtual bool wants_timeline() const { return false; }
  virtual void alert(const gpuguard::alert& /*fired*/) {}
  virtual void dropped(std::uint64_t /*count*/, std::uint64_t /*total*/, std::int64_t /*time_ns*/) {}
  /// Called now and then by the writer with the current totals (Prometheus rewrites its file).
  virtual void tick(std::int64_t /*time_ns*/, const run_totals& /*totals*/) {}
  /// The last lines of the run. The sink is flushed and closed afterwards.
  virtual void finish(const end_info& /*end*/, const run_totals& /*totals*/) {}
  /// Writes out what is buffered.
  virtual void flush() = 0;
};

/// Sinks for the options' paths ("%p" already expanded). Each returns nullptr and sets `error`
/// (naming the path) when its file cannot be opened.
std::unique_ptr<sink> make_text_sink(const std::string& where, failure_reporter report, std::string* error);
std::unique_ptr<sink> make_jsonl_sink(const std::string& path, failure_reporter report, std::string* error);
std::unique_ptr<sink> make_trace_sink(const std::string& path, failure_reporter report, std::string* error);
/// The Prometheus file names the job `job` (prometheus_job), else $SLURM_JOB_ID where set.
std::unique_ptr<sink> make_prometheus_sink(const std::string& path, std::int64_t interval_ns, const std::string& job,
                                           failure_reporter report, std::string* error);

/// How an op's device figures are keyed: the event log's `op` line names the device and its
/// figures `used_before`/`used_after`; the trace's args leave the device out (the slice's track
/// says the thread) and say `device_used_before`/`device_used_after`.
enum class op_keys { event_log, trace };

/// Appends what an op's JSON writers share after its bytes: `,"allocs":..,"frees":..,"exception":..`,
/// then what was queried (the device's used bytes at entry and exit, the pool's deltas, the
/// framework's deltas). Format: docs/formats.md.
void append_op_outcome(std::string& out, const op_result& op, op_keys keys);

/// The human line for an operation: "[gpuguard] forward: +512.0 MiB (peak +768.0 MiB, 3 allocs) 12.4 ms".
std::string op_line(const op_result& op);

}  // namespace gpuguard::detail
