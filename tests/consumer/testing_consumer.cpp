// The consumer's GoogleTest program: gpuguard's leak listener (gpuguard/core/testing.hpp) from
// where gpuguard was installed or built, set up as docs/testing-cpp.md says. Its tests free what
// they allocate and keep within their budget, so the program passes.
#include <gpuguard/core/testing.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/device_buffer.hpp>

#include <gtest/gtest.h>

TEST(consumer, frees_what_it_allocates_within_its_budget) {
  gpuguard::testing::limit_peak(std::size_t{1} << 20);
  const gpuguard::device_buffer buffer(std::size_t{1} << 20);
  EXPECT_EQ(buffer.size(), std::size_t{1} << 20);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  gpuguard::enable_tracking();
  gpuguard::testing::install_leak_listener();
  return RUN_ALL_TESTS();
}
