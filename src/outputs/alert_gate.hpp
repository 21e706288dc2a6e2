// Hysteresis for one alert key (a device, an operation name): it fires when the value reaches the
// threshold, then stays quiet until the value has fallen below the re-arm level, so a value that
// hovers at the line gives one alert, not a storm. Crossings it held back are counted and reported
// with the next alert. Header-only and free of state beyond its members, so it is tested directly.
#pragma once

#include <cstdint>

namespace gpuguard::detail {

class alert_gate {
 public:
  enum class change { none, fired, rearmed };

  /// Feeds one observation. `rearm_below` should be below `threshold`.
  change update(double value, double threshold, double rearm_below) noexcept {
    const bool above = value >= threshold;
    change result = change::none;
    if (armed_) {
      if (above) {
        armed_ = false;
        result = change::fired;
      }
    } else if (value < rearm_below) {
      armed_ = true;
      result = change::rearmed;
    } else if (above && !above_) {
      ++held_back_;  // crossed the line again while disarmed: an alert storm would have fired here
    }
    above_ = above;
    return result;
  }

  /// Crossings held back since the last call; starts counting anew.
  std::uint64_t take_held_back() noexcept {
    const std::uint64_t n = held_back_;
    held_back_ = 0;
    return n;
  }

  [[nodiscard]] bool armed() const noexcept { return armed_; }

 private:
  bool armed_ = true;
  bool above_ = false;
  std::uint64_t held_back_ = 0;
};

}  // namespace gpuguard::detail
