// What tracking costs. Every benchmark comes as a pair over the same upstream, measured in the
// same run: an untracked baseline and the same work through gpuguard::tracking_resource, so the
// results are read as ratios (benchmarks/run_benchmarks.py writes them into docs/benchmarks.md).
//
//   BM_host_pair/{untracked,tracked}/real_time/threads:{1,16}
//       one allocate+deallocate of 256 bytes on host memory per iteration, stacks off. The host
//       upstream is malloc (malloc_resource.hpp): it scales with threads, so the baseline does.
//       With more than one thread, the counter threads_sharing_a_shard says how many threads
//       reuse a block whose record shares its shard of the live table with another's.
//   BM_host_pair/tracked_postmortem/real_time/threads:1
//       the tracked pair while a post-mortem region of the benchmark's own is attached (as under
//       `gpuguard run`): minus BM_host_pair/untracked, what keeping the region current adds.
//   BM_host_pair_stacks_{all,sampled}/{untracked,tracked}/real_time
//       the same pair with stacks=all, or stacks=sampled with stack_sample=64, run 16 calls below
//       the benchmark function in the bench's own code, built with frame pointers as gpuguard is:
//       the 16 frames a capture keeps (stack_depth's default) lie in code with frame pointers, as in
//       an application built so. The stacks come from the frame-pointer walk.
//   BM_host_pair_stacks_all/tracked_unwinder/real_time
//       the same as stacks_all/tracked with fast_unwind=0: every stack by the unwind tables, through
//       the per-thread capture cache (which answers this loop's one repeated stack).
//   BM_host_pair_stacks_all_sites/{tracked,tracked_unwinder}/real_time
//       stacks=all with the pairs made at 8 call sites in turn, all at the same stack depth, with
//       the frame-pointer walk or with fast_unwind=0: 8 stacks starting at one stack address are
//       more than the capture cache keeps for that address, as an application's many sites are.
//   BM_cuda_malloc_pair/{untracked,tracked}/real_time
//       one cudaMalloc+cudaFree of 1 MiB per iteration.
//   BM_cuda_malloc_pair/tracked_stacks/real_time
//       the same tracked, with stacks=all (the default, so that the leak report names each site).
//   BM_cuda_async_pair/{untracked,tracked}/real_time
//       one cudaMallocAsync+cudaFreeAsync of 1 MiB on one stream per iteration.
//   BM_cuda_async_pair/alternating/real_time
//       the same two, in one loop: each iteration times a batch of untracked pairs and a batch of
//       tracked pairs (in turn first), and the counters give the median batch of each, per pair
//       (untracked_ns, tracked_ns), and the median of the iterations' tracked / untracked ratios
//       with its quartiles (ratio, ratio_p25, ratio_p75). The pool's pair drifts by more than
//       tracking adds to it between the two benchmarks above; a ratio taken within one iteration
//       sees both under the same drift.
//   BM_host_pool_pair/{untracked,tracked}/real_time
//       the host pair (256 B) from gpuguard's caching pool over malloc: what the pool's own
//       bookkeeping (its lock, its free sets, its table of live blocks) costs beside malloc's.
//   BM_cuda_pool_pair/{untracked,tracked}/real_time
//       one allocate+deallocate of 1 MiB from gpuguard's caching pool over cudaMalloc (the
//       LibTorch swap-in's default upstream) on one stream: read beside BM_cuda_malloc_pair and
//       BM_cuda_async_pair, the same size.
//   BM_cuda_get_device/real_time
//       one cudaGetDevice: what the tracking resource adds to each device free besides the ledger
//       (it passes the current device to record_free for the wrong-device check).
//   BM_cu_ctx_get_device/real_time
//       one cuCtxGetDevice, the driver's answer to the same question, which the tracking resource
//       asks instead, falling back to cudaGetDevice where no context is current.
//   BM_shard_pair/{apart,together}/real_time/threads:2
//       each of two threads records an allocation and a free of one fixed address of its own
//       straight into the ledger (no memory behind it): apart, the two addresses are in different
//       shards of the live table; together, in the same one, so the threads pass its lock and
//       table lines between them. What a thread that reuses one block pays when another such
//       thread shares its shard (see ledger.cpp on the number of shards).
//   BM_aligned_pair/{512_bytes,2_mib}/real_time
//       with 20000 records of addresses 512 bytes or 2 MiB apart (device blocks and large device
//       buffers are aligned so) live in the ledger, one record and free of a further such address
//       per iteration, straight into the ledger. The live table must spread aligned addresses
//       over its slots, or each lookup walks a run of neighbours.
//   BM_clock_read/{tsc,steady_clock}/real_time
//       one read of the TSC (x86-64 only), or of std::chrono::steady_clock. The ledger reads the
//       TSC once per allocation where it is invariant, steady_clock elsewhere; an operation scope
//       reads it twice. The context's invariant_tsc (1 or 0) says which this machine gets, so a
//       machine's tracking cost can be read against what its clock costs.
//
// The CUDA benchmarks report "no CUDA device" as a skip (SkipWithError) on a machine without a
// GPU, so the run completes there.
#include <gpuguard/cuda_memory_resources.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/pool_memory_resource.hpp>
#include <gpuguard/stream.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "bench_stats.hpp"
#include "ledger/postmortem.hpp"
#include "ledger/shard_hash.hpp"
#include "malloc_resource.hpp"

#include <benchmark/benchmark.h>
#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace {

// A device id of the benchmark's own, so its counters touch nothing else in the ledger.
constexpr int bench_device = 60;
constexpr std::size_t host_bytes = 256;
constexpr std::size_t cuda_bytes = std::size_t{1} << 20;
constexpr std::uint32_t sample_every = 64;

// Resources are created once and shared: with ->Threads(16) the benchmark function runs on 16
// threads at once, and function-local statics are initialised exactly once.
gpuguard_bench::malloc_resource& host() {
  static gpuguard_bench::malloc_resource resource;
  return resource;
}
gpuguard::tracking_resource& tracked_host() {
  static gpuguard::tracking_resource resource(host(), bench_device);
  return resource;
}

/// The process's options (GPUGUARD_OPTIONS on top of the defaults) with the given stack mode, and
/// stacks taken by the frame-pointer walk where it holds (fast) or always by the unwind tables.
gpuguard::options with_stacks(gpuguard::stack_mode mode, bool fast = true) {
  gpuguard::options opts = gpuguard::process_options();
  opts.stacks = mode;
  opts.stack_sample = sample_every;
  opts.fast_unwind = fast;
  return opts;
}

/// Sets a stack mode for the lifetime of this object; the stacks-off options are restored after.
class stacks_scope {
 public:
  explicit stacks_scope(gpuguard::stack_mode mode, bool fast = true) {
    gpuguard::configure_ledger(with_stacks(mode, fast));
  }
  stacks_scope(const stacks_scope&) = delete;
  stacks_scope& operator=(const stacks_scope&) = delete;
  stacks_scope(stacks_scope&&) = delete;
  stacks_scope& operator=(stacks_scope&&) = delete;
  ~stacks_scope() { gpuguard::configure_ledger(with_stacks(gpuguard::stack_mode::off)); }
};

// Each thread's shard of the live table for the block it reuses (see count_shared_shard).
constexpr int max_bench_threads = 64;
std::array<std::atomic<unsigned>, max_bench_threads> thread_shards{};

// How many threads of this run reuse a block whose record shares its shard of the live table
// with another thread's (the birthday problem: ledger.cpp). Each such thread passes the shard's
// lines between cores on every event, so the count tells a run's 16-thread figure from a run
// with more or fewer of them. Reported as a counter that sums over the threads: each adds 1 if
// it shares. Every thread has published its shard before any passes the loop's start barrier.
void publish_shard(benchmark::State& state, const void* block) {
  if (state.threads() > 1 && state.thread_index() < max_bench_threads) {
    thread_shards[static_cast<std::size_t>(state.thread_index())].store(gpuguard::detail::ledger_shard_of(block),
                                                                        std::memory_order_relaxed);
  }
}
void count_shared_shard(benchmark::State& state) {
  if (state.threads() <= 1 || state.threads() > max_bench_threads) { return; }
  const auto mine = static_cast<std::size_t>(state.thread_index());
  bool shares = false;
  for (std::size_t other = 0; other < static_cast<std::size_t>(state.threads()); ++other) {
    shares = shares || (other != mine && thread_shards[other].load(std::memory_order_relaxed) ==
                                             thread_shards[mine].load(std::memory_order_relaxed));
  }
  state.counters["threads_sharing_a_shard"] = shares ? 1 : 0;
}

void pairs(benchmark::State& state, gpuguard::memory_resource& resource, std::size_t bytes,
           gpuguard::stream_view stream = {}) {
  if (state.threads() > 1) {  // the block the loop reuses (malloc's per-thread cache hands it back)
    void* block = resource.allocate(bytes, stream);
    publish_shard(state, block);
    resource.deallocate(block, bytes, stream);
  }
  for (auto _ : state) {
    void* ptr = resource.allocate(bytes, stream);
    benchmark::DoNotOptimize(ptr);
    resource.deallocate(ptr, bytes, stream);
    benchmark::ClobberMemory();
  }
  count_shared_shard(state);
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

// ---- a. host, stacks off --------------------------------------------------------------------------
void BM_host_pair_untracked(benchmark::State& state) { pairs(state, host(), host_bytes); }
void BM_host_pair_tracked(benchmark::State& state) { pairs(state, tracked_host(), host_bytes); }

// The tracked pair while the process keeps a post-mortem region current, as under `gpuguard run`:
// a region of the benchmark's own is attached for this benchmark only (detached after, so the
// other arms run without one). Read beside BM_host_pair/untracked: the difference is what the
// region adds to the host pair's cost.
void BM_host_pair_tracked_postmortem(benchmark::State& state) {
  namespace pm = gpuguard::detail::postmortem;
  static const int region = [] {
    std::string error;
    return pm::create_region(&error);
  }();
  if (region < 0) {
    state.SkipWithError("no post-mortem region (memfd_create failed)");
    return;
  }
  if (state.thread_index() == 0 && !pm::attach(region)) {
    state.SkipWithError("the post-mortem region could not be attached");
    return;
  }
  pairs(state, tracked_host(), host_bytes);
  if (state.thread_index() == 0) { pm::detach(); }
}

// ---- b. host, stacks on ---------------------------------------------------------------------------
// Calls below the benchmark function before the pairs, so that a capture's 16 frames lie in this
// file's code (built with frame pointers) and gpuguard's, not in Google Benchmark's library.
constexpr int stack_nesting = 16;

template <class Body>
__attribute__((noinline)) void nested(int levels, const Body& body) {
  if (levels == 0) {
    body();
  } else {
    nested(levels - 1, body);
  }
  asm volatile("" ::: "memory");  // no tail call: each level keeps its frame
}

void nested_pairs(benchmark::State& state, gpuguard::memory_resource& resource) {
  nested(stack_nesting, [&] { pairs(state, resource, host_bytes); });
}

void BM_host_pair_stacks_all_untracked(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::all);
  nested_pairs(state, host());
}
void BM_host_pair_stacks_all_tracked(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::all);
  nested_pairs(state, tracked_host());
}
void BM_host_pair_stacks_all_tracked_unwinder(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::all, false);
  nested_pairs(state, tracked_host());
}
void BM_host_pair_stacks_sampled_untracked(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::sampled);
  nested_pairs(state, host());
}
void BM_host_pair_stacks_sampled_tracked(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::sampled);
  nested_pairs(state, tracked_host());
}

// One pair from call site I: each I is its own function, so its stacks differ from the others'
// only in the return address into it.
template <int I>
__attribute__((noinline)) void pair_at_site(gpuguard::memory_resource& resource) {
  void* ptr = resource.allocate(host_bytes);
  benchmark::DoNotOptimize(ptr);
  resource.deallocate(ptr, host_bytes);
  asm volatile("" ::: "memory");
}

void pairs_at_sites(benchmark::State& state, bool fast) {
  const stacks_scope stacks(gpuguard::stack_mode::all, fast);
  using site_fn = void (*)(gpuguard::memory_resource&);
  constexpr std::array<site_fn, 8> sites = {pair_at_site<0>, pair_at_site<1>, pair_at_site<2>, pair_at_site<3>,
                                            pair_at_site<4>, pair_at_site<5>, pair_at_site<6>, pair_at_site<7>};
  gpuguard::memory_resource& resource = tracked_host();
  nested(stack_nesting, [&] {
    std::size_t next = 0;
    for (auto _ : state) { sites[next++ % sites.size()](resource); }
  });
  state.SetItemsProcessed(state.iterations());
}
void BM_host_pair_stacks_all_sites_tracked(benchmark::State& state) { pairs_at_sites(state, true); }
void BM_host_pair_stacks_all_sites_tracked_unwinder(benchmark::State& state) { pairs_at_sites(state, false); }

// ---- b'. gpuguard's caching pool over host memory -------------------------------------------------
gpuguard::pool_memory_resource& host_pool() {
  static gpuguard::pool_memory_resource resource(host(), gpuguard::host_device_id);
  return resource;
}
gpuguard::tracking_resource& tracked_host_pool() {
  static gpuguard::tracking_resource resource(host_pool(), bench_device);
  return resource;
}
void BM_host_pool_pair_untracked(benchmark::State& state) { pairs(state, host_pool(), host_bytes); }
void BM_host_pool_pair_tracked(benchmark::State& state) { pairs(state, tracked_host_pool(), host_bytes); }

// ---- c. CUDA --------------------------------------------------------------------------------------
bool gpu_or_skip(benchmark::State& state) {
  if (gpuguard::has_device()) { return true; }
  state.SkipWithError("no CUDA device");
  return false;
}

gpuguard::cuda_memory_resource& cuda_plain() {
  static gpuguard::cuda_memory_resource resource;
  return resource;
}
gpuguard::cuda_async_memory_resource& cuda_async() {
  static gpuguard::cuda_async_memory_resource resource;
  return resource;
}
// Device memory is tracked under the device it belongs to (frees enter that device), so these use
// the real current device, not bench_device.
gpuguard::tracking_resource& tracked_cuda_plain() {
  static gpuguard::tracking_resource resource(cuda_plain(), gpuguard::current_device());
  return resource;
}
gpuguard::tracking_resource& tracked_cuda_async() {
  static gpuguard::tracking_resource resource(cuda_async(), gpuguard::current_device());
  return resource;
}
gpuguard::stream& bench_stream() {
  static gpuguard::stream stream;
  return stream;
}

void cuda_pairs(benchmark::State& state, gpuguard::memory_resource& resource) {
  // One pair outside the timing, so the first timed iteration pays no one-time setup.
  resource.deallocate(resource.allocate(cuda_bytes), cuda_bytes);
  pairs(state, resource, cuda_bytes);
}

void cuda_async_pairs(benchmark::State& state, gpuguard::memory_resource& resource) {
  const gpuguard::stream_view stream = bench_stream().view();
  // One pair outside the timing, so the pool has grown before the first timed iteration.
  resource.deallocate(resource.allocate(cuda_bytes, stream), cuda_bytes, stream);
  stream.synchronize();
  pairs(state, resource, cuda_bytes, stream);
  stream.synchronize();
}

void BM_cuda_malloc_pair_untracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_pairs(state, cuda_plain()); }
}
void BM_cuda_malloc_pair_tracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_pairs(state, tracked_cuda_plain()); }
}
void BM_cuda_malloc_pair_tracked_stacks(benchmark::State& state) {
  const stacks_scope stacks(gpuguard::stack_mode::all);
  if (gpu_or_skip(state)) { cuda_pairs(state, tracked_cuda_plain()); }
}
void BM_cuda_async_pair_untracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_async_pairs(state, cuda_async()); }
}
void BM_cuda_async_pair_tracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_async_pairs(state, tracked_cuda_async()); }
}

gpuguard::pool_memory_resource& cuda_pool() {
  static gpuguard::pool_memory_resource resource(cuda_plain(), gpuguard::current_device());
  return resource;
}
gpuguard::tracking_resource& tracked_cuda_pool() {
  static gpuguard::tracking_resource resource(cuda_pool(), gpuguard::current_device());
  return resource;
}
void BM_cuda_pool_pair_untracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_async_pairs(state, cuda_pool()); }
}
void BM_cuda_pool_pair_tracked(benchmark::State& state) {
  if (gpu_or_skip(state)) { cuda_async_pairs(state, tracked_cuda_pool()); }
}

// Nanoseconds per pair of one batch of `count` pairs from `resource` on `stream`.
double batch_ns(gpuguard::memory_resource& resource, gpuguard::stream_view stream, int count) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    void* ptr = resource.allocate(cuda_bytes, stream);
    benchmark::DoNotOptimize(ptr);
    resource.deallocate(ptr, cuda_bytes, stream);
  }
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / count;
}

void BM_cuda_async_pair_alternating(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  constexpr int batch = 32;
  gpuguard::memory_resource& untracked = cuda_async();
  gpuguard::memory_resource& tracked = tracked_cuda_async();
  const gpuguard::stream_view stream = bench_stream().view();
  for (gpuguard::memory_resource* r : {&untracked, &tracked}) {  // the pool grown, outside the timing
    r->deallocate(r->allocate(cuda_bytes, stream), cuda_bytes, stream);
  }
  stream.synchronize();
  std::vector<double> untracked_ns;
  std::vector<double> tracked_ns;
  std::vector<double> ratios;
  bool tracked_first = false;
  for (auto _ : state) {
    double u = 0;
    double t = 0;
    if (tracked_first) {
      t = batch_ns(tracked, stream, batch);
      u = batch_ns(untracked, stream, batch);
    } else {
      u = batch_ns(untracked, stream, batch);
      t = batch_ns(tracked, stream, batch);
    }
    tracked_first = !tracked_first;
    untracked_ns.push_back(u);
    tracked_ns.push_back(t);
    ratios.push_back(t / u);
  }
  stream.synchronize();
  state.SetItemsProcessed(state.iterations() * 2 * batch);
  if (ratios.empty()) { return; }
  state.counters["untracked_ns"] = gpuguard_bench::quantile(untracked_ns, 0.5);
  state.counters["tracked_ns"] = gpuguard_bench::quantile(tracked_ns, 0.5);
  state.counters["ratio_p25"] = gpuguard_bench::quantile(ratios, 0.25);
  state.counters["ratio"] = gpuguard_bench::quantile(ratios, 0.5);
  state.counters["ratio_p75"] = gpuguard_bench::quantile(ratios, 0.75);
}

void BM_cuda_get_device(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  int device = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cudaGetDevice(&device));
    benchmark::DoNotOptimize(device);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_cu_ctx_get_device(benchmark::State& state) {
  if (!gpu_or_skip(state)) { return; }
  using context_device_fn = CUresult(CUDAAPI*)(CUdevice*);
  void* found = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &found, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    state.SkipWithError("the driver has no cuCtxGetDevice");
    return;
  }
  const auto fn = reinterpret_cast<context_device_fn>(found);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  CUdevice device = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fn(&device));
    benchmark::DoNotOptimize(device);
  }
  state.SetItemsProcessed(state.iterations());
}

// ---- d. two threads, one shard or two -------------------------------------------------------------
// Made-up addresses, never dereferenced: the ledger keeps pointers, not memory.
const void* fake_address(std::uintptr_t address) {
  return reinterpret_cast<const void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

constexpr std::uintptr_t shard_base = 0x7f0000001000;

/// The address thread 1 uses: the first after the base that is (together) or is not (apart) in the
/// base's shard.
std::uintptr_t partner_address(bool together) {
  const unsigned home = gpuguard::detail::ledger_shard_of(fake_address(shard_base));
  for (std::uintptr_t address = shard_base + 0x10000;; address += 16) {
    if ((gpuguard::detail::ledger_shard_of(fake_address(address)) == home) == together) {
      return address;
    }
  }
}

void shard_pairs(benchmark::State& state, bool together) {
  static const std::uintptr_t apart = partner_address(false);
  static const std::uintptr_t with = partner_address(true);
  const std::uintptr_t address = state.thread_index() == 0 ? shard_base : (together ? with : apart);
  const void* ptr = fake_address(address);
  for (auto _ : state) {
    gpuguard::record_allocation({ptr, host_bytes, bench_device, nullptr, gpuguard::memory_kind::host});
    static_cast<void>(gpuguard::record_free(ptr, host_bytes, gpuguard::host_device_id, nullptr));
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_shard_pair_apart(benchmark::State& state) { shard_pairs(state, false); }
void BM_shard_pair_together(benchmark::State& state) { shard_pairs(state, true); }

// ---- e. aligned addresses among many live records ---------------------------------------------------
constexpr int aligned_device = 61;
constexpr std::uintptr_t aligned_live = 20000;

void aligned_pairs(benchmark::State& state, std::uintptr_t alignment) {
  const std::uintptr_t base = std::uintptr_t{0x7e0000000000} + alignment;
  const auto address = [&](std::uintptr_t i) { return fake_address(base + i * alignment); };
  for (std::uintptr_t i = 0; i < aligned_live; ++i) {
    gpuguard::record_allocation({address(i), host_bytes, aligned_device, nullptr, gpuguard::memory_kind::host});
  }
  std::uintptr_t next = 0;
  for (auto _ : state) {
    const void* ptr = address(aligned_live + next++ % 64);
    gpuguard::record_allocation({ptr, host_bytes, aligned_device, nullptr, gpuguard::memory_kind::host});
    static_cast<void>(gpuguard::record_free(ptr, host_bytes, gpuguard::host_device_id, nullptr));
  }
  for (std::uintptr_t i = 0; i < aligned_live; ++i) {
    static_cast<void>(gpuguard::record_free(address(i), host_bytes, gpuguard::host_device_id, nullptr));
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_aligned_pair_512(benchmark::State& state) { aligned_pairs(state, 512); }
void BM_aligned_pair_2mib(benchmark::State& state) { aligned_pairs(state, std::uintptr_t{1} << 21); }

// ---- f. the clock ---------------------------------------------------------------------------------
#if defined(__x86_64__)
void BM_clock_read_tsc(benchmark::State& state) {
  for (auto _ : state) { benchmark::DoNotOptimize(__rdtsc()); }
  state.SetItemsProcessed(state.iterations());
}

/// The CPUID bit the ledger's clock checks before it reads the TSC (clock.cpp). The clock also
/// falls back to steady_clock if its calibration against steady_clock fails, which this does not
/// see: a TSC that stood still over half a millisecond.
bool invariant_tsc() {
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  return __get_cpuid(0x80000007U, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1U << 8)) != 0;
}
#endif
void BM_clock_read_steady(benchmark::State& state) {
  for (auto _ : state) { benchmark::DoNotOptimize(std::chrono::steady_clock::now()); }
  state.SetItemsProcessed(state.iterations());
}

void register_benchmarks() {
  for (const int threads : {1, 2, 16}) {
    benchmark::RegisterBenchmark("BM_host_pair/untracked", BM_host_pair_untracked)
        ->Threads(threads)->UseRealTime();
    benchmark::RegisterBenchmark("BM_host_pair/tracked", BM_host_pair_tracked)
        ->Threads(threads)->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_host_pair/tracked_postmortem", BM_host_pair_tracked_postmortem)
      ->Threads(1)->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_all/untracked", BM_host_pair_stacks_all_untracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_all/tracked", BM_host_pair_stacks_all_tracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_all/tracked_unwinder", BM_host_pair_stacks_all_tracked_unwinder)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_all_sites/tracked", BM_host_pair_stacks_all_sites_tracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_all_sites/tracked_unwinder",
                               BM_host_pair_stacks_all_sites_tracked_unwinder)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_sampled/untracked",
                               BM_host_pair_stacks_sampled_untracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pair_stacks_sampled/tracked",
                               BM_host_pair_stacks_sampled_tracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_malloc_pair/untracked", BM_cuda_malloc_pair_untracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_malloc_pair/tracked", BM_cuda_malloc_pair_tracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_malloc_pair/tracked_stacks", BM_cuda_malloc_pair_tracked_stacks)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_async_pair/untracked", BM_cuda_async_pair_untracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_async_pair/tracked", BM_cuda_async_pair_tracked)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_async_pair/alternating", BM_cuda_async_pair_alternating)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pool_pair/untracked", BM_host_pool_pair_untracked)->UseRealTime();
  benchmark::RegisterBenchmark("BM_host_pool_pair/tracked", BM_host_pool_pair_tracked)->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_pool_pair/untracked", BM_cuda_pool_pair_untracked)->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_pool_pair/tracked", BM_cuda_pool_pair_tracked)->UseRealTime();
  benchmark::RegisterBenchmark("BM_cuda_get_device", BM_cuda_get_device)->UseRealTime();
  benchmark::RegisterBenchmark("BM_cu_ctx_get_device", BM_cu_ctx_get_device)->UseRealTime();
  benchmark::RegisterBenchmark("BM_shard_pair/apart", BM_shard_pair_apart)->Threads(2)->UseRealTime();
  benchmark::RegisterBenchmark("BM_shard_pair/together", BM_shard_pair_together)->Threads(2)->UseRealTime();
  benchmark::RegisterBenchmark("BM_aligned_pair/512_bytes", BM_aligned_pair_512)->UseRealTime();
  benchmark::RegisterBenchmark("BM_aligned_pair/2_mib", BM_aligned_pair_2mib)->UseRealTime();
#if defined(__x86_64__)
  benchmark::RegisterBenchmark("BM_clock_read/tsc", BM_clock_read_tsc)->UseRealTime();
  benchmark::AddCustomContext("invariant_tsc", invariant_tsc() ? "1" : "0");
#endif
  benchmark::RegisterBenchmark("BM_clock_read/steady_clock", BM_clock_read_steady)->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  // The stacks-off benchmarks measure stacks off whatever GPUGUARD_OPTIONS says.
  gpuguard::configure_ledger(with_stacks(gpuguard::stack_mode::off));
  // Create the CUDA context before any timing: the first benchmark would otherwise pay for it.
  if (gpuguard::has_device()) { static_cast<void>(cudaFree(nullptr)); }
  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) { return 1; }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
