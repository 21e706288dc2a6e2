// The tracked process's side of the post-mortem region (util/postmortem_region.hpp has the format
// and the supervisor's side): claiming this process's part, and keeping in it what the ledger
// records (live bytes by site, device and tag, the last events), the sites' frames with the module
// map that names them and their Python lines as text, the tags' names, the open operation scopes, and where the JSONL log is. The hot path is one load
// while no part is claimed, and a few relaxed stores under two sequence words when one is.
// Internal to libgpuguard.
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/ledger.hpp>

#include "util/postmortem_region.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpuguard::detail::postmortem {

// ---- the tracked process's side -----------------------------------------------------------------

/// The calling process's part, or nullptr until claimed (and for ever without a region).
extern std::atomic<part*> current_part;
/// False once the process knows it has no region (no variable, a bad descriptor).
extern std::atomic<bool> region_possible;

/// Claims the process's part if a region was handed down and none is claimed yet. Call outside
/// every lock of the ledger (it maps the region and reads the module map). Cheap once settled.
void claim_slow() noexcept;
__attribute__((always_inline)) inline void prepare() noexcept {
  if (current_part.load(std::memory_order_relaxed) == nullptr &&
      region_possible.load(std::memory_order_relaxed)) [[unlikely]] {
    claim_slow();
  }
}

/// Attaches to the region `fd` now (instead of the environment's), for tests and benchmarks
/// (exported for them).
GPUGUARD_API bool attach(int fd) noexcept;
/// Stops recording into the region: the part is closed (as by the exit path) and no other is
/// claimed until attach() is called again. For measurements that compare with and without one.
GPUGUARD_API void detach() noexcept;

void note_event_slow(part& p, bool alloc, const allocation_record& record, std::uint64_t live_bytes) noexcept;
/// An allocation or a free, from the ledger inside its shard's lock: the live slot and the ring.
__attribute__((always_inline)) inline void note_event(bool alloc, const allocation_record& record,
                                                       std::uint64_t live_bytes) noexcept {
  if (part* p = current_part.load(std::memory_order_relaxed)) { note_event_slow(*p, alloc, record, live_bytes); }
}

/// A site the ledger just recorded an allocation at: its frames go into the part the first time
/// (and the module map, if modules were loaded since). Outside every lock of the ledger.
void note_site_slow(part& p, site_id site) noexcept;
bool site_known(const part& p, site_id site) noexcept;
inline void note_site(site_id site) noexcept {
  if (site == no_site) { return; }
  if (part* p = current_part.load(std::memory_order_relaxed); p != nullptr && !site_known(*p, site)) {
    note_site_slow(*p, site);
  }
}

/// A tag the process just interned (tags.cpp, outside its table's lock): its name goes into the
/// part, now if one is claimed, else when one is.
void note_tag(tag_id tag, std::string_view name) noexcept;
/// A tag declared an exit holder's (declare_exit_holder): marked so in the part, now or when claimed.
void note_exit_holder(tag_id tag) noexcept;

/// An operation scope at `depth` (0: the thread's outermost) opened or closed by the calling thread.
void scope_entered(std::uint32_t depth, const char* name, std::uint32_t thread) noexcept;
void scope_left(std::uint32_t depth) noexcept;

/// The JSONL log this process writes, so that the supervisor can end it on the process's behalf.
void note_log(const std::string& path, std::int64_t start_unix_ns) noexcept;

/// The exit path ran: the part is closed and no post-mortem is written for it.
void close_part() noexcept;

}  // namespace gpuguard::detail::postmortem
