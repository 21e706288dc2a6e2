// Sums that stop at the ends of std::int64_t instead of overflowing (undefined behaviour): figures
// read from a file that may be hostile (a log given to `gpuguard report`), and unsigned figures
// kept as signed ones. Internal to gpuguard.
#pragma once

#include <cstdint>
#include <limits>

namespace gpuguard::detail {

/// a + b, or the nearest end of std::int64_t where the sum lies past it.
constexpr std::int64_t add_saturated(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  if (b > 0 && a > max - b) { return max; }
  if (b < 0 && a < min - b) { return min; }
  return a + b;
}

/// `value` as std::int64_t, or its largest value where `value` is above it.
constexpr std::int64_t to_int64_saturated(std::uint64_t value) noexcept {
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return value > max ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(value);
}

}  // namespace gpuguard::detail
