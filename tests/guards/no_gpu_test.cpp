// Behaviour with no usable GPU. ctest runs this with CUDA_VISIBLE_DEVICES=-1, so it holds on a
// machine that has one too: clear cuda_error exceptions, never a crash, and the host fallback.
#include <gpuguard/gpuguard.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

class no_gpu : public testing::Test {
 protected:
  void SetUp() override {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    ASSERT_TRUE(visible != nullptr && std::string(visible) == "-1")
        << "run through ctest, which hides every GPU with CUDA_VISIBLE_DEVICES=-1";
  }
};

void expect_no_device_error(const gpuguard::cuda_error& error, const char* call) {
  const std::string what = error.what();
  EXPECT_EQ(what.rfind(std::string("no CUDA-capable device is available (") + call + "): ", 0), 0U)
      << what;
  EXPECT_TRUE(gpuguard::detail::is_no_device_status(error.status())) << what;
  EXPECT_NE(what.find(cudaGetErrorName(error.status())), std::string::npos) << what;
}

TEST_F(no_gpu, has_device_is_false) { EXPECT_FALSE(gpuguard::has_device()); }

// The status behind it is cudaErrorNoDevice where a GPU is hidden, cudaErrorInsufficientDriver
// where there is no driver: both mean 0 devices, not a fault.
TEST_F(no_gpu, device_count_is_zero) {
  int count = -1;
  EXPECT_NO_THROW(count = gpuguard::device_count());
  EXPECT_EQ(count, 0);
  EXPECT_EQ(gpuguard::device_count(), 0);  // asking again says the same
  EXPECT_EQ(gpuguard::has_device(), gpuguard::device_count() > 0);
}

TEST_F(no_gpu, current_device_throws_a_clear_cuda_error) {
  try {
    static_cast<void>(gpuguard::current_device());
    FAIL() << "no exception";
  } catch (const gpuguard::cuda_error& error) {
    expect_no_device_error(error, "cudaGetDevice");
  }
}

TEST_F(no_gpu, device_buffer_without_fallback_throws_a_clear_cuda_error) {
  try {
    const gpuguard::device_buffer buffer(1024);
    FAIL() << "no exception";
  } catch (const gpuguard::cuda_error& error) {
    expect_no_device_error(error, "cudaGetDevice");
  }
}

TEST_F(no_gpu, owners_that_need_a_device_throw_cuda_error) {
  EXPECT_THROW(gpuguard::stream{}, gpuguard::cuda_error);
  EXPECT_THROW(gpuguard::event{}, gpuguard::cuda_error);
  EXPECT_THROW(gpuguard::scoped_device{0}, gpuguard::cuda_error);
  EXPECT_THROW(gpuguard::pinned_buffer<float>{16}, gpuguard::cuda_error);
  gpuguard::cuda_async_memory_resource async;
  EXPECT_THROW(gpuguard::device_buffer(64, {}, async), gpuguard::cuda_error);
}

TEST_F(no_gpu, host_fallback_serves_buffers_made_without_a_resource) {
  gpuguard::host_memory_resource host;
  const gpuguard::scoped_current_resource fallback(host, gpuguard::host_device_id);
  {
    const gpuguard::device_array<int> array(std::vector<int>{1, 2, 3});
    EXPECT_EQ(array.device(), gpuguard::host_device_id);
    EXPECT_EQ(array.buffer().resource(), &host);
    EXPECT_EQ(array.to_host(), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(host.used(), 3 * sizeof(int));
  }
  EXPECT_EQ(host.used(), 0U);
}

TEST_F(no_gpu, scoped_device_on_host_is_a_no_op) {
  const gpuguard::scoped_device on_host(gpuguard::host_device_id);
  EXPECT_EQ(on_host.previous(), gpuguard::host_device_id);
}

}  // namespace
