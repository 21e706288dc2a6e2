// What the ledger offers the rest of the compiled core beyond its public header: the per-thread
// counters that operation scopes read, the ledger's clock, the writer thread's interval peaks and
// per-site totals. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpuguard::detail {

/// Per-device tables (the ledger's counters, the timeline's folded figures) index devices by
/// slot: slot 0 is host memory (and any id out of range), slot d + 1 is device d.
inline constexpr int device_slots = max_devices + 1;
constexpr int device_slot_of(int device) noexcept { return device >= 0 && device < max_devices ? device + 1 : 0; }

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

/// The ledger's per-thread counts (allocations, frees and bytes ever allocated, per device and per
/// tag), defined in ledger.cpp: only the owning thread writes them, readers fold every thread's.
struct thread_counts;

/// Everything gpuguard keeps per thread, in one thread-local object: in a shared library each
/// distinct thread_local costs a call to find it, and the hot paths (recording an allocation,
/// entering and leaving an operation scope) look it up once.
struct thread_state {
  thread_memory memory;
  tag_id tag = untagged;               ///< the tag new allocations are recorded under
  std::uint32_t id = 0;                ///< gpuguard's small id (1, 2, ...); 0 until first used
  void* innermost_scope = nullptr;     ///< the innermost open op_scope of the thread
  std::int32_t tid = 0;                ///< the OS thread id; 0 until the outputs first need it
  bool named = false;                  ///< the thread's name has been queued for the outputs
  thread_counts* counts = nullptr;     ///< the thread's counts; claimed on its first record
  std::uint64_t sequence_next = 0;     ///< the next sequence number of the thread's block
  std::uint64_t sequence_end = 0;      ///< one past the block's last
  std::uint32_t go_local_wait = 0;     ///< frees of shared counters before the next look at local mode
  std::uint32_t sample_countdown = 0;  ///< stacks=sampled: allocations to pass before the next capture
};

thread_state& this_thread_state() noexcept;

/// Set once any thread of the process sets a tag or opens an operation scope: from then on a
/// thread's allocations depend on the moment they are recorded, so a source records them at once.
GPUGUARD_SHARED_STATE inline std::atomic<bool>& thread_context_used() noexcept {
  static std::atomic<bool> used{false};
  return used;
}

/// A tag was set or an operation scope opened: sets thread_context_used() and, the
/// first time, first records what a source held back (set_ledger_catch_up), so that calls made
/// before the tag or the scope are not counted inside them.
void note_thread_context() noexcept;

/// A fresh small thread id (1, 2, ...).
std::uint32_t next_thread_id() noexcept;

/// gpuguard's small id of the thread that owns `state`, assigned on first use.
inline std::uint32_t thread_id(thread_state& state) noexcept {
  if (state.id == 0) { state.id = next_thread_id(); }
  return state.id;
}

/// The ledger's clock: nanoseconds since it started (steady), and the wall time of its start.
std::int64_t now_ns() noexcept;
std::int64_t clock_start_unix_ns() noexcept;

/// Refines the scale of the fast clock (see clock.hpp); the outputs' writer calls it now and then.
void refine_clock() noexcept;

/// Devices (host: host_device_id) that ever recorded an allocation, ascending.
std::vector<int> active_devices();

/// device_counters without stopping any thread, for the crash handler: each field read whole, but
/// while the device's live bytes are kept per thread (see ledger.cpp, "counters") their sum may
/// mix instants.
counters device_counters_unstopped(int device) noexcept;

/// While held (by the outputs, when the JSONL log or the Chrome trace is on), every device's and
/// tag's live bytes are one shared atomic, so that every event knows the live bytes it left and
/// the interval peaks are exact: hold(true) makes every counter shared and starts the interval
/// peaks from now; hold(false) lets them go per thread again.
void hold_shared_counters(bool hold) noexcept;

/// Whether `device`'s live bytes are kept per thread at the moment (for tests).
bool counter_is_local(int device) noexcept;

/// The most live bytes `device` had since the previous call (or since the start); starts the next
/// interval at the live bytes of now. For the writer thread's memory samples: one caller only.
/// Exact while the counters are held shared (hold_shared_counters). While the device is local,
/// moments between samples are not seen: it is then at least the live bytes at each end.
std::size_t take_interval_peak(int device) noexcept;

/// Arms the alert on crossing for `device`: the first allocation that takes the device's live
/// bytes to `bytes` or more records the moment (one compare on the hot path); SIZE_MAX disarms.
/// The writer thread arms it from the alert threshold and the device's total. A change stops
/// every thread for a moment: the alert bounds a local counter (ledger.cpp, "counters").
void arm_crossing(int device, std::size_t bytes) noexcept;
/// A crossing recorded since it was armed: the live bytes the allocation left and when.
struct crossing {
  std::size_t live_bytes = 0;
  std::int64_t time_ns = 0;
};
/// The crossing recorded for `device`, if any, and forgets it (the writer thread only).
std::optional<crossing> take_crossing(int device) noexcept;

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
