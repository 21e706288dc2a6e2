// The LibTorch adapter where there is no GPU: option handling, the modes' refusals, the too-late
// install error, and swap-in's effect on PyTorch's allocator. Each test runs in its own process
// (gtest_discover_tests), since the adapter's choices are for the life of the process. ctest runs
// them with CUDA_VISIBLE_DEVICES=-1 (tests/torch/CMakeLists.txt), so they see no GPU and run the
// same on a machine that has one.
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/torch.hpp>
#include <gpuguard/core/tracking.hpp>

#include "cpu_allocator_spy.hpp"
#include "leak_site.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/types.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

bool has_gpu() { return c10::cuda::device_count() > 0; }

std::string allocator_name() { return alloc::get()->name(); }

TEST(torch_options, the_torch_key_takes_each_mode_and_rejects_others_by_name) {
  EXPECT_EQ(gpuguard::options{}.torch, gpuguard::torch_mode::observe);
  for (const auto mode : {gpuguard::torch_mode::observe, gpuguard::torch_mode::swap_in, gpuguard::torch_mode::off}) {
    const auto parsed = gpuguard::parse_options(std::string("torch=") + gpuguard::to_string(mode));
    EXPECT_TRUE(parsed.errors.empty());
    EXPECT_EQ(parsed.values.torch, mode);
  }
  const auto bad = gpuguard::parse_options("torch=swapin:stacks=all");
  ASSERT_EQ(bad.errors.size(), 1U);
  EXPECT_NE(bad.errors[0].find("torch"), std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[0].find("swapin"), std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[0].find("swap_in"), std::string::npos) << "the message lists what is accepted: " << bad.errors[0];
  EXPECT_EQ(bad.values.torch, gpuguard::torch_mode::observe) << "the bad value changes nothing";
  EXPECT_EQ(bad.values.stacks, gpuguard::stack_mode::all) << "the other items still apply";
}

TEST(torch_adapter, off_does_nothing) {
  gpuguard::options opts;
  opts.torch = gpuguard::torch_mode::off;
  gpuguard::torch::enable(opts);
  EXPECT_EQ(gpuguard::torch::current_state(), gpuguard::torch::state::off);
  EXPECT_EQ(allocator_name(), "native");
}

TEST(torch_adapter, observe_without_a_device_is_a_clear_error_and_attaches_nothing) {
  ASSERT_FALSE(has_gpu()) << "run it with CUDA_VISIBLE_DEVICES=-1, as ctest does";
  try {
    gpuguard::torch::observe();
    FAIL() << "observe() succeeded with no CUDA device";
  } catch (const gpuguard::torch::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("no device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing was attached"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpuguard::torch::current_state(), gpuguard::torch::state::off);
  gpuguard::op_scope scope("after a refused observe");
  EXPECT_EQ(scope.end().framework, nullptr) << "no probe was installed";
}

TEST(torch_adapter, swap_in_replaces_the_allocator_and_a_second_call_changes_nothing) {
  ASSERT_TRUE(gpuguard::torch::can_install_allocator());
  gpuguard::options opts;
  opts.torch = gpuguard::torch_mode::swap_in;
  gpuguard::torch::enable(opts);
  EXPECT_EQ(gpuguard::torch::current_state(), gpuguard::torch::state::swapped_in);
  EXPECT_EQ(allocator_name(), "gpuguard");
  const void* installed = alloc::get();
  gpuguard::torch::install_allocator();
  gpuguard::torch::enable(opts);
  EXPECT_EQ(alloc::get(), installed);
  // Observe mode cannot be added on top: a clear error, and swap-in stays.
  EXPECT_THROW(gpuguard::torch::observe(), gpuguard::torch::usage_error);
  EXPECT_EQ(gpuguard::torch::current_state(), gpuguard::torch::state::swapped_in);
  // Without a GPU a CUDA tensor still fails PyTorch's way, through gpuguard's allocator.
  ASSERT_FALSE(has_gpu()) << "run it with CUDA_VISIBLE_DEVICES=-1, as ctest does";
  EXPECT_THROW(static_cast<void>(torch::zeros({4}, torch::kCUDA)), c10::Error);
}

TEST(torch_adapter, install_after_cuda_initialised_is_refused_and_changes_nothing) {
  // No GPU to initialise: PyTorch's own initialisation call, which sets its allocator up for one
  // device before it finds there is no device. (On a GPU, the first CUDA tensor does the same.)
  try { alloc::init(1); } catch (const c10::Error&) {}
  ASSERT_TRUE(alloc::get()->initialized());
  EXPECT_FALSE(gpuguard::torch::can_install_allocator());
  try {
    gpuguard::torch::install_allocator();
    FAIL() << "install_allocator() accepted an initialised allocator";
  } catch (const gpuguard::torch::usage_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("too late"), std::string::npos) << what;
    EXPECT_NE(what.find("Nothing was changed"), std::string::npos) << what;
  }
  EXPECT_EQ(allocator_name(), "native");
  EXPECT_EQ(gpuguard::torch::current_state(), gpuguard::torch::state::off);
}

TEST(torch_adapter, swap_in_statistics_come_from_the_ledger_and_unsupported_calls_name_themselves) {
  gpuguard::torch::install_allocator();
  // PyTorch's own statistics calls reach gpuguard's answers (zero: nothing allocated yet).
  const auto stats = alloc::get()->getDeviceStats(0);
  EXPECT_EQ(stats.allocated_bytes[0].current, 0);
  try {
    alloc::get()->resetAccumulatedStats(0);
    FAIL() << "resetAccumulatedStats did not refuse";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("resetAccumulatedStats"), std::string::npos) << what;
    EXPECT_NE(what.find("torch.cuda.reset_accumulated_memory_stats"), std::string::npos) << what;
  }
  try {
    static_cast<void>(alloc::get()->snapshot({0, 0}, false));
    FAIL() << "snapshot did not refuse";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("memory_snapshot"), std::string::npos);
  }
}

// A site begins at the user's line however deep PyTorch's dispatcher is: frames in PyTorch's and
// gpuguard's libraries are passed over at capture (so the default stack_depth of 16 is spent on the
// caller), and PyTorch's inline API compiled into the program (at::Tensor::mul) at resolution. On
// the CPU, PyTorch's CPU allocator is recorded by a spy in a library of its own, as observe mode's
// tracker records the CUDA allocator from the adapter's library; the GPU test goes through observe.
TEST(torch_stacks, a_site_begins_at_the_users_line_past_pytorchs_frames) {
  gpuguard::options opts;
  opts.stacks = gpuguard::stack_mode::all;
  ASSERT_EQ(opts.stack_depth, 16U) << "the default depth is the one that must suffice";
  gpuguard::configure_ledger(opts);
  std::size_t segments = 0;
  for (const char* library : {"libc10", "libtorch", "libgpuguard"}) { segments += gpuguard::skip_frames_in_modules(library); }
  EXPECT_GE(segments, 3U) << "PyTorch's and gpuguard's libraries are loaded: their code segments are found";
  EXPECT_EQ(gpuguard::skip_frames_in_modules("libc10"), 0U) << "a second call adds nothing";

  const auto x = torch::ones({256, 256});
  gpuguard_test::record_cpu_allocations(true);
  gpuguard_test::remember_activations_by_mistake(x);
  gpuguard_test::record_cpu_allocations(false);
  EXPECT_TRUE(gpuguard_test::a_site_begins_with("remember_activations_by_mistake", sizeof(float) * 256 * 256));
  gpuguard_test::kept_by_mistake().clear();
}

}  // namespace
