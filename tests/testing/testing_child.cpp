// A GoogleTest program with gpuguard's leak listener (include/gpuguard/core/testing.hpp), for
// tests/testing/testing_test.py, which runs it one test at a time (--gtest_filter) and judges
// each verdict by the exit status and the failure text. Some tests fail on purpose: leaking from
// a marked line, going over a peak budget. With --no-tracking, main does not enable tracking and
// the guards allocate untracked host memory, as a program that forgot enable_tracking would.
// The leak-site marker lets the script find the line the failure must name.
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/testing.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;

// What the leaking tests keep, past their end.
std::vector<gpuguard::device_buffer>& kept() {
  static std::vector<gpuguard::device_buffer> buffers;
  return buffers;
}

__attribute__((noinline)) void leak_blocks(int count) {
  for (int i = 0; i < count; ++i) {
    kept().push_back(gpuguard::device_buffer(1 * mib));  // TEST-LEAK-SITE
  }
}

TEST(listener, clean_test_passes) {
  const gpuguard::device_buffer a(3 * mib);
  const gpuguard::device_buffer b(1 * mib);
  EXPECT_EQ(a.size(), 3 * mib);
}

TEST(listener, leaking_test_fails_naming_the_site) {
  const gpuguard::device_buffer freed(2 * mib);  // freed at the end of the test: not a leak
  leak_blocks(3);
}

TEST(listener, allowed_leak_passes) {
  gpuguard::testing::allow_leaks();
  leak_blocks(1);
}

TEST(listener, over_peak_budget_fails) {
  gpuguard::testing::limit_peak(2 * mib);
  const gpuguard::device_buffer big(3 * mib);
}

TEST(listener, within_peak_budget_passes) {
  gpuguard::testing::limit_peak(3 * mib);
  const gpuguard::device_buffer a(2 * mib);
  { const gpuguard::device_buffer b(1 * mib); }
  const gpuguard::device_buffer c(1 * mib);  // back at 3 MiB with b freed: the peak stays 3 MiB
}

// A budget for the host's slot alone overrides the one for every device.
TEST(listener, device_budget_overrides_every_device_budget) {
  gpuguard::testing::limit_peak(1 * mib);
  gpuguard::testing::limit_peak(4 * mib, gpuguard::host_device_id);
  const gpuguard::device_buffer a(4 * mib);
}

// A double free through the tracking resource: reported and not passed on, and the test fails.
// (Without tracking nothing would stop the second free, so there is none.)
void free_twice() {
  if (!gpuguard::tracking_enabled()) { return; }
  gpuguard::memory_resource* resource = gpuguard::get_current_resource(gpuguard::host_device_id);
  void* p = resource->allocate(1 * mib);
  resource->deallocate(p, 1 * mib);
  resource->deallocate(p, 1 * mib);
}

TEST(listener, double_free_fails) { free_twice(); }

TEST(listener, allowed_misuse_passes) {
  gpuguard::testing::allow_misuse();
  free_twice();
}

// Memory the suite holds across its tests (made in SetUpTestSuite, freed in TearDownTestSuite)
// was live at each test's start, and the fixture's own member is freed before the test ends:
// neither is a leak. A test that frees the suite's memory and makes it again does leak.
class suite_with_memory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { held_ = std::make_unique<gpuguard::device_buffer>(8 * mib); }
  static void TearDownTestSuite() { held_.reset(); }
  void SetUp() override { scratch_ = gpuguard::device_buffer(1 * mib); }
  void TearDown() override { scratch_ = gpuguard::device_buffer(); }

  static std::unique_ptr<gpuguard::device_buffer> held_;
  gpuguard::device_buffer scratch_;
};
std::unique_ptr<gpuguard::device_buffer> suite_with_memory::held_;

TEST_F(suite_with_memory, first_test_passes) { EXPECT_EQ(held_->size(), 8 * mib); }
TEST_F(suite_with_memory, second_test_passes) { EXPECT_EQ(scratch_.size(), 1 * mib); }
// The budget counts from what was live at the test's start (the suite's 8 MiB), and SetUp runs
// after the start: its 1 MiB and the test's 1 MiB make 2 MiB, within the budget.
TEST_F(suite_with_memory, budget_counts_from_the_test_start) {
  gpuguard::testing::limit_peak(2 * mib);
  const gpuguard::device_buffer a(1 * mib);
}
TEST_F(suite_with_memory, remade_suite_memory_is_a_leak) {
  held_ = std::make_unique<gpuguard::device_buffer>(8 * mib);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const bool tracking = !(argc > 1 && std::strcmp(argv[1], "--no-tracking") == 0);
  static gpuguard::host_memory_resource untracked;
  if (tracking) {
    gpuguard::enable_tracking();
  } else {
    static_cast<void>(gpuguard::set_current_resource(&untracked, gpuguard::host_device_id));
  }
  gpuguard::testing::install_leak_listener();
  return RUN_ALL_TESTS();
}
