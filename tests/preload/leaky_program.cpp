// An ordinary CUDA program that knows nothing of gpuguard and leaks: 9 MiB in 3 allocations of
// cudaMalloc stay live at exit; a cudaMallocHost, a cudaMallocAsync, a cudaMallocPitch and two
// cudaMallocs are freed. Built against the real CUDA runtime (shared) for the GPU test, and
// against a stand-in runtime for the CPU test (fake_cudart.cpp).
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) { return true; }
  std::fprintf(stderr, "leaky_program: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

}  // namespace

int main() {
  void* blocks[5] = {};
  for (int i = 0; i < 5; ++i) {
    if (!ok(cudaMalloc(&blocks[i], static_cast<std::size_t>(i + 1) * mib), "cudaMalloc")) { return 1; }
  }
  void* pinned = nullptr;
  void* async = nullptr;
  void* pitched = nullptr;
  std::size_t pitch = 0;
  if (!ok(cudaMallocHost(&pinned, mib), "cudaMallocHost") ||
      !ok(cudaMallocAsync(&async, 2 * mib, nullptr), "cudaMallocAsync") ||
      !ok(cudaMallocPitch(&pitched, &pitch, 1000, 100), "cudaMallocPitch")) {
    return 1;
  }
  ok(cudaFree(blocks[1]), "cudaFree");
  ok(cudaFree(blocks[3]), "cudaFree");
  ok(cudaFreeHost(pinned), "cudaFreeHost");
  ok(cudaFreeAsync(async, nullptr), "cudaFreeAsync");
  ok(cudaFree(pitched), "cudaFree");
  ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::printf("leaky_program: leaving 9 MiB in 3 allocations behind\n");
  // Leak checkers (compute-sanitizer) report when the context is destroyed.
  ok(cudaDeviceReset(), "cudaDeviceReset");
  return 0;
}
