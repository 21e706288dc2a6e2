// 8 threads, a million alloc/free pairs each by default, random sizes, with a ninth thread taking
// snapshots all the while: every counter must come out exact, and every snapshot consistent
// (its live allocations add up to its device counter). Also built with ThreadSanitizer.
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/ledger.hpp>
#include <gpuguard/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

std::size_t pairs_per_thread() {
  const char* text = std::getenv("GPUGUARD_STRESS_PAIRS");
  return text != nullptr ? static_cast<std::size_t>(std::strtoull(text, nullptr, 10)) : 1000000;
}

struct thread_result {
  std::size_t total_bytes = 0;
  std::size_t max_live_bytes = 0;
};

TEST(ledger_stress, counters_exact_and_snapshots_consistent_under_8_threads) {
  constexpr int device = 50;
  constexpr int threads = 8;
  constexpr std::size_t window = 16;  // live allocations per thread at most
  const std::size_t pairs = pairs_per_thread();
  const std::uint64_t misuse_before = gpuguard::misuse().total();
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  std::vector<thread_result> results(threads);
  std::atomic<bool> done{false};
  std::atomic<int> inconsistent{0};
  std::atomic<int> snapshots{0};

  std::thread watcher([&] {
    while (!done.load()) {
      const gpuguard::ledger_snapshot snap = gpuguard::snapshot(true);
      std::size_t live = 0;
      for (const gpuguard::allocation_record& r : snap.live) {
        if (r.device == device) { live += r.bytes; }
      }
      std::size_t counted = 0;
      for (const auto& [d, c] : snap.devices) {
        if (d == device) { counted = c.current_bytes; }
      }
      if (live != counted) { inconsistent.fetch_add(1); }
      snapshots.fetch_add(1);
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 random(static_cast<std::uint64_t>(t) * 7919 + 1);
      std::uniform_int_distribution<std::size_t> size(1, 4096);
      std::vector<std::pair<void*, std::size_t>> live;
      live.reserve(window);
      thread_result& result = results[static_cast<std::size_t>(t)];
      std::size_t live_bytes = 0;
      for (std::size_t i = 0; i < pairs; ++i) {
        if (live.size() == window) {
          const std::size_t victim = random() % live.size();
          tracked.deallocate(live[victim].first, live[victim].second);
          live_bytes -= live[victim].second;
          live[victim] = live.back();
          live.pop_back();
        }
        const std::size_t bytes = size(random);
        live.emplace_back(tracked.allocate(bytes), bytes);
        live_bytes += bytes;
        result.total_bytes += bytes;
        result.max_live_bytes = std::max(result.max_live_bytes, live_bytes);
      }
      for (const auto& [ptr, bytes] : live) { tracked.deallocate(ptr, bytes); }
    });
  }
  for (std::thread& w : workers) { w.join(); }
  done.store(true);
  watcher.join();

  std::size_t total = 0;
  std::size_t max_single = 0;
  std::size_t sum_of_max = 0;
  for (const thread_result& r : results) {
    total += r.total_bytes;
    max_single = std::max(max_single, r.max_live_bytes);
    sum_of_max += r.max_live_bytes;
  }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.allocations, threads * pairs);
  EXPECT_EQ(c.frees, threads * pairs);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.total_bytes, total);
  EXPECT_GE(c.peak_bytes, max_single);
  EXPECT_LE(c.peak_bytes, sum_of_max);
  EXPECT_EQ(host.used(), 0U);
  EXPECT_EQ(gpuguard::misuse().total(), misuse_before);
  EXPECT_EQ(inconsistent.load(), 0) << "of " << snapshots.load() << " snapshots";
  EXPECT_GT(snapshots.load(), 0);
}

}  // namespace
