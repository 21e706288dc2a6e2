// The live counters' slow paths (live_counter.hpp): reading them, and moving a counter between
// shared and local mode.
#include "ledger/live_counter.hpp"

#include <new>

namespace gpuguard::detail {

__attribute__((noinline)) void count_shared(thread_counts& counts, int slot, tag_id tag, std::uint64_t allocations,
                                            std::uint64_t bytes, std::uint64_t frees) noexcept {
  for (event_counts* c : {&counts.devices[static_cast<std::size_t>(slot)], &counts.tags[tag]}) {
    c->allocations.fetch_add(allocations, std::memory_order_relaxed);
    c->total.fetch_add(bytes, std::memory_order_relaxed);
    c->frees.fetch_add(frees, std::memory_order_relaxed);
  }
}

count_blocks::~count_blocks() {
  thread_counts* block = head_.load(std::memory_order_acquire);
  while (block != nullptr && block != &fallback_) {
    thread_counts* next = block->next;
    delete block;
    block = next;
  }
}

thread_counts& count_blocks::claim() noexcept {
  thread_counts* head = head_.load(std::memory_order_acquire);
  for (thread_counts* block = head; block != nullptr; block = block->next) {
    bool owned = false;
    if (!block->owned.load(std::memory_order_relaxed) &&
        block->owned.compare_exchange_strong(owned, true, std::memory_order_acquire)) {
      return *block;
    }
  }
  auto* made = new (std::nothrow) thread_counts();
  if (made == nullptr) { return fallback_; }
  made->owned.store(true, std::memory_order_relaxed);
  made->next = head;
  while (!head_.compare_exchange_weak(made->next, made, std::memory_order_acq_rel)) {
  }
  return *made;
}

void count_blocks::restart_in_forked_child(const thread_counts* kept) noexcept {
  for_each([kept](thread_counts& block) {
    const auto zero = [](event_counts& c) {
      for (auto* value : {&c.total, &c.allocations, &c.frees}) { value->store(0, std::memory_order_relaxed); }
      for (auto* value : {&c.part, &c.ceiling, &c.high}) { value->store(0, std::memory_order_relaxed); }
    };
    for (event_counts& c : block.devices) { zero(c); }
    for (event_counts& c : block.tags) { zero(c); }
    if (&block != kept && !block.shared) { block.owned.store(false, std::memory_order_relaxed); }
  });
}

std::size_t live_bytes(const counter_ref& r) noexcept {
  const auto base = r.counter.current.load(std::memory_order_relaxed);
  if (!r.local()) { return base; }
  auto live = static_cast<std::int64_t>(base);
  r.blocks.for_each([&](thread_counts& block) { live += r.in(block).part.load(std::memory_order_relaxed); });
  return live > 0 ? static_cast<std::size_t>(live) : 0;
}

counters read_counters(const counter_ref& r) noexcept {
  counters c;
  c.current_bytes = live_bytes(r);
  c.peak_bytes = r.counter.peak.load(std::memory_order_relaxed);
  c.phase_peak_bytes = r.counter.phase_peak.load(std::memory_order_relaxed);
  r.blocks.for_each([&](thread_counts& block) {
    const event_counts& e = r.in(block);
    c.total_bytes += e.total.load(std::memory_order_relaxed);
    c.allocations += e.allocations.load(std::memory_order_relaxed);
    c.frees += e.frees.load(std::memory_order_relaxed);
  });
  return c;
}

namespace {

void change_mode(live_counter& c) noexcept { c.mode.fetch_add(1, std::memory_order_release); }

// Stops of every thread one local stretch may take to move ceilings between threads; past them
// the counter goes shared, and waits longer before it tries local mode again.
constexpr std::uint32_t max_stops = 64;

}  // namespace

void go_shared(const counter_ref& r) noexcept {
  if (!r.local()) { return; }
  r.counter.current.store(live_bytes(r), std::memory_order_relaxed);
  r.blocks.for_each([&](thread_counts& block) {
    event_counts& e = r.in(block);
    for (auto* value : {&e.part, &e.ceiling, &e.high}) { value->store(0, std::memory_order_relaxed); }
  });
  r.counter.pool.store(0, std::memory_order_relaxed);
  change_mode(r.counter);  // to shared
}

void go_local(const counter_ref& r, bool held_shared) noexcept {
  live_counter& c = r.counter;
  if (r.local() || held_shared) { return; }
  const std::size_t live = c.current.load(std::memory_order_relaxed);
  if (!c.has_headroom(live)) { return; }
  const std::size_t bound = c.bound();
  // Every part is zero here: go_shared left them so, and shared mode does not touch them.
  c.stops = 0;
  c.pool.store(static_cast<std::int64_t>(bound - live), std::memory_order_relaxed);
  change_mode(c);  // to local
}

void make_room_stopped(const counter_ref& r, thread_counts& block, std::size_t bytes) noexcept {
  live_counter& c = r.counter;
  if (!r.local() || (!block.shared && room_for(c, r.in(block), bytes))) { return; }
  const auto base = static_cast<std::int64_t>(c.current.load(std::memory_order_relaxed));
  const auto live = static_cast<std::int64_t>(live_bytes(r));
  const auto bound = static_cast<std::int64_t>(c.bound());
  const auto wanted = static_cast<std::int64_t>(bytes);
  if (live + wanted > bound) {  // a new peak
    go_shared(r);
    return;
  }
  if (++c.stops > max_stops) {
    c.backoff.store(c.backoff.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    go_shared(r);
    return;
  }
  event_counts& mine = r.in(block);
  for (const bool to_parts : {false, true}) {
    std::int64_t ceilings = 0;
    r.blocks.for_each([&](thread_counts& b) {
      event_counts& e = r.in(b);
      const std::int64_t part = e.part.load(std::memory_order_relaxed);
      const std::int64_t keep = to_parts ? part : std::max(part, e.high.load(std::memory_order_relaxed));
      e.ceiling.store(keep, std::memory_order_relaxed);
      if (to_parts) { e.high.store(part, std::memory_order_relaxed); }
      ceilings += keep;
    });
    c.pool.store(bound - base - ceilings, std::memory_order_relaxed);
    if (block.shared) {
      // Several threads write the fallback block: its ceiling is raised by exactly this allocation.
      if (c.pool.load(std::memory_order_relaxed) >= wanted) {
        c.pool.fetch_sub(wanted, std::memory_order_relaxed);
        mine.ceiling.fetch_add(wanted, std::memory_order_relaxed);
        return;
      }
    } else if (room_for(c, mine, bytes)) {
      return;
    }
  }
  go_shared(r);  // not reached: with every ceiling at its part the pool is bound - live >= bytes
}

void share_restarting(const counter_ref& r, std::atomic<std::size_t> live_counter::*peak) noexcept {
  go_shared(r);
  (r.counter.*peak).store(r.counter.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void arm_alert(const counter_ref& r, std::size_t bytes) noexcept {
  r.counter.alert_at.store(bytes, std::memory_order_relaxed);
  if (!r.local()) { return; }
  auto room = static_cast<std::int64_t>(r.counter.bound()) -
              static_cast<std::int64_t>(r.counter.current.load(std::memory_order_relaxed));
  r.blocks.for_each([&](thread_counts& block) { room -= r.in(block).ceiling.load(std::memory_order_relaxed); });
  if (room < 0) {
    go_shared(r);
  } else {
    r.counter.pool.store(room, std::memory_order_relaxed);
  }
}

}  // namespace gpuguard::detail
