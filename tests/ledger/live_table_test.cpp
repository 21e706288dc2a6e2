// The ledger's live table (src/ledger/live_table.hpp): a shard finds every record it holds after
// any mix of claims, growth and backward-shift erasures, and its ring of recent frees names the
// newest free of a pointer.
#include "ledger/live_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using gpuguard::allocation_record;
using gpuguard::detail::live_shard;
using gpuguard::detail::live_table;
using gpuguard::detail::pointer_hash;
using gpuguard::detail::recent_free;

const void* address(std::uint64_t n) {
  return reinterpret_cast<const void*>(std::uintptr_t{0x7f0000000000} + n * 256);  // NOLINT(performance-no-int-to-ptr)
}

bool holds(const live_shard& s, const void* ptr) {
  const std::size_t at = s.find(ptr, pointer_hash(ptr));
  return s.slots[at].ptr == ptr;
}

void put(live_shard& s, const void* ptr, std::size_t bytes) {
  const std::uint64_t hash = pointer_hash(ptr);
  const std::size_t at = s.find(ptr, hash);
  ASSERT_EQ(s.slots[at].ptr, nullptr) << "already held";
  allocation_record* record = s.claim(hash, at);
  ASSERT_NE(record, nullptr);
  record->ptr = ptr;
  record->bytes = bytes;
}

class live_shard_sizes : public testing::TestWithParam<std::size_t> {};

// Every record is found after the shard grew to hold them all, and after half of them went in a
// random order, the rest still are and the erased ones are not.
TEST_P(live_shard_sizes, finds_every_record_through_growth_and_erasure) {
  const std::size_t count = GetParam();
  live_shard s;
  for (std::size_t i = 0; i < count; ++i) { put(s, address(i), i + 1); }
  EXPECT_EQ(s.used, count);
  EXPECT_LE(s.used * 2, s.slots.size()) << "the table stays at most half full";
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = s.find(address(i), pointer_hash(address(i)));
    ASSERT_EQ(s.slots[at].ptr, address(i));
    EXPECT_EQ(s.slots[at].bytes, i + 1);
  }
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) { order[i] = i; }
  std::shuffle(order.begin(), order.end(), std::mt19937(12345));
  const std::size_t erased = count / 2;
  for (std::size_t k = 0; k < erased; ++k) {
    const void* ptr = address(order[k]);
    const std::size_t at = s.find(ptr, pointer_hash(ptr));
    ASSERT_EQ(s.slots[at].ptr, ptr);
    s.erase(at);
  }
  EXPECT_EQ(s.used, count - erased);
  for (std::size_t k = 0; k < count; ++k) {
    EXPECT_EQ(holds(s, address(order[k])), k >= erased) << "record " << order[k];
  }
  std::size_t occupied = 0;
  for (const allocation_record& r : s.slots) { occupied += r.ptr != nullptr ? 1 : 0; }
  EXPECT_EQ(occupied, s.used);
}

INSTANTIATE_TEST_SUITE_P(records, live_shard_sizes, testing::Values(0, 1, 7, 100, 5000));

// Records whose probes start at the same slot form one run; erasing its first moves the others
// back, so none is lost behind an empty slot.
TEST(live_shard, backward_shift_keeps_a_colliding_run_findable) {
  live_shard s;
  const unsigned shift = s.shift;
  std::vector<const void*> same_home;
  const std::size_t home = gpuguard::detail::ledger_home_slot_shifted(pointer_hash(address(0)), shift);
  for (std::uint64_t n = 0; same_home.size() < 4 && n < 1000000; ++n) {
    if (gpuguard::detail::ledger_home_slot_shifted(pointer_hash(address(n)), shift) == home) {
      same_home.push_back(address(n));
    }
  }
  ASSERT_EQ(same_home.size(), 4U);
  for (const void* p : same_home) { put(s, p, 64); }
  ASSERT_EQ(s.shift, shift) << "no growth: the run is in the first table";
  const std::size_t first = s.find(same_home[0], pointer_hash(same_home[0]));
  s.erase(first);
  EXPECT_FALSE(holds(s, same_home[0]));
  for (std::size_t i = 1; i < same_home.size(); ++i) { EXPECT_TRUE(holds(s, same_home[i])) << i; }
  EXPECT_EQ(s.slots[first].ptr, same_home[1]) << "the next of the run moved into the hole";
}

// The ring keeps the newest frees; a block freed again and again takes one entry.
TEST(live_shard, remembers_the_newest_frees) {
  live_shard s;
  EXPECT_EQ(s.recent_free_of(address(1)), nullptr);
  for (std::uint64_t n = 1; n <= 3; ++n) { s.remember_free(recent_free{address(n), n, 0, 0, 0}); }
  for (int again = 0; again < 10; ++again) { s.remember_free(recent_free{address(3), 33, 0, 0, 0}); }
  ASSERT_NE(s.recent_free_of(address(1)), nullptr) << "repeated frees of one block kept the older ones";
  EXPECT_EQ(s.recent_free_of(address(3))->bytes, 33U);
  for (std::uint64_t n = 4; n <= 7; ++n) { s.remember_free(recent_free{address(n), n, 0, 0, 0}); }
  EXPECT_EQ(s.recent_free_of(address(1)), nullptr) << "four newer frees push the oldest out";
  EXPECT_NE(s.recent_free_of(address(7)), nullptr);
  s.forget_frees();
  EXPECT_EQ(s.recent_free_of(address(7)), nullptr);
}

TEST(live_table, picks_the_shard_of_the_hash_and_locks_every_shard) {
  auto table = std::make_unique<live_table>();
  const void* ptr = address(42);
  EXPECT_EQ(&table->shard_for(pointer_hash(ptr)), &table->shards[gpuguard::detail::ledger_shard_of(ptr)]);
  table->lock_all();
  for (live_shard& s : table->shards) { EXPECT_FALSE(s.mutex.try_lock()); }
  table->unlock_all();
  for (live_shard& s : table->shards) {
    ASSERT_TRUE(s.mutex.try_lock());
    s.mutex.unlock();
  }
}

}  // namespace
