// Statistics the benchmark programs share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace gpuguard_bench {

/// The value below which a fraction `q` of `values` lies (nearest rank); `values` is sorted here
/// and must not be empty.
inline double quantile(std::vector<double>& values, double q) {
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::lround(q * static_cast<double>(values.size() - 1)));
  return values[rank];
}

/// Times two batches per call, taking turns at which runs first, so that neither always runs on
/// the caches and the clock speed the other left. Returns the two times in the order of the
/// arguments, whichever ran first.
class in_turn {
 public:
  template <class TimeFirst, class TimeSecond>
  std::pair<double, double> operator()(TimeFirst&& time_first, TimeSecond&& time_second) {
    double first = 0;
    double second = 0;
    if (second_goes_first_) {
      second = time_second();
      first = time_first();
    } else {
      first = time_first();
      second = time_second();
    }
    second_goes_first_ = !second_goes_first_;
    return {first, second};
  }

 private:
  bool second_goes_first_ = false;
};

}  // namespace gpuguard_bench
