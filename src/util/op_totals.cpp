#include "util/op_totals.hpp"

#include "util/saturating.hpp"

#include <algorithm>

namespace gpuguard::detail {

void op_totals::add(std::int64_t duration, std::int64_t allocated, std::int64_t freed, std::int64_t peak,
                    std::int64_t net, bool exception) noexcept {
  calls = add_saturated(calls, 1);
  duration_ns = add_saturated(duration_ns, duration);
  max_duration_ns = std::max(max_duration_ns, duration);
  alloc_bytes = add_saturated(alloc_bytes, allocated);
  free_bytes = add_saturated(free_bytes, freed);
  max_peak_bytes = std::max(max_peak_bytes, peak);
  net_bytes = add_saturated(net_bytes, net);
  last_net_bytes = net;
  if (exception) { exceptions = add_saturated(exceptions, 1); }
}

}  // namespace gpuguard::detail
