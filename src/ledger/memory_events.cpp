// The ledger's memory events (memory_events.hpp): a copy into the subscriber's queue, or, when it
// is full, a fold into per-device atomic figures that the subscriber takes as one `mem_step`.
#include "ledger/memory_events.hpp"

#include "ledger/ledger_internal.hpp"

#include <algorithm>
#include <array>

namespace gpuguard::detail {

std::atomic<mem_event_queue*> mem_event_subscriber{nullptr};

namespace {

std::atomic<void (*)() noexcept> subscriber_wake{nullptr};

// What the producers folded while the queue was full. Updated with relaxed atomics by any thread;
// the writer takes them with exchanges, so a fold racing with the take lands in this step or the
// next one, and only the moment of the lowest and highest may be off by that race.
struct alignas(64) overflow_figures {
  std::atomic<std::uint64_t> events{0};
  std::atomic<std::uint64_t> allocs{0};
  std::atomic<std::uint64_t> alloc_bytes{0};
  std::atomic<std::uint64_t> free_bytes{0};
  std::atomic<std::uint64_t> min_bytes{~std::uint64_t{0}};
  std::atomic<std::uint64_t> max_bytes{0};
  std::atomic<std::int64_t> min_ns{0};
  std::atomic<std::int64_t> max_ns{0};
  std::atomic<std::int64_t> first_ns{0};
  std::atomic<std::int64_t> last_ns{0};
  std::atomic<std::uint64_t> last_bytes{0};
};

std::array<overflow_figures, device_slots>& overflow() {
  static auto* figures = new std::array<overflow_figures, device_slots>();  // lives through exit
  return *figures;
}
std::atomic<std::uint64_t> overflow_mask{0};

void fold(const mem_event& e) noexcept {
  overflow_figures& f = overflow()[device_slot_of(e.device)];
  if (f.events.fetch_add(1, std::memory_order_relaxed) == 0) { f.first_ns.store(e.time_ns, std::memory_order_relaxed); }
  if (e.alloc) {
    f.allocs.fetch_add(1, std::memory_order_relaxed);
    f.alloc_bytes.fetch_add(e.bytes, std::memory_order_relaxed);
  } else {
    f.free_bytes.fetch_add(e.bytes, std::memory_order_relaxed);
  }
  std::uint64_t seen = f.max_bytes.load(std::memory_order_relaxed);
  while (e.live_bytes > seen) {
    if (f.max_bytes.compare_exchange_weak(seen, e.live_bytes, std::memory_order_relaxed)) {
      f.max_ns.store(e.time_ns, std::memory_order_relaxed);
      break;
    }
  }
  seen = f.min_bytes.load(std::memory_order_relaxed);
  while (e.live_bytes < seen) {
    if (f.min_bytes.compare_exchange_weak(seen, e.live_bytes, std::memory_order_relaxed)) {
      f.min_ns.store(e.time_ns, std::memory_order_relaxed);
      break;
    }
  }
  f.last_ns.store(e.time_ns, std::memory_order_relaxed);
  f.last_bytes.store(e.live_bytes, std::memory_order_relaxed);
  overflow_mask.fetch_or(std::uint64_t{1} << (static_cast<unsigned>(device_slot_of(e.device)) % 64), std::memory_order_relaxed);
}

}  // namespace

void push_mem_event(mem_event_queue& queue, bool alloc, const allocation_record& record,
                    std::uint64_t live_bytes, std::uint32_t thread) noexcept {
  mem_event e;
  e.time_ns = now_ns();
  e.address = reinterpret_cast<std::uintptr_t>(record.ptr);
  e.bytes = record.bytes;
  e.live_bytes = live_bytes;
  e.site = record.site;
  e.thread = thread;
  e.device = record.device;
  e.alloc = alloc;
  std::size_t position = 0;
  if (!queue.try_push(e, position)) {
    fold(e);
  } else if ((position & (queue.capacity() / 4 - 1)) == queue.capacity() / 4 - 1) {
    if (void (*const wake)() noexcept = subscriber_wake.load(std::memory_order_acquire)) { wake(); }
  }
}

void subscribe_mem_events(mem_event_queue* queue, void (*wake)() noexcept) noexcept {
  if (queue != nullptr) { subscriber_wake.store(wake, std::memory_order_release); }
  mem_event_subscriber.store(queue, std::memory_order_release);
}

std::uint64_t overflow_devices() noexcept { return overflow_mask.load(std::memory_order_relaxed); }

bool take_overflow(int device, mem_step& out) noexcept {
  overflow_figures& f = overflow()[device_slot_of(device)];
  const std::uint64_t events = f.events.exchange(0, std::memory_order_relaxed);
  if (events == 0) { return false; }
  out = mem_step{};
  out.device = device;
  out.queue_full = true;
  out.allocs = f.allocs.exchange(0, std::memory_order_relaxed);
  out.frees = events - out.allocs;
  out.alloc_bytes = f.alloc_bytes.exchange(0, std::memory_order_relaxed);
  out.free_bytes = f.free_bytes.exchange(0, std::memory_order_relaxed);
  out.min_bytes = f.min_bytes.exchange(~std::uint64_t{0}, std::memory_order_relaxed);
  out.max_bytes = f.max_bytes.exchange(0, std::memory_order_relaxed);
  out.min_ns = f.min_ns.load(std::memory_order_relaxed);
  out.max_ns = f.max_ns.load(std::memory_order_relaxed);
  out.time_ns = f.first_ns.load(std::memory_order_relaxed);
  out.end_ns = f.last_ns.load(std::memory_order_relaxed);
  out.end_bytes = f.last_bytes.load(std::memory_order_relaxed);
  if (out.min_bytes > out.max_bytes) { out.min_bytes = out.max_bytes; }  // a racing fold
  out.start_bytes = out.end_bytes + out.free_bytes >= out.alloc_bytes ? out.end_bytes + out.free_bytes - out.alloc_bytes : 0;
  out.time_ns = std::min({out.time_ns, out.min_ns, out.max_ns});  // racing folds, a clock stepping back
  out.end_ns = std::max({out.end_ns, out.time_ns, out.min_ns, out.max_ns});
  return true;
}

}  // namespace gpuguard::detail
