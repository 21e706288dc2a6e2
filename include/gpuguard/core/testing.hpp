/**
 * @file testing.hpp
 * @brief GoogleTest support: one line in a test program's main makes every TEST that leaves
 *        tracked memory live fail with the allocation sites, and lets a test declare a peak
 *        budget. Header-only over the compiled core: link gpuguard::gpuguard and GTest::gtest.
 *        docs/testing-cpp.md says what counts and what it costs.
 *
 * What a test leaked and its peak are test_window's (test_window.hpp): the allocations live at
 * the test's end that were not live at its start, so memory that an Environment, a
 * SetUpTestSuite or an earlier test made and still holds never counts, and what a fixture's SetUp
 * makes and its TearDown or destructor frees is freed before the end; allocations under an exit
 * holder's tag (a framework's cache, declare_exit_holder) never count. A test's peak on a device:
 * the most that device's live bytes rose above what was live there when the test started.
 */
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/test_window.hpp>
#include <gpuguard/core/tracking.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuguard::testing {

/// How the listener judges tests.
struct listener_options {
  /// Fail a test that leaves memory live (false: only budgets are checked, for every test).
  bool fail_on_leaks = true;
  /// Fail a test during which the ledger saw a free it could not match: a double free, an unknown
  /// pointer, a wrong size or device (misuse(); each is also on stderr with its pointer).
  bool fail_on_misuse = true;
  /// Fail every test while gpuguard::tracking_enabled() is false. Set it to false where another
  /// source feeds the ledger (the LibTorch adapter, the preload interposer) and enable_tracking
  /// is not called: the listener then checks whatever the ledger holds.
  bool require_tracking = true;
  /// Sites shown in a leak failure; 0: the `leak_sites` option (GPUGUARD_OPTIONS).
  std::size_t max_sites = 0;
};

namespace detail {

/// Any device: the key of a budget set by limit_peak(bytes).
inline constexpr int every_device = INT_MIN;

/// The running test's figures and declarations. One per program: the listener runs the tests
/// one at a time, and a test declares its budget and opt-out on its own thread.
struct test_state {
  bool listener_installed = false;
  bool in_test = false;
  bool allow_leaks = false;
  bool allow_misuse = false;
  misuse_counts misuse_at_start;
  std::vector<std::pair<int, std::size_t>> budgets;  ///< device (or every_device), bytes
  test_window window;                                 ///< the running test's start
};

inline test_state& state() {
  static test_state instance;
  return instance;
}

inline std::string device_name(int device) {
  return device == host_device_id ? std::string("host") : "device " + std::to_string(device);
}

/// Declarations made outside a test fail where they were made: nothing would check them.
inline bool declare_in_test(const char* what) {
  const test_state& s = state();
  if (s.listener_installed && s.in_test) { return true; }
  ADD_FAILURE() << "gpuguard: " << what << " was called "
                << (s.listener_installed ? "outside a test" : "but no leak listener is installed "
                                                              "(gpuguard::testing::install_leak_listener())")
                << ": nothing checks it";
  return false;
}

}  // namespace detail

/// Fails the running test if its peak on any device (the host's slot included) rises more than
/// `bytes` above what was live there at its start. Call it inside the test; a later call replaces
/// the budget.
inline void limit_peak(std::size_t bytes) {
  if (!detail::declare_in_test("gpuguard::testing::limit_peak")) { return; }
  auto& budgets = detail::state().budgets;
  budgets.erase(std::remove_if(budgets.begin(), budgets.end(),
                               [](const auto& b) { return b.first == detail::every_device; }),
                budgets.end());
  budgets.emplace_back(detail::every_device, bytes);
}

/// The same for one device only (host_device_id: host and pinned memory); it takes precedence
/// over limit_peak(bytes) on that device.
inline void limit_peak(std::size_t bytes, int device) {
  if (!detail::declare_in_test("gpuguard::testing::limit_peak")) { return; }
  auto& budgets = detail::state().budgets;
  budgets.erase(std::remove_if(budgets.begin(), budgets.end(),
                               [device](const auto& b) { return b.first == device; }),
                budgets.end());
  budgets.emplace_back(device, bytes);
}

/// The running test may leave memory live (it is not checked for leaks; its budget still is).
inline void allow_leaks() {
  if (detail::declare_in_test("gpuguard::testing::allow_leaks")) { detail::state().allow_leaks = true; }
}

/// The running test may misuse tracked memory on purpose (a test of the misuse reports): its
/// double frees and unmatched frees do not fail it.
inline void allow_misuse() {
  if (detail::declare_in_test("gpuguard::testing::allow_misuse")) { detail::state().allow_misuse = true; }
}

/**
 * The listener: at each test's start it notes what is live and starts the phase peak; at its end
 * it adds a failure to the test (at the TEST's file and line) for each device over its budget and
 * for the memory the test left live. Install it with install_leak_listener().
 */
class leak_listener : public ::testing::EmptyTestEventListener {
 public:
  explicit leak_listener(listener_options opts = {}) : opts_(opts) {}

  void OnTestStart(const ::testing::TestInfo& /*info*/) override {
    detail::test_state& s = detail::state();
    s.in_test = true;
    s.allow_leaks = false;
    s.allow_misuse = false;
    s.misuse_at_start = misuse();
    s.budgets.clear();
    s.window.start();
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    detail::test_state& s = detail::state();
    s.in_test = false;
    if (info.result() != nullptr && info.result()->Skipped()) { return; }
    if (!tracking_enabled() && opts_.require_tracking) {
      ADD_FAILURE_AT(info.file(), info.line())
          << "gpuguard: tracking is not enabled, so this test's leaks and peak cannot be checked: "
             "call gpuguard::enable_tracking() in main before RUN_ALL_TESTS() (or, where another "
             "source feeds the ledger, install the listener with require_tracking = false)";
      return;
    }
    const ledger_snapshot snap = snapshot(true);
    check_budgets(info, snap, s);
    if (opts_.fail_on_leaks && !s.allow_leaks) { check_leaks(info, snap, s); }
    if (opts_.fail_on_misuse && !s.allow_misuse) { check_misuse(info, s); }
  }

 private:
  // The device's own budget, else the one for every device, else none.
  static std::optional<std::size_t> budget_for(const detail::test_state& s, int device) {
    std::optional<std::size_t> every;
    for (const auto& [d, bytes] : s.budgets) {
      if (d == device) { return bytes; }
      if (d == detail::every_device) { every = bytes; }
    }
    return every;
  }

  static void check_budgets(const ::testing::TestInfo& info, const ledger_snapshot& snap,
                            const detail::test_state& s) {
    for (const device_rise& r : s.window.rises(snap)) {
      const std::optional<std::size_t> budget = budget_for(s, r.device);
      if (!budget || r.rise() <= *budget) { continue; }
      ADD_FAILURE_AT(info.file(), info.line())
          << "gpuguard: peak over budget on " << detail::device_name(r.device) << ": live bytes rose "
          << r.rise() << " bytes above the " << r.at_start << " live at the test's start (peak "
          << r.peak << " bytes), over the budget of " << *budget
          << " bytes (limit_peak). The ledger keeps no record of what was live at the peak: "
             "operation scopes or the JSONL log's timeline (gpuguard report) show which step reached it.";
    }
  }

  static void check_misuse(const ::testing::TestInfo& info, const detail::test_state& s) {
    const misuse_counts now = misuse();
    const misuse_counts& before = s.misuse_at_start;
    if (now.total() == before.total()) { return; }
    ADD_FAILURE_AT(info.file(), info.line())
        << "gpuguard: the test misused tracked memory: " << now.double_free - before.double_free
        << " double free(s), " << now.unknown_pointer - before.unknown_pointer
        << " free(s) of a pointer the ledger never gave out, " << now.wrong_size - before.wrong_size
        << " with the wrong size, " << now.wrong_device - before.wrong_device
        << " on the wrong device (stderr names each pointer; gpuguard::testing::allow_misuse() allows it)";
  }

  void check_leaks(const ::testing::TestInfo& info, const ledger_snapshot& snap,
                   const detail::test_state& s) const {
    const std::vector<allocation_record> leaked = s.window.new_live(snap).leaked;
    if (leaked.empty()) { return; }
    const std::size_t max_sites = opts_.max_sites != 0 ? opts_.max_sites : process_options().leak_sites;
    const leak_report report = group_leaks(leaked, max_sites);
    ADD_FAILURE_AT(info.file(), info.line())
        << "gpuguard: the test left tracked memory live that was not live at its start "
           "(gpuguard::testing::allow_leaks() allows it):\n"
        << leak_text(report, max_sites);
  }

  listener_options opts_;
};

/// Appends a leak_listener to GoogleTest's listeners (which own it). Call it in main before
/// RUN_ALL_TESTS(), after gpuguard::enable_tracking(). A second call changes nothing.
inline void install_leak_listener(listener_options opts = {}) {
  detail::test_state& s = detail::state();
  if (s.listener_installed) { return; }
  s.listener_installed = true;
  ::testing::UnitTest::GetInstance()->listeners().Append(new leak_listener(opts));
}

}  // namespace gpuguard::testing
