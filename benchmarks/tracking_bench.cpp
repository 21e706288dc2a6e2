// What tracking costs: every benchmark comes as an untracked baseline and a tracked variant over
// the same upstream, measured in the same run. benchmarks/report.py turns the JSON into ratios.
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/ledger.hpp>
#include <gpuguard/tracking_resource.hpp>

#include <benchmark/benchmark.h>

namespace {

constexpr int bench_device = 60;  // a device id of its own, so the counters touch nothing else

gpuguard::host_memory_resource& host() {
  static gpuguard::host_memory_resource resource;
  return resource;
}
gpuguard::tracking_resource& tracked_host() {
  static gpuguard::tracking_resource resource(host(), bench_device);
  return resource;
}

void pairs(benchmark::State& state, gpuguard::memory_resource& resource, std::size_t bytes,
           gpuguard::stream_view stream = {}) {
  for (auto _ : state) {
    void* p = resource.allocate(bytes, stream);
    benchmark::DoNotOptimize(p);
    resource.deallocate(p, bytes, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

void with_stacks(gpuguard::stack_mode mode) {
  gpuguard::options opts;
  opts.stacks = mode;
  opts.stack_sample = 64;
  gpuguard::configure_ledger(opts);
}

void BM_host_pair_untracked(benchmark::State& state) { pairs(state, host(), 256); }
void BM_host_pair_tracked(benchmark::State& state) { pairs(state, tracked_host(), 256); }

void BM_host_pair_tracked_stacks_all(benchmark::State& state) {
  with_stacks(gpuguard::stack_mode::all);
  pairs(state, tracked_host(), 256);
  with_stacks(gpuguard::stack_mode::off);
}
void BM_host_pair_tracked_stacks_sampled(benchmark::State& state) {
  with_stacks(gpuguard::stack_mode::sampled);
  pairs(state, tracked_host(), 256);
  with_stacks(gpuguard::stack_mode::off);
}

bool gpu_or_skip(benchmark::State& state) {
  if (gpuguard::has_device()) { return true; }
  state.SkipWithError("no CUDA device");
  return false;
}

void BM_cuda_malloc_pair_untracked(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  gpuguard::cuda_memory_resource plain;
  pairs(state, plain, 1 << 20);
}
void BM_cuda_malloc_pair_tracked(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  gpuguard::cuda_memory_resource plain;
  gpuguard::tracking_resource tracked(plain, gpuguard::current_device());
  pairs(state, tracked, 1 << 20);
}
void BM_cuda_async_pair_untracked(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  gpuguard::cuda_async_memory_resource pool;
  const gpuguard::stream stream;
  pairs(state, pool, 1 << 20, stream);
  stream.synchronize();
}
void BM_cuda_async_pair_tracked(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  gpuguard::cuda_async_memory_resource pool;
  gpuguard::tracking_resource tracked(pool, gpuguard::current_device());
  const gpuguard::stream stream;
  pairs(state, tracked, 1 << 20, stream);
  stream.synchronize();
}

}  // namespace

BENCHMARK(BM_host_pair_untracked)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK(BM_host_pair_tracked)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK(BM_host_pair_tracked_stacks_all);
BENCHMARK(BM_host_pair_tracked_stacks_sampled);
BENCHMARK(BM_cuda_malloc_pair_untracked);
BENCHMARK(BM_cuda_malloc_pair_tracked);
BENCHMARK(BM_cuda_async_pair_untracked);
BENCHMARK(BM_cuda_async_pair_tracked);

BENCHMARK_MAIN();
