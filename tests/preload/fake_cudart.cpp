// A stand-in for the CUDA runtime, so that the interposer's CPU test runs a real program through
// real dynamic linking on a machine without a GPU: allocation calls take host memory.
#include <cuda_runtime_api.h>

#include <cstdlib>

#define FAKE extern "C" __attribute__((visibility("default")))

namespace {
// As in the real runtime, the entry points do not call each other through their exported names
// (which the interposer would then see twice).
cudaError_t take(void** ptr, std::size_t bytes) {
  *ptr = std::malloc(bytes);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t give(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
}  // namespace

FAKE cudaError_t cudaMalloc(void** ptr, std::size_t bytes) { return take(ptr, bytes); }
FAKE cudaError_t cudaMallocPitch(void** ptr, std::size_t* pitch, std::size_t width, std::size_t height) {
  *pitch = (width + 511) / 512 * 512;
  return take(ptr, *pitch * height);
}
FAKE cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t /*stream*/) { return take(ptr, bytes); }
FAKE cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) { return take(ptr, bytes); }
FAKE cudaError_t cudaFree(void* ptr) { return give(ptr); }
FAKE cudaError_t cudaFreeAsync(void* ptr, cudaStream_t /*stream*/) { return give(ptr); }
FAKE cudaError_t cudaFreeHost(void* ptr) { return give(ptr); }
FAKE cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
FAKE cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
FAKE cudaError_t cudaDeviceReset() { return cudaSuccess; }
FAKE const char* cudaGetErrorString(cudaError_t /*status*/) { return "fake runtime error"; }
