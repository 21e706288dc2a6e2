// The consumer's device half: a kernel over memory owned by a guard from the host half.
#include <gpuguard/gpuguard.hpp>

namespace {
__global__ void sum(const int* values, std::size_t n, int* out) {
  for (std::size_t i = 0; i < n; ++i) { *out += values[i]; }
}
}  // namespace

int consumer_kernel_sum(const gpuguard::device_array<int>& values) {
  gpuguard::device_array<int> out(std::vector<int>{0});
  sum<<<1, 1>>>(values.data(), values.size(), out.data());
  GPUGUARD_CUDA_TRY(cudaGetLastError(), std::string("sum<<<1, 1>>>"));
  return out.to_host().front();
}
