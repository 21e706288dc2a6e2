// The interposer's deferred recording (src/preload/deferred.cpp), in-process and without a driver:
// its source is built into this test with the core, and the calls it is handed stand for the
// wrappers'. Each test runs in a process of its own (gtest_discover_tests), as deferring is
// once per process; the sanitizer builds run them too (TSan: the producer, the drainer and the
// readers). defer_program.cpp tests the same through the preloaded library on a (fake or real)
// driver.
#include "preload/preload.hpp"
#include "preload/ring.hpp"

#include <gpuguard/core/ledger.hpp>

#include "ledger/deferred_source.hpp"
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

namespace gpuguard::preload {
namespace {

constexpr int device = 3;  // a device no other record here uses
constexpr std::size_t bytes = 256;

// Options under which deferring starts: stacks off (they are on by default, and a stack is the
// calling thread's).
options deferrable() {
  options opts;
  opts.stacks = stack_mode::off;
  return opts;
}

const void* address(std::uintptr_t i) {
  return reinterpret_cast<const void*>((std::uintptr_t{1} << 40U) + i * 4096);  // NOLINT(performance-no-int-to-ptr)
}

bool defer_allocation(std::uintptr_t i) {
  return defer({address(i), bytes, nullptr, device, untagged, memory_kind::device, false});
}
bool defer_free(std::uintptr_t i) { return defer({address(i), 0, nullptr, device, untagged, memory_kind::device, true}); }

// The device's counters at one instant (device_counters' fields may be instants apart).
counters at_one_instant() {
  for (const auto& [d, c] : snapshot(false).devices) {
    if (d == device) { return c; }
  }
  return {};
}

// What forget() and record() do with a call that was not deferred.
void record_allocation_now(std::uintptr_t i) { record_allocation({address(i), bytes, device, nullptr, memory_kind::device}); }
void record_free_now(std::uintptr_t i) { static_cast<void>(record_interposed_free(address(i), device, nullptr)); }

TEST(deferred_recording, one_thread_calls_are_deferred_and_every_reading_sees_them_all) {
  start_deferring(deferrable());
  hold_drainer(true);  // the ring's last calls are left to the reader below
  constexpr std::uintptr_t pairs = 20000;  // more than the ring holds: this thread records the rest
  for (std::uintptr_t i = 0; i < pairs; ++i) {
    ASSERT_TRUE(defer_allocation(i));
    ASSERT_TRUE(defer_free(i));
  }
  for (std::uintptr_t i = pairs; i < pairs + 3; ++i) { ASSERT_TRUE(defer_allocation(i)); }
  EXPECT_STREQ(recording_mode(), "deferred");
  // Read on another thread, which records what the ring holds: the records still name the
  // thread that made the calls.
  ledger_snapshot snap;
  std::thread reader([&snap] { snap = snapshot(true); });
  reader.join();
  std::size_t mine = 0;
  for (const allocation_record& r : snap.live) {
    if (r.device == device) {
      EXPECT_EQ(r.thread, ledger_thread_id());
      ++mine;
    }
  }
  EXPECT_EQ(mine, 3U);
  const counters c = device_counters(device);
  EXPECT_EQ(c.allocations, pairs + 3);
  EXPECT_EQ(c.frees, pairs);
  EXPECT_EQ(c.current_bytes, 3 * bytes);
  EXPECT_EQ(c.peak_bytes, 3 * bytes);
  EXPECT_EQ(untracked_frees(), 0U);
}

TEST(deferred_recording, a_reader_while_calls_are_deferred_sees_a_whole_prefix) {
  start_deferring(deferrable());
  constexpr std::uintptr_t pairs = 100000;
  std::atomic<bool> done{false};
  std::atomic<bool> all_deferred{true};
  std::thread producer([&] {
    for (std::uintptr_t i = 0; i < pairs; ++i) {
      if (!defer_allocation(i) || !defer_free(i)) { all_deferred = false; }
    }
    done = true;
  });
  std::uint64_t last_allocations = 0;
  while (!done.load()) {
    const counters c = at_one_instant();
    ASSERT_GE(c.allocations, last_allocations);
    ASSERT_LE(c.frees, c.allocations);
    ASSERT_LE(c.allocations - c.frees, 1U);  // one thread's calls, in its order
    last_allocations = c.allocations;
  }
  producer.join();
  EXPECT_TRUE(all_deferred.load());
  const counters c = device_counters(device);
  EXPECT_EQ(c.allocations, pairs);
  EXPECT_EQ(c.frees, pairs);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(untracked_frees(), 0U);
}

TEST(deferred_recording, a_second_thread_ends_deferring_after_what_the_ring_held) {
  start_deferring(deferrable());
  hold_drainer(true);                // the allocation stays in the ring
  ASSERT_TRUE(defer_allocation(1));  // this thread owns the ring now
  bool second_deferred = true;
  free_result freed;
  std::thread second([&] {
    // Its free of the first thread's block is recorded after that block's allocation.
    second_deferred = defer_free(1);
    if (!second_deferred) { freed = record_interposed_free(address(1), device, nullptr); }
  });
  second.join();
  EXPECT_FALSE(second_deferred);
  EXPECT_TRUE(freed.known);
  EXPECT_EQ(untracked_frees(), 0U);
  EXPECT_STREQ(recording_mode(), "at_once");
  // For good: the first thread's calls are recorded at once too.
  EXPECT_FALSE(defer_allocation(2));
  record_allocation_now(2);
  const counters c = device_counters(device);
  EXPECT_EQ(c.allocations, 2U);
  EXPECT_EQ(c.frees, 1U);
  EXPECT_EQ(c.current_bytes, bytes);
}

TEST(deferred_recording, a_tag_ends_deferring_and_the_ring_is_recorded_first) {
  start_deferring(deferrable());
  hold_drainer(true);
  ASSERT_TRUE(defer_allocation(1));
  const scoped_tag tag("after");
  EXPECT_EQ(device_counters(device).allocations, 1U);
  EXPECT_FALSE(defer_free(1));
  record_free_now(1);
  EXPECT_STREQ(recording_mode(), "at_once");
  const counters c = device_counters(device);
  EXPECT_EQ(c.allocations, 1U);
  EXPECT_EQ(c.frees, 1U);
  EXPECT_EQ(untracked_frees(), 0U);
  // The allocation came before the tag: it is untagged.
  for (const auto& [name, figures] : snapshot(false).tags) {
    if (name == "after") { EXPECT_EQ(figures.allocations, 0U); }
  }
}

// The wrappers' one flag for the common stream-ordered allocation (ring.hpp): open only while a
// thread owns the ring, the process has one device whose pool is noted, and no framework is
// loaded or to be looked for; any change of those closes it, and only the owner's calls take it.
TEST(deferred_recording, the_common_path_is_open_only_while_each_of_its_conditions_holds) {
  start_deferring(deferrable());
  hold_drainer(true);
  hot.one_device.store(1);
  hot.async_devices.store(1);
  hot.recheck_frameworks.store(false);
  refresh_common();
  EXPECT_FALSE(hot.common.load()) << "no thread owns the ring yet";
  ASSERT_TRUE(defer_allocation(1));  // the claim refreshes the flag
  EXPECT_TRUE(hot.common.load());
  EXPECT_TRUE(defer_common_allocation(address(2), bytes, nullptr));
  bool other_thread_took_it = true;
  std::thread([&] { other_thread_took_it = defer_common_allocation(address(3), bytes, nullptr); }).join();
  EXPECT_FALSE(other_thread_took_it);

  struct condition {
    const char* name;
    void (*set)(bool held);
  };
  const condition conditions[] = {
      {"one device", [](bool held) { hot.one_device.store(held ? 1 : 0); }},
      {"device 0's pool noted", [](bool held) { hot.async_devices.store(held ? 1U : 2U); }},
      {"no framework loaded", [](bool held) { hot.torch_loaded.store(!held); }},
      {"no framework to look for", [](bool held) { hot.recheck_frameworks.store(!held); }},
  };
  for (const condition& c : conditions) {
    c.set(false);
    refresh_common();
    EXPECT_FALSE(hot.common.load()) << c.name << " does not hold";
    EXPECT_FALSE(defer_common_allocation(address(4), bytes, nullptr)) << c.name << " does not hold";
    c.set(true);
    refresh_common();
    EXPECT_TRUE(hot.common.load()) << c.name << " holds again";
  }
  EXPECT_TRUE(defer_common_free(address(2), nullptr));

  // A tag ends deferring: the flag closes, and the ring's calls are recorded first.
  const scoped_tag tag("after");
  EXPECT_FALSE(hot.common.load());
  EXPECT_FALSE(defer_common_allocation(address(5), bytes, nullptr));
  EXPECT_FALSE(defer_common_free(address(1), nullptr));
  const counters c = device_counters(device);
  EXPECT_EQ(c.allocations, 1U);  // address(1); address(2) went to device 0
  counters zero;
  for (const auto& [d, figures] : snapshot(false).devices) {
    if (d == 0) { zero = figures; }
  }
  EXPECT_EQ(zero.allocations, 1U);
  EXPECT_EQ(zero.frees, 1U);
  EXPECT_EQ(untracked_frees(), 0U);
}

// A scope opened before CUDA was first used: its catch-up found no ring to end, so the claim
// itself sees the scope and records at once (the owner's later calls read only the mode).
TEST(deferred_recording, a_scope_before_the_first_call_keeps_every_call_recorded_at_once) {
  op_scope scope("before");
  start_deferring(deferrable());
  EXPECT_FALSE(defer_allocation(1));
  EXPECT_STREQ(recording_mode(), "at_once");
  record_allocation_now(1);
  EXPECT_FALSE(defer_free(1));
  record_free_now(1);
  EXPECT_EQ(scope.end().allocs, 1U);
}

// Calls made before the process's first operation scope opened are not counted in it: they are
// recorded as it opens, before it reads its start.
TEST(deferred_recording, the_first_scope_counts_only_the_calls_made_inside_it) {
  start_deferring(deferrable());
  hold_drainer(true);
  for (std::uintptr_t i = 0; i < 100; ++i) { ASSERT_TRUE(defer_allocation(i)); }
  op_result here;
  {
    op_scope scope("owner");
    if (!defer_allocation(100)) { record_allocation_now(100); }
    here = scope.end();
  }
  EXPECT_EQ(here.allocs, 1U);
  EXPECT_EQ(device_counters(device).allocations, 101U);
}

// A record made for another thread (as the drainer, or a reader catching up, makes the owner's)
// is not the calling thread's: its open scope does not count it.
TEST(deferred_recording, a_record_for_another_thread_is_not_in_the_callers_scope) {
  op_scope scope("reader");
  record_allocation_as({address(1), bytes, device, nullptr, memory_kind::device}, untagged, ledger_thread_id() + 1000);
  record_allocation_as({address(2), bytes, device, nullptr, memory_kind::device}, untagged, ledger_thread_id());
  const op_result result = scope.end();
  EXPECT_EQ(result.allocs, 1U);
  EXPECT_EQ(device_counters(device).allocations, 2U);
}

TEST(deferred_recording, stacks_keep_every_call_recorded_at_once) {
  options opts;
  opts.stacks = stack_mode::sampled;
  start_deferring(opts);
  EXPECT_FALSE(defer_allocation(1));
  start_deferring(options{});  // stacks=all, the default
  EXPECT_FALSE(defer_allocation(2));
  EXPECT_STREQ(recording_mode(), "at_once");
}

TEST(deferred_recording, track_defer_0_keeps_every_call_recorded_at_once) {
  ASSERT_EQ(::setenv("GPUGUARD_TRACK_DEFER", "0", 1), 0);
  start_deferring(deferrable());
  EXPECT_FALSE(defer_allocation(1));
  EXPECT_STREQ(recording_mode(), "at_once");
}

}  // namespace
}  // namespace gpuguard::preload
