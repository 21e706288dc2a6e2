// The caching pool's own logic, over host memory (no GPU): its size classes, splitting, merging
// and reuse, the stream rule (through stand-in wait and synchronize calls that count what the
// pool asks of them), giving segments back, statistics, bad input, many threads, destruction with
// blocks still handed out, and what the exit report and a tracking resource under it see.
#include <gpuguard/device_buffer.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/pool_memory_resource.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using gpuguard::pool_memory_resource;
using gpuguard::pool_options;
using gpuguard::stream_view;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

// Streams are handles the pool compares and passes on; over host memory nothing dereferences them.
stream_view fake_stream(std::uintptr_t id) {
  return stream_view{reinterpret_cast<cudaStream_t>(id)};  // NOLINT(performance-no-int-to-ptr)
}

// What the pool asked of the stream calls.
struct stream_calls {
  std::atomic<int> waits{0};
  std::atomic<cudaStream_t> last_waiter{nullptr};
  std::atomic<cudaStream_t> last_freed_on{nullptr};
  std::atomic<int> synchronizations{0};
};
stream_calls& calls() {
  static stream_calls c;
  return c;
}
void counting_wait(stream_view waiter, stream_view freed_on) noexcept {
  calls().last_waiter = waiter.get();
  calls().last_freed_on = freed_on.get();
  ++calls().waits;
}
void counting_synchronize(int /*device*/) noexcept { ++calls().synchronizations; }

pool_options counted(pool_options options = {}) {
  options.wait = counting_wait;
  options.synchronize = counting_synchronize;
  return options;
}

class caching_pool : public testing::Test {
 protected:
  void SetUp() override {
    calls().waits = 0;
    calls().synchronizations = 0;
    calls().last_waiter = nullptr;
    calls().last_freed_on = nullptr;
  }
  gpuguard::host_memory_resource host;
};

TEST(caching_pool_sizes, requests_round_to_512_bytes_and_pick_their_segment_size) {
  EXPECT_EQ(pool_memory_resource::rounded_size(1), 512U);
  EXPECT_EQ(pool_memory_resource::rounded_size(512), 512U);
  EXPECT_EQ(pool_memory_resource::rounded_size(513), 1024U);
  EXPECT_EQ(pool_memory_resource::rounded_size(MiB), MiB);
  EXPECT_EQ(pool_memory_resource::segment_size(512), 2 * MiB) << "small requests share 2 MiB segments";
  EXPECT_EQ(pool_memory_resource::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(pool_memory_resource::segment_size(MiB + 512), 20 * MiB) << "under 10 MiB: 20 MiB segments";
  EXPECT_EQ(pool_memory_resource::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(pool_memory_resource::segment_size(10 * MiB), 10 * MiB) << "from 10 MiB: a segment of its own";
  EXPECT_EQ(pool_memory_resource::segment_size(10 * MiB + 512), 12 * MiB) << "rounded up to 2 MiB";
}

TEST_F(caching_pool, small_requests_are_carved_from_one_2_mib_segment) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  EXPECT_EQ(pool.kind(), gpuguard::memory_kind::host);
  void* a = pool.allocate(1000);
  void* b = pool.allocate(3000);
  EXPECT_EQ(static_cast<char*>(b), static_cast<char*>(a) + 1024) << "the rest of the segment, best fit";
  const gpuguard::pool_statistics s = pool.statistics();
  EXPECT_EQ(s.segments, 1U);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(host.used(), 2 * MiB) << "one upstream allocation";
  EXPECT_EQ(s.allocated_bytes, 1024U + 3072U);
  EXPECT_EQ(s.requested_bytes, 4000U);
  EXPECT_EQ(s.cached_bytes(), 2 * MiB - 4096);
  EXPECT_EQ(s.live_blocks, 2U);
  pool.deallocate(a, 1000);
  pool.deallocate(b, 3000);
  EXPECT_EQ(pool.statistics().allocated_bytes, 0U);
  EXPECT_EQ(pool.statistics().reserved_bytes, 2 * MiB) << "kept as cache";
}

TEST_F(caching_pool, a_freed_block_is_reused_by_its_stream_at_once) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  const stream_view a = fake_stream(0x10);
  void* first = pool.allocate(4 * KiB, a);
  pool.deallocate(first, 4 * KiB, a);
  void* again = pool.allocate(4 * KiB, a);
  EXPECT_EQ(again, first);
  EXPECT_EQ(calls().waits, 0) << "same stream: no wait";
  EXPECT_EQ(calls().synchronizations, 0);
  EXPECT_EQ(pool.statistics().segment_allocations, 1U);
  EXPECT_EQ(pool.statistics().allocations, 2U);
  EXPECT_EQ(pool.statistics().frees, 1U);
  pool.deallocate(again, 4 * KiB, a);
}

TEST_F(caching_pool, another_stream_gets_its_own_segment_not_the_cached_block) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  const stream_view a = fake_stream(0x10);
  const stream_view b = fake_stream(0x20);
  void* on_a = pool.allocate(4 * KiB, a);
  pool.deallocate(on_a, 4 * KiB, a);
  void* on_b = pool.allocate(4 * KiB, b);
  EXPECT_NE(on_b, on_a) << "a block freed on a is not handed to b without a synchronization";
  EXPECT_EQ(pool.statistics().segments, 2U);
  pool.deallocate(on_b, 4 * KiB, b);
}

TEST_F(caching_pool, a_block_freed_on_another_stream_makes_its_own_stream_wait_first) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  const stream_view a = fake_stream(0x10);
  const stream_view b = fake_stream(0x20);
  void* block = pool.allocate(4 * KiB, a);
  pool.deallocate(block, 4 * KiB, b);
  EXPECT_EQ(calls().waits, 1);
  EXPECT_EQ(calls().last_waiter.load(), a.get()) << "the block's own stream waits";
  EXPECT_EQ(calls().last_freed_on.load(), b.get()) << "for the stream that freed it";
  EXPECT_EQ(pool.allocate(4 * KiB, a), block) << "then a reuses it";
  pool.deallocate(block, 4 * KiB, a);
  EXPECT_EQ(calls().waits, 1);
}

TEST_F(caching_pool, neighbours_merge_so_a_whole_segment_can_be_given_back) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  void* a = pool.allocate(KiB);
  void* b = pool.allocate(KiB);
  void* c = pool.allocate(KiB);
  pool.deallocate(a, KiB);
  pool.deallocate(c, KiB);
  EXPECT_EQ(pool.empty(), 0U) << "b still holds the segment";
  EXPECT_EQ(host.used(), 2 * MiB);
  pool.deallocate(b, KiB);
  // Merged again: the whole segment serves a request of nearly its size without a new one.
  void* big = pool.allocate(MiB);
  EXPECT_EQ(big, a);
  EXPECT_EQ(pool.statistics().segments, 1U);
  pool.deallocate(big, MiB);
  EXPECT_EQ(pool.empty(), 2 * MiB);
  EXPECT_EQ(host.used(), 0U) << "given back to the upstream";
  EXPECT_EQ(pool.statistics().reserved_bytes, 0U);
  EXPECT_EQ(pool.statistics().segment_releases, 1U);
  EXPECT_EQ(calls().synchronizations, 1) << "giving back waits for the device first";
}

TEST_F(caching_pool, large_blocks_split_only_when_more_than_1_mib_is_left) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  void* five = pool.allocate(5 * MiB);
  EXPECT_EQ(pool.statistics().reserved_bytes, 20 * MiB);
  EXPECT_EQ(pool.statistics().allocated_bytes, 5 * MiB) << "15 MiB split off";
  void* fourteen = pool.allocate(14 * MiB + 512);
  EXPECT_EQ(static_cast<char*>(fourteen), static_cast<char*>(five) + 5 * MiB);
  EXPECT_EQ(pool.statistics().allocated_bytes, 20 * MiB) << "under 1 MiB left: the whole rest handed out";
  EXPECT_EQ(pool.statistics().requested_bytes, 19 * MiB + 512);
  EXPECT_EQ(pool.statistics().segments, 1U);
  pool.deallocate(fourteen, 14 * MiB + 512);
  pool.deallocate(five, 5 * MiB);
  void* own = pool.allocate(10 * MiB + 1);
  EXPECT_EQ(pool.statistics().segments, 1U) << "best fit: the free 20 MiB block serves it";
  EXPECT_EQ(own, five);
  pool.deallocate(own, 10 * MiB + 1);
}

TEST_F(caching_pool, max_split_bytes_keeps_large_blocks_whole_and_for_large_requests) {
  pool_options options = counted();
  options.max_split_bytes = 4 * MiB;
  pool_memory_resource pool(host, gpuguard::host_device_id, options);
  void* six = pool.allocate(6 * MiB);
  EXPECT_EQ(pool.statistics().allocated_bytes, 20 * MiB) << "at least max_split_bytes: never split";
  pool.deallocate(six, 6 * MiB);
  void* two = pool.allocate(2 * MiB);
  EXPECT_EQ(pool.statistics().segments, 2U) << "the unsplittable 20 MiB block does not serve 2 MiB";
  void* seven = pool.allocate(7 * MiB);  // best fit: the 18 MiB left of the second segment
  EXPECT_EQ(static_cast<char*>(seven), static_cast<char*>(two) + 2 * MiB);
  EXPECT_EQ(pool.statistics().segments, 2U) << "a large request takes a cached block";
  EXPECT_EQ(pool.statistics().allocated_bytes, 20 * MiB) << "not split: 7 MiB is at least max_split_bytes";
  pool.deallocate(two, 2 * MiB);
  pool.deallocate(seven, 7 * MiB);
}

TEST_F(caching_pool, when_the_upstream_runs_out_the_cache_goes_back_and_another_stream_gets_the_memory) {
  gpuguard::host_memory_resource small_host(3 * MiB);
  pool_memory_resource pool(small_host, gpuguard::host_device_id, counted());
  void* on_a = pool.allocate(KiB, fake_stream(0x10));
  pool.deallocate(on_a, KiB, fake_stream(0x10));
  void* on_b = pool.allocate(KiB, fake_stream(0x20));  // a second 2 MiB segment does not fit in 3 MiB
  EXPECT_NE(on_b, nullptr);
  EXPECT_EQ(calls().synchronizations, 1);
  const gpuguard::pool_statistics s = pool.statistics();
  EXPECT_EQ(s.cache_flushes, 1U);
  EXPECT_EQ(s.segments, 1U);
  EXPECT_EQ(s.segment_releases, 1U);
  pool.deallocate(on_b, KiB, fake_stream(0x20));
}

TEST_F(caching_pool, out_of_memory_names_the_pool_and_loses_nothing) {
  gpuguard::host_memory_resource small_host(MiB);
  pool_options options = counted();
  options.name = "test pool";
  pool_memory_resource pool(small_host, gpuguard::host_device_id, options);
  try {
    static_cast<void>(pool.allocate(4 * KiB));
    FAIL() << "a 2 MiB segment cannot come from 1 MiB";
  } catch (const gpuguard::out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test pool: allocate(4096 bytes) on host: the upstream is out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("host_memory_resource"), std::string::npos) << "the upstream's own message: " << what;
  }
  const gpuguard::pool_statistics s = pool.statistics();
  EXPECT_EQ(s.reserved_bytes, 0U);
  EXPECT_EQ(s.allocated_bytes, 0U);
  EXPECT_EQ(s.allocations, 0U);
  EXPECT_EQ(small_host.used(), 0U);
}

TEST_F(caching_pool, bad_sizes_get_clear_errors_and_change_nothing) {
  pool_options options = counted();
  options.name = "test pool";
  options.reserve_limit = 4 * MiB;
  pool_memory_resource pool(host, gpuguard::host_device_id, options);
  EXPECT_EQ(pool.allocate(0), nullptr);
  for (const std::size_t huge : {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() / 2 + 1}) {
    try {
      static_cast<void>(pool.allocate(huge));
      FAIL() << huge;
    } catch (const gpuguard::out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find("test pool: allocate(" + std::to_string(huge) + " bytes) on host: larger than"),
                std::string::npos) << e.what();
    }
  }
  try {
    static_cast<void>(pool.allocate(3 * MiB));  // a 20 MiB segment
    FAIL() << "over the reserve limit";
  } catch (const gpuguard::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("over the pool's reserve limit of 4194304 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.statistics().reserved_bytes, 0U);
  EXPECT_EQ(pool.statistics().allocations, 0U);
  EXPECT_EQ(host.used(), 0U);
  void* fits = pool.allocate(MiB);
  EXPECT_NE(fits, nullptr) << "the pool still works";
  pool.deallocate(fits, MiB);
  EXPECT_THROW(pool_memory_resource(host, gpuguard::host_device_id, pool_options{100}), std::invalid_argument);
}

TEST_F(caching_pool, a_free_of_an_unknown_pointer_is_reported_and_ignored) {
  pool_options options = counted();
  options.name = "test pool";
  pool_memory_resource pool(host, gpuguard::host_device_id, options);
  void* block = pool.allocate(KiB);
  int outside = 0;
  testing::internal::CaptureStderr();
  pool.deallocate(&outside, sizeof outside);
  pool.deallocate(static_cast<char*>(block) + 16, KiB);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("test pool on host: free of"), std::string::npos) << err;
  EXPECT_NE(err.find("which it did not hand out: ignored"), std::string::npos) << err;
  EXPECT_EQ(pool.statistics().unknown_frees, 2U);
  EXPECT_EQ(pool.statistics().live_blocks, 1U) << "the real block is still handed out";
  pool.deallocate(block, KiB);
  EXPECT_EQ(pool.statistics().live_blocks, 0U);
}

TEST_F(caching_pool, trim_gives_back_the_largest_free_segments_until_under_its_mark) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (const std::size_t bytes : {12 * MiB, 16 * MiB, KiB}) { blocks.emplace_back(pool.allocate(bytes), bytes); }
  EXPECT_EQ(pool.statistics().reserved_bytes, 30 * MiB);
  for (const auto& [ptr, bytes] : blocks) { pool.deallocate(ptr, bytes); }
  EXPECT_EQ(pool.trim(20 * MiB), 16 * MiB) << "the 16 MiB segment alone brings it under 20 MiB";
  EXPECT_EQ(pool.statistics().reserved_bytes, 14 * MiB);
  EXPECT_EQ(pool.trim(20 * MiB), 0U) << "already under";
  EXPECT_EQ(pool.empty(), 14 * MiB);
  EXPECT_EQ(host.used(), 0U);
}

TEST_F(caching_pool, peaks_follow_the_most_held_and_reset_to_the_present) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  void* a = pool.allocate(MiB);      // a 2 MiB segment
  void* b = pool.allocate(2 * MiB);  // a 20 MiB one
  pool.deallocate(b, 2 * MiB);
  EXPECT_EQ(pool.empty(), 20 * MiB);
  gpuguard::pool_statistics s = pool.statistics();
  EXPECT_EQ(s.peak_allocated_bytes, 3 * MiB);
  EXPECT_EQ(s.peak_reserved_bytes, 22 * MiB);
  pool.reset_peaks();
  s = pool.statistics();
  EXPECT_EQ(s.peak_allocated_bytes, MiB);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * MiB);
  pool.deallocate(a, MiB);
}

TEST_F(caching_pool, many_threads_get_blocks_no_other_thread_holds) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  constexpr int threads = 8;
  constexpr int rounds = 4000;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&pool, &overlaps, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 1);
      std::uniform_int_distribution<std::size_t> size(1, 3 * MiB);
      // Half the threads share one stream, the others have their own.
      const stream_view stream = fake_stream(t % 2 == 0 ? 0x100 : 0x200 + static_cast<std::uintptr_t>(t));
      std::vector<std::pair<unsigned char*, std::size_t>> held;
      for (int i = 0; i < rounds; ++i) {
        if (held.size() < 6 && (held.empty() || random() % 2 == 0)) {
          const std::size_t bytes = size(random);
          auto* p = static_cast<unsigned char*>(pool.allocate(bytes, stream));
          std::memset(p, t + 1, std::min<std::size_t>(bytes, 4096));
          p[bytes - 1] = static_cast<unsigned char>(t + 1);
          held.emplace_back(p, bytes);
        } else {
          const std::size_t pick = random() % held.size();
          const auto [p, bytes] = held[pick];
          if (p[0] != t + 1 || p[bytes - 1] != t + 1) { ++overlaps; }
          pool.deallocate(p, bytes, stream);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
        }
      }
      for (const auto& [p, bytes] : held) { pool.deallocate(p, bytes, stream); }
    });
  }
  for (std::thread& w : workers) { w.join(); }
  EXPECT_EQ(overlaps, 0) << "no block was handed to two holders at once";
  const gpuguard::pool_statistics s = pool.statistics();
  EXPECT_EQ(s.allocated_bytes, 0U);
  EXPECT_EQ(s.requested_bytes, 0U);
  EXPECT_EQ(s.live_blocks, 0U);
  EXPECT_EQ(s.allocations, s.frees);
  EXPECT_EQ(s.unknown_frees, 0U);
  EXPECT_EQ(pool.empty(), s.reserved_bytes) << "every segment whole again";
  EXPECT_EQ(host.used(), 0U);
}

TEST_F(caching_pool, destruction_with_blocks_handed_out_reports_them_and_leaves_their_memory) {
  void* kept = nullptr;
  testing::internal::CaptureStderr();
  {
    pool_options options = counted();
    options.name = "test pool";
    pool_memory_resource pool(host, gpuguard::host_device_id, options);
    kept = pool.allocate(3000);
    pool.deallocate(pool.allocate(5 * MiB), 5 * MiB);  // a free 20 MiB segment, given back
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("test pool on host destroyed with 1 block(s) (3.0 KiB) still handed out: their 1 segment(s) are "
                     "left to the process"),
            std::string::npos)
      << err;
  EXPECT_EQ(host.used(), 2 * MiB) << "the segment in use was not freed under its user; the free one was";
  std::memset(kept, 1, 3000);  // still usable
  host.deallocate(kept, 2 * MiB);  // the block is the segment's start: the test gives it back
}

TEST_F(caching_pool, guards_allocate_from_it) {
  pool_memory_resource pool(host, gpuguard::host_device_id, counted());
  {
    gpuguard::device_buffer buffer(10000, {}, pool);
    EXPECT_EQ(buffer.size(), 10000U);
    EXPECT_EQ(pool.statistics().requested_bytes, 10000U);
    std::memset(buffer.data(), 7, buffer.size());
  }
  EXPECT_EQ(pool.statistics().live_blocks, 0U);
  EXPECT_EQ(pool.statistics().reserved_bytes, 2 * MiB);
}

TEST_F(caching_pool, a_tracking_resource_under_it_sees_its_segments_as_held_not_leaked) {
  // Under the pool, a tracking resource records its segments, under the pool's name: an exit
  // holder, as PyTorch's cache is. (Track under the pool or over it, not both: the ledger knows
  // each address once, and a segment starts where its first block does.)
  constexpr int device = 41;  // the ledger's figures of this test alone
  gpuguard::tracking_resource segments(host, device);
  pool_options options = counted();
  options.name = "held pool";
  pool_memory_resource pool(segments, gpuguard::host_device_id, options);
  void* live = pool.allocate(5000);
  EXPECT_TRUE(gpuguard::is_exit_holder(gpuguard::intern_tag("held pool")));
  const gpuguard::leak_report report = gpuguard::collect_leaks(0);
  std::size_t held = 0;
  for (const gpuguard::leak_site& site : report.held) {
    if (site.device == device && site.tag == "held pool") { held += site.bytes; }
  }
  EXPECT_EQ(held, 2 * MiB) << "the segment is the pool's, held";
  for (const gpuguard::leak_site& site : report.sites) { EXPECT_NE(site.device, device) << "nothing of it leaked"; }
  pool.deallocate(live, 5000);
  EXPECT_EQ(pool.empty(), 2 * MiB);
  EXPECT_EQ(gpuguard::device_counters(device).current_bytes, 0U);
}

TEST_F(caching_pool, the_exit_report_names_its_cache_apart_from_what_it_hands_out) {
  // Over the pool, a tracking resource records what the pool hands out, which a leak report
  // counts; the pool's reserve is named on a line of its own.
  constexpr int device = 42;
  pool_options options = counted();
  options.name = "report pool";
  pool_memory_resource pool(host, gpuguard::host_device_id, options);
  gpuguard::tracking_resource handed_out(pool, device);
  void* live = handed_out.allocate(5000);
  const gpuguard::leak_report report = gpuguard::collect_leaks(0);
  std::size_t leaked = 0;
  for (const gpuguard::leak_site& site : report.sites) {
    if (site.device == device) { leaked += site.bytes; }
  }
  EXPECT_EQ(leaked, 5000U) << "what the pool handed out, as asked for";
  const auto mine = std::find_if(report.pools.begin(), report.pools.end(),
                                 [](const gpuguard::pool_holding& p) { return p.name == "report pool"; });
  ASSERT_NE(mine, report.pools.end());
  EXPECT_EQ(mine->device, gpuguard::host_device_id);
  EXPECT_EQ(mine->statistics.reserved_bytes, 2 * MiB);
  EXPECT_EQ(mine->statistics.allocated_bytes, 5120U);
  char text[4096] = {};
  std::FILE* out = fmemopen(text, sizeof text - 1, "w");
  ASSERT_NE(out, nullptr);
  gpuguard::write_leak_text(out, report, 5);
  std::fclose(out);
  EXPECT_NE(std::string(text).find("held at exit by report pool: 2.0 MiB reserved in 1 segment on host, 2.0 MiB of it "
                                   "cached and free"),
            std::string::npos)
      << text;
  handed_out.deallocate(live, 5000);
  pool.empty();
  EXPECT_EQ(gpuguard::device_counters(device).current_bytes, 0U);
  const auto after = gpuguard::pool_holdings();
  EXPECT_TRUE(std::none_of(after.begin(), after.end(), [](const gpuguard::pool_holding& p) { return p.name == "report pool"; }))
      << "a pool holding nothing is not listed";
}

}  // namespace
