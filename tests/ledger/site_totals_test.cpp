// Per-site totals (src/ledger/site_totals.hpp): counted per site, the largest first, cleared for a
// forked child, and bounded: sites past the table's capacity go uncounted.
#include "ledger/site_totals.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace {

using gpuguard::detail::site_totals;

TEST(site_totals, counts_per_site_largest_first) {
  auto totals = std::make_unique<site_totals>();
  EXPECT_TRUE(totals->top(10).empty());
  totals->count(7, 100);
  totals->count(3, 500);
  totals->count(7, 450);
  totals->count(9, 550);
  const auto top = totals->top(10);
  ASSERT_EQ(top.size(), 3U);
  EXPECT_EQ(top[0].site, 7U);
  EXPECT_EQ(top[0].bytes, 550U);
  EXPECT_EQ(top[0].allocations, 2U);
  EXPECT_EQ(top[1].site, 9U) << "equal bytes: the lower site id first";
  EXPECT_EQ(top[2].site, 3U);
  EXPECT_EQ(totals->top(1).size(), 1U);
  EXPECT_TRUE(totals->top(0).empty());
}

TEST(site_totals, clear_keeps_the_sites_and_zeroes_their_totals) {
  auto totals = std::make_unique<site_totals>();
  totals->count(5, 10);
  totals->clear();
  const auto top = totals->top(10);
  ASSERT_EQ(top.size(), 1U);
  EXPECT_EQ(top[0].bytes, 0U);
  EXPECT_EQ(top[0].allocations, 0U);
}

TEST(site_totals, sites_past_the_capacity_go_uncounted) {
  auto totals = std::make_unique<site_totals>();
  for (gpuguard::site_id site = 1; site <= site_totals::capacity + 50; ++site) { totals->count(site, site); }
  EXPECT_EQ(totals->top(site_totals::capacity + 100).size(), site_totals::capacity);
}

}  // namespace
