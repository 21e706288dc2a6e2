// The ledger: a sharded live table (open addressing, linear probing with backward-shift deletion,
// so it never fills with tombstones and needs no heap allocation once it has grown to the live
// set), counters updated inside the shard's lock so a snapshot that holds every shard sees one
// instant, and a small ring of recent frees per shard to tell a double free from a stray pointer.
#include <gpuguard/ledger.hpp>

#include "ledger/ledger_internal.hpp"
#include "ledger/clock.hpp"
#include "ledger/shard_hash.hpp"
#include "ledger/stacks.hpp"
#include "outputs/timeline.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <new>
#include <string>
#include <unordered_map>

#include <pthread.h>
#include <sched.h>


namespace gpuguard {

const char* to_string(misuse_kind kind) noexcept {
  switch (kind) {
    case misuse_kind::unknown_pointer: return "free of an unknown pointer";
    case misuse_kind::double_free: return "double free";
    case misuse_kind::wrong_size: return "free with the wrong size";
    case misuse_kind::wrong_device: return "free on a different device";
  }
  return "misuse";
}

namespace {

// ---- counters -----------------------------------------------------------------------------------
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
    crossed_ns = detail::now_ns();
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
};

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

using detail::device_slot_of;
using detail::device_slots;

}  // namespace

// One thread's counts of every device and tag. Blocks are never freed: a thread that ends gives
// its block back and the next new thread takes it over, counts and all (they are sums, so whose
// thread added to them does not matter), so there are never more blocks than threads that were
// alive at once.
struct detail::thread_counts {
  std::array<event_counts, device_slots> devices;
  std::array<event_counts, max_tags> tags;
  std::atomic<bool> owned{false};
  bool shared = false;             // the fallback block: any thread may write it, with fetch_add
  thread_counts* next = nullptr;   // the registry's list; set before the block is published
};

namespace {

// A count of the block's owner: the only writer, so a plain add, no locked instruction.
__attribute__((always_inline)) inline void add_own(std::atomic<std::uint64_t>& value, std::uint64_t by) noexcept {
  value.store(value.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// The fallback block, which any thread may write: fetch_add. Out of line, so that the owner's
// path tests `shared` once.
__attribute__((noinline)) void count_shared(detail::thread_counts& counts, int slot, tag_id tag,
                                            std::uint64_t allocations, std::uint64_t bytes, std::uint64_t frees) noexcept {
  for (event_counts* c : {&counts.devices[static_cast<std::size_t>(slot)], &counts.tags[tag]}) {
    c->allocations.fetch_add(allocations, std::memory_order_relaxed);
    c->total.fetch_add(bytes, std::memory_order_relaxed);
    c->frees.fetch_add(frees, std::memory_order_relaxed);
  }
}

__attribute__((always_inline)) inline void count_allocation(detail::thread_counts& counts, int slot, tag_id tag, std::size_t bytes) noexcept {
  if (counts.shared) [[unlikely]] {
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

__attribute__((always_inline)) inline void count_free(detail::thread_counts& counts, int slot, tag_id tag) noexcept {
  if (counts.shared) [[unlikely]] {
    count_shared(counts, slot, tag, 0, 0, 1);
    return;
  }
  add_own(counts.devices[static_cast<std::size_t>(slot)].frees, 1);
  add_own(counts.tags[tag].frees, 1);
}

// ---- tags ---------------------------------------------------------------------------------------

constexpr std::size_t max_tag_length = 63;

struct tag_table {
  std::mutex mutex;
  std::array<std::string, max_tags> names;  // names[0] = "" (untagged)
  std::unordered_map<std::string, tag_id> ids;
  int count = 1;
  tag_id other = untagged;
};

tag_table& tags() {
  static auto* table = new tag_table();  // lives through exit: reports at exit read it
  return *table;
}

// The calling thread's state. In a shared library a global-dynamic thread_local's address comes
// from a call (__tls_get_addr), about 12 ns of the stream-ordered pair's added time between driver
// calls on the H100 machine (benchmarks/ledger_cost_parts.sh, tls_ie); an initial-exec one is an
// offset from the thread pointer. The price: a library with initial-exec TLS has its whole TLS
// block (libgpuguard's is 144 bytes) in the static TLS area, which a library loaded with dlopen
// (a PyTorch extension) gets from the surplus glibc keeps for such libraries (about 1.5 KiB by
// default, shared by all of them); were it used up, the dlopen would fail with "cannot allocate
// memory in static TLS block", and GLIBC_TUNABLES=glibc.rtld.optional_static_tls=N enlarges it.
__attribute__((tls_model("initial-exec"))) thread_local detail::thread_state this_thread;

// ---- per-site totals ----------------------------------------------------------------------------

// A fixed open-addressing table keyed by site id: lock-free, no allocation on the hot path. Sites
// past its capacity go uncounted (reports say the table is of the top sites only).
constexpr std::size_t site_table_size = 4096;

struct site_slot {
  std::atomic<site_id> site{no_site};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> bytes{0};
};

std::array<site_slot, site_table_size>& site_table() {
  static auto* table = new std::array<site_slot, site_table_size>();  // lives through exit
  return *table;
}

void count_site(site_id site, std::size_t bytes) noexcept {
  auto& table = site_table();
  std::size_t i = (std::size_t{site} * 0x9E3779B1U) & (site_table_size - 1);
  for (std::size_t probe = 0; probe < site_table_size; ++probe, i = (i + 1) & (site_table_size - 1)) {
    site_slot& slot = table[i];
    site_id seen = slot.site.load(std::memory_order_acquire);
    if (seen == no_site && slot.site.compare_exchange_strong(seen, site, std::memory_order_acq_rel)) {
      seen = site;  // claimed; on failure `seen` is the site that claimed it first
    }
    if (seen != site) { continue; }
    slot.allocations.fetch_add(1, std::memory_order_relaxed);
    slot.bytes.fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
}

// ---- the live table -----------------------------------------------------------------------------

// A thread that keeps allocating and freeing the same block (a malloc's per-thread cache, a
// framework's reused buffer) always lands in the same shard. Two such threads in one shard pass
// its lines between their cores on every event: on the 2-core CPU machine a pair took 224 ns of
// each thread's time instead of 40 (BM_shard_pair, docs/benchmarks.md). Of 16 such threads,
// 16 x (1 - (1 - 1/shards)^15) share a shard with another (the birthday problem): about 3.4 with
// 64 shards, 0.9 with 256, 0.23 with 1024. Which threads share is down to the addresses malloc
// hands out, so it changes from process to process: on an H100 machine with 256 shards, a run of
// the 16-thread host pair in which 4 threads shared took 11.3 to 14.4 ns a pair, and its tracked
// scaling over untracked was 0.28; the next, in which none did, 3.4 to 3.6 ns and 0.94
// (docs/benchmarks.md, "The coarse clock and 1024 shards"). The table's starting size and the
// recent-free rings are divided among the shards, so the memory stays as it was (and so does, on
// average, the number of frees a double free is still recognised after).
constexpr unsigned shard_count = 1U << detail::ledger_shard_bits;
constexpr std::size_t initial_capacity = 16;  // per shard, a power of two
constexpr std::size_t recent_free_count = 4;

struct recent_free {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = host_device_id;
  site_id allocated_at = no_site;
  site_id freed_at = no_site;
};

struct spin_mutex {
  std::atomic<bool> locked{false};
  bool try_lock() noexcept { return !locked.exchange(true, std::memory_order_acquire); }
  void lock() noexcept {
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

struct alignas(64) shard {
  spin_mutex mutex;
  std::vector<allocation_record> slots;  // ptr == nullptr: empty
  // The table's geometry, kept with it: a vector's size divides by the record's size, and a
  // probe's start needs the count of its bits, on every allocation and free.
  std::size_t mask = 0;  // slots.size() - 1
  unsigned shift = 64;   // detail::ledger_slot_shift(slots.size())
  std::size_t used = 0;
  std::array<recent_free, recent_free_count> recent{};
  std::size_t recent_next = 0;

  // Takes `table` (a power of two of slots) as the table, and gives the old one back in it.
  void take_table(std::vector<allocation_record>& table) noexcept {
    slots.swap(table);
    mask = slots.size() - 1;
    shift = detail::ledger_slot_shift(slots.size());
  }
};

struct ledger_state {
  std::array<shard, shard_count> shards;
  std::array<live_counter, device_slots> devices;
  std::array<live_counter, max_tags> tag_counters;
  // Every thread's counts (see detail::thread_counts), newest first; pushed, never unlinked.
  std::atomic<detail::thread_counts*> thread_counts{nullptr};
  // For a thread whose own block is gone (it is ending) or could not be made (out of memory).
  detail::thread_counts fallback_counts;
  // Three cache lines by who writes them. A line that a thread writes now and then is taken from
  // every core that reads it, so the settings every event reads do not share one with the
  // sequence blocks that every thread takes in turn (one per 256 allocations).
  // Written at misuse and at interposed frees of memory from before tracking began.
  alignas(64) std::atomic<std::uint64_t> unknown_pointer{0};
  std::atomic<std::uint64_t> double_free{0};
  std::atomic<std::uint64_t> wrong_size{0};
  std::atomic<std::uint64_t> wrong_device{0};
  std::atomic<std::uint64_t> untracked_frees{0};
  // Written by every thread now and then: its next block of sequence numbers, a new thread's id.
  alignas(64) std::atomic<std::uint64_t> sequence{0};
  std::atomic<std::uint32_t> next_thread{0};
  // Read by every allocation or free, written seldom (options, fork, an output starting).
  // In a child made by fork(): records up to this sequence are the parent's (see forget_parent).
  alignas(64) std::atomic<std::uint64_t> inherited_through{0};
  // Holders that need every counter shared (the outputs, while the JSONL log or trace is on).
  std::atomic<int> shared_holds{0};
  std::atomic<int> stacks{static_cast<int>(stack_mode::off)};
  std::atomic<std::uint32_t> stack_sample{64};
  std::atomic<std::uint32_t> stack_depth{16};
  std::atomic<bool> abort_on_error{false};

  ledger_state() {
    for (shard& s : shards) {
      std::vector<allocation_record> table(initial_capacity);
      s.take_table(table);
    }
    fallback_counts.shared = true;
    fallback_counts.owned.store(true, std::memory_order_relaxed);
    thread_counts.store(&fallback_counts, std::memory_order_release);
  }
};

inline ledger_state& state();  // below: one load once the state is made

// fork(): the shards are locked around it, so the child's copy of the table is consistent (a lock
// another thread held at the fork would stay held in the child for ever). In the child the
// parent's allocations are not its own: the counters, misuse counts and site totals start from
// zero, and the parent's live records stay in the table only so that the child's frees of them
// (its copies of host memory, its static destructors) are recognised, quietly, and not reported
// as frees of unknown pointers. Snapshots, leak reports and crash records skip them.
// Every shard, in order: around fork(), and for all_shards below.
void lock_every_shard() noexcept {
  for (shard& s : state().shards) { s.mutex.lock(); }
}
void unlock_every_shard() noexcept {
  for (shard& s : state().shards) { s.mutex.unlock(); }
}
void forget_parent_in_forked_child() noexcept {
  ledger_state& st = state();
  for (shard& s : st.shards) {
    s.recent = {};
    s.recent_next = 0;
  }
  for (live_counter& c : st.devices) { c.clear(); }
  for (live_counter& c : st.tag_counters) { c.clear(); }
  // The child's only thread is the one that forked: every other block's owner is gone.
  detail::thread_state& mine = detail::this_thread_state();
  for (detail::thread_counts* block = st.thread_counts.load(std::memory_order_acquire); block != nullptr;
       block = block->next) {
    const auto zero = [](event_counts& c) {
      for (auto* value : {&c.total, &c.allocations, &c.frees}) { value->store(0, std::memory_order_relaxed); }
      for (auto* value : {&c.part, &c.ceiling, &c.high}) { value->store(0, std::memory_order_relaxed); }
    };
    for (event_counts& c : block->devices) { zero(c); }
    for (event_counts& c : block->tags) { zero(c); }
    if (block != mine.counts && !block->shared) { block->owned.store(false, std::memory_order_relaxed); }
  }
  mine.sequence_next = mine.sequence_end = 0;  // the parent's numbers are the inherited ones
  for (auto* count : {&st.unknown_pointer, &st.double_free, &st.wrong_size, &st.wrong_device, &st.untracked_frees}) {
    count->store(0, std::memory_order_relaxed);
  }
  for (site_slot& slot : site_table()) {
    slot.allocations.store(0, std::memory_order_relaxed);
    slot.bytes.store(0, std::memory_order_relaxed);
  }
  st.inherited_through.store(st.sequence.load(std::memory_order_relaxed), std::memory_order_relaxed);
  unlock_every_shard();
}

bool inherited(const ledger_state& st, const allocation_record& record) noexcept {
  return record.sequence <= st.inherited_through.load(std::memory_order_relaxed);
}

// The state once made: constant-initialised, so it reads null before any static constructor runs.
std::atomic<ledger_state*> made_state{nullptr};

// Never destroyed: frees from static destructors and the exit report may come after any
// ordinary static would be gone.
__attribute__((noinline)) ledger_state& make_state() {
  static auto* s = [] {
    // The ledger's clock starts with it: the live table's times are counted from its origin.
    static_cast<void>(detail::origin());
    auto* made = new ledger_state();
    static_cast<void>(::pthread_atfork(lock_every_shard, unlock_every_shard, forget_parent_in_forked_child));
    made_state.store(made, std::memory_order_release);
    return made;
  }();
  return *s;
}

// Every record and free asks for the state: once it is made, one load and no call (a static
// local's guard check sat behind a call in each).
__attribute__((always_inline)) inline ledger_state& state() {
  if (ledger_state* s = made_state.load(std::memory_order_acquire)) [[likely]] { return *s; }
  return make_state();
}

// ---- per-thread counts and sequence numbers ------------------------------------------------------

// Gives the thread's block back when the thread ends. Its own thread_local, apart from
// thread_state: thread_state must stay trivially destructible, because frees may still be recorded
// while a thread's other thread_locals are destroyed; those go to the fallback block.
struct counts_owner {
  counts_owner() = default;
  counts_owner(const counts_owner&) = delete;
  counts_owner& operator=(const counts_owner&) = delete;
  counts_owner(counts_owner&&) = delete;
  counts_owner& operator=(counts_owner&&) = delete;
  ~counts_owner() {
    detail::thread_state& mine = this_thread;
    if (mine.counts != nullptr && !mine.counts->shared) {
      mine.counts->owned.store(false, std::memory_order_release);
    }
    mine.counts = &state().fallback_counts;
  }
};

detail::thread_counts& claim_counts(detail::thread_state& mine) noexcept {
  static thread_local counts_owner owner;  // registers the thread's exit hook
  static_cast<void>(owner);
  ledger_state& st = state();
  detail::thread_counts* head = st.thread_counts.load(std::memory_order_acquire);
  for (detail::thread_counts* block = head; block != nullptr; block = block->next) {
    bool owned = false;
    if (!block->owned.load(std::memory_order_relaxed) &&
        block->owned.compare_exchange_strong(owned, true, std::memory_order_acquire)) {
      mine.counts = block;
      return *block;
    }
  }
  auto* made = new (std::nothrow) detail::thread_counts();
  if (made == nullptr) {
    mine.counts = &st.fallback_counts;
    return *mine.counts;
  }
  made->owned.store(true, std::memory_order_relaxed);
  made->next = head;
  while (!st.thread_counts.compare_exchange_weak(made->next, made, std::memory_order_acq_rel)) {
  }
  mine.counts = made;
  return *made;
}

detail::thread_counts& counts_of(detail::thread_state& mine) noexcept {
  return mine.counts != nullptr ? *mine.counts : claim_counts(mine);
}

// Sequence numbers are handed to threads in blocks, so the global counter is touched once per
// this many allocations of a thread: numbers are unique and increase within a thread.
constexpr std::uint64_t sequence_block = 256;

std::uint64_t next_sequence(detail::thread_state& mine) noexcept {
  if (mine.sequence_next == mine.sequence_end) {
    mine.sequence_next = state().sequence.fetch_add(sequence_block, std::memory_order_relaxed) + 1;
    mine.sequence_end = mine.sequence_next + sequence_block;
  }
  return mine.sequence_next++;
}

shard& shard_for(ledger_state& st, std::uint64_t hash) noexcept {
  return st.shards[detail::ledger_shard_of_hash(hash)];
}

// The index of `ptr`'s record (ptr not null), or else of the empty slot where its probe run ends.
__attribute__((always_inline)) inline std::size_t probe(const shard& s, const void* ptr, std::uint64_t hash) noexcept {
  const allocation_record* slots = s.slots.data();
  for (std::size_t i = detail::ledger_home_slot_shifted(hash, s.shift);; i = (i + 1) & s.mask) {
    if (slots[i].ptr == ptr || slots[i].ptr == nullptr) { return i; }
  }
}

// Doubles the table, out of line: the check that calls it is on every allocation. Returns false
// (and leaves the table as it was) if memory ran out.
__attribute__((noinline)) bool grow(shard& s) noexcept {
  try {
    std::vector<allocation_record> bigger(s.slots.size() * 2);
    const std::size_t mask = bigger.size() - 1;
    for (const allocation_record& record : s.slots) {
      if (record.ptr == nullptr) { continue; }
      std::size_t i = detail::ledger_home_slot(detail::pointer_hash(record.ptr), bigger.size());
      while (bigger[i].ptr != nullptr) { i = (i + 1) & mask; }
      bigger[i] = record;
    }
    s.take_table(bigger);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

// The slot for a new record of `hash`, counted as used, given `empty`, the index of the empty
// slot its probe found: that one, unless the table is half full and grows first (then found
// again). Null if the table had to grow and memory ran out (the table as it was).
__attribute__((always_inline)) inline allocation_record* insert(shard& s, std::uint64_t hash, std::size_t empty) noexcept {
  if ((s.used + 1) * 2 > s.mask + 1) {  // half full: mask + 1 slots
    if (!grow(s)) { return nullptr; }
    empty = detail::ledger_home_slot_shifted(hash, s.shift);
    while (s.slots[empty].ptr != nullptr) { empty = (empty + 1) & s.mask; }
  }
  ++s.used;
  return &s.slots[empty];
}

// Backward-shift deletion: later entries of the probe run move up, so no tombstones are needed.
__attribute__((always_inline)) inline void erase(shard& s, std::size_t hole) noexcept {
  const std::size_t mask = s.mask;
  for (std::size_t i = (hole + 1) & mask; s.slots[i].ptr != nullptr; i = (i + 1) & mask) {
    const std::size_t home = detail::ledger_home_slot_shifted(detail::pointer_hash(s.slots[i].ptr), s.shift);
    // Move the entry into the hole if its home is not within (hole, i].
    const bool home_in_between = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!home_in_between) {
      s.slots[hole] = s.slots[i];
      hole = i;
    }
  }
  s.slots[hole].ptr = nullptr;  // empty; the other fields are written again before they are read
  --s.used;
}

// ---- live bytes: shared and local mode (see "counters" at the top) ------------------------------

// One device's or tag's counter, and where its part sits in each thread's block.
struct counter_ref {
  live_counter& counter;
  bool is_tag;
  std::size_t index;
  [[nodiscard]] event_counts& in(detail::thread_counts& block) const noexcept {
    return is_tag ? block.tags[index] : block.devices[index];
  }
  [[nodiscard]] bool local() const noexcept { return (counter.mode.load(std::memory_order_relaxed) & 1U) != 0; }
};

__attribute__((always_inline)) inline counter_ref device_ref(int slot, ledger_state& st = state()) noexcept {
  return {st.devices[static_cast<std::size_t>(slot)], false, static_cast<std::size_t>(slot)};
}
__attribute__((always_inline)) inline
counter_ref tag_ref(std::size_t tag, ledger_state& st = state()) noexcept {
  return {st.tag_counters[tag], true, tag};
}

template <typename Visit>
void each_block(Visit visit) noexcept {
  for (detail::thread_counts* block = state().thread_counts.load(std::memory_order_acquire); block != nullptr;
       block = block->next) {
    visit(*block);
  }
}

// Holds every shard of the live table, in order: no part, ceiling or mode changes meanwhile, and
// the table and the counters are of one instant. The caller holds no shard.
class all_shards {
 public:
  all_shards() noexcept { lock_every_shard(); }
  all_shards(const all_shards&) = delete;
  all_shards& operator=(const all_shards&) = delete;
  all_shards(all_shards&&) = delete;
  all_shards& operator=(all_shards&&) = delete;
  ~all_shards() { unlock_every_shard(); }
};

// The live bytes of a counter. Exact while every shard is held, or for a shared counter;
// otherwise (a local counter read without stopping anyone) each part is read whole but the sum
// may mix instants.
std::size_t live_bytes(const counter_ref& r) noexcept {
  const auto base = r.counter.current.load(std::memory_order_relaxed);
  if (!r.local()) { return base; }
  auto live = static_cast<std::int64_t>(base);
  each_block([&](detail::thread_counts& block) { live += r.in(block).part.load(std::memory_order_relaxed); });
  return live > 0 ? static_cast<std::size_t>(live) : 0;
}

// The counters of one device slot or tag: live bytes and peaks from the counter, counts summed
// over every thread's block.
counters read_counters(const counter_ref& r) noexcept {
  counters c;
  c.current_bytes = live_bytes(r);
  c.peak_bytes = r.counter.peak.load(std::memory_order_relaxed);
  c.phase_peak_bytes = r.counter.phase_peak.load(std::memory_order_relaxed);
  each_block([&](detail::thread_counts& block) {
    const event_counts& e = r.in(block);
    c.total_bytes += e.total.load(std::memory_order_relaxed);
    c.allocations += e.allocations.load(std::memory_order_relaxed);
    c.frees += e.frees.load(std::memory_order_relaxed);
  });
  return c;
}

counters read_device(int slot) noexcept { return read_counters(device_ref(slot)); }
counters read_tag(int tag) noexcept { return read_counters(tag_ref(static_cast<std::size_t>(tag))); }

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
__attribute__((always_inline)) inline bool plan_add(const counter_ref& r, detail::thread_counts& block,
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

__attribute__((always_inline)) inline
std::size_t remove_bytes(const counter_ref& r, detail::thread_counts& block, std::size_t bytes) noexcept {
  if (!r.local()) { return r.counter.remove(bytes); }
  event_counts& e = r.in(block);
  if (block.shared) {
    e.part.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  } else {
    e.part.store(e.part.load(std::memory_order_relaxed) - static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
  return unknown_size;
}

void change_mode(live_counter& c) noexcept { c.mode.fetch_add(1, std::memory_order_release); }

// Every shard held. Folds the parts into `current` (the exact live bytes) and makes the counter
// shared.
void go_shared(const counter_ref& r) noexcept {
  if (!r.local()) { return; }
  r.counter.current.store(live_bytes(r), std::memory_order_relaxed);
  each_block([&](detail::thread_counts& block) {
    event_counts& e = r.in(block);
    for (auto* value : {&e.part, &e.ceiling, &e.high}) { value->store(0, std::memory_order_relaxed); }
  });
  r.counter.pool.store(0, std::memory_order_relaxed);
  change_mode(r.counter);  // to shared
}

// Every shard held. Makes a shared counter local when no holder needs it shared and its live
// bytes leave an eighth of the bound or more as headroom: all of it goes to the pool.
void go_local(const counter_ref& r) noexcept {
  live_counter& c = r.counter;
  if (r.local() || state().shared_holds.load(std::memory_order_relaxed) > 0) { return; }
  const std::size_t live = c.current.load(std::memory_order_relaxed);
  const std::size_t bound = c.bound();
  if (bound <= live || bound - live < bound / 8) { return; }
  // Every part is zero here: go_shared left them so, and shared mode does not touch them.
  c.stops = 0;
  c.pool.store(static_cast<std::int64_t>(bound - live), std::memory_order_relaxed);
  change_mode(c);  // to local
}

// Stops of every thread one local stretch may take to move ceilings between threads; past them
// the counter goes shared, and waits longer before it tries local mode again.
constexpr std::uint32_t max_stops = 64;

// Every shard held, for an allocation of `bytes` by `block`'s thread that plan_add refused.
// Makes room for it: each thread keeps a ceiling as high as its part has been in this local
// stretch and the rest goes back to the pool; if that is not enough, every ceiling comes down to
// its part (and the stretch's highs start again). If the allocation takes the live bytes past the
// bound, or the threads keep taking room from each other, the counter is made shared.
void make_room_stopped(const counter_ref& r, detail::thread_counts& block, std::size_t bytes) noexcept {
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
    each_block([&](detail::thread_counts& b) {
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

// Frees a thread makes of shared counters before it next looks at going local, doubled by each
// local stretch of the device that ended in threads taking room from each other (at most 64
// times as many).
constexpr std::uint32_t go_local_wait = 1024;

// After a free of a shared device or tag (outside every lock; `device_live` is the device's live
// bytes after it, unknown_size if the device is local): now and then, if the device or the tag
// has headroom, stops every thread and makes them local.
void maybe_go_local(detail::thread_state& mine, int slot, tag_id tag, std::size_t device_live) noexcept {
  if (mine.go_local_wait > 0) {
    --mine.go_local_wait;
    return;
  }
  ledger_state& st = state();
  const counter_ref device = device_ref(slot);
  const counter_ref tagged = tag_ref(tag);
  const std::uint32_t backoff = device.counter.backoff.load(std::memory_order_relaxed);
  mine.go_local_wait = go_local_wait << std::min<std::uint32_t>(backoff, 6);
  if (st.shared_holds.load(std::memory_order_relaxed) > 0) { return; }
  const auto headroom = [](const live_counter& c, std::size_t live) {
    const std::size_t bound = c.bound();
    return bound > live && bound - live >= bound / 8;
  };
  const bool device_may = device_live != unknown_size && !device.local() && headroom(device.counter, device_live);
  const bool tag_may =
      !tagged.local() && headroom(tagged.counter, tagged.counter.current.load(std::memory_order_relaxed));
  if (!device_may && !tag_may) { return; }
  const all_shards stopped;
  go_local(device);
  go_local(tagged);
}

}  // namespace

std::uint32_t detail::next_thread_id() noexcept {
  return state().next_thread.fetch_add(1, std::memory_order_relaxed) + 1;
}

namespace {

site_id capture_site_now() noexcept {
  std::array<void*, detail::max_stack_depth> frames{};
  const std::size_t depth = state().stack_depth.load(std::memory_order_relaxed);
  const std::size_t count = detail::capture_caller_frames(frames.data(), depth);
  return detail::intern_site(frames.data(), count);
}

// The countdown is in the thread's state, which the caller has already looked up: a thread_local
// of its own would cost another TLS lookup on every allocation.
site_id maybe_capture_site(ledger_state& st, detail::thread_state& mine) noexcept {
  const auto mode = static_cast<stack_mode>(st.stacks.load(std::memory_order_relaxed));
  if (mode == stack_mode::off) { return no_site; }
  if (mode == stack_mode::sampled) {
    if (mine.sample_countdown != 0) {
      --mine.sample_countdown;
      return no_site;
    }
    mine.sample_countdown = st.stack_sample.load(std::memory_order_relaxed) - 1;
  }
  return capture_site_now();
}

// ---- misuse reports (rare: allowed to format, resolve and write) -------------------------------

void print_site(const char* label, site_id site) {
  if (site == no_site) {
    std::fprintf(stderr, "[gpuguard]   %s: (no stack: set GPUGUARD_OPTIONS=stacks=all)\n", label);
    return;
  }
  std::fprintf(stderr, "[gpuguard]   %s:\n", label);
  int n = 0;
  for (const frame_info& frame : resolve_site(site)) {
    std::fprintf(stderr, "[gpuguard]     #%d 0x%" PRIxPTR " %s", n++, frame.address,
                 frame.function.empty() ? "??" : frame.function.c_str());
    if (!frame.file.empty()) { std::fprintf(stderr, " at %s:%zu", frame.file.c_str(), frame.line); }
    std::fputc('\n', stderr);
  }
}

struct misuse_report {
  bool interposed;  // seen by an interposer, which passes every free on to CUDA
  misuse_kind kind;
  const void* ptr;
  std::size_t bytes_given;
  std::size_t bytes_recorded;
  int device_given;
  int device_recorded;
  site_id allocated_at;
  site_id freed_at;
};

void report_misuse(const misuse_report& m) noexcept {
  try {
    std::fprintf(stderr, "[gpuguard] error: %s: %p", to_string(m.kind), m.ptr);
    switch (m.kind) {
      case misuse_kind::wrong_size:
        std::fprintf(stderr, " freed as %zu bytes but allocated as %zu on device %d; freed with %zu\n",
                     m.bytes_given, m.bytes_recorded, m.device_recorded, m.bytes_recorded);
        break;
      case misuse_kind::wrong_device:
        std::fprintf(stderr, " (%zu bytes) allocated on device %d, freed while device %d was current; "
                     "freed on device %d\n", m.bytes_recorded, m.device_recorded, m.device_given,
                     m.device_recorded);
        break;
      case misuse_kind::double_free:
        std::fprintf(stderr, " (%zu bytes, device %d) was already freed; %s\n", m.bytes_recorded,
                     m.device_recorded, m.interposed ? "passed on to CUDA as the program made it" : "this free is ignored");
        break;
      case misuse_kind::unknown_pointer:
        std::fprintf(stderr, " (%zu bytes) was never allocated through gpuguard's tracking; not freed\n",
                     m.bytes_given);
        break;
    }
    if (m.kind != misuse_kind::unknown_pointer) { print_site("allocated at", m.allocated_at); }
    if (m.kind == misuse_kind::double_free) { print_site("first freed at", m.freed_at); }
    const site_id here = state().stacks.load(std::memory_order_relaxed) !=
                                 static_cast<int>(stack_mode::off)
                             ? capture_site_now()
                             : no_site;
    print_site("this free at", here);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failing report must not break the free
  }
  if (state().abort_on_error.load(std::memory_order_relaxed)) {
    std::fputs("[gpuguard] abort_on_error=1: aborting\n", stderr);
    std::abort();
  }
}

}  // namespace

// ---- recording ----------------------------------------------------------------------------------

namespace {

// What record_allocation knows before it takes a lock.
struct new_allocation {
  const allocation_event& event;
  tag_id tag;
  std::uint32_t thread;
  std::int64_t coarse_ns;  // the live table's time: the coarse clock
  site_id site;
  std::uint64_t sequence;
  std::uint64_t hash;
};

// Records an allocation into shard `s`, whose lock the caller holds, or with every shard held
// (`stopped`). Without `stopped`, returns false, having recorded nothing, when a local counter
// has no room for it in this thread's ceiling or the pool.
__attribute__((always_inline)) inline
bool record_allocation_in(ledger_state& st, shard& s, const new_allocation& a, detail::thread_state& mine,
                          detail::thread_counts& counts, bool stopped) noexcept {
  const allocation_event& event = a.event;
  const int slot = device_slot_of(event.device);
  const counter_ref device = device_ref(slot, st);
  const counter_ref tagged = tag_ref(a.tag, st);
  const std::size_t probed = probe(s, event.ptr, a.hash);
  allocation_record* record = s.slots[probed].ptr != nullptr ? &s.slots[probed] : nullptr;
  // The upstream handed out a live address again: the earlier block was freed behind the
  // tracker's back. It is counted as freed so the counters stay true.
  const bool replaces = record != nullptr && !inherited(st, *record);
  if (stopped) {
    make_room_stopped(device, counts, event.bytes);
    make_room_stopped(tagged, counts, event.bytes);
  } else if (replaces && (device_ref(device_slot_of(record->device), st).local() ||
                          tag_ref(record->tag, st).local())) {
    return false;
  }
  planned_add device_add;
  planned_add tag_add;
  if (!plan_add(device, counts, event.bytes, device_add, stopped) ||
      !plan_add(tagged, counts, event.bytes, tag_add, stopped)) {
    return false;  // only without `stopped`: with every shard held, the room was made above
  }
  if (replaces) {
    remove_bytes(device_ref(device_slot_of(record->device), st), counts, record->bytes);
    remove_bytes(tag_ref(record->tag, st), counts, record->bytes);
    count_free(counts, device_slot_of(record->device), record->tag);
  } else if (record == nullptr) {
    record = insert(s, a.hash, probed);
    if (record == nullptr) { return true; }  // out of memory: this allocation goes untracked
  }
  // Field by field into the table: a record built on the stack and copied in whole is read back
  // in 16-byte pieces just after its narrower fields were stored, which stalls the copy.
  record->ptr = event.ptr;
  record->bytes = event.bytes;
  record->device = event.device;
  record->stream = event.stream;
  record->kind = event.kind;
  record->tag = a.tag;
  record->thread = a.thread;
  record->time_ns = a.coarse_ns;  // raw: the snapshot converts
  record->site = a.site;
  record->sequence = a.sequence;
  // Inside the shard's lock, like the table: a snapshot that holds every shard sees the counters
  // and the live table of one instant.
  const std::size_t live = add_planned(device, device_add, event.bytes);
  add_planned(tagged, tag_add, event.bytes);
  // Under the lock and after the counters' change (timeline.hpp). Stamped before the stack
  // capture, as it was, an allocation's time could precede that change by the capture's time, and
  // a memory sample in between read the bytes from before it at a later time.
  detail::note_mem_event(true, *record, live, a.thread);
  count_allocation(counts, slot, a.tag, event.bytes);
  detail::thread_memory& memory = mine.memory;
  memory.allocated_bytes += event.bytes;
  ++memory.allocations;
  memory.net += static_cast<std::int64_t>(event.bytes);
  if (memory.net > memory.peak) { memory.peak = memory.net; }
  return true;
}

// The slow path, out of line so that the fast one stays small: a local counter had no room, so
// every thread is stopped while it is made.
__attribute__((noinline)) void record_allocation_stopped(ledger_state& st, shard& s, const new_allocation& a,
                                                         detail::thread_state& mine,
                                                         detail::thread_counts& counts) noexcept {
  const all_shards stopped;
  record_allocation_in(st, s, a, mine, counts, true);
}

}  // namespace

void record_allocation(const allocation_event& event) noexcept {
  if (event.ptr == nullptr) { return; }
  ledger_state& st = state();
  detail::thread_state& mine = this_thread;
  const std::uint32_t thread = detail::thread_id(mine);
  // The coarse clock: the exact one costs the most of anything here right after a driver call (28
  // ns on the H100 machine), and only the timeline's events need it.
  const std::int64_t coarse_ns = detail::coarse_monotonic_ns();
  const site_id site = maybe_capture_site(st, mine);
  const new_allocation a{event, mine.tag, thread, coarse_ns, site, next_sequence(mine),
                         detail::pointer_hash(event.ptr)};
  if (site != no_site) { count_site(site, event.bytes); }
  detail::thread_counts& counts = counts_of(mine);
  shard& s = shard_for(st, a.hash);
  {
    const std::lock_guard<spin_mutex> lock(s.mutex);
    if (record_allocation_in(st, s, a, mine, counts, false)) { return; }
  }
  record_allocation_stopped(st, s, a, mine, counts);
}

namespace {

free_result record_free_impl(const void* ptr, std::size_t bytes, int current_device, bool interposed) noexcept {
  free_result result;
  if (ptr == nullptr) { return result; }
  ledger_state& st = state();
  const std::uint64_t hash = detail::pointer_hash(ptr);
  shard& s = shard_for(st, hash);
  // Filled only when misuse is found: zeroing it on every free (a rep stos) was measurable.
  misuse_report misuses[2];  // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
  int misuse_count = 0;
  // Where each free happened is kept (for "first freed at" in a double-free report) only with
  // stacks=all: a capture per free would undo what sampling saves.
  const bool capture = st.stacks.load(std::memory_order_relaxed) == static_cast<int>(stack_mode::all);
  const site_id freed_at = capture ? capture_site_now() : no_site;
  detail::thread_state& mine = this_thread;
  detail::thread_counts& counts = counts_of(mine);  // before the lock: a thread's first may allocate
  int freed_slot = 0;
  tag_id freed_tag = untagged;
  std::size_t freed_live = unknown_size;  // the device's live bytes after the free, if it was shared
  bool look_at_local = false;             // the device or the tag was shared
  {
    const std::lock_guard<spin_mutex> lock(s.mutex);
    const std::size_t at = probe(s, ptr, hash);
    if (allocation_record* slot = s.slots[at].ptr != nullptr ? &s.slots[at] : nullptr) {
      result.known = true;
      result.bytes = slot->bytes;
      result.device = slot->device;
      if (inherited(st, *slot)) {
        erase(s, at);  // the parent's, freed in a forked child: not in the child's counters
        return result;
      }
      if (bytes != unknown_size && bytes != slot->bytes) {
        misuses[misuse_count++] = {interposed, misuse_kind::wrong_size, ptr, bytes, slot->bytes, current_device,
                                   slot->device, slot->site, no_site};
        st.wrong_size.fetch_add(1, std::memory_order_relaxed);
      }
      if (slot->kind == memory_kind::device && current_device != unknown_device && current_device != slot->device) {
        misuses[misuse_count++] = {interposed, misuse_kind::wrong_device, ptr, bytes, slot->bytes,
                                   current_device, slot->device, slot->site, no_site};
        st.wrong_device.fetch_add(1, std::memory_order_relaxed);
      }
      // A block freed again and again (reused between) takes one entry, not the whole ring.
      const recent_free freed{ptr, slot->bytes, slot->device, slot->site, freed_at};
      recent_free& newest = s.recent[(s.recent_next + recent_free_count - 1) % recent_free_count];
      if (s.recent_next != 0 && newest.ptr == ptr) {
        newest = freed;
      } else {
        s.recent[s.recent_next++ % recent_free_count] = freed;
      }
      freed_slot = device_slot_of(slot->device);
      freed_tag = slot->tag;
      const std::size_t live = remove_bytes(device_ref(freed_slot, st), counts, slot->bytes);
      const std::size_t tag_live = remove_bytes(tag_ref(freed_tag, st), counts, slot->bytes);
      freed_live = live;
      look_at_local = live != unknown_size || tag_live != unknown_size;
      count_free(counts, freed_slot, freed_tag);
      detail::note_mem_event(false, *slot, live, detail::thread_id(mine));
      detail::thread_memory& memory = mine.memory;
      memory.freed_bytes += slot->bytes;
      ++memory.frees;
      memory.net -= static_cast<std::int64_t>(slot->bytes);
      erase(s, at);
    } else {
      const recent_free* earlier = nullptr;
      for (const recent_free& r : s.recent) {
        if (r.ptr == ptr) { earlier = &r; }
      }
      if (earlier != nullptr) {
        result.double_free = true;
        misuses[misuse_count++] = {interposed, misuse_kind::double_free, ptr, bytes, earlier->bytes,
                                   current_device, earlier->device, earlier->allocated_at,
                                   earlier->freed_at};
        st.double_free.fetch_add(1, std::memory_order_relaxed);
      } else if (interposed) {
        // Memory from before tracking began, or from an API the interposer does not see.
        st.untracked_frees.fetch_add(1, std::memory_order_relaxed);
      } else {
        misuses[misuse_count++] = {interposed, misuse_kind::unknown_pointer, ptr, bytes, 0, current_device,
                                   host_device_id, no_site, no_site};
        st.unknown_pointer.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  for (int i = 0; i < misuse_count; ++i) { report_misuse(misuses[i]); }
  if (look_at_local) { maybe_go_local(mine, freed_slot, freed_tag, freed_live); }
  return result;
}

}  // namespace

free_result record_free(const void* ptr, std::size_t bytes, int current_device, cudaStream_t /*stream*/) noexcept {
  return record_free_impl(ptr, bytes, current_device, false);
}

free_result record_interposed_free(const void* ptr, int current_device, cudaStream_t /*stream*/) noexcept {
  return record_free_impl(ptr, unknown_size, current_device, true);
}

std::uint32_t ledger_thread_id() noexcept { return detail::thread_id(this_thread); }

namespace {

// Runs `record` with the calling thread's id and tag standing in for another thread's. The
// calling thread's own figures (what its operation scopes read) count the record only when the
// thread is itself.
template <class F>
auto as_thread(std::uint32_t thread, tag_id tag, F&& record) noexcept {
  detail::thread_state& mine = this_thread;
  const std::uint32_t own_id = detail::thread_id(mine);
  const tag_id own_tag = mine.tag;
  const detail::thread_memory own_memory = mine.memory;
  mine.id = thread;
  mine.tag = tag < max_tags ? tag : untagged;
  auto result = record();
  mine.id = own_id;
  mine.tag = own_tag;
  if (thread != own_id) { mine.memory = own_memory; }
  return result;
}

}  // namespace

void record_allocation_as(const allocation_event& event, tag_id tag, std::uint32_t thread) noexcept {
  static_cast<void>(as_thread(thread, tag, [&event] {
    record_allocation(event);
    return true;
  }));
}

free_result record_interposed_free_as(const void* ptr, int current_device, std::uint32_t thread) noexcept {
  return as_thread(thread, this_thread.tag, [&] { return record_free_impl(ptr, unknown_size, current_device, true); });
}

std::uint64_t untracked_frees() noexcept { return state().untracked_frees.load(std::memory_order_relaxed); }

// ---- reading ------------------------------------------------------------------------------------

namespace {

std::atomic<void (*)() noexcept> catch_up_source{nullptr};

// What a source holds back, into the ledger before a reading.
void catch_up() noexcept {
  if (void (*const f)() noexcept = catch_up_source.load(std::memory_order_acquire)) { f(); }
}

misuse_counts read_misuse() noexcept;

}  // namespace

void set_ledger_catch_up(void (*catch_up)() noexcept) noexcept {
  catch_up_source.store(catch_up, std::memory_order_release);
}

ledger_snapshot snapshot(bool with_live) {
  catch_up();
  ledger_state& st = state();
  ledger_snapshot snap;
  std::vector<allocation_record> live;
  std::array<counters, device_slots> devices{};
  std::array<counters, max_tags> tag_values{};
  std::array<bool, device_slots> device_used{};
  std::array<bool, max_tags> tag_used{};
  if (with_live) {
    std::size_t estimate = 0;  // from the atomic counters: the shards' own sizes need their locks
    for (int i = 0; i < device_slots; ++i) {
      if (st.devices[static_cast<std::size_t>(i)].ever_used()) { estimate += read_device(i).live_count(); }
    }
    live.reserve(estimate + estimate / 4 + 16);  // allocate before taking the locks
  }
  bool live_complete = true;
  {
    const all_shards stopped;
    for (int i = 0; i < device_slots; ++i) {
      device_used[i] = st.devices[i].ever_used();
      if (device_used[i]) { devices[i] = read_device(i); }
    }
    for (int i = 0; i < max_tags; ++i) {
      tag_used[i] = st.tag_counters[i].ever_used();
      if (tag_used[i]) { tag_values[i] = read_tag(i); }
    }
    snap.misuse = read_misuse();  // every shard is held: no catch-up here
    if (with_live) {
      for (const shard& s : st.shards) {
        for (const allocation_record& record : s.slots) {
          if (record.ptr == nullptr || inherited(st, record)) { continue; }
          if (live.size() == live.capacity()) {
            live_complete = false;  // never reallocate under the locks
            break;
          }
          live.push_back(record);
        }
      }
    }
  }
  if (!live_complete) { return snapshot(true); }  // the live set grew between estimate and lock
  for (allocation_record& record : live) { record.time_ns = detail::coarse_to_ns(record.time_ns); }

  for (int i = 0; i < device_slots; ++i) {
    if (device_used[i]) { snap.devices.emplace_back(i == 0 ? host_device_id : i - 1, devices[i]); }
  }
  for (int i = 0; i < max_tags; ++i) {
    if (tag_used[i]) { snap.tags.emplace_back(tag_name(static_cast<tag_id>(i)), tag_values[i]); }
  }
  std::sort(live.begin(), live.end(), [](const allocation_record& a, const allocation_record& b) {
    return a.sequence < b.sequence;
  });
  snap.live = std::move(live);
  return snap;
}

counters device_counters(int device) noexcept {
  catch_up();
  const counter_ref r = device_ref(device_slot_of(device));
  // A shared counter's live bytes are one atomic: read as they are, unless the mode changed
  // meanwhile. A local one's are a sum of every thread's part, exact only with everyone stopped.
  const std::uint32_t before = r.counter.mode.load(std::memory_order_acquire);
  if ((before & 1U) == 0) {
    const counters c = read_counters(r);
    if (r.counter.mode.load(std::memory_order_acquire) == before) { return c; }
  }
  const all_shards stopped;
  return read_counters(r);
}

counters detail::device_counters_unstopped(int device) noexcept {
  return read_counters(device_ref(device_slot_of(device)));
}

namespace {

// Every shard held. Makes every device's and tag's counter shared and starts one of its peaks
// (the phase peak, or the writer's interval peak) again at its live bytes: a local counter does
// not keep either between its events.
void share_every_counter_restarting(std::atomic<std::size_t> live_counter::*peak) noexcept {
  const auto share = [peak](const counter_ref& r) {
    go_shared(r);
    (r.counter.*peak).store(r.counter.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
  };
  for (int slot = 0; slot < device_slots; ++slot) { share(device_ref(slot)); }
  for (std::size_t tag = 0; tag < max_tags; ++tag) { share(tag_ref(tag)); }
}

}  // namespace

void reset_phase_peak() noexcept {
  catch_up();  // what came before the new phase is in the old one
  const all_shards stopped;
  // A phase peak set to the live bytes leaves no headroom: every counter goes shared.
  share_every_counter_restarting(&live_counter::phase_peak);
}

void detail::hold_shared_counters(bool hold) noexcept {
  ledger_state& st = state();
  if (!hold) {
    st.shared_holds.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  st.shared_holds.fetch_add(1, std::memory_order_relaxed);
  const all_shards stopped;
  share_every_counter_restarting(&live_counter::interval_peak);  // interval peaks count from here
}

bool detail::counter_is_local(int device) noexcept { return device_ref(device_slot_of(device)).local(); }

misuse_counts misuse() noexcept {
  catch_up();
  return read_misuse();
}

namespace {

misuse_counts read_misuse() noexcept {
  const ledger_state& st = state();
  misuse_counts m;
  m.unknown_pointer = st.unknown_pointer.load(std::memory_order_relaxed);
  m.double_free = st.double_free.load(std::memory_order_relaxed);
  m.wrong_size = st.wrong_size.load(std::memory_order_relaxed);
  m.wrong_device = st.wrong_device.load(std::memory_order_relaxed);
  return m;
}

}  // namespace

void configure_ledger(const options& opts) noexcept {
  ledger_state& st = state();
  st.stack_sample.store(std::max<std::uint32_t>(opts.stack_sample, 1), std::memory_order_relaxed);
  st.stack_depth.store(std::clamp<std::uint32_t>(opts.stack_depth, 1, detail::max_stack_depth),
                       std::memory_order_relaxed);
  st.abort_on_error.store(opts.abort_on_error, std::memory_order_relaxed);
  st.stacks.store(static_cast<int>(opts.stacks), std::memory_order_relaxed);
}

// ---- tags ---------------------------------------------------------------------------------------

tag_id intern_tag(std::string_view name) noexcept {
  if (name.empty()) { return untagged; }
  tag_table& table = tags();
  try {
    std::string key(name.substr(0, max_tag_length));
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (const auto it = table.ids.find(key); it != table.ids.end()) { return it->second; }
    if (table.count == max_tags - 1 && table.other == untagged) {
      table.other = static_cast<tag_id>(table.count++);
      table.names[table.other] = "(other)";
    }
    if (table.count >= max_tags) { return table.other; }
    const auto id = static_cast<tag_id>(table.count++);
    table.names[id] = key;
    table.ids.emplace(std::move(key), id);
    return id;
  } catch (...) {  // out of memory or a broken mutex: count it untagged rather than fail
    return untagged;
  }
}

std::string tag_name(tag_id tag) {
  tag_table& table = tags();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return tag < max_tags ? table.names[tag] : std::string();
}

tag_id current_tag() noexcept { return this_thread.tag; }
void set_current_tag(tag_id tag) noexcept {
  if (tag != untagged && !detail::thread_context_used().load(std::memory_order_relaxed)) {
    detail::note_thread_context();
  }
  this_thread.tag = tag < max_tags ? tag : untagged;
}

void detail::note_thread_context() noexcept {
  // The first time: what a source held back was made before this tag or scope, so it is recorded
  // now, outside them. Sequentially consistent, like the source's claim that reads the flag after
  // taking its ring: one of the two sees the other.
  if (!thread_context_used().exchange(true, std::memory_order_seq_cst)) { catch_up(); }
}

// ---- for the rest of the core -------------------------------------------------------------------

detail::thread_state& detail::this_thread_state() noexcept { return this_thread; }


std::vector<int> detail::active_devices() {
  catch_up();
  std::vector<int> devices;
  const ledger_state& st = state();
  for (int i = 0; i < device_slots; ++i) {
    if (st.devices[i].ever_used()) { devices.push_back(i == 0 ? host_device_id : i - 1); }
  }
  return devices;
}

void detail::arm_crossing(int device, std::size_t bytes) noexcept {
  const counter_ref r = device_ref(device_slot_of(device));
  if (r.counter.alert_at.load(std::memory_order_relaxed) == bytes) { return; }
  // The alert is part of the bound a local counter keeps under (see "counters"): it changes with
  // every thread stopped, and a counter it would now bind goes shared.
  const all_shards stopped;
  r.counter.alert_at.store(bytes, std::memory_order_relaxed);
  if (!r.local()) { return; }
  auto room = static_cast<std::int64_t>(r.counter.bound()) -
              static_cast<std::int64_t>(r.counter.current.load(std::memory_order_relaxed));
  each_block([&](detail::thread_counts& block) { room -= r.in(block).ceiling.load(std::memory_order_relaxed); });
  if (room < 0) {
    go_shared(r);
  } else {
    r.counter.pool.store(room, std::memory_order_relaxed);
  }
}

std::optional<detail::crossing> detail::take_crossing(int device) noexcept {
  live_counter& c = state().devices[device_slot_of(device)];
  if (c.crossing_state.load(std::memory_order_acquire) != 2) { return std::nullopt; }
  const crossing seen{c.crossed_bytes, c.crossed_ns};
  c.crossing_state.store(0, std::memory_order_release);
  return seen;
}

std::size_t detail::take_interval_peak(int device) noexcept {
  const counter_ref r = device_ref(device_slot_of(device));
  // Start the next interval at the live bytes of now; an allocation racing with this raises it.
  // While the device is local the interval peak is not raised (only an output that holds the
  // counters shared writes it): it is then the most of the live bytes at the samples.
  const std::size_t now = r.local() ? device_counters(device).current_bytes
                                    : r.counter.current.load(std::memory_order_relaxed);
  return r.counter.interval_peak.exchange(now, std::memory_order_relaxed);
}

std::vector<detail::site_total> detail::top_sites(std::size_t count) {
  std::vector<site_total> all;
  for (const site_slot& slot : site_table()) {
    const site_id site = slot.site.load(std::memory_order_acquire);
    if (site == no_site) { continue; }
    all.push_back({site, slot.allocations.load(std::memory_order_relaxed),
                   slot.bytes.load(std::memory_order_relaxed)});
  }
  std::sort(all.begin(), all.end(), [](const site_total& a, const site_total& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (all.size() > count) { all.resize(count); }
  return all;
}

std::size_t detail::crash_scan(crash_site* sites, std::size_t capacity, bool& complete) noexcept {
  complete = true;
  std::size_t used = 0;
  const ledger_state& st = state();
  for (shard& s : state().shards) {
    if (!s.mutex.try_lock()) {
      complete = false;
      continue;
    }
    for (const allocation_record& record : s.slots) {
      if (record.ptr == nullptr || inherited(st, record)) { continue; }
      std::size_t i = 0;
      while (i < used && (sites[i].site != record.site || sites[i].device != record.device)) { ++i; }
      if (i == used) {
        if (used == capacity) {
          complete = false;
          continue;
        }
        sites[used++] = crash_site{record.site, record.device, 0, 0};
      }
      sites[i].bytes += record.bytes;
      ++sites[i].count;
    }
    s.mutex.unlock();
  }
  return used;
}

std::vector<frame_info> resolve_site(site_id site) {
  return detail::resolve_frames(detail::site_frames(site));
}

}  // namespace gpuguard
