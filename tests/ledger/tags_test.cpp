// The ledger's tag table (src/ledger/tags.hpp): one id per name, names cut at their longest, and
// an "(other)" id once the table is full.
#include "ledger/tags.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace {

using gpuguard::tag_id;
using gpuguard::detail::tag_table;

TEST(tag_table, one_id_per_name_and_empty_is_untagged) {
  tag_table table;
  EXPECT_EQ(table.intern(""), gpuguard::untagged);
  const tag_id a = table.intern("forward");
  const tag_id b = table.intern("backward");
  EXPECT_NE(a, gpuguard::untagged);
  EXPECT_NE(a, b);
  EXPECT_EQ(table.intern("forward"), a);
  EXPECT_EQ(table.name(a), "forward");
  EXPECT_EQ(table.name(gpuguard::untagged), "");
  EXPECT_EQ(table.name(static_cast<tag_id>(gpuguard::max_tags - 1)), "") << "an id never handed out";
  EXPECT_EQ(table.name(static_cast<tag_id>(gpuguard::max_tags + 5)), "") << "an id out of range";
}

TEST(tag_table, names_are_cut_at_the_longest_kept) {
  tag_table table;
  const std::string base(gpuguard::detail::max_tag_length, 'x');
  const tag_id a = table.intern(base + "-first");
  const tag_id b = table.intern(base + "-second");
  EXPECT_EQ(a, b) << "names equal in their first 63 bytes are one tag";
  EXPECT_EQ(table.name(a), base);
}

TEST(tag_table, past_the_last_id_every_new_name_is_other) {
  tag_table table;
  std::set<tag_id> ids;
  for (int i = 0; i < gpuguard::max_tags + 10; ++i) { ids.insert(table.intern("tag" + std::to_string(i))); }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(gpuguard::max_tags - 1)) << "every id but untagged, (other) among them";
  const tag_id other = table.intern("one more");
  EXPECT_EQ(table.name(other), "(other)");
  EXPECT_EQ(table.intern("tag0"), *ids.begin()) << "names interned before still have their ids";
}

}  // namespace
