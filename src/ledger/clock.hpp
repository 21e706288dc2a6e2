// The ledger's clock: nanoseconds since the clock started (steady), cheap to read where it matters.
// Operation scopes read it twice, and the ledger once per event while the outputs' timeline is on
// (the live table keeps the coarse clock below), and where the kernel's clock source is a
// paravirtual one (kvm-clock on a VM) a steady_clock read is a slow path through the kernel. On
// x86-64 with an invariant TSC the clock reads the TSC instead and scales it to nanoseconds:
// the scale is first measured against steady_clock over half a millisecond, then refined by the
// outputs' writer (detail::refine_clock) as the interval between the two clocks' readings grows,
// so the error shrinks as the run goes on. Elsewhere it is steady_clock. Internal to libgpuguard.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gpuguard::detail {

/// When the clock started: its zero, in steady and in wall time, taken together.
struct clock_origin {
  std::chrono::steady_clock::time_point steady = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point wall = std::chrono::system_clock::now();
};
const clock_origin& origin();

struct tsc_clock {
  bool usable = false;
  std::uint64_t base_ticks = 0;
  std::chrono::steady_clock::time_point base_time;
  std::int64_t base_since_start_ns = 0;  // base_time - the origin, fixed at construction
  std::atomic<double> ns_per_tick{0.0};

  tsc_clock() noexcept;
};

/// The process's one TSC clock, measured on first use; lives through exit, like the ledger.
tsc_clock& fast_clock();

/// The clock's raw reading: TSC ticks where the TSC is used, else steady_clock nanoseconds since
/// the origin. The live table keeps raw readings (the conversion's multiply is left to the
/// snapshot, which also converts with the scale refined since).
__attribute__((always_inline)) inline std::int64_t now_ticks() noexcept {
  static tsc_clock& clock = fast_clock();
#if defined(__x86_64__)
  if (clock.usable) { return static_cast<std::int64_t>(__rdtsc()); }
#endif
  return (std::chrono::steady_clock::now() - origin().steady).count();
}

/// The kernel's coarse monotonic clock, in nanoseconds on steady_clock's scale and from its epoch
/// (CLOCK_MONOTONIC): the time of the kernel's last tick, so it runs behind by about one tick
/// (clock_getres(CLOCK_MONOTONIC_COARSE), a few milliseconds; a tickless kernel may lag a little
/// more). Read from the vDSO's data without touching the clock source, which a TSC read right
/// after a driver call must wait for (benchmarks/ledger_cost_parts.sh, no_clock, measures it).
/// The live table's allocation times.
inline std::int64_t coarse_monotonic_ns() noexcept {
#if defined(CLOCK_MONOTONIC_COARSE)
  timespec now{};
  if (::clock_gettime(CLOCK_MONOTONIC_COARSE, &now) == 0) {
    return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  }
#endif
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A coarse_monotonic_ns() reading in nanoseconds since the origin (0 for one taken before it:
/// the coarse clock lags the origin's precise reading by up to a tick).
inline std::int64_t coarse_to_ns(std::int64_t coarse) noexcept {
  const std::int64_t since = coarse - std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          origin().steady.time_since_epoch()).count();
  return since < 0 ? 0 : since;
}

/// A raw reading in nanoseconds since the origin.
__attribute__((always_inline)) inline std::int64_t ticks_to_ns(std::int64_t ticks) noexcept {
  static tsc_clock& clock = fast_clock();
#if defined(__x86_64__)
  if (clock.usable) {
    // No call in here: a call between the multiply's operands made the compiler spill them.
    const auto since_base = static_cast<double>(static_cast<std::uint64_t>(ticks) - clock.base_ticks) *
                            clock.ns_per_tick.load(std::memory_order_relaxed);
    return static_cast<std::int64_t>(since_base) + clock.base_since_start_ns;
  }
#endif
  return ticks;
}

/// The time between two raw readings (their difference), in nanoseconds.
__attribute__((always_inline)) inline std::int64_t ticks_to_duration_ns(std::int64_t ticks) noexcept {
  static tsc_clock& clock = fast_clock();
#if defined(__x86_64__)
  if (clock.usable) {
    return static_cast<std::int64_t>(static_cast<double>(ticks) * clock.ns_per_tick.load(std::memory_order_relaxed));
  }
#endif
  return ticks;
}

}  // namespace gpuguard::detail
