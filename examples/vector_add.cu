// vector_add: a CUDA kernel whose memory, stream and timing events are all owned by gpuguard's
// header-only guards. Nothing to free by hand, nothing to link but the CUDA runtime.
#include <gpuguard/gpuguard.hpp>

#include <cstdio>
#include <vector>

namespace {
__global__ void add(const float* a, const float* b, float* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) { out[i] = a[i] + b[i]; }
}
}  // namespace

int main() try {
  constexpr std::size_t n = 1 << 20;
  const std::vector<float> a(n, 1.0F);
  const std::vector<float> b(n, 2.0F);

  const gpuguard::stream stream;
  const gpuguard::device_array<float> da(a, stream);
  const gpuguard::device_array<float> db(b, stream);
  gpuguard::device_array<float> out(n, stream);

  gpuguard::event start;
  gpuguard::event stop;
  start.record(stream);
  constexpr unsigned threads = 256;
  add<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream.get()>>>(
      da.data(), db.data(), out.data(), n);
  GPUGUARD_CUDA_TRY(cudaGetLastError(), std::string("add<<<...>>>"));
  stop.record(stream);
  stop.synchronize();

  const std::vector<float> result = out.to_host();
  std::size_t wrong = 0;
  for (const float x : result) { wrong += x != 3.0F ? 1 : 0; }
  std::printf("vector_add: %zu elements, %zu wrong, kernel %.3f ms\n", n, wrong,
              static_cast<double>(gpuguard::elapsed_time(start, stop).count()));
  return wrong == 0 ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "vector_add: %s\n", error.what());
  return 1;
}
