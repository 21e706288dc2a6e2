// Memory over time from the ledger's own events (docs/formats.md: `alloc`, `free`, `mem_step`).
//
// The hot path (the ledger, inside the shard's lock) only copies a small record into a bounded
// lock-free queue; when the queue is full it folds the event into per-device atomic figures
// instead (the lowest and highest live bytes, counts), so the exact peak survives an overload.
// The writer thread drains the queue and hands each event to a coalescer that writes it as an
// `alloc` or `free` line while the device's current millisecond has seen fewer than
// `timeline_events` of them, and folds the rest of that millisecond into one `mem_step`.
// Internal to libgpuguard.
#pragma once

#include <gpuguard/ledger.hpp>

#include "outputs/event_queue.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

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

/// The queue the ledger feeds, or nullptr while no output wants the events (then the hot path
/// costs one load). Set and cleared by the outputs.
extern std::atomic<mem_event_queue*> timeline_queue;

/// Out of line: the queue is set. The event's time is read here.
void push_mem_event(mem_event_queue& queue, bool alloc, const allocation_record& record,
                    std::uint64_t live_bytes, std::uint32_t thread) noexcept;

/// Called by the ledger for every allocation and free, inside the shard's lock and after the
/// counters' change: the free of an address is queued after its allocation, and an event's time
/// is after the change it reports (a memory sample that read the counters before it is earlier).
inline void note_mem_event(bool alloc, const allocation_record& record, std::uint64_t live_bytes,
                           std::uint32_t thread) noexcept {
  if (mem_event_queue* queue = timeline_queue.load(std::memory_order_acquire)) {
    push_mem_event(*queue, alloc, record, live_bytes, thread);
  }
}

/// Wakes the outputs' writer thread (outputs.cpp): the producers call it each time a quarter of
/// the queue has filled.
void wake_writer() noexcept;

/// For the writer: what the producers folded per device while the queue was full, taken (and
/// reset) at once. False when nothing was folded for `device`.
bool take_overflow(int device, mem_step& out) noexcept;
/// Devices that may have folded events (one bit per device slot).
std::uint64_t overflow_devices() noexcept;

/// The writer's side: per device, individual events up to `per_ms` per millisecond, then steps.
class timeline_coalescer {
 public:
  explicit timeline_coalescer(std::uint32_t per_ms) : per_ms_(per_ms) {}

  /// Takes one event; calls `line(const mem_event&)` for each event written as is and
  /// `step(const mem_step&)` for each folded record it completes.
  template <class Line, class Step>
  void add(const mem_event& e, Line&& line, Step&& step);

  /// Completes every open step (end of a writer pass, and at stop).
  template <class Step>
  void finish(Step&& step);

 private:
  struct device_state {
    std::int64_t window = -1;  // the millisecond being counted
    std::uint32_t lines = 0;   // events written as lines in it
    bool open = false;         // `pending` holds folded events
    mem_step pending;
  };
  std::uint32_t per_ms_;
  std::unordered_map<int, device_state> devices_;
  // Addresses whose allocation was written as a line: their free is written as a line too, so
  // every band the report draws from `alloc` lines has its end. Bounded: a free folded by the
  // producers (a full queue) leaves its address here, and so does a leak.
  static constexpr std::size_t max_shown = std::size_t{1} << 18;
  std::unordered_set<std::uint64_t> shown_;
};

template <class Line, class Step>
void timeline_coalescer::add(const mem_event& e, Line&& line, Step&& step) {
  constexpr std::int64_t window_ns = 1000000;
  device_state& d = devices_[e.device];
  const std::int64_t window = e.time_ns / window_ns;
  // A late event of an earlier millisecond (another thread's, or the clock stepping back when its
  // scale is refined) counts in the current one.
  if (window > d.window) {
    d.window = window;
    d.lines = 0;
  }
  const std::uint64_t key = static_cast<std::uint64_t>(e.address) ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(e.device)) << 56);
  bool as_line = false;
  if (e.alloc) {
    as_line = d.lines < per_ms_ && shown_.size() < max_shown;
    if (as_line) {
      shown_.insert(key);
    } else {
      shown_.erase(key);  // the address came back without a free we saw: forget the old one
    }
  } else {
    as_line = shown_.erase(key) != 0;
  }
  if (as_line) {
    if (d.open) {  // keep the series in order: what was folded before this line comes first
      step(d.pending);
      d.open = false;
    }
    ++d.lines;
    line(e);
    return;
  }
  mem_step& s = d.pending;
  if (!d.open) {
    s = mem_step{};
    s.device = e.device;
    s.time_ns = e.time_ns;
    s.start_bytes = e.alloc ? e.live_bytes - e.bytes : e.live_bytes + e.bytes;
    s.min_bytes = s.max_bytes = e.live_bytes;
    s.min_ns = s.max_ns = e.time_ns;
    d.open = true;
  }
  // The ledger's clock may step back a little when its scale is refined: t and end bound them all.
  s.time_ns = std::min(s.time_ns, e.time_ns);
  s.end_ns = std::max(s.end_ns, e.time_ns);
  s.end_bytes = e.live_bytes;
  if (e.live_bytes < s.min_bytes) {
    s.min_bytes = e.live_bytes;
    s.min_ns = e.time_ns;
  }
  if (e.live_bytes > s.max_bytes) {
    s.max_bytes = e.live_bytes;
    s.max_ns = e.time_ns;
  }
  if (e.alloc) {
    ++s.allocs;
    s.alloc_bytes += e.bytes;
  } else {
    ++s.frees;
    s.free_bytes += e.bytes;
  }
}

template <class Step>
void timeline_coalescer::finish(Step&& step) {
  for (auto& entry : devices_) {
    if (entry.second.open) {
      step(entry.second.pending);
      entry.second.open = false;
    }
  }
}

}  // namespace gpuguard::detail
