// Per-site totals (site_totals.hpp).
#include "ledger/site_totals.hpp"

#include <algorithm>

namespace gpuguard::detail {

void site_totals::count(site_id site, std::size_t bytes) noexcept {
  std::size_t i = (std::size_t{site} * 0x9E3779B1U) & (capacity - 1);
  for (std::size_t probe = 0; probe < capacity; ++probe, i = (i + 1) & (capacity - 1)) {
    slot& s = slots_[i];
    site_id seen = s.site.load(std::memory_order_acquire);
    if (seen == no_site && s.site.compare_exchange_strong(seen, site, std::memory_order_acq_rel)) {
      seen = site;  // claimed; on failure `seen` is the site that claimed it first
    }
    if (seen != site) { continue; }
    s.allocations.fetch_add(1, std::memory_order_relaxed);
    s.bytes.fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
}

std::vector<site_total> site_totals::top(std::size_t count) const {
  std::vector<site_total> all;
  for (const slot& s : slots_) {
    const site_id site = s.site.load(std::memory_order_acquire);
    if (site == no_site) { continue; }
    all.push_back({site, s.allocations.load(std::memory_order_relaxed), s.bytes.load(std::memory_order_relaxed)});
  }
  std::sort(all.begin(), all.end(), [](const site_total& a, const site_total& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (all.size() > count) { all.resize(count); }
  return all;
}

void site_totals::clear() noexcept {
  for (slot& s : slots_) {
    s.allocations.store(0, std::memory_order_relaxed);
    s.bytes.store(0, std::memory_order_relaxed);
  }
}

}  // namespace gpuguard::detail
