// What the ledger offers the rest of the compiled core beyond its public header: the per-thread
// counters that operation scopes read, the ledger's clock, the writer thread's interval peaks and
// per-site totals. Internal to libgpuguard.
#pragma once

#include <gpuguard/ledger.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpuguard::detail {

/// What the calling thread allocated and freed through the ledger, on any device. Operation
/// scopes read it at entry and exit; only the owning thread writes it.
struct thread_memory {
  std::uint64_t allocated_bytes = 0;
  std::uint64_t freed_bytes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::int64_t net = 0;   ///< allocated_bytes - freed_bytes
  std::int64_t peak = 0;  ///< most `net` has been since the innermost open scope began
};

thread_memory& this_thread_memory() noexcept;

/// gpuguard's small id of the calling thread (1, 2, ...), as allocation records carry it.
std::uint32_t this_thread_id() noexcept;

/// The ledger's clock: nanoseconds since it started (steady), and the wall time of its start.
std::int64_t now_ns() noexcept;
std::int64_t clock_start_unix_ns() noexcept;

/// Devices (host: host_device_id) that ever recorded an allocation, ascending.
std::vector<int> active_devices();

/// The most live bytes `device` had since the previous call (or since the start); starts the next
/// interval at the live bytes of now. For the writer thread's memory samples: one caller only.
std::size_t take_interval_peak(int device) noexcept;

/// Allocations and bytes recorded per allocation site over the run (sites with a stack only).
struct site_total {
  site_id site = no_site;
  std::uint64_t allocations = 0;
  std::uint64_t bytes = 0;
};

/// The `count` sites that allocated the most bytes, largest first.
std::vector<site_total> top_sites(std::size_t count);

/// Live allocations of one site, as the crash handler counts them.
struct crash_site {
  site_id site = no_site;
  int device = host_device_id;
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

/**
 * Async-signal-safe: groups the live allocations by (site, device) into `sites` (at most
 * `capacity`; more distinct groups are left out) without waiting for any lock: a shard whose lock
 * is held (perhaps by the crashing thread) is skipped. No allocation, no stdio. Returns the number
 * of groups filled; `complete` says whether every shard was read and every group fitted.
 */
std::size_t crash_scan(crash_site* sites, std::size_t capacity, bool& complete) noexcept;

}  // namespace gpuguard::detail
