// Allocations and bytes per allocation site over the run, for the outputs' top sites: a fixed
// open-addressing table keyed by site id, lock-free, with no allocation on the hot path. Sites
// past its capacity go uncounted (reports say the table is of the top sites only). Internal to
// libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include "ledger/ledger_internal.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpuguard::detail {

class site_totals {
 public:
  static constexpr std::size_t capacity = 4096;

  /// Counts one allocation of `bytes` at `site` (not no_site). Any thread, any time.
  void count(site_id site, std::size_t bytes) noexcept;
  /// The `count` sites that allocated the most bytes, largest first (ties: lower id first).
  std::vector<site_total> top(std::size_t count) const;
  /// Every total back to zero; the sites keep their slots (a forked child's start).
  void clear() noexcept;

 private:
  struct slot {
    std::atomic<site_id> site{no_site};
    std::atomic<std::uint64_t> allocations{0};
    std::atomic<std::uint64_t> bytes{0};
  };
  std::array<slot, capacity> slots_;
};

}  // namespace gpuguard::detail
