// Two GPUs: guards free on the device they allocated on whatever is current, and the
// ledger, scopes and reports keep separate per-device figures that match the driver per device.
#include "gpu_test.hpp"

#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

namespace {

using gpuguard_test::device_used_bytes;
using gpuguard_test::multi_gpu_test;

constexpr std::size_t mib = 1024 * 1024;
constexpr std::int64_t slack = 16 * mib;

std::size_t used_on(int device) {
  GPUGUARD_SCOPED_DEVICE(device);
  return device_used_bytes();
}

void expect_grew_by(std::size_t before, std::size_t after, std::size_t bytes) {
  const auto grown = static_cast<std::int64_t>(after) - static_cast<std::int64_t>(before);
  EXPECT_NEAR(static_cast<double>(grown), static_cast<double>(bytes), static_cast<double>(slack));
}

class two_gpus : public multi_gpu_test {};

TEST_F(two_gpus, each_buffer_frees_on_its_own_device_whatever_is_current) {
  const std::size_t before0 = used_on(0);
  const std::size_t before1 = used_on(1);
  std::optional<gpuguard::device_buffer> on0;
  std::optional<gpuguard::device_buffer> on1;
  {
    GPUGUARD_SCOPED_DEVICE(0);
    on0.emplace(256 * mib);
  }
  {
    GPUGUARD_SCOPED_DEVICE(1);
    on1.emplace(512 * mib);
  }
  expect_grew_by(before0, used_on(0), 256 * mib);
  expect_grew_by(before1, used_on(1), 512 * mib);
  {
    GPUGUARD_SCOPED_DEVICE(1);
    on0.reset();  // device 0's memory, freed while device 1 is current
  }
  {
    GPUGUARD_SCOPED_DEVICE(0);
    on1.reset();
  }
  expect_grew_by(before0, used_on(0), 0);
  expect_grew_by(before1, used_on(1), 0);
}

TEST_F(two_gpus, the_ledger_keeps_per_device_figures_that_match_the_driver) {
  gpuguard::cuda_memory_resource plain;
  gpuguard::tracking_resource tracked0(plain, 0);
  gpuguard::tracking_resource tracked1(plain, 1);
  const std::size_t before0 = used_on(0);
  const std::size_t before1 = used_on(1);
  const auto ledger0 = gpuguard::device_counters(0).current_bytes;
  const auto ledger1 = gpuguard::device_counters(1).current_bytes;
  void* a = nullptr;
  void* b = nullptr;
  {
    GPUGUARD_SCOPED_DEVICE(0);
    a = tracked0.allocate(384 * mib);
  }
  {
    GPUGUARD_SCOPED_DEVICE(1);
    b = tracked1.allocate(768 * mib);
  }
  EXPECT_EQ(gpuguard::device_counters(0).current_bytes - ledger0, 384 * mib);
  EXPECT_EQ(gpuguard::device_counters(1).current_bytes - ledger1, 768 * mib);
  expect_grew_by(before0, used_on(0), 384 * mib);
  expect_grew_by(before1, used_on(1), 768 * mib);
  const gpuguard::leak_report live = gpuguard::collect_leaks();
  std::size_t on0 = 0;
  std::size_t on1 = 0;
  for (const auto& site : live.sites) {
    if (site.device == 0) { on0 += site.bytes; }
    if (site.device == 1) { on1 += site.bytes; }
  }
  EXPECT_GE(on0, 384 * mib);
  EXPECT_GE(on1, 768 * mib);
  {
    GPUGUARD_SCOPED_DEVICE(0);  // the wrong device for b: the tracker still frees it on device 1
    tracked1.deallocate(b, 768 * mib);
  }
  {
    GPUGUARD_SCOPED_DEVICE(0);
    tracked0.deallocate(a, 384 * mib);
  }
  EXPECT_EQ(gpuguard::device_counters(0).current_bytes, ledger0);
  EXPECT_EQ(gpuguard::device_counters(1).current_bytes, ledger1);
  expect_grew_by(before1, used_on(1), 0);
}

TEST_F(two_gpus, a_scope_queries_the_device_current_at_its_entry) {
  gpuguard::options opts;
  opts.text_log = "off";
  opts.op_device_query = true;
  gpuguard::start_outputs(opts);
  gpuguard::cuda_memory_resource plain;
  gpuguard::tracking_resource tracked1(plain, 1);
  GPUGUARD_SCOPED_DEVICE(1);
  gpuguard::op_scope scope("on device 1");
  void* p = tracked1.allocate(512 * mib);
  const gpuguard::op_result& r = scope.end();
  EXPECT_EQ(r.device, 1);
  ASSERT_TRUE(r.device_queried);
  EXPECT_NEAR(static_cast<double>(r.used_after - r.used_before), 512.0 * mib, static_cast<double>(slack));
  tracked1.deallocate(p, 512 * mib);
  gpuguard::stop_outputs("test");
}

}  // namespace
