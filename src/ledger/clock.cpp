// The ledger's clock (clock.hpp): the TSC's scale, measured and refined, and the clock's origin.
#include "ledger/clock.hpp"

#include "ledger/ledger_internal.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gpuguard::detail {

const clock_origin& origin() {
  static const auto* start = new clock_origin();  // lives through exit, like the ledger
  return *start;
}

tsc_clock::tsc_clock() noexcept {
#if defined(__x86_64__)
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  if (__get_cpuid(0x80000007U, &eax, &ebx, &ecx, &edx) == 0 || (edx & (1U << 8)) == 0) { return; }
  base_time = std::chrono::steady_clock::now();
  base_ticks = __rdtsc();
  std::chrono::steady_clock::time_point now;
  std::uint64_t ticks = 0;
  do {
    now = std::chrono::steady_clock::now();
    ticks = __rdtsc();
  } while (now - base_time < std::chrono::microseconds(500));
  if (ticks <= base_ticks) { return; }
  ns_per_tick.store(static_cast<double>((now - base_time).count()) / static_cast<double>(ticks - base_ticks),
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
std::int64_t clock_ticks_to_ns(std::int64_t ticks) noexcept { return ticks_to_ns(ticks); }

std::int64_t clock_start_unix_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(origin().wall.time_since_epoch()).count();
}

void refine_clock() noexcept {
#if defined(__x86_64__)
  tsc_clock& clock = fast_clock();
  if (!clock.usable) { return; }
  const auto now = std::chrono::steady_clock::now();
  const std::uint64_t ticks = __rdtsc();
  if (ticks <= clock.base_ticks) { return; }
  clock.ns_per_tick.store(static_cast<double>((now - clock.base_time).count()) /
                              static_cast<double>(ticks - clock.base_ticks),
                          std::memory_order_relaxed);
#endif
}

const char* clock_name() noexcept { return fast_clock().usable ? "tsc" : "steady_clock"; }

}  // namespace gpuguard::detail
