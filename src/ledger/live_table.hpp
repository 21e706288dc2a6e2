// The ledger's live table: every live allocation's record, in shards. Each shard is an
// open-addressing table (linear probing with backward-shift deletion, so it never fills with
// tombstones and needs no heap allocation once it has grown to the live set) behind a spin lock,
// with a small ring of recent frees to tell a double free from a stray pointer. The ledger
// (ledger.cpp) updates its counters inside a shard's lock, so a reader that holds every shard sees
// the table and the counters of one instant. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include "ledger/shard_hash.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <sched.h>

namespace gpuguard::detail {

// A thread that keeps allocating and freeing the same block (a malloc's per-thread cache, a
// framework's reused buffer) always lands in the same shard, and two such threads in one shard
// pass its lines between their cores on every event (BM_shard_pair in the tracking benchmark
// measures it). Of 16 such threads, 16 x (1 - (1 - 1/shards)^15) share a shard with another (the
// birthday problem): about 3.4 with 64 shards, 0.9 with 256, 0.23 with 1024. Which threads share
// is down to the addresses malloc hands out, so it changes from process to process. The table's
// starting size and the recent-free rings are divided among the shards, so the memory stays as
// it would be with fewer (and so does, on average, the number of frees a double free is still
// recognised after).
inline constexpr unsigned live_table_shards = 1U << ledger_shard_bits;
inline constexpr std::size_t live_table_initial_capacity = 16;  // per shard, a power of two
inline constexpr std::size_t recent_free_count = 4;

/// A free the shard remembers, to name both sites of a double free.
struct recent_free {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = host_device_id;
  site_id allocated_at = no_site;
  site_id freed_at = no_site;
};

/// A lock for critical sections a few dozen instructions long.
struct spin_mutex {
  std::atomic<bool> locked{false};
  bool try_lock() noexcept { return !locked.exchange(true, std::memory_order_acquire); }
  void lock() noexcept {
#if defined(GPUGUARD_VARIANT_NO_LOCK)  // a measurement build only (benchmarks/ledger_cost_parts.sh)
    return;
#endif
    while (locked.exchange(true, std::memory_order_acquire)) {
      // Critical sections are short: spin a while, then give the core away, in case the holder
      // is a thread that lost its core (more threads than cores, or a stop of every thread).
      for (unsigned spins = 0; locked.load(std::memory_order_relaxed); ++spins) {
        if (spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          sched_yield();
        }
      }
    }
  }
  void unlock() noexcept { locked.store(false, std::memory_order_release); }
};

/// One shard of the live table. Every member is used under `mutex`.
struct alignas(64) live_shard {
  spin_mutex mutex;
  std::vector<allocation_record> slots;  // ptr == nullptr: empty
  // The table's geometry, kept with it: a vector's size divides by the record's size, and a
  // probe's start needs the count of its bits, on every allocation and free.
  std::size_t mask = 0;  // slots.size() - 1
  unsigned shift = 64;   // ledger_slot_shift(slots.size())
  std::size_t used = 0;
  std::array<recent_free, recent_free_count> recent{};
  std::size_t recent_next = 0;

  /// A table of live_table_initial_capacity empty slots.
  live_shard();

  /// The index of `ptr`'s record (ptr not null), or else of the empty slot where its probe ends.
  __attribute__((always_inline)) std::size_t find(const void* ptr, std::uint64_t hash) const noexcept {
    const allocation_record* table = slots.data();
    for (std::size_t i = ledger_home_slot_shifted(hash, shift);; i = (i + 1) & mask) {
      if (table[i].ptr == ptr || table[i].ptr == nullptr) { return i; }
    }
  }

  /// The slot for a new record of `hash`, counted as used, given `empty`, the index of the empty
  /// slot its find() ended at: that one, unless the table is half full and grows first (then
  /// found again). Null if the table had to grow and memory ran out (the table as it was).
  __attribute__((always_inline)) allocation_record* claim(std::uint64_t hash, std::size_t empty) noexcept {
    if ((used + 1) * 2 > mask + 1) {  // half full: mask + 1 slots
      if (!grow()) { return nullptr; }
      empty = ledger_home_slot_shifted(hash, shift);
      while (slots[empty].ptr != nullptr) { empty = (empty + 1) & mask; }
    }
    ++used;
    return &slots[empty];
  }

  /// Removes the record at `hole` by backward shift: later entries of its probe run move up, so
  /// no tombstones are needed.
  __attribute__((always_inline)) void erase(std::size_t hole) noexcept {
    for (std::size_t i = (hole + 1) & mask; slots[i].ptr != nullptr; i = (i + 1) & mask) {
      const std::size_t home = ledger_home_slot_shifted(pointer_hash(slots[i].ptr), shift);
      // Move the entry into the hole if its home is not within (hole, i].
      const bool home_in_between = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
      if (!home_in_between) {
        slots[hole] = slots[i];
        hole = i;
      }
    }
    slots[hole].ptr = nullptr;  // empty; the other fields are written again before they are read
    --used;
  }

  /// Remembers a free. A block freed again and again (reused between) takes one entry, not the
  /// whole ring.
  void remember_free(const recent_free& freed) noexcept {
    recent_free& newest = recent[(recent_next + recent_free_count - 1) % recent_free_count];
    if (recent_next != 0 && newest.ptr == freed.ptr) {
      newest = freed;
    } else {
      recent[recent_next++ % recent_free_count] = freed;
    }
  }

  /// The newest remembered free of `ptr`, or null.
  [[nodiscard]] const recent_free* recent_free_of(const void* ptr) const noexcept {
    const recent_free* found = nullptr;
    for (const recent_free& r : recent) {
      if (r.ptr == ptr) { found = &r; }
    }
    return found;
  }

  /// Forgets the remembered frees.
  void forget_frees() noexcept {
    recent = {};
    recent_next = 0;
  }

  /// Doubles the table; false (and the table as it was) if memory ran out. Out of line: the
  /// check that calls it is on every allocation.
  bool grow() noexcept;

 private:
  // Takes `table` (a power of two of slots) as the table, and gives the old one back in it.
  void take_table(std::vector<allocation_record>& table) noexcept;
};

/// The shards, each record in the one its pointer's hash picks.
struct live_table {
  std::array<live_shard, live_table_shards> shards;

  live_shard& shard_for(std::uint64_t hash) noexcept { return shards[ledger_shard_of_hash(hash)]; }

  /// Every shard's lock, in order (and back): around fork(), and for a reading of one instant.
  void lock_all() noexcept {
    for (live_shard& s : shards) { s.mutex.lock(); }
  }
  void unlock_all() noexcept {
    for (live_shard& s : shards) { s.mutex.unlock(); }
  }
};

}  // namespace gpuguard::detail
