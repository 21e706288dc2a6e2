// 8 threads, a million alloc/free pairs each by default, random sizes, with a ninth thread taking
// snapshots all the while: every counter must come out exact, and every snapshot consistent
// (its live allocations add up to its device counter). Also built with ThreadSanitizer.
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#if defined(GPUGUARD_LEDGER_INTERNALS)  // built from the core's sources (tsan.ledger_stress)
#include "ledger/ledger_internal.hpp"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <string>
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

// Lets a fixed number of threads wait for each other, again and again (C++17 has no std::barrier).
class round_barrier {
 public:
  explicit round_barrier(int threads) : threads_(threads) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int round = round_;
    if (++waiting_ == threads_) {
      waiting_ = 0;
      ++round_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return round_ != round; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  int threads_;
  int waiting_ = 0;
  int round_ = 0;
};

// The ledger's peaks must be the most bytes live *at once*, not a sum of what each thread (or each
// shard of a counter) held at its own worst. In each round every thread holds random blocks at the
// same time, then all free them: the live bytes of the device and of the tag reach exactly the
// round's sum at the barrier and never more, so the exact peak is the largest round sum, and the
// phase peak after reset_phase_peak() is the largest sum of the later rounds. A peak folded from
// per-thread peaks would give the sum of each thread's own largest holding, which random sizes make
// larger. Between their blocks the threads hammer the same counters with zero-byte allocations, so
// the blocks' adds race with many others.
TEST(ledger_stress, peaks_exact_when_threads_hold_memory_at_once) {
  constexpr int device = 51;
  constexpr int threads = 8;
  constexpr int rounds = 400;
  constexpr int phase_from = rounds / 2;  // reset_phase_peak() before this round
  const std::uint64_t misuse_before = gpuguard::misuse().total();
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  const std::string tag = "ledger_stress.peaks_exact";

  constexpr int churn = 50;  // racing pairs per thread per round
  const auto pair_bytes = [](std::size_t freed) { return std::min<std::size_t>(freed, 4096); };
  // Every thread's holdings of every round, drawn up front so the expected peaks are known.
  std::mt19937_64 random(20261204);
  std::uniform_int_distribution<std::size_t> blocks(0, 3);
  std::uniform_int_distribution<std::size_t> size(1, 1U << 20);
  std::vector<std::vector<std::vector<std::size_t>>> plan(
      threads, std::vector<std::vector<std::size_t>>(rounds));
  std::size_t expected_peak = 0;
  std::size_t expected_phase_peak = 0;
  std::size_t sum_of_thread_peaks = 0;
  std::size_t expected_total = 0;
  std::size_t expected_allocations = 0;
  for (int t = 0; t < threads; ++t) {
    std::size_t thread_peak = 0;
    for (int r = 0; r < rounds; ++r) {
      std::size_t held = 0;
      for (std::size_t b = blocks(random); b > 0; --b) {
        plan[t][r].push_back(size(random));
        held += plan[t][r].back();
      }
      thread_peak = std::max(thread_peak, held);
    }
    sum_of_thread_peaks += thread_peak;
  }
  for (int r = 0; r < rounds; ++r) {
    std::size_t sum = 0;
    for (int t = 0; t < threads; ++t) {
      std::size_t held = 0;
      for (const std::size_t bytes : plan[t][r]) { held += bytes; }
      sum += held;
      expected_allocations += plan[t][r].size() * (1 + churn / 4);
      if (held > 0) {
        expected_allocations += churn;
        expected_total += churn * std::min<std::size_t>(held, 4096);
      }
    }
    expected_total += sum;
    expected_peak = std::max(expected_peak, sum);
    if (r >= phase_from) { expected_phase_peak = std::max(expected_phase_peak, sum); }
  }
  ASSERT_LT(expected_peak, sum_of_thread_peaks) << "the plan cannot tell the two kinds of peak apart";

  round_barrier barrier(threads);
  struct alignas(64) zero_byte_block {
    char byte = 0;
  };
  std::vector<zero_byte_block> zero_byte_blocks(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      GPUGUARD_TAG(tag);
      std::vector<void*> held;
      for (int r = 0; r < rounds; ++r) {
        for (const std::size_t bytes : plan[t][r]) {
          for (int i = 0; i < churn / 4; ++i) {  // a resource returns nullptr for 0 bytes: the ledger itself
            gpuguard::record_allocation({&zero_byte_blocks[t], 0, device, nullptr, gpuguard::memory_kind::host});
            static_cast<void>(gpuguard::record_free(&zero_byte_blocks[t], 0, gpuguard::host_device_id, nullptr));
          }
          held.push_back(tracked.allocate(bytes));
        }
        barrier.arrive_and_wait();  // every block of the round is live now
        std::size_t freed = 0;
        for (std::size_t i = 0; i < held.size(); ++i) {
          tracked.deallocate(held[i], plan[t][r][i]);
          freed += plan[t][r][i];
        }
        held.clear();
        // Pairs no larger than what this thread just gave back cannot raise the live bytes past
        // the round's sum: they race with the other threads' frees and pairs.
        for (int i = 0; freed > 0 && i < churn; ++i) {
          tracked.deallocate(tracked.allocate(pair_bytes(freed)), pair_bytes(freed));
        }
        barrier.arrive_and_wait();  // all freed
        if (r + 1 == phase_from) {
          if (t == 0) { gpuguard::reset_phase_peak(); }
          barrier.arrive_and_wait();
        }
      }
    });
  }
  for (std::thread& w : workers) { w.join(); }

  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.peak_bytes, expected_peak) << "sum of per-thread peaks: " << sum_of_thread_peaks;
  EXPECT_EQ(c.phase_peak_bytes, expected_phase_peak);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.total_bytes, expected_total);
  EXPECT_EQ(c.allocations - c.frees, 0U);
  EXPECT_EQ(c.allocations, expected_allocations);
  EXPECT_EQ(gpuguard::misuse().total(), misuse_before);
  // Past 256 distinct tags (other tests in this program make many) a new name shares "(other)",
  // whose counters hold other tests' memory too: then only the device's figures are judged.
  // tsan.ledger_stress runs these tests on their own, where the tag always has its own counters.
  if (gpuguard::tag_name(gpuguard::intern_tag(tag)) != tag) {
    std::printf("note: the tag table is full; the tag's peaks are not judged in this run\n");
    return;
  }
  bool tag_seen = false;
  for (const auto& [name, figures] : gpuguard::snapshot(false).tags) {
    if (name != tag) { continue; }
    tag_seen = true;
    EXPECT_EQ(figures.peak_bytes, expected_peak);
    EXPECT_EQ(figures.phase_peak_bytes, expected_phase_peak);
    EXPECT_EQ(figures.total_bytes, expected_total);
    EXPECT_EQ(figures.allocations, expected_allocations);
    EXPECT_EQ(figures.current_bytes, 0U);
  }
  EXPECT_TRUE(tag_seen);
}

// A device's live bytes are kept per thread while they have headroom below the peaks, and in one
// shared atomic otherwise (ledger.cpp, "counters"). Threads take turns in a drawn order, so the
// exact live bytes after every step, and the peaks, are known in advance; the ledger's must equal
// them whichever way each step went: within the thread's ceiling, with headroom from the pool,
// by stopping every thread to move ceilings between them, or as a new peak that makes the
// counter shared again. Frees are often of another thread's allocation.
TEST(ledger_stress, peaks_exact_when_threads_take_turns_in_a_drawn_order) {
  constexpr int device = 53;
  constexpr int threads = 4;
  constexpr int steps = 20000;
  constexpr int check_every = 250;
  const std::string tag = "ledger_stress.turns";
  enum class kind { allocate, free, check, reset_phase };
  struct step {
    int thread;
    kind what;
    std::size_t index;  // allocate: the new block; free: the block freed
  };
  // Distinct, never dereferenced addresses: the ledger only keys on them.
  const auto address = [](std::size_t index) {
    return reinterpret_cast<void*>(std::uintptr_t{0x7e0000000000} + index * 64);  // NOLINT(performance-no-int-to-ptr)
  };
  std::mt19937_64 random(20261205);
  std::vector<step> plan;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> live_after;  // the exact live bytes after each check step
  std::vector<std::size_t> live_blocks;
  std::size_t live = 0;
  std::size_t peak = 0;
  std::size_t phase_peak = 0;
  for (int i = 0; i < steps; ++i) {
    const int thread = static_cast<int>(random() % threads);
    if (i == steps / 2) {
      plan.push_back({thread, kind::reset_phase, 0});
      phase_peak = live;
      continue;
    }
    if (i % check_every == 0) {
      plan.push_back({thread, kind::check, live_after.size()});
      live_after.push_back(live);
      continue;
    }
    // Mostly below the peak reached so far, now and then past it: the live block count drifts
    // between a few and a few hundred, and one allocation in fifty is large.
    const std::size_t target = 8 + (static_cast<std::size_t>(i) / 2000 % 4) * 60;
    const bool allocate = live_blocks.empty() || (live_blocks.size() < target ? random() % 8 != 0 : random() % 8 == 0);
    if (allocate) {
      const std::size_t bytes = random() % 50 == 0 ? 65536 + random() % (1U << 20) : 1 + random() % 4096;
      plan.push_back({thread, kind::allocate, sizes.size()});
      live_blocks.push_back(sizes.size());
      sizes.push_back(bytes);
      live += bytes;
    } else {
      const std::size_t pick = random() % live_blocks.size();
      plan.push_back({thread, kind::free, live_blocks[pick]});
      live -= sizes[live_blocks[pick]];
      live_blocks[pick] = live_blocks.back();
      live_blocks.pop_back();
    }
    peak = std::max(peak, live);
    if (i > steps / 2) { phase_peak = std::max(phase_peak, live); }
  }

  const std::uint64_t misuse_before = gpuguard::misuse().total();
  std::mutex turn_mutex;
  std::condition_variable turn_changed;
  std::size_t turn = 0;  // under turn_mutex: the step that may run
  std::vector<std::size_t> seen(live_after.size());
  std::vector<int> seen_local(live_after.size());
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      GPUGUARD_TAG(tag);
      for (std::size_t i = 0; i < plan.size(); ++i) {
        const step& s = plan[i];
        if (s.thread != t) { continue; }
        {
          std::unique_lock<std::mutex> lock(turn_mutex);
          turn_changed.wait(lock, [&] { return turn == i; });
        }
        switch (s.what) {
          case kind::allocate:
            gpuguard::record_allocation({address(s.index), sizes[s.index], device, nullptr, gpuguard::memory_kind::device});
            break;
          case kind::free:
            static_cast<void>(gpuguard::record_free(address(s.index), sizes[s.index], device, nullptr));
            break;
          case kind::check:
            seen[s.index] = gpuguard::device_counters(device).current_bytes;
#if defined(GPUGUARD_LEDGER_INTERNALS)
            seen_local[s.index] = gpuguard::detail::counter_is_local(device) ? 1 : 0;
#endif
            break;
          case kind::reset_phase:
            gpuguard::reset_phase_peak();
            break;
        }
        {
          const std::lock_guard<std::mutex> lock(turn_mutex);
          turn = i + 1;
        }
        turn_changed.notify_all();
      }
    });
  }
  for (std::thread& w : workers) { w.join(); }

  for (std::size_t i = 0; i < live_after.size(); ++i) {
    EXPECT_EQ(seen[i], live_after[i]) << "check " << i;
  }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.peak_bytes, peak);
  EXPECT_EQ(c.phase_peak_bytes, phase_peak);
  EXPECT_EQ(c.current_bytes, live);
  EXPECT_EQ(gpuguard::misuse().total(), misuse_before);
#if defined(GPUGUARD_LEDGER_INTERNALS)
  // The drawn order must have run the device both ways, or the test judged one mode only.
  const auto local_checks = std::count(seen_local.begin(), seen_local.end(), 1);
  EXPECT_GT(local_checks, 0) << "the device never kept its live bytes per thread";
  EXPECT_LT(static_cast<std::size_t>(local_checks), seen_local.size()) << "the device was never shared";
#endif
  if (gpuguard::tag_name(gpuguard::intern_tag(tag)) == tag) {
    for (const auto& [name, figures] : gpuguard::snapshot(false).tags) {
      if (name != tag) { continue; }
      EXPECT_EQ(figures.peak_bytes, peak);
      EXPECT_EQ(figures.current_bytes, live);
    }
  }
  for (const std::size_t index : live_blocks) {
    static_cast<void>(gpuguard::record_free(address(index), sizes[index], device, nullptr));
  }
}

#if defined(GPUGUARD_LEDGER_INTERNALS)
// While the outputs' writer runs it needs the live bytes after every event: holding the counters
// shared makes a local device shared at once, with its live bytes exact, and it stays shared
// until the hold ends.
TEST(ledger_stress, a_hold_keeps_every_counter_shared) {
  constexpr int device = 54;
  const auto address = [](std::size_t index) {
    return reinterpret_cast<void*>(std::uintptr_t{0x7f0000000000} + index * 64);  // NOLINT(performance-no-int-to-ptr)
  };
  GPUGUARD_TAG("ledger_stress.hold");
  const auto churn = [&] {  // more frees than a thread makes between looks at local mode
    for (int round = 0; round < 3000; ++round) {
      static_cast<void>(gpuguard::record_free(address(1), 4096, device, nullptr));
      gpuguard::record_allocation({address(1), 4096, device, nullptr, gpuguard::memory_kind::device});
    }
  };
  // A peak of 64 KiB, then 8 KiB and below: a free with that headroom makes the device local.
  for (std::size_t i = 0; i < 16; ++i) {
    gpuguard::record_allocation({address(i), 4096, device, nullptr, gpuguard::memory_kind::device});
  }
  for (std::size_t i = 2; i < 16; ++i) {
    static_cast<void>(gpuguard::record_free(address(i), 4096, device, nullptr));
  }
  churn();
  ASSERT_TRUE(gpuguard::detail::counter_is_local(device));
  gpuguard::detail::hold_shared_counters(true);
  EXPECT_FALSE(gpuguard::detail::counter_is_local(device));
  EXPECT_EQ(gpuguard::device_counters(device).current_bytes, 8192U);
  churn();
  EXPECT_FALSE(gpuguard::detail::counter_is_local(device));
  gpuguard::detail::hold_shared_counters(false);
  churn();
  EXPECT_TRUE(gpuguard::detail::counter_is_local(device));
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.current_bytes, 8192U);
  EXPECT_EQ(c.peak_bytes, 65536U);
  for (const std::size_t i : {std::size_t{0}, std::size_t{1}}) {
    static_cast<void>(gpuguard::record_free(address(i), 4096, device, nullptr));
  }
}

// Modes change under load: while 4 threads allocate and free (often each other's blocks), a fifth
// holds and releases the counters shared, resets the phase peak, re-arms the alert and reads the
// counters. Nothing may deadlock or race, and every figure must come out exact at the end.
TEST(ledger_stress, modes_change_while_threads_allocate) {
  constexpr int device = 56;
  constexpr int threads = 4;
  constexpr int pairs = 20000;
  const auto address = [](int thread, int index) {
    return reinterpret_cast<void*>(std::uintptr_t{0x7c0000000000} +  // NOLINT(performance-no-int-to-ptr)
                                   static_cast<std::uintptr_t>(thread * pairs + index) * 64);
  };
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread changer([&] {
    std::size_t round = 0;
    bool holding = false;
    while (!done.load()) {
      switch (round++ % 4) {
        case 0:
          gpuguard::detail::hold_shared_counters(true);
          holding = true;
          break;
        case 1:
          gpuguard::detail::hold_shared_counters(false);
          holding = false;
          break;
        case 2: gpuguard::reset_phase_peak(); break;
        default:
          gpuguard::detail::arm_crossing(device, round % 8 == 3 ? static_cast<std::size_t>(-1) : 1U << 20);
          break;
      }
      // Read while others allocate (fields may be from instants apart: the judging is at the end).
      reads.fetch_add(gpuguard::device_counters(device).allocations > 0 ? 1 : 0);
      std::this_thread::yield();
    }
    if (holding) { gpuguard::detail::hold_shared_counters(false); }  // later tests need none
  });
  std::vector<std::size_t> allocated(threads);
  std::vector<std::size_t> most_held(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 7U);
      std::vector<std::pair<void*, std::size_t>> held;
      std::size_t held_bytes = 0;
      for (int i = 0; i < pairs; ++i) {
        const std::size_t bytes = 1 + random() % 8192;
        gpuguard::record_allocation({address(t, i), bytes, device, nullptr, gpuguard::memory_kind::device});
        allocated[t] += bytes;
        held.emplace_back(address(t, i), bytes);
        held_bytes += bytes;
        most_held[t] = std::max(most_held[t], held_bytes);
        if (held.size() > 8 + random() % 24) {
          const std::size_t pick = random() % held.size();
          static_cast<void>(gpuguard::record_free(held[pick].first, held[pick].second, device, nullptr));
          held_bytes -= held[pick].second;
          held[pick] = held.back();
          held.pop_back();
        }
      }
      for (const auto& [ptr, bytes] : held) { static_cast<void>(gpuguard::record_free(ptr, bytes, device, nullptr)); }
    });
  }
  for (std::thread& w : workers) { w.join(); }
  done.store(true);
  changer.join();
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.allocations, static_cast<std::uint64_t>(threads) * pairs);
  EXPECT_EQ(c.frees, c.allocations);
  std::size_t total = 0;
  std::size_t sum_of_most = 0;
  for (int t = 0; t < threads; ++t) {
    total += allocated[t];
    sum_of_most += most_held[t];
  }
  EXPECT_EQ(c.total_bytes, total);
  EXPECT_GE(c.peak_bytes, *std::max_element(most_held.begin(), most_held.end()));
  EXPECT_LE(c.peak_bytes, sum_of_most);
  EXPECT_GT(reads.load(), 0U) << "the changer never read the counters while the workers ran";
  gpuguard::detail::arm_crossing(device, static_cast<std::size_t>(-1));
}

// The device alert is part of the bound a local device keeps under: arming it below what the
// ceilings allow takes headroom away, and the allocation that crosses it is still the one seen,
// with the exact live bytes it left.
TEST(ledger_stress, an_alert_is_seen_crossed_while_the_device_is_local) {
  constexpr int device = 55;
  const auto address = [](std::size_t index) {
    return reinterpret_cast<void*>(std::uintptr_t{0x7d0000000000} + index * 64);  // NOLINT(performance-no-int-to-ptr)
  };
  GPUGUARD_TAG("ledger_stress.alert");
  for (std::size_t i = 0; i < 16; ++i) {  // a peak of 64 KiB
    gpuguard::record_allocation({address(i), 4096, device, nullptr, gpuguard::memory_kind::device});
  }
  for (std::size_t i = 1; i < 16; ++i) {
    static_cast<void>(gpuguard::record_free(address(i), 4096, device, nullptr));
  }
  for (int round = 0; round < 3000; ++round) {  // more frees than a thread makes between looks
    gpuguard::record_allocation({address(1), 1024, device, nullptr, gpuguard::memory_kind::device});
    static_cast<void>(gpuguard::record_free(address(1), 1024, device, nullptr));
  }
  ASSERT_TRUE(gpuguard::detail::counter_is_local(device));
  // 4 KiB live; the alert at 32 KiB leaves room below it for what the thread's ceiling holds.
  gpuguard::detail::arm_crossing(device, 32768);
  EXPECT_TRUE(gpuguard::detail::counter_is_local(device));
  gpuguard::record_allocation({address(1), 16384, device, nullptr, gpuguard::memory_kind::device});  // 20 KiB
  EXPECT_FALSE(gpuguard::detail::take_crossing(device).has_value());
  gpuguard::record_allocation({address(2), 16384, device, nullptr, gpuguard::memory_kind::device});  // 36 KiB
  const std::optional<gpuguard::detail::crossing> crossed = gpuguard::detail::take_crossing(device);
  ASSERT_TRUE(crossed.has_value());
  EXPECT_EQ(crossed->live_bytes, 36864U);
  EXPECT_EQ(gpuguard::device_counters(device).peak_bytes, 65536U);
  gpuguard::detail::arm_crossing(device, static_cast<std::size_t>(-1));
  for (const std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
    static_cast<void>(gpuguard::record_free(address(i), i == 0 ? 4096 : 16384, device, nullptr));
  }
}
#endif

// Counts are kept per thread and summed when read; a thread that ends hands its counts on to the
// next new thread. Many short-lived threads, each freeing what another thread allocated, must
// leave every count exact.
TEST(ledger_stress, counts_exact_across_short_lived_threads) {
  constexpr int device = 52;
  constexpr int generations = 40;
  constexpr int threads = 4;
  constexpr int per_thread = 500;
  gpuguard::host_memory_resource host;
  gpuguard::tracking_resource tracked(host, device);
  std::vector<std::pair<void*, std::size_t>> handed_on;  // allocated by one generation, freed by the next
  std::size_t expected_total = 0;
  std::uint64_t expected_allocations = 0;
  std::size_t peak_seen = 0;
  for (int g = 0; g < generations; ++g) {
    std::vector<std::vector<std::pair<void*, std::size_t>>> made(threads);
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          const std::size_t bytes = 1 + static_cast<std::size_t>((g * 131 + t * 17 + i) % 1000);
          made[t].emplace_back(tracked.allocate(bytes), bytes);
        }
        // Free a share of the previous generation's blocks, which other threads allocated.
        for (std::size_t i = static_cast<std::size_t>(t); i < handed_on.size(); i += threads) {
          tracked.deallocate(handed_on[i].first, handed_on[i].second);
        }
      });
    }
    for (std::thread& w : workers) { w.join(); }
    std::size_t live = 0;
    handed_on.clear();
    for (const auto& list : made) {
      for (const auto& block : list) {
        handed_on.push_back(block);
        expected_total += block.second;
        live += block.second;
        ++expected_allocations;
      }
    }
    peak_seen = std::max(peak_seen, live);
    const gpuguard::counters c = gpuguard::device_counters(device);
    EXPECT_EQ(c.current_bytes, live) << "generation " << g;
    EXPECT_EQ(c.allocations, expected_allocations) << "generation " << g;
    EXPECT_EQ(c.frees, expected_allocations - handed_on.size()) << "generation " << g;
    EXPECT_EQ(c.total_bytes, expected_total) << "generation " << g;
  }
  for (const auto& [ptr, bytes] : handed_on) { tracked.deallocate(ptr, bytes); }
  const gpuguard::counters c = gpuguard::device_counters(device);
  EXPECT_EQ(c.current_bytes, 0U);
  EXPECT_EQ(c.frees, c.allocations);
  EXPECT_GE(c.peak_bytes, peak_seen);
}

}  // namespace
