// The ledger's live counters (src/ledger/live_counter.hpp), driven as the ledger drives them but
// from one thread: exact live bytes and peaks in shared mode, the bound kept in local mode
// (base + ceilings + pool = bound, every part within its ceiling), room moved between threads'
// blocks, and the way back to shared mode at a new peak or an armed alert.
#include "ledger/live_counter.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace {

using namespace gpuguard::detail;  // NOLINT(google-build-using-namespace): the part under test

struct fixture {
  std::unique_ptr<count_blocks> blocks = std::make_unique<count_blocks>();
  std::unique_ptr<live_counter> counter = std::make_unique<live_counter>();
  [[nodiscard]] counter_ref device() const { return {*counter, *blocks, false, 1}; }

  // An allocation as the ledger makes it: planned, room made with everyone stopped if refused,
  // then carried out, and counted.
  void allocate(thread_counts& block, std::size_t bytes) const {
    planned_add plan;
    if (!plan_add(device(), block, bytes, plan, false)) {
      make_room_stopped(device(), block, bytes);
      plan = planned_add{};
      ASSERT_TRUE(plan_add(device(), block, bytes, plan, true));
    }
    add_planned(device(), plan, bytes);
    count_allocation(block, 1, 0, bytes);
  }
  void free(thread_counts& block, std::size_t bytes) const {
    remove_bytes(device(), block, bytes);
    count_free(block, 1, 0);
  }
  // base + sum of ceilings + pool, which a local counter keeps equal to its bound.
  [[nodiscard]] std::int64_t accounted() const {
    std::int64_t sum = static_cast<std::int64_t>(counter->current.load()) + counter->pool.load();
    blocks->for_each([&](thread_counts& b) { sum += device().in(b).ceiling.load(); });
    return sum;
  }
  [[nodiscard]] bool parts_within_ceilings() const {
    bool within = true;
    blocks->for_each([&](thread_counts& b) {
      within = within && device().in(b).part.load() <= device().in(b).ceiling.load();
    });
    return within;
  }
};

TEST(live_counter, shared_mode_keeps_exact_live_bytes_and_peaks) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  f.allocate(a, 100);
  f.allocate(a, 50);
  f.free(a, 100);
  EXPECT_FALSE(f.device().local());
  EXPECT_EQ(live_bytes(f.device()), 50U);
  const gpuguard::counters c = read_counters(f.device());
  EXPECT_EQ(c.current_bytes, 50U);
  EXPECT_EQ(c.peak_bytes, 150U);
  EXPECT_EQ(c.phase_peak_bytes, 150U);
  EXPECT_EQ(c.total_bytes, 150U);
  EXPECT_EQ(c.allocations, 2U);
  EXPECT_EQ(c.frees, 1U);
  EXPECT_TRUE(f.counter->ever_used());
}

TEST(live_counter, goes_local_only_with_headroom_and_no_holder) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  f.allocate(a, 1000);
  f.free(a, 950);  // live 50 of a bound of 1000
  go_local(f.device(), true);
  EXPECT_FALSE(f.device().local()) << "a holder needs the counter shared";
  go_local(f.device(), false);
  ASSERT_TRUE(f.device().local());
  EXPECT_EQ(f.accounted(), 1000);
  EXPECT_EQ(f.counter->pool.load(), 950);

  fixture g;
  thread_counts& b = g.blocks->claim();
  g.allocate(b, 1000);
  g.free(b, 100);  // live 900: less than an eighth of the bound is left
  go_local(g.device(), false);
  EXPECT_FALSE(g.device().local());
}

// Two threads' blocks allocating and freeing in local mode: the bound holds after every event,
// room moves to the thread that needs it, and the live bytes are the base plus the parts.
TEST(live_counter, local_mode_keeps_the_bound_while_room_moves_between_blocks) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  thread_counts& b = f.blocks->claim();
  ASSERT_NE(&a, &b);
  f.allocate(a, 1000);
  f.free(a, 1000);
  go_local(f.device(), false);
  ASSERT_TRUE(f.device().local());
  for (int round = 0; round < 50; ++round) {
    f.allocate(a, 300);
    f.allocate(b, 300);
    ASSERT_TRUE(f.device().local()) << "round " << round << ": 600 of a bound of 1000";
    ASSERT_EQ(f.accounted(), 1000) << "round " << round;
    ASSERT_TRUE(f.parts_within_ceilings()) << "round " << round;
    EXPECT_EQ(live_bytes(f.device()), 600U);
    f.free(a, 300);
    f.free(b, 300);
    f.allocate(b, 600);  // b needs room a holds: moved while everyone is stopped
    ASSERT_TRUE(f.device().local());
    ASSERT_EQ(f.accounted(), 1000);
    ASSERT_TRUE(f.parts_within_ceilings());
    f.free(b, 600);
  }
  EXPECT_EQ(f.counter->peak.load(), 1000U) << "no event passed the bound unseen";
  const gpuguard::counters c = read_counters(f.device());
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.allocations, 151U);
  EXPECT_EQ(c.frees, 151U);
}

// An allocation that makes a new peak folds the parts back and goes shared, with the peak exact.
TEST(live_counter, a_new_peak_makes_the_counter_shared_again) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  thread_counts& b = f.blocks->claim();
  f.allocate(a, 1000);
  f.free(a, 1000);
  go_local(f.device(), false);
  f.allocate(a, 400);
  f.allocate(b, 500);
  ASSERT_TRUE(f.device().local());
  f.allocate(b, 300);  // 1200 > the peak of 1000
  EXPECT_FALSE(f.device().local());
  EXPECT_EQ(f.counter->current.load(), 1200U);
  EXPECT_EQ(f.counter->peak.load(), 1200U);
  f.blocks->for_each([&](thread_counts& block) {
    EXPECT_EQ(f.device().in(block).part.load(), 0);
    EXPECT_EQ(f.device().in(block).ceiling.load(), 0);
  });
}

// Arming an alert lowers the bound: a local counter whose ceilings no longer fit goes shared; one
// that still fits keeps going with a smaller pool. A crossing is recorded once.
TEST(live_counter, an_armed_alert_bounds_a_local_counter) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  f.allocate(a, 1000);
  f.free(a, 1000);
  go_local(f.device(), false);
  f.allocate(a, 100);
  arm_alert(f.device(), 801);  // bound 800: room for what a's ceiling holds
  ASSERT_TRUE(f.device().local());
  EXPECT_EQ(f.accounted(), 800);
  arm_alert(f.device(), 51);  // bound 50, below a's part
  EXPECT_FALSE(f.device().local());
  EXPECT_EQ(f.counter->current.load(), 100U);

  fixture g;
  thread_counts& b = g.blocks->claim();
  arm_alert(g.device(), 100);
  g.allocate(b, 60);
  g.allocate(b, 60);
  g.allocate(b, 60);
  EXPECT_EQ(g.counter->crossing_state.load(), 2);
  EXPECT_EQ(g.counter->crossed_bytes, 120U) << "the first allocation that reached the alert";
}

// share_restarting starts a peak again at the live bytes.
TEST(live_counter, share_restarting_starts_a_peak_at_the_live_bytes) {
  fixture f;
  thread_counts& a = f.blocks->claim();
  f.allocate(a, 500);
  f.free(a, 400);
  share_restarting(f.device(), &live_counter::phase_peak);
  EXPECT_EQ(f.counter->phase_peak.load(), 100U);
  EXPECT_EQ(f.counter->peak.load(), 500U);
}

// The fallback block, which several threads may write, is counted with fetch_add and gets room
// only with everyone stopped.
TEST(live_counter, the_fallback_block_counts_and_takes_room_stopped) {
  fixture f;
  thread_counts& fallback = f.blocks->fallback();
  ASSERT_TRUE(fallback.shared);
  f.allocate(fallback, 1000);
  f.free(fallback, 1000);
  go_local(f.device(), false);
  planned_add plan;
  EXPECT_FALSE(plan_add(f.device(), fallback, 10, plan, false));
  f.allocate(fallback, 10);
  EXPECT_EQ(live_bytes(f.device()), 10U);
  EXPECT_EQ(f.accounted(), 1000);
  EXPECT_EQ(read_counters(f.device()).allocations, 2U);
}

// A block given back is claimed again, counts and all; a forked child's restart zeroes every
// count and leaves only the forking thread's block and the fallback owned.
TEST(count_blocks, reuse_and_restart_in_a_forked_child) {
  count_blocks blocks;
  thread_counts& a = blocks.claim();
  thread_counts& b = blocks.claim();
  a.devices[1].allocations.store(5);
  a.owned.store(false);
  thread_counts& again = blocks.claim();
  EXPECT_EQ(&again, &a);
  EXPECT_EQ(again.devices[1].allocations.load(), 5U);
  blocks.restart_in_forked_child(&b);
  EXPECT_EQ(a.devices[1].allocations.load(), 0U);
  EXPECT_FALSE(a.owned.load());
  EXPECT_TRUE(b.owned.load());
  EXPECT_TRUE(blocks.fallback().owned.load());
}

}  // namespace
