// The ledger's clock (clock.hpp): the TSC's scale, measured and refined, and the clock's origin.
#include "ledger/clock.hpp"

#include "ledger/ledger_internal.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace gpuguard::detail {

const clock_origin& origin() {
  static const auto* start = new clock_origin();  // lives through exit, like the ledger
  return *start;
}

#if defined(__x86_64__)
namespace {

// A steady_clock reading and the TSC at the same moment: the TSC read on both sides of it, the
// tightest of a few tries (a try that was preempted or slowed is wide), and its middle taken. A
// scale from pairs read one after the other is off by whatever ran between the two reads, which
// under a sanitizer or on a busy machine was a quarter of a percent over the first half
// millisecond.
struct clock_pair {
  std::chrono::steady_clock::time_point time;
  std::uint64_t ticks = 0;
};

clock_pair read_pair() noexcept {
  clock_pair best;
  std::uint64_t narrowest = UINT64_MAX;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::uint64_t before = __rdtsc();
    const auto time = std::chrono::steady_clock::now();
    const std::uint64_t after = __rdtsc();
    if (after >= before && after - before < narrowest) {
      narrowest = after - before;
      best = {time, before + (after - before) / 2};
    }
  }
  return best;
}

}  // namespace
#endif

tsc_clock::tsc_clock() noexcept {
#if defined(__x86_64__)
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  if (__get_cpuid(0x80000007U, &eax, &ebx, &ecx, &edx) == 0 || (edx & (1U << 8)) == 0) { return; }
  const clock_pair base = read_pair();
  base_time = base.time;
  base_ticks = base.ticks;
  clock_pair now;
  do {
    now = read_pair();
  } while (now.time - base_time < std::chrono::microseconds(500));
  if (now.ticks <= base_ticks) { return; }
  ns_per_tick.store(static_cast<double>((now.time - base_time).count()) / static_cast<double>(now.ticks - base_ticks),
                    std::memory_order_relaxed);
  base_since_start_ns = (base_time - origin().steady).count();
  usable = true;
#endif
}

tsc_clock& fast_clock() {
  static auto* clock = new tsc_clock();  // NOLINT(cppcoreguidelines-owning-memory): lives through exit
  return *clock;
}

std::int64_t now_ns() noexcept { return ticks_to_ns(now_ticks()); }

std::int64_t clock_start_unix_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(origin().wall.time_since_epoch()).count();
}

void refine_clock() noexcept {
#if defined(__x86_64__)
  tsc_clock& clock = fast_clock();
  if (!clock.usable) { return; }
  const clock_pair now = read_pair();
  if (now.ticks <= clock.base_ticks) { return; }
  clock.ns_per_tick.store(static_cast<double>((now.time - clock.base_time).count()) /
                              static_cast<double>(now.ticks - clock.base_ticks),
                          std::memory_order_relaxed);
#endif
}

}  // namespace gpuguard::detail
