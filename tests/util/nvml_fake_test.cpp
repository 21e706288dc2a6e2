// util/nvml against the tests' stand-in for libnvidia-ml.so.1 (tests/cli/fake_nvml.cpp), on any
// machine: the library it loads, the handle by bus id, the _v2 memory call's version and
// arithmetic (cudaMemGetInfo's total and used, without the driver's reserve), MIG, and a process's
// bytes. Its own executable: NVML is loaded once per process, and this one loads the stand-in.
#include "util/nvml.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

TEST(nvml_fake, answers_by_bus_id_with_cudas_figures_mig_and_a_processes_bytes) {
  const std::filesystem::path spec =
      std::filesystem::temp_directory_path() / ("gpuguard_nvml_fake_" + std::to_string(::getpid()) + ".spec");
  {
    std::ofstream out(spec);
    out << "device 0 1000000 100 300,400 Fake Zero\n"
        << "device 3 2000000 0 500 Fake Three\n"
        << "mig 1 1\n"
        << "process 0 4242 123\n";
  }
  ASSERT_EQ(::setenv("GPUGUARD_NVML_LIBRARY", GPUGUARD_FAKE_NVML_PATH, 1), 0);
  ASSERT_EQ(::setenv("GPUGUARD_FAKE_NVML", spec.c_str(), 1), 0);
  EXPECT_STREQ(gpuguard::util::nvml_library_name(), GPUGUARD_FAKE_NVML_PATH);

  const auto zero = gpuguard::util::nvml_device("00000000:00:00.0");
  const auto three = gpuguard::util::nvml_device("00000000:03:00.0");
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(three, nullptr);
  EXPECT_NE(zero, three);
  EXPECT_EQ(gpuguard::util::nvml_device("00000000:07:00.0"), nullptr);

  // Total 1000000 with 100 reserved: cudaMemGetInfo's total is 999900; each query takes the next
  // used figure (300, then 400).
  std::uint64_t used = 0;
  std::uint64_t total = 0;
  ASSERT_TRUE(gpuguard::util::nvml_memory(zero, used, total));
  EXPECT_EQ(total, 999900U);
  EXPECT_EQ(used, 300U);
  ASSERT_TRUE(gpuguard::util::nvml_memory(zero, used, total));
  EXPECT_EQ(used, 400U);
  ASSERT_TRUE(gpuguard::util::nvml_memory(three, used, total));
  EXPECT_EQ(total, 2000000U);
  EXPECT_EQ(used, 500U);

  EXPECT_FALSE(gpuguard::util::nvml_mig_enabled(zero));  // no MIG support at all
  EXPECT_TRUE(gpuguard::util::nvml_mig_enabled(three));  // MIG on

  EXPECT_EQ(gpuguard::util::nvml_process_used(zero, 4242), 123);
  EXPECT_EQ(gpuguard::util::nvml_process_used(zero, 1), 0);
  EXPECT_EQ(gpuguard::util::nvml_process_used(three, 4242), 0);
  std::filesystem::remove(spec);
}

}  // namespace
