// Operation scopes on a real GPU: for large allocations, a scope's ledger figures agree with what
// the driver says changed on the device (op_device_query=1 asks cudaMemGetInfo at entry and exit).
#include "gpu_test.hpp"

#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace {

using gpuguard_test::gpu_test;

constexpr std::size_t mib = 1024 * 1024;
constexpr std::int64_t slack = 16 * mib;  // page-table and pool granularity of the driver

class op_scope_gpu : public gpu_test, public testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    gpu_test::SetUp();
    if (IsSkipped() || HasFailure()) { return; }
    gpuguard::options opts;
    opts.text_log = "off";
    opts.op_device_query = true;
    gpuguard::start_outputs(opts);
  }
  void TearDown() override { gpuguard::stop_outputs("test"); }

  // true: cudaMallocAsync on the device's pool (which may keep what it reserved after the frees:
  // the scope reports the pool's figures beside the ledger's); false: cudaMalloc.
  gpuguard::memory_resource& upstream() {
    if (GetParam()) { return async_; }
    return plain_;
  }
  gpuguard::cuda_memory_resource plain_;
  gpuguard::cuda_async_memory_resource async_;
};

std::int64_t device_delta(const gpuguard::op_result& r) {
  return static_cast<std::int64_t>(r.used_after) - static_cast<std::int64_t>(r.used_before);
}

// What the driver should have seen change: the ledger's net, less what the stream-ordered pool
// handed out (part of the net), plus what the pool reserved from the device (it keeps freed memory).
std::int64_t expected_device_delta(const gpuguard::op_result& r) {
  return r.net_bytes - r.pool_used_delta + r.pool_reserved_delta;
}

std::string figures(const gpuguard::op_result& r) {
  return "driver " + std::to_string(device_delta(r)) + ", ledger net " + std::to_string(r.net_bytes) +
         ", pool used " + std::to_string(r.pool_used_delta) + ", pool reserved " + std::to_string(r.pool_reserved_delta);
}

TEST_P(op_scope_gpu, scope_deltas_match_the_driver_for_large_allocations) {
  const int device = gpuguard::current_device();
  gpuguard::tracking_resource tracked(upstream(), device);
  const gpuguard::stream stream;
  std::optional<gpuguard::device_buffer> kept;
  gpuguard::op_result grow;
  {
    gpuguard::op_scope scope("grow_1GiB");
    kept.emplace(1024 * mib, stream, tracked);
    { const gpuguard::device_buffer temporary(512 * mib, stream, tracked); }
    stream.synchronize();
    grow = scope.end();
  }
  ASSERT_TRUE(grow.device_queried);
  EXPECT_EQ(grow.device, device);
  EXPECT_EQ(grow.net_bytes, static_cast<std::int64_t>(1024 * mib));
  EXPECT_EQ(grow.peak_bytes, 1536 * mib);
  EXPECT_EQ(grow.allocs, 2U);
  if (GetParam()) {
    // Every byte came from the pool: the ledger and the pool's used bytes agree exactly.
    ASSERT_TRUE(grow.pool_queried);
    EXPECT_EQ(grow.pool_used_delta, grow.net_bytes);
    EXPECT_GE(grow.pool_reserved_delta, grow.pool_used_delta) << figures(grow);
  } else {
    EXPECT_EQ(grow.pool_used_delta, 0) << figures(grow);
  }
  EXPECT_LE(std::abs(device_delta(grow) - expected_device_delta(grow)), slack) << figures(grow);

  gpuguard::op_result shrink;
  {
    gpuguard::op_scope scope("free_1GiB");
    kept.reset();
    stream.synchronize();
    shrink = scope.end();
  }
  ASSERT_TRUE(shrink.device_queried);
  EXPECT_EQ(shrink.net_bytes, -static_cast<std::int64_t>(1024 * mib));
  EXPECT_EQ(shrink.peak_bytes, 0U);
  if (GetParam()) {
    ASSERT_TRUE(shrink.pool_queried);
    EXPECT_EQ(shrink.pool_used_delta, shrink.net_bytes);
  }
  EXPECT_LE(std::abs(device_delta(shrink) - expected_device_delta(shrink)), slack) << figures(shrink);
}

TEST_P(op_scope_gpu, nested_scopes_on_the_device_fold_into_the_parent) {
  const int device = gpuguard::current_device();
  gpuguard::tracking_resource tracked(upstream(), device);
  const gpuguard::stream stream;
  std::vector<gpuguard::device_buffer> kept;
  gpuguard::op_result outer_result;
  {
    gpuguard::op_scope outer("step");
    for (int i = 0; i < 4; ++i) {
      gpuguard::op_scope inner("layer");
      kept.emplace_back(256 * mib, stream, tracked);
    }
    stream.synchronize();
    outer_result = outer.end();
  }
  EXPECT_EQ(outer_result.net_bytes, static_cast<std::int64_t>(1024 * mib));
  EXPECT_LE(std::abs(device_delta(outer_result) - expected_device_delta(outer_result)), slack)
      << figures(outer_result);
  kept.clear();
  stream.synchronize();
}

INSTANTIATE_TEST_SUITE_P(upstreams, op_scope_gpu, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "cuda_async" : "cuda";
                         });

// The writer's memory sample of a device (the device-full alert, the `mem` lines) says what
// cudaMemGetInfo says: it asks NVML where NVML agrees with cudaMemGetInfo (without entering the
// process's CUDA context), else cudaMemGetInfo. A threshold below what the context alone takes
// makes the device's first sample raise the alert: judged on the most live since the previous
// sample plus what the device holds besides, which with one block held throughout is the device's
// used bytes. The test passes through either path; which one a machine takes is not visible here.
class device_sample_gpu : public gpu_test {};

TEST_F(device_sample_gpu, the_device_full_alert_carries_the_drivers_figures) {
  const int device = gpuguard::current_device();
  gpuguard::cuda_memory_resource plain;
  gpuguard::tracking_resource tracked(plain, device);  // the sampler samples devices the ledger has seen
  std::mutex mutex;
  std::condition_variable raised;
  std::optional<gpuguard::alert> first;
  gpuguard::set_alert_callback([&](const gpuguard::alert& a) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (a.kind == gpuguard::alert_kind::device_full && a.device == device && !first) {
      first = a;
      raised.notify_all();
    }
  });
  void* held = tracked.allocate(512 * mib);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  gpuguard::options opts;
  opts.text_log = "off";
  opts.sample_ms = 10;
  opts.alert_fraction = 1.0 / 1024;  // 0.1 percent: the context alone takes more
  gpuguard::start_outputs(opts);
  {
    std::unique_lock<std::mutex> lock(mutex);
    raised.wait_for(lock, std::chrono::seconds(10), [&] { return first.has_value(); });
  }
  gpuguard::stop_outputs("test");
  gpuguard::set_alert_callback(nullptr);
  tracked.deallocate(held, 512 * mib);
  ASSERT_TRUE(first.has_value()) << "no device-full alert within 10 s at sample_ms=10";
  const std::size_t used = total_bytes - free_bytes;
  EXPECT_EQ(first->total_bytes, total_bytes);
  EXPECT_GE(first->used_bytes, 512 * mib);
  const std::size_t apart = first->used_bytes > used ? first->used_bytes - used : used - first->used_bytes;
  EXPECT_LE(apart, static_cast<std::size_t>(slack)) << "sampled " << first->used_bytes << ", cudaMemGetInfo " << used;
}

}  // namespace
