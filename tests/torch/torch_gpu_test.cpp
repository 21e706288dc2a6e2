// The LibTorch adapter on a GPU (the GPU runner; skipped with a reason elsewhere). Each test runs in
// its own process (gtest_discover_tests): the adapter's mode is for the life of a process.
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/torch.hpp>

#include "gpu_test.hpp"
#include "leak_site.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int device = 0;
constexpr std::int64_t mib = 1 << 20;

struct small_cnn : torch::nn::Module {
  small_cnn()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(32 * 8 * 8, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc;
};

gpuguard::torch::torch_memory torch_figures() {
  gpuguard::torch::torch_memory m;
  EXPECT_TRUE(gpuguard::torch::memory(device, m));
  return m;
}
std::uint64_t torch_allocated() { return torch_figures().allocated; }
// What live tensors asked for: the figure observe mode's ledger equals (docs/torch.md).
std::uint64_t torch_requested() { return torch_figures().requested; }

std::uint64_t ledger_live() { return gpuguard::device_counters(device).current_bytes; }

class torch_gpu : public gpuguard_test::gpu_test {};

// The ledger records the sizes tensors ask for: byte for byte PyTorch's requested bytes, and never
// more than its allocated bytes (the same requests rounded up to PyTorch's 512-byte blocks).
void expect_ledger_matches_torch(const std::string& where) {
  const gpuguard::torch::torch_memory m = torch_figures();
  EXPECT_EQ(ledger_live(), m.requested) << "requested bytes, " << where;
  EXPECT_LE(ledger_live(), m.allocated) << "allocated bytes, " << where;
}

TEST_F(torch_gpu, observe_ledger_equals_torch_requested_at_every_checkpoint_of_training) {
  gpuguard::torch::observe();
  torch::manual_seed(0);
  auto model = std::make_shared<small_cnn>();
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  expect_ledger_matches_torch("after the model moved to the GPU");
  EXPECT_LT(ledger_live(), torch_allocated()) << "the model's odd-sized biases are rounded up by PyTorch";
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({64, 3, 32, 32}, torch::kCUDA);
    auto y = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    expect_ledger_matches_torch("after forward, step " + std::to_string(step));
    loss.backward();
    expect_ledger_matches_torch("after backward, step " + std::to_string(step));
    optimizer.step();
    expect_ledger_matches_torch("after the optimizer step, step " + std::to_string(step));
  }
  EXPECT_GT(ledger_live(), 0U);
  const gpuguard::torch::cache_counters cache = gpuguard::torch::cache(device);
  EXPECT_GE(cache.segment_allocs, 1U);
  gpuguard::torch::torch_memory m;
  ASSERT_TRUE(gpuguard::torch::memory(device, m));
  EXPECT_EQ(cache.reserved_bytes, m.reserved) << "segments seen by the tracker = torch's reserved bytes";
}

TEST_F(torch_gpu, observe_keeps_torchs_own_statistics_and_snapshot_working) {
  auto before_attach = torch::empty({4 * mib}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
  gpuguard::torch::observe();
  EXPECT_EQ(ledger_live(), torch_requested()) << "the tensor from before the attach was entered from a snapshot";
  auto t = torch::empty({8 * mib}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  EXPECT_EQ(stats.allocated_bytes[0].current, static_cast<std::int64_t>(12 * mib));
  const auto snap = c10::cuda::CUDACachingAllocator::snapshot({0, 0}, false);
  std::size_t allocated = 0;
  for (const auto& segment : snap.segments) { allocated += segment.allocated_size; }
  EXPECT_EQ(allocated, static_cast<std::size_t>(12 * mib));
  before_attach.reset();
  EXPECT_EQ(ledger_live(), torch_requested());
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::get()->name(), "native");
}

TEST_F(torch_gpu, observe_names_a_leaked_tensor_with_its_site) {
  // As GPUGUARD_OPTIONS=stacks=all would: the default stack_depth (16) must reach the user's line.
  gpuguard::options opts;
  opts.stacks = gpuguard::stack_mode::all;
  opts.torch = gpuguard::torch_mode::observe;
  gpuguard::torch::enable(opts);
  auto x = torch::ones({1024, 1024}, torch::kCUDA);  // 4 MiB of floats
  gpuguard_test::remember_activations_by_mistake(x);
  x.reset();
  EXPECT_TRUE(gpuguard_test::a_site_begins_with("remember_activations_by_mistake", 4U * mib));
  gpuguard_test::kept_by_mistake().clear();
}

TEST_F(torch_gpu, observe_exception_in_forward_leaves_allocated_memory_where_it_started) {
  gpuguard::torch::observe();
  auto model = std::make_shared<small_cnn>();
  model->to(torch::kCUDA);
  // The first forward makes what PyTorch keeps for the life of the process (cuDNN and cuBLAS
  // workspaces); a completed forward first, so the claim is about the forward that throws.
  static_cast<void>(model->forward(torch::randn({256, 3, 32, 32}, torch::kCUDA)));
  const std::uint64_t start = torch_allocated();
  const std::uint64_t start_ledger = ledger_live();
  try {
    GPUGUARD_OP("forward");
    auto x = torch::randn({256, 3, 32, 32}, torch::kCUDA);
    auto out = model->forward(x);
    throw std::runtime_error("loss is NaN");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(torch_allocated(), start);
  EXPECT_EQ(ledger_live(), start_ledger);
}

TEST_F(torch_gpu, observe_out_of_memory_is_torchs_error_and_the_ledger_counts_it) {
  gpuguard::torch::observe();
  const auto kept = torch::empty({16 * mib}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
  const std::uint64_t start = ledger_live();
  bool caught = false;
  testing::internal::CaptureStderr();
  try {
    GPUGUARD_OP("forward");
    static_cast<void>(torch::empty({std::int64_t{1} << 40}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8)));
  } catch (const c10::OutOfMemoryError&) {
    caught = true;
  }
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(caught) << "1 TiB was not refused as PyTorch's OutOfMemoryError";
  // gpuguard's report, before PyTorch's error: what was asked, the open scope, what is live.
  EXPECT_NE(report.find("OUT OF MEMORY"), std::string::npos) << report;
  EXPECT_NE(report.find("in operation \"forward\""), std::string::npos) << report;
  EXPECT_NE(report.find("largest sites"), std::string::npos) << report;
  EXPECT_EQ(gpuguard::torch::cache(device).out_of_memory, 1U);
  EXPECT_EQ(ledger_live(), start);
  auto after = torch::ones({16}, torch::kCUDA);  // the device still works
  EXPECT_EQ(after.sum().item<float>(), 16.0F);
}

TEST_F(torch_gpu, scopes_report_torchs_allocated_and_reserved_deltas) {
  gpuguard::torch::observe();
  torch::Tensor kept;
  gpuguard::op_scope scope("allocate 64 MiB");
  kept = torch::empty({64 * mib}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
  const gpuguard::op_result& r = scope.end();
  ASSERT_NE(r.framework, nullptr);
  EXPECT_STREQ(r.framework, "torch");
  EXPECT_EQ(r.framework_allocated_delta, 64 * mib);
  EXPECT_GE(r.framework_reserved_delta, 0);
  EXPECT_EQ(r.alloc_bytes, static_cast<std::uint64_t>(64 * mib));
  EXPECT_EQ(r.device, device);
}

TEST_F(torch_gpu, swap_in_owns_every_byte_across_streams_with_record_stream) {
  gpuguard::torch::install_allocator();
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::get()->name(), "gpuguard");
  const std::uint64_t start = ledger_live();
  {
    auto side = c10::cuda::getStreamFromPool();
    torch::Tensor produced;
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      produced = torch::full({32 * mib}, 3, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
    }
    at::cuda::CUDAEvent produced_on_side;
    produced_on_side.record(side);
    produced_on_side.block(c10::cuda::getCurrentCUDAStream());
    produced.record_stream(c10::cuda::getCurrentCUDAStream());
    auto sum = produced.to(torch::kInt64).sum();
    EXPECT_EQ(sum.item<std::int64_t>(), mib * 3 * 32);
    EXPECT_GE(ledger_live(), start + 32 * mib);
    EXPECT_EQ(torch_allocated(), ledger_live()) << "torch.cuda.memory_allocated is the ledger's figure";
  }
  c10::cuda::device_synchronize();
  EXPECT_EQ(ledger_live(), start);
  // The pool keeps what was freed into it across synchronisations (so the next step does not map
  // it again), torch.cuda.memory_reserved says so, and empty_cache gives it back.
  EXPECT_GE(torch_figures().reserved, static_cast<std::uint64_t>(32 * mib)) << "freed memory stays in the pool";
  c10::cuda::CUDACachingAllocator::emptyCache();
  EXPECT_LT(torch_figures().reserved, static_cast<std::uint64_t>(32 * mib)) << "empty_cache trims the pool";
  EXPECT_EQ(gpuguard::misuse().total(), 0U);
}

TEST_F(torch_gpu, swap_in_out_of_memory_is_torchs_error) {
  gpuguard::torch::install_allocator();
  bool caught = false;
  try {
    static_cast<void>(torch::empty({std::int64_t{1} << 40}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8)));
  } catch (const c10::OutOfMemoryError&) {
    caught = true;
  }
  EXPECT_TRUE(caught);
  EXPECT_EQ(gpuguard::torch::cache(device).out_of_memory, 1U);
}

}  // namespace
