// The ledger's live counters: per device and per tag, the live bytes and their peaks, kept exact
// whichever threads allocate, and the counts of allocations and frees, kept per thread. Internal
// to libgpuguard; ledger.cpp drives them from inside the live table's locks.
//
// A counter that every thread writes is a cache line that every thread's allocation pulls to its
// own core. So each device's and tag's counters are split by what they need:
// - allocations, frees and bytes ever allocated: per thread (thread_counts below), written by
//   their owner without a locked instruction and summed when read. Sums of counts are exact
//   whatever the order, so nothing is lost by splitting them.
// - live bytes and the peaks. A peak is not a sum: each thread's own most, summed, would
//   overstate it. Each device's and tag's live bytes are therefore in one of two modes.
//   Shared: one atomic that every allocation and free adds to. Its fetch_add orders all of the
//   counter's events into one sequence and returns the exact live bytes after each, so raising
//   the peaks to it keeps them exact (the largest value that sequence reached). Every thread
//   writes that line, and sixteen threads allocating at once take turns on it.
//   Local: `current` is frozen as a base, and each thread's block holds its own part of the live
//   bytes (its allocations minus its frees) and a ceiling that part may rise to without asking.
//   The ceilings, the base and a pool of headroom not yet handed out always add up to the bound,
//   the lowest figure an event must not pass unseen (the peak, the phase peak, an armed alert):
//       base + sum of ceilings + pool = bound,  and every part <= its ceiling,
//   so the live bytes, base + sum of parts, cannot pass the bound while the counter is local, and
//   the peaks stay exact without any thread seeing the others' parts. An allocation within its
//   thread's ceiling is a plain store to the thread's own block; past it, the thread takes
//   headroom from the pool (a compare-and-swap); past the pool, it stops every thread that might
//   change a part (it holds every shard of the live table: all parts and ceilings change only
//   inside a shard's lock) and sums the parts, exactly. Then it either moves ceilings from threads
//   that do not use them to itself, or, when this allocation makes a new peak, folds the parts
//   into `current` and the counter is shared again. A shared counter goes local at a free that
//   leaves an eighth of the bound or more as headroom, and not while an output holds every
//   counter shared: the JSONL log and the Chrome trace write the live bytes after each event.

#pragma once

#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include "ledger/ledger_internal.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

// Counts of one device or tag in one thread's block. Written by one thread at a time (the block's
// owner, or under the fallback below with fetch_add), read by any: relaxed atomics, so a reader
// sees each value whole. The last three are the block's part of a local counter (see above):
// written by the owner inside a shard's lock, or by a thread that holds every shard.
struct event_counts {
  std::atomic<std::uint64_t> total{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::int64_t> part{0};     // allocated minus freed by this block while local
  std::atomic<std::int64_t> ceiling{0};  // the most `part` may reach without asking
  std::atomic<std::int64_t> high{0};     // the most `part` reached in this local stretch
};

// One thread's counts of every device and tag. Blocks live as long as their registry (the
// ledger's never goes): a thread that ends gives its block back and the next new thread takes it
// over, counts and all (they are sums, so whose thread added to them does not matter), so there
// are never more blocks than threads that were alive at once.
struct thread_counts {
  std::array<event_counts, device_slots> devices;
  std::array<event_counts, max_tags> tags;
  std::atomic<bool> owned{false};
  bool shared = false;             // the fallback block: any thread may write it, with fetch_add
  thread_counts* next = nullptr;   // the registry's list; set before the block is published
};

/// Every thread's block (see thread_counts), newest first: pushed, never unlinked, and a fallback
/// block for a thread whose own block is gone (it is ending) or could not be made (out of memory).
class count_blocks {
 public:
  count_blocks() noexcept {
    fallback_.shared = true;
    fallback_.owned.store(true, std::memory_order_relaxed);
    head_.store(&fallback_, std::memory_order_release);
  }
  count_blocks(const count_blocks&) = delete;
  count_blocks& operator=(const count_blocks&) = delete;
  count_blocks(count_blocks&&) = delete;
  count_blocks& operator=(count_blocks&&) = delete;
  ~count_blocks();

  thread_counts& fallback() noexcept { return fallback_; }

  /// A block no thread owns, now owned by the caller: one a thread gave back, or a new one;
  /// the fallback block when memory ran out.
  thread_counts& claim() noexcept;

  template <typename Visit>
  void for_each(Visit visit) const noexcept {
    for (thread_counts* block = head_.load(std::memory_order_acquire); block != nullptr; block = block->next) {
      visit(*block);
    }
  }

  /// In a child made by fork(): every count back to zero, and every block but `kept` (the forking
  /// thread's) and the fallback unowned, as their threads are the parent's.
  void restart_in_forked_child(const thread_counts* kept) noexcept;

 private:
  std::atomic<thread_counts*> head_{nullptr};
  thread_counts fallback_;
};

// A count of the block's owner: the only writer, so a plain add, no locked instruction.
__attribute__((always_inline)) inline void add_own(std::atomic<std::uint64_t>& value, std::uint64_t by) noexcept {
  value.store(value.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// The fallback block, which any thread may write: fetch_add. Out of line, so that the owner's
// path tests `shared` once.
void count_shared(thread_counts& counts, int slot, tag_id tag, std::uint64_t allocations, std::uint64_t bytes,
                  std::uint64_t frees) noexcept;

__attribute__((always_inline)) inline void count_allocation(thread_counts& counts, int slot, tag_id tag, std::size_t bytes) noexcept {
  if (__builtin_expect(counts.shared, false)) {
    count_shared(counts, slot, tag, 1, bytes, 0);
    return;
  }
  event_counts& device = counts.devices[static_cast<std::size_t>(slot)];
  event_counts& tagged = counts.tags[tag];
  add_own(device.allocations, 1);
  add_own(device.total, bytes);
  add_own(tagged.allocations, 1);
  add_own(tagged.total, bytes);
}

__attribute__((always_inline)) inline void count_free(thread_counts& counts, int slot, tag_id tag) noexcept {
  if (__builtin_expect(counts.shared, false)) {
    count_shared(counts, slot, tag, 0, 0, 1);
    return;
  }
  add_own(counts.devices[static_cast<std::size_t>(slot)].frees, 1);
  add_own(counts.tags[tag].frees, 1);
}

struct alignas(64) live_counter {
  std::atomic<std::size_t> current{0};  // shared: the live bytes; local: the base
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> phase_peak{0};
  std::atomic<std::size_t> interval_peak{0};  // the writer thread's sampling interval
  // The alert on crossing (devices only): the first allocation that takes `current` to
  // `alert_at` or more records the moment; the writer takes it and writes the alert. Armed and
  // disarmed by the writer; SIZE_MAX: disarmed. crossing_state: 0 none, 1 being written, 2 ready.
  std::atomic<std::size_t> alert_at{static_cast<std::size_t>(-1)};
  std::atomic<int> crossing_state{0};
  std::atomic<bool> used{false};  // ever allocated: set once, read by reports
  // The mode: even shared, odd local. Counts every change (made while every shard is held), so
  // a reader that holds no shard can tell whether the mode changed while it read.
  std::atomic<std::uint32_t> mode{0};
  std::size_t crossed_bytes = 0;      // written by the claimer before crossing_state becomes 2
  std::int64_t crossed_ns = 0;
  // Local mode: headroom not yet in any thread's ceiling. Taken with compare-and-swap.
  std::atomic<std::int64_t> pool{0};
  // Stops of every thread in this local stretch (written while every shard is held), and how
  // many stretches ended because threads kept taking ceilings from each other: each doubles the
  // frees to wait before the counter tries local mode again.
  std::uint32_t stops = 0;
  std::atomic<std::uint32_t> backoff{0};

  static void raise_to(std::atomic<std::size_t>& max, std::size_t value) noexcept {
    std::size_t seen = max.load(std::memory_order_relaxed);
    while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
  std::size_t add(std::size_t bytes) noexcept {  // shared mode; returns the live bytes it left
    const std::size_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(peak, now);
    raise_to(phase_peak, now);
    raise_to(interval_peak, now);
    if (!used.load(std::memory_order_relaxed)) { used.store(true, std::memory_order_relaxed); }
    if (now >= alert_at.load(std::memory_order_relaxed)) { note_crossing(now); }
    return now;
  }
  void note_crossing(std::size_t now) noexcept {
    int none = 0;
    if (!crossing_state.compare_exchange_strong(none, 1, std::memory_order_acquire)) { return; }
    crossed_bytes = now;
    crossed_ns = now_ns();
    crossing_state.store(2, std::memory_order_release);
  }
  std::size_t remove(std::size_t bytes) noexcept {  // shared mode; returns the live bytes it left
    return current.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
  }
  // The most the live bytes may reach while local: the lowest peak, and below an armed alert.
  [[nodiscard]] std::size_t bound() const noexcept {
    const std::size_t alert = alert_at.load(std::memory_order_relaxed);
    return std::min({peak.load(std::memory_order_relaxed), phase_peak.load(std::memory_order_relaxed),
                     alert == 0 ? 0 : alert - 1});
  }
  void clear() noexcept {
    for (auto* value : {&current, &peak, &phase_peak, &interval_peak}) {
      value->store(0, std::memory_order_relaxed);
    }
    used.store(false, std::memory_order_relaxed);
    mode.store(0, std::memory_order_relaxed);
    pool.store(0, std::memory_order_relaxed);
    stops = 0;
    backoff.store(0, std::memory_order_relaxed);
  }
  [[nodiscard]] bool ever_used() const noexcept { return used.load(std::memory_order_relaxed); }
  // Whether live bytes of `live` leave an eighth of the bound or more as headroom: enough for the
  // counter to go local.
  [[nodiscard]] bool has_headroom(std::size_t live) const noexcept {
    const std::size_t b = bound();
    return b > live && b - live >= b / 8;
  }
};

// One device's or tag's counter, and where its part sits in each thread's block.
struct counter_ref {
  live_counter& counter;
  count_blocks& blocks;
  bool is_tag;
  std::size_t index;
  [[nodiscard]] event_counts& in(thread_counts& block) const noexcept {
    return is_tag ? block.tags[index] : block.devices[index];
  }
  [[nodiscard]] bool local() const noexcept { return (counter.mode.load(std::memory_order_relaxed) & 1U) != 0; }
};

// Inside a shard's lock, by the block's owner. Room for `bytes` more in its part: within its
// ceiling, or with headroom taken from the pool. Gives the part it would then have; false, having
// added nothing, when neither has room.
__attribute__((always_inline)) inline bool room_for(live_counter& c, event_counts& mine, std::size_t bytes,
                                                    std::int64_t& part_after) noexcept {
  part_after = mine.part.load(std::memory_order_relaxed) + static_cast<std::int64_t>(bytes);
  const std::int64_t ceiling = mine.ceiling.load(std::memory_order_relaxed);
  if (part_after <= ceiling) { return true; }
  const std::int64_t need = part_after - ceiling;
  std::int64_t pool = c.pool.load(std::memory_order_relaxed);
  while (pool >= need) {
    // A quarter of what is left as well: a thread that keeps growing comes back seldom.
    const std::int64_t grant = need + (pool - need) / 4;
    if (c.pool.compare_exchange_weak(pool, pool - grant, std::memory_order_relaxed)) {
      mine.ceiling.store(ceiling + grant, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

__attribute__((always_inline)) inline bool room_for(live_counter& c, event_counts& mine, std::size_t bytes) noexcept {
  std::int64_t part_after = 0;
  return room_for(c, mine, bytes, part_after);
}

// An allocation's add to one counter, decided inside the shard's lock before anything changes:
// to the shared atomic (part == nullptr), or to the thread's part, which becomes `after`.
struct planned_add {
  event_counts* part = nullptr;
  std::int64_t after = 0;
  bool fallback = false;  // the part is the fallback block's, which several threads may write
};

// Plans an allocation's add by `block`'s thread; false when a local counter has no room without
// stopping the others. With every shard held (`stopped`), make_room_stopped has made the room.
// The fallback block, which several threads may write at once, has room only then.
__attribute__((always_inline)) inline bool plan_add(const counter_ref& r, thread_counts& block,
                                                    std::size_t bytes, planned_add& plan, bool stopped) noexcept {
  if (!r.local()) { return true; }
  event_counts& e = r.in(block);
  if (block.shared) {
    if (!stopped) { return false; }
    plan.fallback = true;
  } else if (!room_for(r.counter, e, bytes, plan.after)) {
    return false;
  }
  plan.part = &e;
  return true;
}

// Carries out a planned add; returns the live bytes it left for a shared counter, unknown_size
// for a local one (knowing them would mean reading every thread's part).
__attribute__((always_inline)) inline std::size_t add_planned(const counter_ref& r, planned_add plan,
                                                              std::size_t bytes) noexcept {
  if (plan.part == nullptr) { return r.counter.add(bytes); }
  event_counts& e = *plan.part;
  if (plan.fallback) {
    const auto added = static_cast<std::int64_t>(bytes);
    plan.after = e.part.fetch_add(added, std::memory_order_relaxed) + added;
  } else {
    e.part.store(plan.after, std::memory_order_relaxed);  // the owner is the only writer
  }
  if (plan.after > e.high.load(std::memory_order_relaxed)) { e.high.store(plan.after, std::memory_order_relaxed); }
  return unknown_size;
}

__attribute__((always_inline)) inline std::size_t remove_bytes(const counter_ref& r, thread_counts& block, std::size_t bytes) noexcept {
  if (!r.local()) { return r.counter.remove(bytes); }
  event_counts& e = r.in(block);
  if (block.shared) {
    e.part.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  } else {
    e.part.store(e.part.load(std::memory_order_relaxed) - static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
  return unknown_size;
}

// Reading and changing modes: every function below but live_bytes and read_counters wants every
// shard of the live table held (no part, ceiling or mode changes meanwhile), or, in a unit test,
// the one thread.

/// The live bytes of a counter. Exact while every shard is held, or for a shared counter;
/// otherwise (a local counter read without stopping anyone) each part is read whole but the sum
/// may mix instants.
std::size_t live_bytes(const counter_ref& r) noexcept;

/// The counters of one device slot or tag: live bytes and peaks from the counter, counts summed
/// over every thread's block.
counters read_counters(const counter_ref& r) noexcept;

/// Folds the parts into `current` (the exact live bytes) and makes the counter shared.
void go_shared(const counter_ref& r) noexcept;

/// Makes a shared counter local when `held_shared` is false (no holder needs it shared) and its
/// live bytes leave an eighth of the bound or more as headroom: all of it goes to the pool.
void go_local(const counter_ref& r, bool held_shared) noexcept;

/// For an allocation of `bytes` by `block`'s thread that plan_add refused: makes room for it.
/// Each thread keeps a ceiling as high as its part has been in this local stretch and the rest
/// goes back to the pool; if that is not enough, every ceiling comes down to its part (and the
/// stretch's highs start again). If the allocation takes the live bytes past the bound, or the
/// threads keep taking room from each other, the counter is made shared.
void make_room_stopped(const counter_ref& r, thread_counts& block, std::size_t bytes) noexcept;

/// Makes the counter shared and starts one of its peaks (the phase peak, or the writer's
/// interval peak) again at its live bytes: a local counter keeps neither between its events.
void share_restarting(const counter_ref& r, std::atomic<std::size_t> live_counter::*peak) noexcept;

/// Arms the alert on crossing `bytes` (SIZE_MAX disarms). The alert is part of the bound a local
/// counter keeps under: a counter it would now bind goes shared.
void arm_alert(const counter_ref& r, std::size_t bytes) noexcept;

}  // namespace gpuguard::detail
