// gpuguard demo: what the guards, the tracking ledger and operation scopes do for a training job.
//  1. a kernel whose inputs, output, stream and timing events are owned by guards;
//  2. a training loop with a scope around each step and its forward, backward and optimizer parts:
//     one line per operation says what it took, its peak and what it left behind; the evaluation
//     in step 3 keeps its outputs in a cache nobody clears (the planted leak);
//  3. a step that throws halfway: its scope is marked, and the memory it had is all back;
//  4. a stream-ordered buffer freed on its stream, and the device restored after a scope.
// At exit the leak report names the line of the planted leak. Tracking and the outputs are on from
// the start (GPUGUARD_OPTIONS applies: scripts/demo.sh adds a JSONL log and renders it as HTML).
// On a machine without a GPU it says so, tracks host memory instead, and runs steps 2 and 3.
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking.hpp>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace {

constexpr std::size_t mib = 1024 * 1024;

__global__ void scale(float* data, float factor, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) { data[i] *= factor; }
}

/// What the ledger says is live on the device the guards use now.
std::size_t tracked_bytes() {
  return gpuguard::device_counters(gpuguard::current_device_resource().device).current_bytes;
}

bool kernel_step() {
  constexpr std::size_t n = 1 << 22;
  const gpuguard::stream stream;
  gpuguard::device_array<float> weights(std::vector<float>(n, 1.5F), stream);
  gpuguard::event start;
  gpuguard::event stop;
  start.record(stream);
  scale<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream.get()>>>(weights.data(), 2.0F, n);
  GPUGUARD_CUDA_TRY(cudaGetLastError(), std::string("scale<<<...>>>"));
  stop.record(stream);
  stop.synchronize();
  const std::vector<float> back = weights.to_host();
  const bool ok = back.front() == 3.0F && back.back() == 3.0F;
  std::printf("[demo] 1. kernel over %zu floats on a guarded stream: %.3f ms, result %s\n", n,
              static_cast<double>(gpuguard::elapsed_time(start, stop).count()),
              ok ? "correct" : "WRONG");
  return ok;
}

void failing_step() {
  GPUGUARD_OP("failing_step");
  gpuguard::device_buffer activations(512 * mib);
  gpuguard::device_array<float> gradients(64 * mib);
  std::printf("[demo] 3. mid-step: %zu MiB tracked\n", tracked_bytes() / mib);
  throw std::runtime_error("kernel reported NaN loss");
}

bool exception_step() {
  const std::size_t before = tracked_bytes();
  try {
    failing_step();
  } catch (const std::exception& error) {
    std::printf("[demo] 3. the step threw \"%s\"\n", error.what());
  }
  const std::size_t after = tracked_bytes();
  std::printf("[demo] 3. tracked before %zu MiB, after the throw %zu MiB: %s\n", before / mib,
              after / mib, after == before ? "nothing lost" : "MEMORY LOST");
  return after == before;
}

bool stream_ordered_step() {
  gpuguard::cuda_async_memory_resource pool;
  const gpuguard::stream stream;
  {
    gpuguard::device_buffer staging(256 * mib, stream, pool);
    GPUGUARD_CUDA_TRY(cudaMemsetAsync(staging.data(), 0, staging.size(), stream.get()));
  }  // freed with cudaFreeAsync on `stream`, no device-wide sync
  stream.synchronize();
  const int before = gpuguard::current_device();
  {
    GPUGUARD_SCOPED_DEVICE(gpuguard::device_count() - 1);
  }
  const bool ok = gpuguard::current_device() == before;
  std::printf("[demo] 4. stream-ordered 256 MiB freed on its stream; device %d restored: %s\n",
              before, ok ? "yes" : "NO");
  return ok;
}

/// The planted bug: evaluation results cached "for later" and never cleared. The cache outlives
/// main, so its buffers are still live when the leak report runs at exit.
std::vector<gpuguard::device_buffer>& eval_cache() {
  static std::vector<gpuguard::device_buffer> cache;
  return cache;
}

// A small model's step: forward keeps activations for backward, backward frees them and makes
// gradients, the optimizer updates in a scratch buffer.
void train_step(int step) {
  GPUGUARD_OP("train_step");
  GPUGUARD_TAG("train_step");
  std::vector<gpuguard::device_buffer> saved;
  saved.reserve(2);
  {
    GPUGUARD_OP("forward");
    saved.emplace_back(192 * mib);                       // activations, kept for backward
    const gpuguard::device_buffer workspace(64 * mib);   // freed at the end of forward
  }
  {
    GPUGUARD_OP("backward");
    const gpuguard::device_buffer gradients(128 * mib);
    saved.clear();                                       // activations freed here
  }
  {
    GPUGUARD_OP("optimizer");
    const gpuguard::device_buffer moments(32 * mib);
  }
  if (step == 3) {
    GPUGUARD_OP("eval");
    GPUGUARD_TAG("eval");
    eval_cache().emplace_back(96 * mib);  // the leak the report at exit points to
  }
}

void training_loop() {
  std::printf("[demo] 2. training loop, 4 steps (the step-3 evaluation leaks 96 MiB):\n");
  for (int step = 1; step <= 4; ++step) { train_step(step); }
  gpuguard::flush_outputs();  // the operation lines are out before the demo prints on
}

}  // namespace

int main() try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the demo's lines and gpuguard's (stderr) in order
  eval_cache().reserve(4);  // made before tracking starts, so it is destroyed after the report
  gpuguard::enable_tracking();
  const bool gpu = gpuguard::has_device() && gpuguard::process_options().device != gpuguard::device_mode::host;
  bool ok = true;
  if (gpu) {
    cudaDeviceProp prop{};
    GPUGUARD_CUDA_TRY(cudaGetDeviceProperties(&prop, gpuguard::current_device()));
    std::printf("[demo] running on GPU %d: %s\n", gpuguard::current_device(), prop.name);
    ok = kernel_step() && ok;
  } else {
    std::printf("[demo] no GPU in use: steps 1 and 4 need one and are skipped; steps 2 and 3 run on "
                "host memory\n");
  }
  training_loop();
  ok = exception_step() && ok;
  gpuguard::flush_outputs();
  if (gpu) { ok = stream_ordered_step() && ok; }
  std::printf("[demo] %s; the leak report follows at exit\n",
              ok ? "steps done: every guard freed what it owned" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "[demo] error: %s\n", error.what());
  return 1;
}
