// The LibTorch adapter on two GPUs: tensors on both devices are tracked, each under its
// own device, in observe and in swap-in mode (one process per test, as gtest_discover_tests runs).
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/torch.hpp>

#include "gpu_test.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

namespace {

constexpr std::int64_t mib = 1 << 20;

class torch_two_gpus : public gpuguard_test::multi_gpu_test {
 protected:
  static void expect_ledger_equals_torch(int device) {
    gpuguard::torch::torch_memory m;
    ASSERT_TRUE(gpuguard::torch::memory(device, m));
    EXPECT_EQ(gpuguard::device_counters(device).current_bytes, m.allocated) << "device " << device;
  }

  static void tensors_on_both_devices() {
    const auto on = [](int d) { return torch::TensorOptions(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d))).dtype(torch::kUInt8); };
    const std::uint64_t before0 = gpuguard::device_counters(0).current_bytes;
    const std::uint64_t before1 = gpuguard::device_counters(1).current_bytes;
    auto a = torch::empty({64 * mib}, on(0));
    auto b = torch::empty({96 * mib}, on(1));
    EXPECT_EQ(gpuguard::device_counters(0).current_bytes - before0, static_cast<std::uint64_t>(64 * mib));
    EXPECT_EQ(gpuguard::device_counters(1).current_bytes - before1, static_cast<std::uint64_t>(96 * mib));
    expect_ledger_equals_torch(0);
    expect_ledger_equals_torch(1);
    {
      const c10::cuda::CUDAGuard current(0);
      b.reset();  // device 1's tensor freed while device 0 is current
    }
    a.reset();
    EXPECT_EQ(gpuguard::device_counters(0).current_bytes, before0);
    EXPECT_EQ(gpuguard::device_counters(1).current_bytes, before1);
    EXPECT_EQ(gpuguard::misuse().total(), 0U);
  }
};

TEST_F(torch_two_gpus, observe_tracks_tensors_on_each_device) {
  gpuguard::torch::observe();
  tensors_on_both_devices();
}

TEST_F(torch_two_gpus, swap_in_tracks_tensors_on_each_device) {
  gpuguard::torch::install_allocator();
  tensors_on_both_devices();
}

}  // namespace
