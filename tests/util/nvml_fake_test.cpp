// util/nvml against the tests' stand-in for libnvidia-ml.so.1 (tests/cli/fake_nvml.cpp), on any
// machine: the library it loads, the handle by bus id, the _v2 memory call's version and
// arithmetic (cudaMemGetInfo's total and used, without the driver's reserve), MIG, a process's
// bytes and a device's UUID; then the loader itself (nvml_library), as the CLI opens it: what it resolves, the driver's
// version, and each way it fails. Its own executable: NVML is loaded once per process, and this one
// loads the stand-in. The stand-in's state is global, so the loader's tests come after the
// process-wide instance's, and use none of its handles.
#include "util/nvml.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <unistd.h>

namespace {

using gpuguard::util::nvml_api;
using gpuguard::util::nvml_failure;
using gpuguard::util::nvml_library;

// A spec file for the stand-in, removed at the end.
struct spec_file {
  std::filesystem::path path;
  explicit spec_file(const std::string& text)
      : path(std::filesystem::temp_directory_path() / ("gpuguard_nvml_loader_" + std::to_string(::getpid()) + ".spec")) {
    std::ofstream(path) << text;
    EXPECT_EQ(::setenv("GPUGUARD_FAKE_NVML", path.c_str(), 1), 0);
  }
  ~spec_file() { std::filesystem::remove(path); }
};

TEST(nvml_fake, answers_by_bus_id_with_cudas_figures_mig_and_a_processes_bytes) {
  const std::filesystem::path spec =
      std::filesystem::temp_directory_path() / ("gpuguard_nvml_fake_" + std::to_string(::getpid()) + ".spec");
  {
    std::ofstream out(spec);
    out << "device 0 1000000 100 300,400 Fake Zero\n"
        << "device 3 2000000 0 500 Fake Three\n"
        << "device 5 1000 0 0 Fake Five\n"
        << "mig 1 1\n"
        << "uuid 1 GPU-3b6f0c1e-aaaa-bbbb-cccc-0123456789ab\n"
        << "uuid 2 error\n"
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

  // UUIDs by bus id: the stand-in's default, a spec's own, none where nvmlDeviceGetUUID fails or
  // the bus id is unknown.
  EXPECT_EQ(gpuguard::util::nvml_uuid_of_bus("00000000:00:00.0"), "GPU-fa4e0000-0000-4000-8000-000000000000");
  EXPECT_EQ(gpuguard::util::nvml_uuid_of_bus("00000000:03:00.0"), "GPU-3b6f0c1e-aaaa-bbbb-cccc-0123456789ab");
  EXPECT_EQ(gpuguard::util::nvml_uuid_of_bus("00000000:05:00.0"), "");
  EXPECT_EQ(gpuguard::util::nvml_uuid_of_bus("00000000:07:00.0"), "");
  EXPECT_EQ(gpuguard::util::nvml_uuid_of_bus(nullptr), "");
  std::filesystem::remove(spec);
}

TEST(nvml_library, resolves_the_entry_points_the_library_has_and_reads_the_drivers_version) {
  const spec_file spec("driver 555.42\ndevice 0 1000 0 10 Fake\n");
  nvml_library nvml = nvml_library::open(GPUGUARD_FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.available()) << nvml.error();
  EXPECT_EQ(nvml.failure(), nvml_failure::none);
  EXPECT_EQ(nvml.error(), "");
  EXPECT_EQ(nvml.driver_version(), "555.42");
  const nvml_api& api = nvml.api();
  EXPECT_NE(api.device_count, nullptr);
  EXPECT_NE(api.device_by_index, nullptr);
  EXPECT_NE(api.compute_processes, nullptr);  // the stand-in has the _v3 call
  EXPECT_EQ(api.graphics_processes, nullptr);  // and no graphics list at all
  EXPECT_EQ(api.init_v1, nullptr);
  unsigned int count = 0;
  ASSERT_EQ(api.device_count(&count), gpuguard::util::nvml_abi::success);
  EXPECT_EQ(count, 1U);
  gpuguard::util::nvml_abi::device_handle device = nullptr;
  ASSERT_EQ(api.device_by_index(0, &device), gpuguard::util::nvml_abi::success);
  EXPECT_EQ(gpuguard::util::nvml_uuid(api, device), "GPU-fa4e0000-0000-4000-8000-000000000000");
  EXPECT_EQ(gpuguard::util::nvml_uuid(api, nullptr), "");
  EXPECT_EQ(gpuguard::util::nvml_uuid(nvml_api{}, device), "") << "a library without nvmlDeviceGetUUID";
  EXPECT_EQ(nvml.error_text("nvmlDeviceGetCount_v2", gpuguard::util::nvml_abi::error_insufficient_size),
            "nvmlDeviceGetCount_v2: Insufficient Size");

  // Moved: the new owner holds the library, the old one nothing.
  nvml_library moved(std::move(nvml));
  EXPECT_TRUE(moved.available());
  EXPECT_FALSE(nvml.available());  // NOLINT(bugprone-use-after-move): what a move leaves is the point
  EXPECT_EQ(nvml.api().device_count, nullptr);
}

TEST(nvml_library, says_why_when_nvml_cannot_start) {
  const spec_file spec("init_error 9\n");
  const nvml_library nvml = nvml_library::open(GPUGUARD_FAKE_NVML_PATH);
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.failure(), nvml_failure::init_failed);
  EXPECT_EQ(nvml.error(), "nvmlInit_v2: Driver Not Loaded");
  EXPECT_EQ(nvml.failure_detail(), "Driver Not Loaded");
  EXPECT_EQ(nvml.api().device_count, nullptr);  // nothing to call
  EXPECT_EQ(nvml.driver_version(), "");
}

TEST(nvml_library, a_library_without_what_the_caller_requires_is_not_initialised) {
  const spec_file spec("device 0 1000 0 10 Fake\n");
  const nvml_library nvml = nvml_library::open(
      GPUGUARD_FAKE_NVML_PATH, [](const nvml_api& api) noexcept { return api.graphics_processes != nullptr; });
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.failure(), nvml_failure::missing_symbols);
  EXPECT_EQ(nvml.error(), std::string(GPUGUARD_FAKE_NVML_PATH) + " lacks a required entry point");
  EXPECT_EQ(nvml.failure_detail(), "");
}

TEST(nvml_library, a_library_the_loader_cannot_find_is_named_in_the_error) {
  const nvml_library nvml = nvml_library::open("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.failure(), nvml_failure::not_loaded);
  EXPECT_NE(nvml.error().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << nvml.error();
  EXPECT_EQ(nvml.failure_detail(), nvml.error());
  // Without a library there is no nvmlErrorString: a failed call is named with its number.
  EXPECT_EQ(nvml.error_text("nvmlDeviceGetCount_v2", 7), "nvmlDeviceGetCount_v2: error 7");
  EXPECT_EQ(nvml.error_string(7), "");
}

}  // namespace
