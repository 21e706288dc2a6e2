// What the rest of the core reads of the ledger beyond its public header (ledger_internal.hpp):
// the alert's crossings and the writer's interval peaks, per-site totals, a device's counters
// without stopping anyone, and the crash handler's scan of the live table.
#include "ledger/ledger_internal.hpp"

#include "ledger/ledger_state.hpp"

#include <optional>
#include <vector>

namespace gpuguard::detail {

counters device_counters_unstopped(int device) noexcept {
  return read_counters(ledger().device_ref(device_slot_of(device)));
}

void hold_shared_counters(bool hold) noexcept {
  ledger_state& st = ledger();
  if (!hold) {
    st.shared_holds.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  st.shared_holds.fetch_add(1, std::memory_order_relaxed);
  const all_shards stopped;
  st.share_every_counter(&live_counter::interval_peak);  // interval peaks count from here
}

bool counter_is_local(int device) noexcept { return ledger().device_ref(device_slot_of(device)).local(); }

void arm_crossing(int device, std::size_t bytes) noexcept {
  const counter_ref r = ledger().device_ref(device_slot_of(device));
  if (r.counter.alert_at.load(std::memory_order_relaxed) == bytes) { return; }
  // The alert is part of the bound a local counter keeps under: it changes with every thread
  // stopped.
  const all_shards stopped;
  arm_alert(r, bytes);
}

std::optional<crossing> take_crossing(int device) noexcept {
  live_counter& c = ledger().devices[device_slot_of(device)];
  if (c.crossing_state.load(std::memory_order_acquire) != 2) { return std::nullopt; }
  const crossing seen{c.crossed_bytes, c.crossed_ns};
  c.crossing_state.store(0, std::memory_order_release);
  return seen;
}

std::size_t take_interval_peak(int device) noexcept {
  const counter_ref r = ledger().device_ref(device_slot_of(device));
  // Start the next interval at the live bytes of now; an allocation racing with this raises it.
  // While the device is local the interval peak is not raised (only an output that holds the
  // counters shared writes it): it is then the most of the live bytes at the samples.
  const std::size_t now = r.local() ? device_counters(device).current_bytes
                                    : r.counter.current.load(std::memory_order_relaxed);
  return r.counter.interval_peak.exchange(now, std::memory_order_relaxed);
}

std::vector<site_total> top_sites(std::size_t count) { return ledger().sites.top(count); }

std::size_t crash_scan(crash_site* sites, std::size_t capacity, bool& complete) noexcept {
  complete = true;
  std::size_t used = 0;
  const ledger_state& st = ledger();
  for (live_shard& s : ledger().table.shards) {
    if (!s.mutex.try_lock()) {
      complete = false;
      continue;
    }
    for (const allocation_record& record : s.slots) {
      if (record.ptr == nullptr || st.inherited(record)) { continue; }
      std::size_t i = 0;
      while (i < used && (sites[i].site != record.site || sites[i].device != record.device)) { ++i; }
      if (i == used) {
        if (used == capacity) {
          complete = false;
          continue;
        }
        sites[used++] = crash_site{record.site, record.device, 0, 0};
      }
      sites[i].bytes += record.bytes;
      ++sites[i].count;
    }
    s.mutex.unlock();
  }
  return used;
}

}  // namespace gpuguard::detail
