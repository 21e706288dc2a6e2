// The tracking resource over the CUDA resources on a real GPU: the ledger agrees with the driver.
#include "gpu_test.hpp"

#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/testing.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace {

using gpuguard_test::device_used_bytes;
using gpuguard_test::gpu_test;

constexpr std::size_t mib = 1024 * 1024;
constexpr std::size_t slack = 8 * mib;

__global__ void fill(unsigned char* data, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    data[i] = 1;
  }
}

class tracking_gpu : public gpu_test, public testing::WithParamInterface<bool> {
 protected:
  // true: cudaMallocAsync on the device's pool; false: cudaMalloc.
  gpuguard::memory_resource& upstream() {
    if (GetParam()) { return async_; }
    return plain_;
  }
  gpuguard::cuda_memory_resource plain_;
  gpuguard::cuda_async_memory_resource async_;
};

TEST_P(tracking_gpu, ledger_matches_driver_for_large_allocations) {
  const int device = gpuguard::current_device();
  gpuguard::tracking_resource tracked(upstream(), device);
  const gpuguard::scoped_current_resource under_guards(tracked, device);
  gpuguard::testing::limit_peak(1024 * mib, device);  // the four buffers below, not a byte more
  const gpuguard::stream stream;
  const gpuguard::counters before = gpuguard::device_counters(device);
  const std::size_t used_before = device_used_bytes();
  {
    std::vector<gpuguard::device_buffer> buffers;
    for (int i = 0; i < 4; ++i) { buffers.emplace_back(256 * mib, stream); }  // plain guards: tracked
    for (gpuguard::device_buffer& b : buffers) {
      fill<<<128, 256, 0, stream.get()>>>(static_cast<unsigned char*>(b.data()), b.size());
    }
    stream.synchronize();
    const gpuguard::counters during = gpuguard::device_counters(device);
    const std::size_t ledger_delta = during.current_bytes - before.current_bytes;
    const std::size_t driver_delta = device_used_bytes() - used_before;
    EXPECT_EQ(ledger_delta, 1024 * mib);
    EXPECT_LE(driver_delta > ledger_delta ? driver_delta - ledger_delta : ledger_delta - driver_delta, slack)
        << "driver " << driver_delta << " ledger " << ledger_delta;
    EXPECT_EQ(during.live_count() - before.live_count(), 4U);
  }
  stream.synchronize();
  const gpuguard::counters after = gpuguard::device_counters(device);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.allocations - before.allocations, 4U);
  EXPECT_GE(after.peak_bytes, before.current_bytes + 1024 * mib);
  const std::size_t used_after = device_used_bytes();
  EXPECT_LE(used_after > used_before ? used_after - used_before : used_before - used_after, slack);
}

TEST_P(tracking_gpu, records_the_stream_and_device_of_each_allocation) {
  const int device = gpuguard::current_device();
  gpuguard::tracking_resource tracked(upstream(), device);
  const gpuguard::stream stream;
  const gpuguard::device_buffer buffer(mib, stream, tracked);
  bool found = false;
  for (const gpuguard::allocation_record& r : gpuguard::snapshot(true).live) {
    if (r.ptr == buffer.data()) {
      found = true;
      EXPECT_EQ(r.stream, stream.get());
      EXPECT_EQ(r.device, device);
      EXPECT_EQ(r.kind, gpuguard::memory_kind::device);
      EXPECT_EQ(r.bytes, mib);
    }
  }
  EXPECT_TRUE(found);
}

TEST_P(tracking_gpu, misuse_on_the_gpu_is_reported_and_memory_still_freed_correctly) {
  const int device = gpuguard::current_device();
  gpuguard::tracking_resource tracked(upstream(), device);
  gpuguard::testing::allow_misuse();  // the misuse below is what this test checks
  const gpuguard::misuse_counts before = gpuguard::misuse();
  const std::size_t used_before = device_used_bytes();
  void* p = tracked.allocate(64 * mib);
  testing::internal::CaptureStderr();
  tracked.deallocate(p, 1);  // wrong size: still freed, with the recorded size
  tracked.deallocate(p, 64 * mib);  // double free: reported, not passed to CUDA
  const std::string err = testing::internal::GetCapturedStderr();
  GPUGUARD_CUDA_TRY(cudaDeviceSynchronize());
  EXPECT_EQ(gpuguard::misuse().wrong_size, before.wrong_size + 1);
  EXPECT_EQ(gpuguard::misuse().double_free, before.double_free + 1);
  EXPECT_NE(err.find("double free"), std::string::npos) << err;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "no invalid free reached CUDA";
  const std::size_t used_after = device_used_bytes();
  EXPECT_LE(used_after > used_before ? used_after - used_before : used_before - used_after, slack);
}

INSTANTIATE_TEST_SUITE_P(upstreams, tracking_gpu, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("cuda_async") : std::string("cuda");
                         });

class tracking_pinned_gpu : public gpu_test {};

TEST_F(tracking_pinned_gpu, pinned_and_managed_are_tracked_on_the_host_or_device) {
  gpuguard::pinned_memory_resource pinned;
  gpuguard::managed_memory_resource managed;
  gpuguard::tracking_resource tracked_pinned(pinned, gpuguard::host_device_id);
  gpuguard::tracking_resource tracked_managed(managed, gpuguard::current_device());
  const gpuguard::counters host_before = gpuguard::device_counters(gpuguard::host_device_id);
  {
    gpuguard::pinned_buffer<int> staging(mib, tracked_pinned);
    gpuguard::device_array<int> shared(1024, {}, tracked_managed);
    EXPECT_EQ(gpuguard::device_counters(gpuguard::host_device_id).current_bytes - host_before.current_bytes,
              mib * sizeof(int));
    EXPECT_EQ(tracked_pinned.kind(), gpuguard::memory_kind::pinned_host);
    EXPECT_EQ(tracked_managed.kind(), gpuguard::memory_kind::managed);
  }
  EXPECT_EQ(gpuguard::device_counters(gpuguard::host_device_id).current_bytes, host_before.current_bytes);
}

}  // namespace
