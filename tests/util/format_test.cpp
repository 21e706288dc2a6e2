// util/format: the sizes and durations every report, summary and table prints.
#include "util/format.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

namespace {

using gpuguard::detail::duration_precision;
using gpuguard::detail::format_bytes;
using gpuguard::detail::format_duration;
using gpuguard::detail::format_signed_bytes;

constexpr std::int64_t second = 1000000000;

class format_bytes_of : public ::testing::TestWithParam<std::tuple<std::size_t, const char*>> {};

TEST_P(format_bytes_of, spells_the_size_in_its_largest_binary_unit) {
  const auto& [bytes, text] = GetParam();
  EXPECT_EQ(format_bytes(bytes), text);
}

INSTANTIATE_TEST_SUITE_P(sizes, format_bytes_of,
                         ::testing::Values(std::make_tuple(std::size_t{0}, "0 B"), std::make_tuple(std::size_t{512}, "512 B"),
                                           std::make_tuple(std::size_t{1023}, "1023 B"),
                                           std::make_tuple(std::size_t{1024}, "1.0 KiB"),
                                           std::make_tuple(std::size_t{1536}, "1.5 KiB"),
                                           std::make_tuple(std::size_t{768} << 20, "768.0 MiB"),
                                           std::make_tuple(std::size_t{2} << 30, "2.00 GiB"),
                                           std::make_tuple(std::size_t{3} << 40, "3.00 TiB")));

TEST(format_signed_bytes, puts_the_sign_in_front_even_of_zero_and_of_the_most_negative_size) {
  EXPECT_EQ(format_signed_bytes(0), "+0 B");
  EXPECT_EQ(format_signed_bytes(512LL << 20), "+512.0 MiB");
  EXPECT_EQ(format_signed_bytes(-256), "-256 B");
  EXPECT_EQ(format_signed_bytes(std::numeric_limits<std::int64_t>::min()), "-8192.00 PiB");
}

class fine_duration_of : public ::testing::TestWithParam<std::tuple<std::int64_t, const char*>> {};

TEST_P(fine_duration_of, keeps_a_decimal_or_two_in_the_largest_unit) {
  const auto& [ns, text] = GetParam();
  EXPECT_EQ(format_duration(ns), text);
  EXPECT_EQ(format_duration(ns, duration_precision::fine), text);
}

INSTANTIATE_TEST_SUITE_P(durations, fine_duration_of,
                         ::testing::Values(std::make_tuple(std::int64_t{0}, "0 ns"), std::make_tuple(std::int64_t{850}, "850 ns"),
                                           std::make_tuple(std::int64_t{12345}, "12.3 us"),
                                           std::make_tuple(std::int64_t{12400000}, "12.4 ms"),
                                           std::make_tuple(std::int64_t{1234000000}, "1.23 s"),
                                           std::make_tuple(std::int64_t{90} * second, "90.00 s")));

class coarse_duration_of : public ::testing::TestWithParam<std::tuple<std::int64_t, const char*>> {};

TEST_P(coarse_duration_of, gives_whole_units_rounded_down_switching_at_two_of_the_next) {
  const auto& [ns, text] = GetParam();
  EXPECT_EQ(format_duration(ns, duration_precision::coarse), text);
}

INSTANTIATE_TEST_SUITE_P(
    ages, coarse_duration_of,
    ::testing::Values(std::make_tuple(std::int64_t{0}, "0s"), std::make_tuple(second - 1, "0s"),
                      std::make_tuple(std::int64_t{45} * second, "45s"),
                      std::make_tuple(std::int64_t{119} * second + second / 2, "119s"),
                      std::make_tuple(std::int64_t{120} * second, "2m"),
                      std::make_tuple(std::int64_t{7199} * second, "119m"),
                      std::make_tuple(std::int64_t{7200} * second, "2h"),
                      std::make_tuple(std::int64_t{172799} * second, "47h"),
                      std::make_tuple(std::int64_t{172800} * second, "2d"),
                      std::make_tuple(std::int64_t{400} * 86400 * second, "400d"),
                      std::make_tuple(std::int64_t{-5} * second, "-5s"),
                      std::make_tuple(std::int64_t{-3} * 3600 * second, "-3h"),
                      std::make_tuple(std::numeric_limits<std::int64_t>::max(), "106751d"),
                      std::make_tuple(std::numeric_limits<std::int64_t>::min(), "-106751d")));

}  // namespace
