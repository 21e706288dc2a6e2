// The outputs' side of the memory timeline: the writer thread drains the ledger's memory events
// (ledger/memory_events.hpp) and hands each to a coalescer that writes it as an `alloc` or `free`
// line while the device's current millisecond has seen fewer than `timeline_events` of them, and
// folds the rest of that millisecond into one `mem_step`. Internal to libgpuguard.
#pragma once

#include "ledger/memory_events.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

namespace gpuguard::detail {

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
