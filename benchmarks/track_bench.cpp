// What `gpuguard run --track` costs the calls it wraps, in a program that knows nothing of gpuguard
// (built as nvcc builds by default: the CUDA runtime linked statically). Prints the median time of
// a cudaMalloc/cudaFree pair and of a cuMemAllocAsync/cuMemFreeAsync pair, each over batches;
// benchmarks/track_overhead.py runs it plain and under --track, interleaved, and takes the ratio.
//
// usage: gpuguard_track_bench [BATCHES] [PAIRS_PER_BATCH]     (defaults 31 and 200)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace {

constexpr std::size_t bytes = std::size_t{1} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double median_ns_per_pair(int batches, int pairs, F&& pair) {
  std::vector<double> per_pair;
  for (int b = 0; b < batches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) {
      if (!pair()) { std::exit(1); }
    }
    const auto end = std::chrono::steady_clock::now();
    per_pair.push_back(std::chrono::duration<double, std::nano>(end - start).count() / pairs);
  }
  return median(per_pair);
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 31;
  const int pairs = argc > 2 ? std::atoi(argv[2]) : 200;
  if (batches < 1 || pairs < 1) {
    std::fputs("usage: gpuguard_track_bench [BATCHES >= 1] [PAIRS_PER_BATCH >= 1]\n", stderr);
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) {  // the context, outside the timing
    std::fputs("gpuguard_track_bench: no usable GPU\n", stderr);
    return 77;
  }
  const double runtime_pair = median_ns_per_pair(batches, pairs, [] {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess && cudaFree(p) == cudaSuccess;
  });
  CUstream stream = nullptr;
  if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) { return 1; }
  const double async_pair = median_ns_per_pair(batches, pairs, [stream] {
    CUdeviceptr p = 0;
    return cuMemAllocAsync(&p, bytes, stream) == CUDA_SUCCESS && cuMemFreeAsync(p, stream) == CUDA_SUCCESS;
  });
  cuStreamSynchronize(stream);
  cuStreamDestroy(stream);
  std::printf("cudaMalloc pair ns %.1f\ncuMemAllocAsync pair ns %.1f\n", runtime_pair, async_pair);
  return 0;
}
