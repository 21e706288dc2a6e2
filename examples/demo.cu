// gpuguard demo: what the header-only guards do for a training step.
//  1. a kernel whose inputs, output, stream and timing events are owned by guards;
//  2. a step that throws halfway, and the memory it had, all back;
//  3. a stream-ordered buffer freed on its stream, and the device restored after a scope.
// On a machine without a GPU it says so and runs step 2 on host memory.
#include "memory_in_use.hpp"

#include <gpuguard/gpuguard.hpp>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace {

using examples::mib;

__global__ void scale(float* data, float factor, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) { data[i] *= factor; }
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

void failing_step(const gpuguard::host_memory_resource* host) {
  gpuguard::device_buffer activations(512 * mib);
  gpuguard::device_array<float> gradients(64 * mib);
  std::printf("[demo] 2. mid-step: %zu MiB in use\n", examples::memory_in_use(host) / mib);
  throw std::runtime_error("CUDA kernel reported NaN loss");
}

bool exception_step(const gpuguard::host_memory_resource* host) {
  const std::size_t before = examples::memory_in_use(host);
  try {
    failing_step(host);
  } catch (const std::exception& error) {
    std::printf("[demo] 2. the step threw \"%s\"\n", error.what());
  }
  const std::size_t after = examples::memory_in_use(host);
  std::printf("[demo] 2. in use before %zu MiB, after the throw %zu MiB: %s\n", before / mib,
              after / mib, after <= before ? "nothing lost" : "MEMORY LOST");
  return after <= before;
}

bool stream_ordered_step() {
  gpuguard::cuda_async_memory_resource pool;
  const gpuguard::stream stream;
  {
    const gpuguard::device_buffer staging(256 * mib, stream, pool);
    GPUGUARD_CUDA_TRY(cudaMemsetAsync(const_cast<void*>(staging.data()), 0, staging.size(),
                                      stream.get()));
  }  // freed with cudaFreeAsync on `stream`, no device-wide sync
  stream.synchronize();
  const int before = gpuguard::current_device();
  {
    GPUGUARD_SCOPED_DEVICE(gpuguard::device_count() - 1);
  }
  const bool ok = gpuguard::current_device() == before;
  std::printf("[demo] 3. stream-ordered 256 MiB freed on its stream; device %d restored: %s\n",
              before, ok ? "yes" : "NO");
  return ok;
}

}  // namespace

int main() try {
  gpuguard::host_memory_resource host_memory;
  const bool gpu = gpuguard::has_device();
  bool ok = true;
  if (gpu) {
    cudaDeviceProp prop{};
    GPUGUARD_CUDA_TRY(cudaGetDeviceProperties(&prop, gpuguard::current_device()));
    std::printf("[demo] running on GPU %d: %s\n", gpuguard::current_device(), prop.name);
    ok = kernel_step() && ok;
    ok = exception_step(nullptr) && ok;
    ok = stream_ordered_step() && ok;
  } else {
    std::printf("[demo] no CUDA device on this machine: steps 1 and 3 need one and are skipped;\n"
                "[demo] step 2 runs on host memory (gpuguard::host_memory_resource)\n");
    gpuguard::set_current_resource(&host_memory, gpuguard::host_device_id);
    ok = exception_step(&host_memory);
    gpuguard::set_current_resource(nullptr, gpuguard::host_device_id);
  }
  std::printf("[demo] %s\n", ok ? "done: every guard freed what it owned" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "[demo] error: %s\n", error.what());
  return 1;
}
