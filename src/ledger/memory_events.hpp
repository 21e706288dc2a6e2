// The ledger's memory events: the subscription point through which an allocation's or a free's
// event leaves the ledger (docs/formats.md: `alloc`, `free`, `mem_step`).
//
// The hot path (the ledger, inside the shard's lock) only copies a small record into the
// subscriber's bounded lock-free queue; when the queue is full it folds the event into per-device
// atomic figures instead (the lowest and highest live bytes, counts), so the exact peak survives
// an overload. The subscriber (the outputs' writer thread, outputs/timeline.hpp) drains the queue
// and takes the folded figures. The ledger knows nothing of who subscribes. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include "util/event_queue.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

/// One allocation or free, as the ledger saw it.
struct mem_event {
  std::int64_t time_ns = 0;
  std::uintptr_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t live_bytes = 0;  ///< the device's live bytes right after this event
  site_id site = no_site;        ///< the allocation's site (a free names the site of what it freed)
  std::uint32_t thread = 0;      ///< the thread that allocated (alloc) or freed (free)
  std::int32_t device = host_device_id;
  bool alloc = true;
};

/// Events of one device folded into one record: written as a `mem_step` line.
struct mem_step {
  int device = host_device_id;
  std::int64_t time_ns = 0;      ///< the first folded event
  std::int64_t end_ns = 0;       ///< the last folded event
  std::uint64_t start_bytes = 0; ///< live bytes before the first folded event
  std::uint64_t end_bytes = 0;   ///< live bytes after the last
  std::uint64_t min_bytes = 0;
  std::int64_t min_ns = 0;
  std::uint64_t max_bytes = 0;
  std::int64_t max_ns = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t alloc_bytes = 0;
  std::uint64_t free_bytes = 0;
  bool queue_full = false;       ///< folded by the producers because the queue was full
};

using mem_event_queue = event_queue<mem_event>;

/// The subscriber's queue, or nullptr while nothing subscribes (then the hot path costs one
/// load). Written only by subscribe_mem_events.
extern std::atomic<mem_event_queue*> mem_event_subscriber;

/**
 * Subscribes `queue` to every allocation and free the ledger records from now on (nullptr:
 * unsubscribes), as PyTorch's caching allocator lets trace observers attach. One subscriber at a
 * time: the outputs' writer thread, while the JSONL log or the Chrome trace wants the timeline.
 * `wake` is called by the producers each time a quarter of the queue has filled; it must be
 * callable from any thread inside the ledger's shard lock (a condition variable's notify).
 * Producers already inside a push when the queue is unsubscribed finish it: the subscriber
 * drains the queue once more before it lets it go.
 */
void subscribe_mem_events(mem_event_queue* queue, void (*wake)() noexcept) noexcept;

/// Out of line: a queue is subscribed. The event's time is read here.
void push_mem_event(mem_event_queue& queue, bool alloc, const allocation_record& record,
                    std::uint64_t live_bytes, std::uint32_t thread) noexcept;

/// Called by the ledger for every allocation and free, inside the shard's lock and after the
/// counters' change: the free of an address is queued after its allocation, and an event's time
/// is after the change it reports (a memory sample that read the counters before it is earlier).
inline void note_mem_event(bool alloc, const allocation_record& record, std::uint64_t live_bytes,
                           std::uint32_t thread) noexcept {
  if (mem_event_queue* queue = mem_event_subscriber.load(std::memory_order_acquire)) {
    push_mem_event(*queue, alloc, record, live_bytes, thread);
  }
}

/// For the subscriber: what the producers folded per device while the queue was full, taken (and
/// reset) at once. False when nothing was folded for `device`.
bool take_overflow(int device, mem_step& out) noexcept;
/// Devices that may have folded events (one bit per device slot).
std::uint64_t overflow_devices() noexcept;

}  // namespace gpuguard::detail
