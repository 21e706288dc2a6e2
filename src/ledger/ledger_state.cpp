// Making the ledger's state, handing threads their count blocks and ids, and fork() (see
// ledger_state.hpp).
#include "ledger/ledger_state.hpp"

#include "ledger/clock.hpp"
#include "util/immovable.hpp"

#include <new>

#include <pthread.h>

namespace gpuguard::detail {

std::atomic<ledger_state*> made_ledger_state{nullptr};

namespace {

// fork(): the shards are locked around it, so the child's copy of the table is consistent (a lock
// another thread held at the fork would stay held in the child for ever). In the child the
// parent's allocations are not its own: the counters, misuse counts and site totals start from
// zero, and the parent's live records stay in the table only so that the child's frees of them
// (its copies of host memory, its static destructors) are recognised, quietly, and not reported
// as frees of unknown pointers. Snapshots, leak reports and crash records skip them.
void lock_before_fork() noexcept { ledger().table.lock_all(); }
void unlock_in_parent() noexcept { ledger().table.unlock_all(); }
void forget_parent_in_forked_child() noexcept {
  ledger_state& st = ledger();
  for (live_shard& s : st.table.shards) { s.forget_frees(); }
  for (live_counter& c : st.devices) { c.clear(); }
  for (live_counter& c : st.tag_counters) { c.clear(); }
  // The child's only thread is the one that forked: every other block's owner is gone.
  thread_state& mine = this_thread_state();
  st.blocks.restart_in_forked_child(mine.counts);
  mine.sequence_next = mine.sequence_end = 0;  // the parent's numbers are the inherited ones
  st.misuse.clear();
  st.sites.clear();
  st.inherited_through.store(st.sequence.load(std::memory_order_relaxed), std::memory_order_relaxed);
  st.table.unlock_all();
}

// Gives the thread's block back when the thread ends. Its own thread_local, apart from
// thread_state: thread_state must stay trivially destructible, because frees may still be recorded
// while a thread's other thread_locals are destroyed; those go to the fallback block.
struct counts_owner : immovable {
  counts_owner() = default;
  ~counts_owner() {
    thread_state& mine = this_thread_state();
    if (mine.counts != nullptr && !mine.counts->shared) {
      mine.counts->owned.store(false, std::memory_order_release);
    }
    mine.counts = &ledger().blocks.fallback();
  }
};

}  // namespace

__attribute__((noinline)) ledger_state& make_ledger_state() {
  static auto* s = [] {
    // The ledger's clock starts with it: the live table's times are counted from its origin.
    static_cast<void>(origin());
    auto* made = new ledger_state();
    static_cast<void>(::pthread_atfork(lock_before_fork, unlock_in_parent, forget_parent_in_forked_child));
    made_ledger_state.store(made, std::memory_order_release);
    return made;
  }();
  return *s;
}

void ledger_state::share_every_counter(std::atomic<std::size_t> live_counter::*peak) noexcept {
  for (int slot = 0; slot < device_slots; ++slot) { share_restarting(device_ref(slot), peak); }
  for (std::size_t tag = 0; tag < max_tags; ++tag) { share_restarting(tag_ref(tag), peak); }
}

thread_counts& claim_counts(thread_state& mine) noexcept {
  static thread_local counts_owner owner;  // registers the thread's exit hook
  static_cast<void>(owner);
  mine.counts = &ledger().blocks.claim();
  return *mine.counts;
}

std::uint32_t next_thread_id() noexcept {
  return ledger().next_thread.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace gpuguard::detail
