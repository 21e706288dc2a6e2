// The training job of the evidence harness (docs/evidence.md): a LibTorch loop holding device
// memory, with worker processes that hold device memory too, as data-loader workers with CUDA do.
//
//   evidence_job [--iters N] [--main-mib M] [--workers W] [--worker-mib M]
//                [--fail none|throw|oom] [--fail-at K] [--guarded]
//
// Prints "pid P" first, then "iter K" after each iteration (the harness kills it at one of them),
// and "fault throw|oom" just before it fails on purpose (the harness times recovery from there).
// --fail throw ends iteration K with an uncaught exception, --fail oom with an allocation the
// device cannot hold (PyTorch's out-of-memory error, uncaught). Plain, workers are started with
// posix_spawn and nothing else: when the job dies they are orphans that keep their memory.
// --guarded turns gpuguard on inside the job too: the LibTorch adapter (leak report, exit paths)
// and gpuguard::spawn for the workers (they die with the job). The harness also runs the guarded
// arm under `gpuguard run`.
#include <gpuguard/core/child_process.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/torch.hpp>
#include <gpuguard/core/tracking.hpp>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/torch.h>

#include <spawn.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char** environ;  // NOLINT: POSIX declares it nowhere in C++

namespace {

struct settings {
  int iters = 1000;
  std::int64_t main_mib = 2048;
  int workers = 2;
  std::int64_t worker_mib = 1024;
  std::string fail = "none";
  int fail_at = -1;
  bool guarded = false;
  bool worker = false;
};

int usage(const std::string& why) {
  std::fprintf(stderr,
               "evidence_job: %s\nusage: evidence_job [--iters N] [--main-mib M] [--workers W] [--worker-mib M] "
               "[--fail none|throw|oom] [--fail-at K] [--guarded]\n",
               why.c_str());
  return 2;
}

torch::Tensor hold_mib(std::int64_t mib) {
  return torch::ones({mib << 20}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
}

// A worker says it holds its memory with a file the job waits for (training starts once its
// data-loader workers are up, so a kill at any iteration finds them holding memory).
std::string ready_prefix(pid_t job) { return "gpuguard-evidence-ready-" + std::to_string(job) + "-"; }

[[noreturn]] void run_worker(std::int64_t mib) {
  const torch::Tensor held = hold_mib(mib);
  torch::cuda::synchronize();
  const std::ofstream ready(std::filesystem::temp_directory_path() /
                            (ready_prefix(::getppid()) + std::to_string(::getpid())));
  for (;;) { std::this_thread::sleep_for(std::chrono::seconds(1)); }
}

void wait_for_workers(int count) {
  const std::string prefix = ready_prefix(::getpid());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    std::vector<std::filesystem::path> ready;
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
      if (entry.path().filename().string().rfind(prefix, 0) == 0) { ready.push_back(entry.path()); }
    }
    if (static_cast<int>(ready.size()) >= count) {
      for (const auto& p : ready) { std::filesystem::remove(p); }
      return;
    }
    if (std::chrono::steady_clock::now() > deadline) { throw std::runtime_error("the workers did not start within 120 s"); }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> worker_argv(const char* self, const settings& s) {
  return {self, "--worker", "--worker-mib", std::to_string(s.worker_mib)};
}

void start_worker_plain(const char* self, const settings& s) {
  std::vector<std::string> args = worker_argv(self, s);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) { argv.push_back(a.data()); }
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("posix_spawn of a worker failed");
  }
}

}  // namespace

// Some runs end by an uncaught exception on purpose: that is the failure under study.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--iters" && has_value) {
      s.iters = std::atoi(argv[++i]);
    } else if (arg == "--main-mib" && has_value) {
      s.main_mib = std::atoll(argv[++i]);
    } else if (arg == "--workers" && has_value) {
      s.workers = std::atoi(argv[++i]);
    } else if (arg == "--worker-mib" && has_value) {
      s.worker_mib = std::atoll(argv[++i]);
    } else if (arg == "--fail" && has_value) {
      s.fail = argv[++i];
    } else if (arg == "--fail-at" && has_value) {
      s.fail_at = std::atoi(argv[++i]);
    } else if (arg == "--guarded") {
      s.guarded = true;
    } else if (arg == "--worker") {
      s.worker = true;
    } else {
      return usage("unknown or incomplete argument: " + arg);
    }
  }
  if (s.fail != "none" && s.fail != "throw" && s.fail != "oom") { return usage("--fail must be none, throw or oom"); }
  if (s.iters < 1 || s.main_mib < 0 || s.workers < 0 || s.worker_mib < 0) { return usage("counts must not be negative"); }
  if (c10::cuda::device_count() == 0) {
    std::fprintf(stderr, "evidence_job: no CUDA device on this machine\n");
    return 77;
  }
  if (s.worker) { run_worker(s.worker_mib); }

  std::printf("pid %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  if (s.guarded) { gpuguard::torch::observe(); }
  std::vector<gpuguard::child_process> guarded_workers;  // ended with the job, on every exit path
  guarded_workers.reserve(static_cast<std::size_t>(s.workers));
  for (int w = 0; w < s.workers; ++w) {
    if (s.guarded) {
      guarded_workers.push_back(gpuguard::spawn(worker_argv(argv[0], s)));
    } else {
      start_worker_plain(argv[0], s);
    }
  }
  const torch::Tensor held = hold_mib(s.main_mib);
  wait_for_workers(s.workers);
  auto weights = torch::randn({2048, 2048}, torch::kCUDA).requires_grad_();
  for (int i = 0; i < s.iters; ++i) {
    GPUGUARD_OP("step");
    if (i == s.fail_at && s.fail != "none") {
      std::printf("fault %s\n", s.fail.c_str());
      std::fflush(stdout);
    }
    if (i == s.fail_at && s.fail == "throw") {
      throw std::runtime_error("loss is NaN at iteration " + std::to_string(i));  // uncaught on purpose
    }
    if (i == s.fail_at && s.fail == "oom") {
      static_cast<void>(hold_mib(std::int64_t{1} << 20));  // 1 TiB: PyTorch's OutOfMemoryError, uncaught
    }
    auto x = torch::randn({512, 2048}, torch::kCUDA);
    auto loss = torch::matmul(x, weights).pow(2).mean();
    loss.backward();
    {
      const torch::NoGradGuard no_grad;
      weights -= 1e-6 * weights.grad();
      weights.grad().zero_();
    }
    torch::cuda::synchronize();
    std::printf("iter %d\n", i);
    std::fflush(stdout);
  }
  return 0;
}
