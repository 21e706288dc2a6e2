// The main of the project's own GPU test programs: every TEST that leaves tracked device memory
// live, or rises above a peak it declared (gpuguard::testing::limit_peak), fails with the sites,
// through the same GoogleTest listener users install (docs/testing-cpp.md).
//
// The tests feed the ledger through their own tracking resources rather than enable_tracking(),
// so the listener checks whatever the ledger holds (require_tracking = false).
#include <gpuguard/core/testing.hpp>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  gpuguard::testing::listener_options options;
  options.require_tracking = false;
  gpuguard::testing::install_leak_listener(options);
  return RUN_ALL_TESTS();
}
