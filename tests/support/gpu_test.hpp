// The base of every GPU test: skips with a reason where there is no GPU, and fails instead when
// GPUGUARD_REQUIRE_GPU=1 (the GPU runner sets it, so a skipped GPU test can never pass there).
#pragma once

#include <gpuguard/device.hpp>
#include <gpuguard/error.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace gpuguard_test {

inline bool gpu_required() {
  const char* value = std::getenv("GPUGUARD_REQUIRE_GPU");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

class gpu_test : public testing::Test {
 protected:
  void SetUp() override {
    if (gpuguard::has_device()) { return; }
    if (gpu_required()) {
      FAIL() << "GPUGUARD_REQUIRE_GPU=1 but no CUDA device is usable";
    }
    GTEST_SKIP() << "no CUDA device on this machine; the GPU runner (scripts/gpu-runner.sh) runs it";
  }
};

/// The base of the tests that need two GPUs (label `multigpu`): skips with the reason on
/// a machine with fewer, and fails instead when GPUGUARD_REQUIRE_GPUS=2 (a runner on a two-GPU
/// machine sets it). The single-GPU runner leaves the label out and says so.
class multi_gpu_test : public testing::Test {
 protected:
  void SetUp() override {
    const int count = gpuguard::has_device() ? gpuguard::device_count() : 0;
    if (count >= 2) { return; }
    const char* required = std::getenv("GPUGUARD_REQUIRE_GPUS");
    if (required != nullptr && std::strcmp(required, "2") == 0) {
      FAIL() << "GPUGUARD_REQUIRE_GPUS=2 but this machine has " << count << " usable GPU(s)";
    }
    GTEST_SKIP() << "needs two GPUs, this machine has " << count << "; a two-GPU machine runs it";
  }
};

/// Bytes in use on the current device, as the driver reports them.
inline std::size_t device_used_bytes() {
  std::size_t free = 0;
  std::size_t total = 0;
  GPUGUARD_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return total - free;
}

}  // namespace gpuguard_test
