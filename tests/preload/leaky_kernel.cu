// A CUDA program that knows nothing of gpuguard, built by nvcc as it builds by default (the CUDA
// runtime linked statically) and with -cudart shared. It runs a kernel over what it allocates and
// leaks in several ways: two cudaMalloc blocks (3 MiB and 5 MiB), a cudaMallocManaged block
// (1 MiB) and a cudaMallocPitch block stay live; a cudaMalloc block, a managed block and the
// pinned and stream-ordered blocks are freed.
#include <cstdio>

#include <cuda_runtime.h>

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;

__global__ void fill(unsigned char* data, std::size_t bytes, unsigned char value) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] = value;
  }
}

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) { return true; }
  std::fprintf(stderr, "leaky_kernel: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

}  // namespace

int main() {
  void* kept[2] = {};
  void* freed = nullptr;
  void* managed_kept = nullptr;
  void* managed_freed = nullptr;
  void* pitched = nullptr;
  void* pinned = nullptr;
  void* async = nullptr;
  std::size_t pitch = 0;
  cudaStream_t stream = nullptr;
  if (!ok(cudaMalloc(&kept[0], 3 * mib), "cudaMalloc") || !ok(cudaMalloc(&kept[1], 5 * mib), "cudaMalloc") ||
      !ok(cudaMalloc(&freed, 2 * mib), "cudaMalloc") || !ok(cudaMallocManaged(&managed_kept, mib), "cudaMallocManaged") ||
      !ok(cudaMallocManaged(&managed_freed, mib), "cudaMallocManaged") ||
      !ok(cudaMallocPitch(&pitched, &pitch, 3000, 64), "cudaMallocPitch") || !ok(cudaMallocHost(&pinned, mib), "cudaMallocHost") ||
      !ok(cudaStreamCreate(&stream), "cudaStreamCreate") || !ok(cudaMallocAsync(&async, 4 * mib, stream), "cudaMallocAsync")) {
    return 1;
  }
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(kept[0]), 3 * mib, 1);
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(async), 4 * mib, 2);
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(managed_kept), mib, 3);
  ok(cudaFreeAsync(async, stream), "cudaFreeAsync");
  ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  ok(cudaFree(freed), "cudaFree");
  ok(cudaFree(managed_freed), "cudaFree");
  ok(cudaFreeHost(pinned), "cudaFreeHost");
  ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
  std::printf("leaky_kernel: leaving 3 + 5 MiB of cudaMalloc, 1 MiB managed and one pitched block (pitch %zu) behind\n", pitch);
  ok(cudaDeviceReset(), "cudaDeviceReset");  // leak checkers report when the context is destroyed
  return 0;
}
