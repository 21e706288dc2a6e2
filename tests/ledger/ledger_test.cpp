// The ledger through the tracking resource over host memory: counters, tags, phases, snapshots,
// misuse. Every test uses its own pretend device id so the process-wide counters do not mix.
#include <gpuguard/device_buffer.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "ledger/shard_hash.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

const gpuguard::counters* find_tag(const gpuguard::ledger_snapshot& snap, const std::string& tag) {
  for (const auto& [name, c] : snap.tags) {
    if (name == tag) { return &c; }
  }
  return nullptr;
}

TEST(ledger, counts_current_peak_total_and_live) {
  constexpr int device = 40;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  {
    gpuguard::device_buffer a(1000, {}, tracked);
    {
      const gpuguard::device_buffer b(3000, {}, tracked);
      const gpuguard::counters c = gpuguard::device_counters(device);
      EXPECT_EQ(c.current_bytes, 4000U);
      EXPECT_EQ(c.peak_bytes, 4000U);
      EXPECT_EQ(c.live_count(), 2U);
    }
    const gpuguard::device_buffer c2(500, {}, tracked);
    const gpuguard::counters c = gpuguard::device_counters(device);
    EXPECT_EQ(c.current_bytes, 1500U);
    EXPECT_EQ(c.peak_bytes, 4000U);
    EXPECT_EQ(c.total_bytes, 4500U);
    EXPECT_EQ(c.allocations, 3U);
    EXPECT_EQ(c.frees, 1U);
  }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.live_count(), 0U);
  EXPECT_EQ(host.used(), 0U);
}

TEST(ledger, zero_byte_buffers_are_not_recorded) {
  constexpr int device = 41;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  const gpuguard::device_buffer empty(0, {}, tracked);
  EXPECT_EQ(gpuguard::device_counters(device).allocations, 0U);
}

TEST(ledger, phase_peak_resets_and_global_peak_stays) {
  constexpr int device = 42;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  const gpuguard::device_buffer kept(100, {}, tracked);
  { const gpuguard::device_buffer big(10000, {}, tracked); }
  gpuguard::reset_phase_peak();
  { const gpuguard::device_buffer medium(700, {}, tracked); }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.peak_bytes, 10100U);
  EXPECT_EQ(c.phase_peak_bytes, 800U);
}

TEST(ledger, tags_count_per_region_and_restore) {
  constexpr int device = 43;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  std::vector<gpuguard::device_buffer> kept;
  {
    GPUGUARD_TAG("ledger_test.forward");
    kept.emplace_back(256, gpuguard::stream_view{}, tracked);
    {
      GPUGUARD_TAG("ledger_test.inner");
      kept.emplace_back(64, gpuguard::stream_view{}, tracked);
    }
    kept.emplace_back(256, gpuguard::stream_view{}, tracked);
  }
  EXPECT_EQ(gpuguard::current_tag(), gpuguard::untagged);
  const gpuguard::ledger_snapshot snap = gpuguard::snapshot();
  const gpuguard::counters* forward = find_tag(snap, "ledger_test.forward");
  const gpuguard::counters* inner = find_tag(snap, "ledger_test.inner");
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(forward->current_bytes, 512U);
  EXPECT_EQ(forward->allocations, 2U);
  EXPECT_EQ(inner->current_bytes, 64U);
  kept.clear();
  EXPECT_EQ(find_tag(gpuguard::snapshot(), "ledger_test.forward")->current_bytes, 0U);
}

TEST(ledger, tags_past_the_limit_share_other) {
  gpuguard::tag_id last = gpuguard::untagged;
  for (int i = 0; i < gpuguard::max_tags + 10; ++i) {
    last = gpuguard::intern_tag("ledger_test.many." + std::to_string(i));
  }
  EXPECT_EQ(gpuguard::tag_name(last), "(other)");
  EXPECT_EQ(gpuguard::intern_tag("ledger_test.forward"), gpuguard::intern_tag("ledger_test.forward"));
  EXPECT_EQ(gpuguard::intern_tag(""), gpuguard::untagged);
}

TEST(ledger, snapshot_lists_live_allocations_in_order) {
  constexpr int device = 44;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  const gpuguard::device_buffer a(111, {}, tracked);
  const gpuguard::device_buffer b(222, {}, tracked);
  const gpuguard::ledger_snapshot snap = gpuguard::snapshot(true);
  std::vector<std::size_t> sizes;
  for (const gpuguard::allocation_record& r : snap.live) {
    if (r.device == device) {
      sizes.push_back(r.bytes);
      EXPECT_EQ(r.kind, gpuguard::memory_kind::host);
      EXPECT_GT(r.thread, 0U);
    }
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{111, 222}));
}

// Device buffers are aligned to 512 bytes and large ones to 2 MiB, so their addresses differ only
// in high bits. The live table must still find, free and move every record: thousands of them
// land in each table, which grows and shifts them on erase, here in a drawn order.
TEST(ledger, aligned_addresses_are_found_and_freed_in_any_order) {
  constexpr int device = 57;
  const std::uint64_t misuse_before = gpuguard::misuse().total();
  for (const std::uintptr_t alignment : {std::uintptr_t{512}, std::uintptr_t{1} << 21}) {
    const std::uintptr_t base = std::uintptr_t{0x7e0000000000} + alignment;
    std::vector<const void*> live;
    for (std::uintptr_t i = 0; i < 6000; ++i) {
      // Never dereferenced: the ledger keeps pointers, not memory.
      const auto* ptr = reinterpret_cast<const void*>(base + i * alignment);  // NOLINT(performance-no-int-to-ptr)
      gpuguard::record_allocation({ptr, 100 + i % 7, device, nullptr, gpuguard::memory_kind::host});
      live.push_back(ptr);
    }
    std::mt19937 draw(7);
    std::shuffle(live.begin(), live.end(), draw);
    // Free two thirds in the drawn order, each found with the bytes it was recorded with.
    const std::size_t freed = live.size() * 2 / 3;
    for (std::size_t i = 0; i < freed; ++i) {
      const std::uintptr_t index = (reinterpret_cast<std::uintptr_t>(live[i]) - base) / alignment;
      const gpuguard::free_result r =
          gpuguard::record_free(live[i], gpuguard::unknown_size, gpuguard::host_device_id, nullptr);
      ASSERT_TRUE(r.known) << "alignment " << alignment << ", record " << index;
      ASSERT_EQ(r.bytes, 100 + index % 7);
    }
    // The rest are still there, and only they.
    std::size_t listed = 0;
    for (const gpuguard::allocation_record& r : gpuguard::snapshot(true).live) {
      if (r.device == device) { ++listed; }
    }
    EXPECT_EQ(listed, live.size() - freed);
    for (std::size_t i = freed; i < live.size(); ++i) {
      ASSERT_TRUE(gpuguard::record_free(live[i], gpuguard::unknown_size, gpuguard::host_device_id, nullptr).known);
    }
    const gpuguard::counters c = gpuguard::device_counters(device);
    EXPECT_EQ(c.current_bytes, 0U);
    EXPECT_EQ(c.live_count(), 0U);
  }
  EXPECT_EQ(gpuguard::misuse().total(), misuse_before);
}

// Each shard's table starts at 16 slots and doubles when half full: 40000 records put about 39
// in each of the 1024 shards, so every table grows more than once, and records inserted after a
// growth are placed by the grown table's geometry, not the old one's.
TEST(ledger, live_table_grows_and_keeps_every_record) {
  constexpr int device = 58;
  constexpr std::uintptr_t count = 40000;
  const std::uint64_t misuse_before = gpuguard::misuse().total();
  const std::uintptr_t base = 0x7d0000000000;
  std::vector<const void*> live;
  for (std::uintptr_t i = 0; i < count; ++i) {
    const auto* ptr = reinterpret_cast<const void*>(base + i * 256);  // NOLINT(performance-no-int-to-ptr)
    gpuguard::record_allocation({ptr, 1 + i % 13, device, nullptr, gpuguard::memory_kind::host});
    live.push_back(ptr);
  }
  ASSERT_EQ(gpuguard::device_counters(device).live_count(), count);
  std::mt19937 draw(11);
  std::shuffle(live.begin(), live.end(), draw);
  for (const void* ptr : live) {
    const std::uintptr_t index = (reinterpret_cast<std::uintptr_t>(ptr) - base) / 256;
    const gpuguard::free_result r = gpuguard::record_free(ptr, gpuguard::unknown_size, gpuguard::host_device_id, nullptr);
    ASSERT_TRUE(r.known) << "record " << index;
    ASSERT_EQ(r.bytes, 1 + index % 13) << "record " << index;
  }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.live_count(), 0U);
  EXPECT_EQ(gpuguard::misuse().total(), misuse_before);
}

// A live record's time is when it was allocated, on the kernel's coarse monotonic clock: two
// records made 50 ms apart by steady_clock are 50 ms apart in the snapshot, give or take the
// clock's lag: a tick (its resolution), and on a tickless kernel a little more, so two ticks are
// allowed.
TEST(ledger, live_records_keep_their_allocation_time_to_a_kernel_tick) {
  constexpr int device = 57;
  timespec resolution{};
  ASSERT_EQ(::clock_getres(CLOCK_MONOTONIC_COARSE, &resolution), 0);
  const std::int64_t tick_ns = static_cast<std::int64_t>(resolution.tv_sec) * 1000000000 + resolution.tv_nsec;
  const auto* first = reinterpret_cast<const void*>(std::uintptr_t{0x7c0000000100});   // NOLINT(performance-no-int-to-ptr)
  const auto* second = reinterpret_cast<const void*>(std::uintptr_t{0x7c0000000200});  // NOLINT(performance-no-int-to-ptr)
  gpuguard::record_allocation({first, 64, device, nullptr, gpuguard::memory_kind::host});
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gpuguard::record_allocation({second, 64, device, nullptr, gpuguard::memory_kind::host});
  const std::int64_t apart_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start).count();
  std::int64_t first_ns = -1;
  std::int64_t second_ns = -1;
  for (const gpuguard::allocation_record& record : gpuguard::snapshot(true).live) {
    if (record.ptr == first) { first_ns = record.time_ns; }
    if (record.ptr == second) { second_ns = record.time_ns; }
  }
  for (const void* ptr : {first, second}) {
    static_cast<void>(gpuguard::record_free(ptr, 64, gpuguard::host_device_id, nullptr));
  }
  ASSERT_GE(first_ns, 0);
  ASSERT_GE(second_ns, 0);
  EXPECT_GE(second_ns - first_ns, std::int64_t{50000000} - 2 * tick_ns);
  EXPECT_LE(second_ns - first_ns, apart_ns + 2 * tick_ns);
}

class misuse : public testing::Test {
 protected:
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked{host, 45};
  gpuguard::misuse_counts before = gpuguard::misuse();
};

TEST_F(misuse, double_free_is_reported_counted_and_not_passed_on) {
  void* p = tracked.allocate(128);
  tracked.deallocate(p, 128);
  testing::internal::CaptureStderr();
  tracked.deallocate(p, 128);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[gpuguard] error: double free"), std::string::npos) << err;
  EXPECT_NE(err.find("first freed at"), std::string::npos) << err;
  EXPECT_EQ(gpuguard::misuse().double_free, before.double_free + 1);
  EXPECT_EQ(host.used(), 0U) << "the upstream freed it once";
}

// A block freed, allocated again and freed again and again (a buffer reused every step) keeps one
// entry of its shard's ring of recent frees, so an older free in that shard is still known.
TEST_F(misuse, double_free_is_known_after_a_reused_block_cycles_through_its_shard) {
  constexpr int device = 58;
  // Made-up addresses, never dereferenced: the ledger keeps pointers, not memory.
  const auto* freed_once =
      reinterpret_cast<const void*>(std::uintptr_t{0x7d0000001000});  // NOLINT(performance-no-int-to-ptr)
  const void* reused = nullptr;
  for (std::uintptr_t a = 0x7d0000101000; reused == nullptr; a += 16) {
    const auto* candidate = reinterpret_cast<const void*>(a);  // NOLINT(performance-no-int-to-ptr)
    if (gpuguard::detail::ledger_shard_of(candidate) == gpuguard::detail::ledger_shard_of(freed_once)) {
      reused = candidate;
    }
  }
  gpuguard::record_allocation({freed_once, 64, device, nullptr, gpuguard::memory_kind::host});
  ASSERT_TRUE(gpuguard::record_free(freed_once, 64, gpuguard::host_device_id, nullptr).known);
  for (int step = 0; step < 100; ++step) {
    gpuguard::record_allocation({reused, 64, device, nullptr, gpuguard::memory_kind::host});
    ASSERT_TRUE(gpuguard::record_free(reused, 64, gpuguard::host_device_id, nullptr).known);
  }
  testing::internal::CaptureStderr();
  const gpuguard::free_result again = gpuguard::record_free(freed_once, 64, gpuguard::host_device_id, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(again.double_free);
  EXPECT_NE(err.find("[gpuguard] error: double free"), std::string::npos) << err;
  EXPECT_EQ(gpuguard::misuse().double_free, before.double_free + 1);
  EXPECT_EQ(gpuguard::misuse().unknown_pointer, before.unknown_pointer);
}

TEST_F(misuse, unknown_pointer_is_reported_and_not_freed) {
  int local = 0;
  testing::internal::CaptureStderr();
  tracked.deallocate(&local, 4);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("free of an unknown pointer"), std::string::npos) << err;
  EXPECT_EQ(gpuguard::misuse().unknown_pointer, before.unknown_pointer + 1);
}

TEST_F(misuse, wrong_size_is_reported_and_freed_with_the_recorded_size) {
  void* p = tracked.allocate(1000);
  EXPECT_EQ(host.used(), 1000U);
  testing::internal::CaptureStderr();
  tracked.deallocate(p, 10);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("freed as 10 bytes but allocated as 1000"), std::string::npos) << err;
  EXPECT_EQ(gpuguard::misuse().wrong_size, before.wrong_size + 1);
  EXPECT_EQ(host.used(), 0U) << "host_memory_resource accounts by size: the right one was used";
  EXPECT_EQ(gpuguard::device_counters(45).current_bytes, 0U);
}

TEST_F(misuse, wrong_device_is_reported_for_device_memory) {
  int block = 0;
  gpuguard::record_allocation({&block, 4, 7, nullptr, gpuguard::memory_kind::device});
  testing::internal::CaptureStderr();
  const gpuguard::free_result result = gpuguard::record_free(&block, 4, 3, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(result.known);
  EXPECT_EQ(result.device, 7) << "the source frees on the recorded device";
  EXPECT_NE(err.find("allocated on device 7, freed while device 3 was current"), std::string::npos) << err;
  EXPECT_EQ(gpuguard::misuse().wrong_device, before.wrong_device + 1);
}

TEST_F(misuse, abort_on_error_makes_misuse_fatal) {
  EXPECT_DEATH(
      {
        gpuguard::options opts;
        opts.abort_on_error = true;
        gpuguard::configure_ledger(opts);
        int local = 0;
        tracked.deallocate(&local, 4);
      },
      "abort_on_error=1: aborting");
}

TEST(ledger, stacks_all_interns_identical_stacks_as_one_site) {
  gpuguard::options opts;
  opts.stacks = gpuguard::stack_mode::all;
  gpuguard::configure_ledger(opts);
  constexpr int device = 46;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  std::vector<gpuguard::device_buffer> kept;
  kept.reserve(4);  // no reallocation: it would put other frames on some of the stacks
  for (int i = 0; i < 3; ++i) { kept.emplace_back(64, gpuguard::stream_view{}, tracked); }
  kept.emplace_back(32, gpuguard::stream_view{}, tracked);  // another line: another site
  gpuguard::configure_ledger(gpuguard::options{});
  std::vector<gpuguard::site_id> sites;
  for (const gpuguard::allocation_record& r : gpuguard::snapshot(true).live) {
    if (r.device == device) { sites.push_back(r.site); }
  }
  ASSERT_EQ(sites.size(), 4U);
  EXPECT_NE(sites[0], gpuguard::no_site);
  EXPECT_EQ(sites[0], sites[1]);
  EXPECT_EQ(sites[1], sites[2]);
  EXPECT_NE(sites[2], sites[3]);
  const std::vector<gpuguard::frame_info> frames = gpuguard::resolve_site(sites[0]);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.front().function.rfind("gpuguard::", 0), std::string::npos)
      << "gpuguard's own frames are dropped: " << frames.front().function;
}

TEST(ledger, sampled_stacks_capture_one_in_n) {
  gpuguard::options opts;
  opts.stacks = gpuguard::stack_mode::sampled;
  opts.stack_sample = 4;
  gpuguard::configure_ledger(opts);
  constexpr int device = 47;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  std::vector<gpuguard::device_buffer> kept;
  kept.reserve(40);
  for (int i = 0; i < 40; ++i) { kept.emplace_back(16, gpuguard::stream_view{}, tracked); }
  gpuguard::configure_ledger(gpuguard::options{});
  int with_stack = 0;
  for (const gpuguard::allocation_record& r : gpuguard::snapshot(true).live) {
    if (r.device == device && r.site != gpuguard::no_site) { ++with_stack; }
  }
  EXPECT_EQ(with_stack, 10);
}

}  // namespace
