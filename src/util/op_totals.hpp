// Per-operation totals: what every ended scope of one operation name did, added up. The run keeps
// them for its summarising sinks (the Prometheus file's gpuguard_op_* families), `gpuguard report`
// for a log's `op` lines (the page's operations table). Sums saturate at the ends of std::int64_t,
// so that no figure, from a long run or a hostile log, overflows. Internal to gpuguard.
#pragma once

#include <cstdint>

namespace gpuguard::detail {

struct op_totals {
  std::int64_t calls = 0;
  std::int64_t duration_ns = 0;      ///< summed over the calls
  std::int64_t max_duration_ns = 0;  ///< of the longest call
  std::int64_t alloc_bytes = 0;      ///< summed
  std::int64_t free_bytes = 0;       ///< summed
  std::int64_t max_peak_bytes = 0;   ///< largest peak above its start of any call
  std::int64_t net_bytes = 0;        ///< summed: what all the calls left behind
  std::int64_t last_net_bytes = 0;   ///< what the latest call left behind
  std::int64_t exceptions = 0;       ///< calls that ended by an exception

  /// Adds one ended scope: its duration, the bytes it allocated and freed, its peak above its
  /// start, its net bytes, and whether it ended by an exception.
  void add(std::int64_t duration, std::int64_t allocated, std::int64_t freed, std::int64_t peak, std::int64_t net,
           bool exception) noexcept;
};

}  // namespace gpuguard::detail
