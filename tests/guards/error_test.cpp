// Error messages and the check macro: the text users read when a CUDA call fails.
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/error.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

cudaError_t returns(cudaError_t status) { return status; }

TEST(cuda_try, out_of_memory_names_call_size_device_and_error) {
  try {
    GPUGUARD_CUDA_TRY(returns(cudaErrorMemoryAllocation),
                      gpuguard::detail::describe_allocation("cudaMalloc", 268435456, 0));
    FAIL() << "no exception";
  } catch (const gpuguard::out_of_memory& error) {
    EXPECT_STREQ(error.what(),
                 "cudaMalloc(268435456 bytes) on device 0: cudaErrorMemoryAllocation: out of memory");
  }
}

TEST(cuda_try, out_of_memory_is_a_bad_alloc) {
  EXPECT_THROW(GPUGUARD_CUDA_TRY(returns(cudaErrorMemoryAllocation)), std::bad_alloc);
}

TEST(cuda_try, other_errors_are_cuda_error_with_status_and_call_text) {
  try {
    GPUGUARD_CUDA_TRY(returns(cudaErrorInvalidValue));
    FAIL() << "no exception";
  } catch (const gpuguard::cuda_error& error) {
    EXPECT_EQ(error.status(), cudaErrorInvalidValue);
    EXPECT_EQ(std::string(error.what()),
              std::string("returns(cudaErrorInvalidValue): cudaErrorInvalidValue: ") +
                  cudaGetErrorString(cudaErrorInvalidValue));
  }
}

TEST(cuda_try, host_allocations_say_host) {
  EXPECT_EQ(gpuguard::detail::describe_allocation("cudaMallocHost", 4096, gpuguard::host_device_id),
            "cudaMallocHost(4096 bytes) on host");
}

TEST(cuda_try, message_is_built_only_on_failure) {
  int built = 0;
  auto describe = [&built] {
    ++built;
    return std::string("described");
  };
  GPUGUARD_CUDA_TRY(returns(cudaSuccess), describe());
  EXPECT_EQ(built, 0);
  EXPECT_THROW(GPUGUARD_CUDA_TRY(returns(cudaErrorInvalidDevice), describe()), gpuguard::cuda_error);
  EXPECT_EQ(built, 1);
}

TEST(teardown, unloading_and_destroyed_context_are_silent_and_not_counted) {
  const unsigned long before = gpuguard::teardown_error_count();
  testing::internal::CaptureStderr();
  gpuguard::detail::report_teardown(cudaSuccess, "cudaFree");
  gpuguard::detail::report_teardown(cudaErrorCudartUnloading, "cudaFree");
  gpuguard::detail::report_teardown(cudaErrorContextIsDestroyed, "cudaFree");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(gpuguard::teardown_error_count(), before);
}

TEST(teardown, real_failures_are_reported_and_counted_never_thrown) {
  const unsigned long before = gpuguard::teardown_error_count();
  testing::internal::CaptureStderr();
  gpuguard::detail::report_teardown(cudaErrorIllegalAddress, "cudaFree");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(gpuguard::teardown_error_count(), before + 1);
  EXPECT_NE(err.find("[gpuguard] teardown: cudaFree: cudaErrorIllegalAddress"), std::string::npos)
      << err;
}

TEST(teardown, report_stops_printing_after_the_limit_but_keeps_counting) {
  testing::internal::CaptureStderr();
  const unsigned long before = gpuguard::teardown_error_count();
  for (unsigned long i = 0; i < gpuguard::detail::teardown_report_limit + 5; ++i) {
    gpuguard::detail::report_teardown(cudaErrorLaunchFailure, "cudaStreamDestroy");
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(gpuguard::teardown_error_count(), before + gpuguard::detail::teardown_report_limit + 5);
  EXPECT_NE(err.find("further teardown errors are only counted"), std::string::npos);
  std::size_t lines = 0;
  for (const char c : err) { lines += c == '\n' ? 1 : 0; }
  EXPECT_LE(lines, gpuguard::detail::teardown_report_limit + 1);
}

}  // namespace
