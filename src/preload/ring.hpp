// The ring of deferred calls (deferred.cpp says how deferring works): its layout, and the owner's
// push, inline so that the stream-ordered wrappers (driver_hooks.cpp) write their call into it with
// no call of their own. What a wrapper adds to the stream-ordered pair is mostly the work after the
// driver call (docs/run.md, "What --track costs"); on the common path that is one flag, one
// thread-local flag and a few stores.
#pragma once
#include "preload.hpp"

#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include <array>
#include <atomic>
#include <cstdint>

namespace gpuguard::preload {

// One call, as the drainer records it.
struct ring_slot {
  const void* ptr;
  std::size_t bytes;
  cudaStream_t stream;
  std::int32_t device;
  tag_id tag;
  std::uint8_t kind;  // a memory_kind
  bool is_free;
};
static_assert(sizeof(ring_slot) == 32, "two calls to a cache line");

// 8192 calls, 256 KiB: several drainer periods (1 ms) of the fastest stream-ordered pairs a GPU
// makes; the producer also wakes the drainer once every lap.
inline constexpr std::uint64_t ring_slots = 8192;

// Single producer (the owning thread), single consumer (whoever holds the drainer's lock). The
// producer's side, the tail, is on the wrappers' own line (hot, preload.hpp).
struct ring_state {
  alignas(64) std::atomic<std::uint64_t> head{0};  // the consumer's
  std::uint32_t owner = 0;                          // the owner's ledger thread id (the consumer reads it)
  alignas(64) std::array<ring_slot, ring_slots> slots{};
};
extern ring_state ring;

/// The deferring mode (hot.defer_mode).
enum mode_value : int {
  off,     // not deferring (not started, not allowed, or a forked child)
  open,    // deferring; no thread has claimed the ring yet
  owned,   // deferring the calls of the ring's owner
  ended,   // a second thread, a tag or a scope came: every call is recorded at once
};

/// Whether the calling thread owns the ring. `__thread`, not thread_local: a thread_local declared
/// extern is read through a check for a dynamic initialiser that this one does not have.
extern __thread bool owns_ring __attribute__((tls_model("initial-exec")));

/// The ring is full: records what it holds on the calling thread (out of line: rare).
void ring_full() noexcept;
/// Wakes the drainer thread (out of line: once a lap).
void wake_drainer() noexcept;

inline void prefetch_for_write(const void* address) noexcept {
#if defined(__x86_64__)
  if (hot.write_prefetch.load(std::memory_order_relaxed)) { __asm__ volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address))); }
#else
  __builtin_prefetch(address, 1, 3);
#endif
}

// The owner's write of one call: inlined into each caller, which then builds no record in memory.
__attribute__((always_inline)) inline
void push(const call_record& call) noexcept {
#if defined(GPUGUARD_VARIANT_NOPUSH)  // a measurement build: everything but the push to the ring
  if (call.ptr != &ring) { return; }
#endif
  const std::uint64_t tail = hot.ring_tail.load(std::memory_order_relaxed);
  std::uint64_t& seen_head = hot.ring_seen_head;
  if (tail - seen_head >= ring_slots) {
    seen_head = ring.head.load(std::memory_order_acquire);
    if (tail - seen_head >= ring_slots) {  // the drainer fell behind: catch up here
      ring_full();
      seen_head = ring.head.load(std::memory_order_acquire);
    }
  }
  // The line eight pairs ahead, for writing: the drainer read it last, so taking it back costs a
  // trip to the drainer's core, which a driver call's locked instructions would make this thread
  // wait for. Prefetched now, the trip is over when the line is written.
  prefetch_for_write(&ring.slots[(tail + 16) % ring_slots]);
  ring_slot& s = ring.slots[tail % ring_slots];
  s.ptr = call.ptr;
  s.bytes = call.bytes;
  s.stream = call.stream;
  s.device = call.device;
  s.tag = call.tag;
  s.kind = static_cast<std::uint8_t>(call.kind);
  s.is_free = call.is_free;
  hot.ring_tail.store(tail + 1, std::memory_order_release);
  if (tail - seen_head == ring_slots / 2) { wake_drainer(); }
}

/// The common stream-ordered allocation of a deferring process, to the ring with nothing asked
/// first: device memory on device 0 (hot.common says that it is the process's one device and that
/// no holder is looked for), made by the ring's owner. False, doing nothing, for any other; the
/// caller then takes record().
GPUGUARD_HOT_PATH __attribute__((always_inline)) inline
bool defer_common_allocation(const void* ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  if (!hot.common.load(std::memory_order_relaxed) || !owns_ring) { return false; }
  push({ptr, bytes, stream, 0, untagged, memory_kind::device, false});
  return true;
}

/// Whether the calling thread owns the ring and the process still defers: its calls go to the ring.
GPUGUARD_HOT_PATH __attribute__((always_inline)) inline bool owner_deferring() noexcept {
  return owns_ring && hot.defer_mode.load(std::memory_order_relaxed) == owned;
}

/// A free by the ring's owner while deferring, to the ring (its device is the record's, found by
/// the drainer). False, doing nothing, for any other; the caller then takes forget().
GPUGUARD_HOT_PATH __attribute__((always_inline)) inline
bool defer_common_free(const void* ptr, cudaStream_t stream) noexcept {
  if (!owner_deferring()) { return false; }
  push({ptr, 0, stream, unknown_device, untagged, memory_kind::device, true});
  return true;
}

}  // namespace gpuguard::preload
