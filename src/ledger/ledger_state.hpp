// The ledger's one state and the calling thread's: its parts (the live table, the live counters,
// the threads' count blocks, misuse, site totals) in one object made on first use and never
// destroyed, since frees from static destructors and the exit report may come after any ordinary
// static would be gone. ledger.cpp records into it and reads it (and keeps each thread's state);
// ledger_state.cpp makes it, hands threads their count blocks and ids, and restarts it in a child
// made by fork(). Internal to
// libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include "ledger/ledger_internal.hpp"
#include "ledger/live_counter.hpp"
#include "ledger/live_table.hpp"
#include "ledger/misuse.hpp"
#include "ledger/site_totals.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

struct ledger_state {
  live_table table;
  std::array<live_counter, device_slots> devices;
  std::array<live_counter, max_tags> tag_counters;
  count_blocks blocks;
  site_totals sites;
  // Three cache lines by who writes them. A line that a thread writes now and then is taken from
  // every core that reads it, so the settings every event reads do not share one with the
  // sequence blocks that every thread takes in turn (one per 256 allocations).
  // Written at misuse and at interposed frees of memory from before tracking began.
  alignas(64) misuse_counters misuse;
  // Written by every thread now and then: its next block of sequence numbers, a new thread's id.
  alignas(64) std::atomic<std::uint64_t> sequence{0};
  std::atomic<std::uint32_t> next_thread{0};
  // Read by every allocation or free, written seldom (options, fork, an output starting).
  // In a child made by fork(): records up to this sequence are the parent's (ledger_state.cpp).
  alignas(64) std::atomic<std::uint64_t> inherited_through{0};
  // Holders that need every counter shared (the outputs, while the JSONL log or trace is on).
  std::atomic<int> shared_holds{0};
  std::atomic<int> stacks{static_cast<int>(stack_mode::all)};  // options::stacks' default
  std::atomic<std::uint32_t> stack_sample{64};
  std::atomic<std::uint32_t> stack_depth{16};
  std::atomic<bool> abort_on_error{false};

  __attribute__((always_inline)) counter_ref device_ref(int slot) noexcept {
    return {devices[static_cast<std::size_t>(slot)], blocks, false, static_cast<std::size_t>(slot)};
  }
  __attribute__((always_inline)) counter_ref tag_ref(std::size_t tag) noexcept {
    return {tag_counters[tag], blocks, true, tag};
  }
  /// A record of the parent's, in a child made by fork().
  [[nodiscard]] bool inherited(const allocation_record& record) const noexcept {
    return record.sequence <= inherited_through.load(std::memory_order_relaxed);
  }
  /// Every shard held: makes every device's and tag's counter shared and starts one of its peaks
  /// again at its live bytes (share_restarting).
  void share_every_counter(std::atomic<std::size_t> live_counter::*peak) noexcept;
  [[nodiscard]] bool counters_held_shared() const noexcept {
    return shared_holds.load(std::memory_order_relaxed) > 0;
  }
};

/// The state once made: constant-initialised, so it reads null before any static constructor runs.
extern std::atomic<ledger_state*> made_ledger_state;

/// Makes the state (once) and returns it.
ledger_state& make_ledger_state();

/// The state. Every record and free asks for it: once it is made, one load and no call.
__attribute__((always_inline)) inline ledger_state& ledger() {
  if (ledger_state* s = made_ledger_state.load(std::memory_order_acquire)) [[likely]] { return *s; }
  return make_ledger_state();
}

/// The thread's count block, claimed on its first record.
thread_counts& claim_counts(thread_state& mine) noexcept;
__attribute__((always_inline)) inline thread_counts& counts_of(thread_state& mine) noexcept {
  return mine.counts != nullptr ? *mine.counts : claim_counts(mine);
}

/// Sequence numbers are handed to threads in blocks, so the global counter is touched once per
/// this many allocations of a thread: numbers are unique and increase within a thread.
inline constexpr std::uint64_t sequence_block = 256;

__attribute__((always_inline)) inline std::uint64_t next_sequence(thread_state& mine) noexcept {
  if (mine.sequence_next == mine.sequence_end) {
    mine.sequence_next = ledger().sequence.fetch_add(sequence_block, std::memory_order_relaxed) + 1;
    mine.sequence_end = mine.sequence_next + sequence_block;
  }
  return mine.sequence_next++;
}

/// Holds every shard of the live table, in order: no part, ceiling or mode changes meanwhile, and
/// the table and the counters are of one instant. The caller holds no shard.
class all_shards {
 public:
  all_shards() noexcept { ledger().table.lock_all(); }
  all_shards(const all_shards&) = delete;
  all_shards& operator=(const all_shards&) = delete;
  all_shards(all_shards&&) = delete;
  all_shards& operator=(all_shards&&) = delete;
  ~all_shards() { ledger().table.unlock_all(); }
};

}  // namespace gpuguard::detail
