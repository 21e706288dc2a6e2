/**
 * @file test_window.hpp
 * @brief What one test did to the ledger, for a test framework's plugin: the GoogleTest listener
 *        (testing.hpp) and the pytest plugin (the Python package) judge a test through it.
 *        Header-only over the compiled core, with no test framework in it.
 *
 * What a test leaked: the ledger's live allocations at the test's end that were not live at its
 * start, told apart by their sequence numbers (unique per allocation, ledger.hpp) and pointers,
 * so memory made before the test and still held never counts. Allocations under an exit holder's
 * tag (a framework's cache, declare_exit_holder) are apart: never leaked.
 *
 * A test's peak on a device: the most that device's live bytes rose above what was live there
 * when the test started (the ledger's phase peak, which start() starts again).
 */
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace gpuguard::testing {

/// One device's rise during a test.
struct device_rise {
  int device = host_device_id;
  std::size_t at_start = 0;  ///< live bytes at the test's start
  std::size_t peak = 0;      ///< the phase peak: the most live bytes since the start
  [[nodiscard]] std::size_t rise() const noexcept { return peak > at_start ? peak - at_start : 0; }
};

/// The allocations a test left live, apart by whether an exit holder keeps them.
struct left_live {
  std::vector<allocation_record> leaked;  ///< not under an exit holder's tag
  std::vector<allocation_record> held;    ///< under one (a framework's cache): never leaked
};

/// A test's start, and what the ledger says of the test since then. One test at a time: start()
/// begins a new phase of the process's ledger.
class test_window {
 public:
  /// Notes what is live and each device's live bytes, and starts the phase peak.
  void start() {
    live_at_start_.clear();
    current_at_start_.clear();
    reset_phase_peak();
    const ledger_snapshot snap = snapshot(true);
    live_at_start_.reserve(snap.live.size());
    for (const allocation_record& record : snap.live) { live_at_start_.emplace_back(record.sequence, record.ptr); }
    std::sort(live_at_start_.begin(), live_at_start_.end());
    for (const auto& [device, c] : snap.devices) { current_at_start_.emplace_back(device, c.current_bytes); }
  }

  /// Each device of `snap` (a snapshot taken at the test's end), with its rise since the start.
  [[nodiscard]] std::vector<device_rise> rises(const ledger_snapshot& snap) const {
    std::vector<device_rise> out;
    for (const auto& [device, c] : snap.devices) {
      device_rise r;
      r.device = device;
      r.peak = c.phase_peak_bytes;
      for (const auto& [d, bytes] : current_at_start_) {
        if (d == device) { r.at_start = bytes; }
      }
      out.push_back(r);
    }
    return out;
  }

  /// The allocations live in `snap` (taken with its live list) that were not live at the start.
  [[nodiscard]] left_live new_live(const ledger_snapshot& snap) const {
    left_live out;
    for (const allocation_record& record : snap.live) {
      if (std::binary_search(live_at_start_.begin(), live_at_start_.end(), std::make_pair(record.sequence, record.ptr))) {
        continue;
      }
      (is_exit_holder(record.tag) ? out.held : out.leaked).push_back(record);
    }
    return out;
  }

 private:
  std::vector<std::pair<std::uint64_t, const void*>> live_at_start_;  ///< (sequence, ptr), sorted
  std::vector<std::pair<int, std::size_t>> current_at_start_;         ///< device, live bytes
};

/// The library's leak text (the exit report's headline and sites) as a string.
inline std::string leak_text(const leak_report& report, std::size_t max_sites) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  if (out == nullptr) { return "(gpuguard: could not format the leak report: open_memstream failed)\n"; }
  write_leak_text(out, report, max_sites);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);  // open_memstream allocates it with malloc
  return text;
}

}  // namespace gpuguard::testing
