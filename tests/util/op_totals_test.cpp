// util/op_totals (the per-operation totals the Prometheus sink and `gpuguard report` share), its
// saturating sums, and util/json_text's array writer.
#include "util/json_text.hpp"
#include "util/op_totals.hpp"
#include "util/saturating.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using gpuguard::detail::op_totals;

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

TEST(op_totals, sums_counts_and_keeps_the_largest_and_the_latest) {
  op_totals t;
  t.add(100, 4096, 1024, 3000, 3072, false);
  t.add(50, 512, 2048, 9000, -1536, true);
  t.add(300, 0, 0, 0, 0, false);
  EXPECT_EQ(t.calls, 3);
  EXPECT_EQ(t.duration_ns, 450);
  EXPECT_EQ(t.max_duration_ns, 300);
  EXPECT_EQ(t.alloc_bytes, 4608);
  EXPECT_EQ(t.free_bytes, 3072);
  EXPECT_EQ(t.max_peak_bytes, 9000);
  EXPECT_EQ(t.net_bytes, 1536);
  EXPECT_EQ(t.last_net_bytes, 0);
  EXPECT_EQ(t.exceptions, 1);
}

TEST(op_totals, sums_stop_at_the_ends_of_int64_instead_of_overflowing) {
  op_totals t;
  t.add(int64_max - 1, int64_max, 0, int64_max, int64_min + 1, false);
  t.add(5, 7, 0, 1, -9, false);
  EXPECT_EQ(t.duration_ns, int64_max);
  EXPECT_EQ(t.alloc_bytes, int64_max);
  EXPECT_EQ(t.max_peak_bytes, int64_max);
  EXPECT_EQ(t.net_bytes, int64_min);
  EXPECT_EQ(t.last_net_bytes, -9);
}

TEST(saturating, adds_within_range_and_clamps_past_either_end) {
  using gpuguard::detail::add_saturated;
  EXPECT_EQ(add_saturated(2, 3), 5);
  EXPECT_EQ(add_saturated(-2, 3), 1);
  EXPECT_EQ(add_saturated(int64_max, 1), int64_max);
  EXPECT_EQ(add_saturated(int64_min, -1), int64_min);
  EXPECT_EQ(add_saturated(int64_max, int64_min), -1);
  using gpuguard::detail::to_int64_saturated;
  EXPECT_EQ(to_int64_saturated(42U), 42);
  EXPECT_EQ(to_int64_saturated(static_cast<std::uint64_t>(int64_max)), int64_max);
  EXPECT_EQ(to_int64_saturated(std::numeric_limits<std::uint64_t>::max()), int64_max);
}

TEST(json_text, append_array_writes_commas_between_items_only) {
  const auto number = [](std::string& out, int value) { gpuguard::detail::append_int(out, value); };
  std::string out;
  gpuguard::detail::append_array(out, std::vector<int>{}, number);
  EXPECT_EQ(out, "[]");
  out.clear();
  gpuguard::detail::append_array(out, std::vector<int>{7}, number);
  EXPECT_EQ(out, "[7]");
  out.clear();
  gpuguard::detail::append_array(out, std::vector<int>{1, -2, 3}, number);
  EXPECT_EQ(out, "[1,-2,3]");
  out.clear();
  gpuguard::detail::append_uint_array(out, std::vector<std::uint64_t>{0, 18446744073709551615ULL});
  EXPECT_EQ(out, "[0,18446744073709551615]");
}

}  // namespace
