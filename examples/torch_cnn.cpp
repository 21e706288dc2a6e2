// A small CNN trained with LibTorch under gpuguard's adapter (docs/torch.md): scopes around
// forward, backward and the optimizer step, and a bug that keeps one tensor per step alive. At
// exit gpuguard's leak report names the line that kept it.
//
//   torch_cnn [--mode observe|swap_in|native] [--steps N] [--side-stream] [--no-leak] [--bench]
//             [--split STEP]
//
// --mode native runs without gpuguard (for comparison), --side-stream loads each batch on a second
// stream and hands it over with record_stream, --bench times the steps after a warm-up and prints
// the median (the GPU runner compares the modes). --split STEP, with --bench, also prints the
// median of the steps before STEP and of those after it (each after its own warm-up); in observe
// mode it attaches gpuguard at STEP instead of at the start, so that one process runs both native
// and observed steps (benchmarks/torch_bench.py --inside compares them with a native run's halves:
// the spread between processes is wider than the 1 percent it judges). Prints the loss of every
// 10th step and the last; with --bench in observe or swap-in mode (no --split), also the
// allocations gpuguard recorded per timed step.
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/torch.hpp>

#include <ATen/Context.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct cnn : torch::nn::Module {
  cnn()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 8 * 8, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

struct settings {
  std::string mode = "observe";
  int steps = 50;
  bool side_stream = false;
  bool leak = true;
  bool bench = false;
  int split = 0;  // 0: none
};

constexpr int warm_up_steps = 10;  // dropped from --bench's medians, at the start and after --split

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int usage(const char* why) {
  std::fprintf(stderr,
               "torch_cnn: %s\n"
               "usage: torch_cnn [--mode observe|swap_in|native] [--steps N] [--side-stream] [--no-leak] [--bench]\n"
               "                 [--split STEP]\n",
               why);
  return 2;
}

// The bug this example plants: the logits of every step are kept "for debugging" and never used.
std::vector<torch::Tensor> debug_history;
__attribute__((noinline)) void keep_for_debugging(const torch::Tensor& logits) {
  debug_history.push_back(logits.detach().clone());
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mode" && i + 1 < argc) {
      s.mode = argv[++i];
    } else if (arg == "--steps" && i + 1 < argc) {
      s.steps = std::atoi(argv[++i]);
      if (s.steps <= 0) { return usage("--steps needs a positive number"); }
    } else if (arg == "--side-stream") {
      s.side_stream = true;
    } else if (arg == "--no-leak") {
      s.leak = false;
    } else if (arg == "--bench") {
      s.bench = true;
    } else if (arg == "--split" && i + 1 < argc) {
      s.split = std::atoi(argv[++i]);
      if (s.split <= 0) { return usage("--split needs a positive step number"); }
    } else if (arg == "--help" || arg == "-h") {
      usage("a LibTorch training loop under gpuguard");
      return 0;
    } else {
      return usage(("unknown argument: " + arg).c_str());
    }
  }
  if (s.mode != "observe" && s.mode != "swap_in" && s.mode != "native") {
    return usage(("--mode must be observe, swap_in or native, not " + s.mode).c_str());
  }
  if (s.split != 0) {
    if (s.mode == "swap_in") { return usage("--split works in native and observe mode: swap-in must start before the first tensor"); }
    if (s.split <= warm_up_steps || s.split + warm_up_steps >= s.steps) {
      return usage(("--split " + std::to_string(s.split) + " leaves no timed step on one side: it must lie between " +
                    std::to_string(warm_up_steps + 1) + " and --steps - " + std::to_string(warm_up_steps + 1) + " (" +
                    std::to_string(s.steps - warm_up_steps - 1) + ")")
                       .c_str());
    }
  }

  try {
    if (c10::cuda::device_count() == 0) {  // counting devices does not initialise CUDA
      std::fprintf(stderr, "torch_cnn: no CUDA device on this machine\n");
      return 77;
    }
    // Before the first CUDA tensor: swap-in must come first, and observe may.
    if (s.mode == "swap_in") {
      gpuguard::torch::install_allocator();
    } else if (s.mode == "observe" && s.split == 0) {
      gpuguard::torch::observe();
    }
    at::globalContext().setDeterministicCuDNN(true);  // the modes' losses are compared

    torch::manual_seed(0);
    auto model = std::make_shared<cnn>();
    model->to(torch::kCUDA);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    auto side = c10::cuda::getStreamFromPool();
    std::vector<double> step_ms;
    float last_loss = 0;
    // What gpuguard recorded during the timed steps (observe and swap-in, without --split): the
    // events a mode's added time is spread over.
    const int device = c10::cuda::current_device();  // NOLINT(bugprone-signed-char-misuse): a device index, not a character
    std::uint64_t allocations_at_warm_up = 0;

    for (int step = 0; step < s.steps; ++step) {
      if (step == s.split && s.mode == "observe") { gpuguard::torch::observe(); }
      if (step == warm_up_steps) { allocations_at_warm_up = gpuguard::device_counters(device).allocations; }
      const auto start = std::chrono::steady_clock::now();
      torch::Tensor x;
      torch::Tensor y;
      {
        GPUGUARD_OP("load");
        // A fixed synthetic task: the label is the brightest of ten channel patterns.
        const std::uint64_t generator_seed = std::uint64_t{1000} + static_cast<std::uint64_t>(step);
        torch::manual_seed(generator_seed);
        if (s.side_stream) {
          const c10::cuda::CUDAStreamGuard on_side(side);
          x = torch::randn({128, 3, 32, 32}, torch::kCUDA);
          y = std::get<1>(x.mean({1, 2}).reshape({128, 32}).narrow(1, 0, 10).max(1));
          at::cuda::CUDAEvent loaded;
          loaded.record(side);
          loaded.block(c10::cuda::getCurrentCUDAStream());
          x.record_stream(c10::cuda::getCurrentCUDAStream());
          y.record_stream(c10::cuda::getCurrentCUDAStream());
        } else {
          x = torch::randn({128, 3, 32, 32}, torch::kCUDA);
          y = std::get<1>(x.mean({1, 2}).reshape({128, 32}).narrow(1, 0, 10).max(1));
        }
      }
      optimizer.zero_grad();
      torch::Tensor loss;
      {
        GPUGUARD_OP("forward");
        auto logits = model->forward(x);
        loss = torch::nn::functional::cross_entropy(logits, y);
        if (s.leak) { keep_for_debugging(logits); }
      }
      {
        GPUGUARD_OP("backward");
        loss.backward();
      }
      {
        GPUGUARD_OP("optimizer");
        optimizer.step();
      }
      last_loss = loss.item<float>();  // synchronises: the step's time is its GPU time too
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      if (!s.bench && (step % 10 == 0)) { std::printf("step %d loss %.6f\n", step, static_cast<double>(last_loss)); }
    }
    std::printf("final loss %.6f\n", static_cast<double>(last_loss));
    if (s.bench && step_ms.size() > warm_up_steps) {
      const auto first = step_ms.begin();
      const std::vector<double> timed(first + warm_up_steps, step_ms.end());
      std::printf("median step ms %.4f over %zu steps\n", median_of(timed), timed.size());
      if (s.mode != "native" && s.split == 0) {
        const std::uint64_t allocations = gpuguard::device_counters(device).allocations - allocations_at_warm_up;
        std::printf("allocations per step %.1f\n", static_cast<double>(allocations) / static_cast<double>(timed.size()));
      }
      if (s.split != 0) {
        const std::vector<double> before(first + warm_up_steps, first + s.split);
        const std::vector<double> after(first + s.split + warm_up_steps, step_ms.end());
        std::printf("median step ms before step %d %.4f over %zu steps\n", s.split, median_of(before), before.size());
        std::printf("median step ms after step %d %.4f over %zu steps\n", s.split, median_of(after), after.size());
      }
    }
    if (s.leak) {
      std::printf("kept %zu tensors for debugging: gpuguard's report below names where\n", debug_history.size());
    }
    std::fflush(stdout);
    return 0;
  } catch (const gpuguard::torch::usage_error& e) {
    std::fprintf(stderr, "torch_cnn: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "torch_cnn: %s\n", e.what_without_backtrace());
    return 1;
  }
}
