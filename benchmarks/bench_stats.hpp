// Statistics the benchmark programs share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace gpuguard_bench {

/// The value below which a fraction `q` of `values` lies (nearest rank); `values` is sorted here
/// and must not be empty.
inline double quantile(std::vector<double>& values, double q) {
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::lround(q * static_cast<double>(values.size() - 1)));
  return values[rank];
}

}  // namespace gpuguard_bench
