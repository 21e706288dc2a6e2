// What `gpuguard run --track` costs the calls it wraps, in a program that knows nothing of gpuguard
// (built as nvcc builds by default: the CUDA runtime linked statically). Prints the median time of
// a cudaMalloc/cudaFree pair and of a cuMemAllocAsync/cuMemFreeAsync pair, each over batches;
// benchmarks/track_overhead.py runs it plain and under --track, interleaved, and takes the ratio.
// Then it times the stream-ordered pair through its own calls and through the driver's entry
// points in alternating batches of one process, and prints their ratio (under --track, what the
// interposer adds to the pair, whatever state the process runs in).
//
// usage: gpuguard_track_bench [BATCHES] [PAIRS_PER_BATCH]     (defaults 31 and 200)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>

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

using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
using dlsym_fn = void* (*)(void*, const char*);

// The driver's own entry point `name`, past any interposer: looked up with the C library's dlsym,
// itself found by its symbol version (an interposer's dlsym has none). Null where not found.
void* driver_entry(const char* name) {
  auto libc_dlsym = reinterpret_cast<dlsym_fn>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (libc_dlsym == nullptr) { libc_dlsym = reinterpret_cast<dlsym_fn>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")); }
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  return libc_dlsym == nullptr || driver == nullptr ? nullptr : libc_dlsym(driver, name);
}

// Nanoseconds per pair of one batch of `pairs` through `alloc` and `release`.
double batch_ns(int pairs, alloc_async_fn alloc, free_async_fn release, CUstream stream) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    CUdeviceptr p = 0;
    if (alloc(&p, bytes, stream) != CUDA_SUCCESS || release(p, stream) != CUDA_SUCCESS) { std::exit(1); }
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / pairs;
}

// The stream-ordered pair through the program's own calls (under --track, the interposer's
// wrappers) and through the driver's entry points, in alternating batches, each in turn first:
// prints the median of the batches' ratios and each side's median. One process, so a process's
// fast or slow state falls on both sides; run plain, the two sides are the same and the ratio
// says what the method itself reads.
void in_one_process(int batches, int pairs, CUstream stream) {
  const auto direct_alloc = reinterpret_cast<alloc_async_fn>(driver_entry("cuMemAllocAsync"));
  const auto direct_free = reinterpret_cast<free_async_fn>(driver_entry("cuMemFreeAsync"));
  if (direct_alloc == nullptr || direct_free == nullptr) {
    std::puts("cuMemAllocAsync pair in one process: the driver's own entry points were not found");
    return;
  }
  std::vector<double> own;
  std::vector<double> direct;
  std::vector<double> ratios;
  for (int b = 0; b < batches; ++b) {
    double o = 0;
    double d = 0;
    if (b % 2 == 0) {
      o = batch_ns(pairs, &cuMemAllocAsync, &cuMemFreeAsync, stream);
      d = batch_ns(pairs, direct_alloc, direct_free, stream);
    } else {
      d = batch_ns(pairs, direct_alloc, direct_free, stream);
      o = batch_ns(pairs, &cuMemAllocAsync, &cuMemFreeAsync, stream);
    }
    own.push_back(o);
    direct.push_back(d);
    ratios.push_back(o / d);
  }
  std::printf("cuMemAllocAsync pair in one process ratio %.4f\ncuMemAllocAsync pair in one process ns %.1f own, %.1f direct\n",
              median(ratios), median(own), median(direct));
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
  std::printf("cudaMalloc pair ns %.1f\ncuMemAllocAsync pair ns %.1f\n", runtime_pair, async_pair);
  in_one_process(batches, pairs, stream);
  cuStreamSynchronize(stream);
  cuStreamDestroy(stream);
  return 0;
}
