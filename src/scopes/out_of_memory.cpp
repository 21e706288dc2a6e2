// The out-of-memory report a framework's adapter asks for (tracking.hpp, report_out_of_memory):
// which operation was open, what the device held, and its largest live sites, the caches'
// segments among them.
#include <gpuguard/core/tracking.hpp>

#include <gpuguard/core/op_scope.hpp>

#include "tracking/report_json.hpp"
#include "util/format.hpp"

#include <algorithm>
#include <cstdio>

namespace gpuguard {

void report_out_of_memory(const out_of_memory_info& info) noexcept {
  try {
    const op_result* op = current_op();
    const counters on_device = device_counters(info.device);
    std::fprintf(stderr, "[gpuguard] OUT OF MEMORY: %s could not get %s on device %d (%s free of %s)%s%s%s\n",
                 info.source != nullptr ? info.source : "an allocation",
                 detail::format_bytes(info.requested).c_str(), info.device,
                 detail::format_bytes(info.free_bytes).c_str(), detail::format_bytes(info.total_bytes).c_str(),
                 op != nullptr ? " in operation \"" : "", op != nullptr ? op->name : "", op != nullptr ? "\"" : "");
    std::fprintf(stderr, "[gpuguard] live on device %d: %s in %llu allocations (peak %s); largest sites:\n",
                 info.device, detail::format_bytes(on_device.current_bytes).c_str(),
                 static_cast<unsigned long long>(on_device.live_count()),
                 detail::format_bytes(on_device.peak_bytes).c_str());
    constexpr std::size_t sites_shown = 5;
    leak_report live = collect_leaks(sites_shown);
    // Here a cache's segments count as much as anything else: they are what fills the device.
    if (!live.held.empty()) {
      live.sites.insert(live.sites.end(), live.held.begin(), live.held.end());
      std::stable_sort(live.sites.begin(), live.sites.end(),
                       [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; });
      for (std::size_t i = 0; i < live.sites.size() && i < sites_shown; ++i) {
        if (live.sites[i].frames.empty()) { live.sites[i].frames = resolve_site(live.sites[i].site); }
      }
    }
    live.sites.erase(std::remove_if(live.sites.begin(), live.sites.end(),
                                    [&](const leak_site& s) { return s.device != info.device; }),
                     live.sites.end());
    detail::write_leak_sites(stderr, live, sites_shown);
  } catch (...) {
    std::fputs("[gpuguard] out of memory: the report of what was live could not be made\n", stderr);
  }
}

}  // namespace gpuguard
