// Swap-in mode: gpuguard's tracking allocator becomes PyTorch's CUDA allocator, over gpuguard's
// caching pool (one per device, over cudaMalloc: the default) or over the stream-ordered resource
// (cudaMallocAsync; GPUGUARD_OPTIONS=torch_upstream=async). PyTorch's pluggable allocator does the bookkeeping PyTorch
// needs (sizes, devices and streams of live blocks); gpuguard adds what it lacks: recordStream,
// empty_cache, and memory statistics answered from the ledger.
#include <gpuguard/torch.hpp>

#include <gpuguard/cuda_memory_resources.hpp>
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/pool_memory_resource.hpp>
#include <gpuguard/core/tracking.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "adapter_internal.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpuguard::torch {

namespace {

namespace alloc = ::c10::cuda::CUDACachingAllocator;
namespace pluggable = ::torch::cuda::CUDAPluggableAllocator;

cuda_async_memory_resource& stream_ordered() {
  static cuda_async_memory_resource upstream;
  return upstream;
}

// What the swap-in takes memory from, read once: the options are read once per process.
bool pooled() noexcept {
  static const bool pool = process_options().torch_upstream == torch_upstream_mode::pool;
  return pool;
}

// gpuguard's caching pool of `device` (0..max_pool_devices-1), made at its first allocation and
// never destroyed: PyTorch frees tensors during exit, after static objects are gone.
pool_memory_resource* device_pool(int device);

// The stream-ordered pool keeps what is freed into it until empty_cache. With the pool's default
// release threshold (0) the driver gives all of the pool's free memory back at every
// synchronisation, so each training step mapped its memory again: most of what swap-in cost over
// PyTorch's own cudaMallocAsync backend, which sets the same threshold. Once per device, on its
// first allocation; a device out of range keeps the default.
constexpr int max_pool_devices = 64;

void keep_freed_memory_in_pool(int device) noexcept {
  static std::array<std::atomic<bool>, max_pool_devices> kept{};
  if (device < 0 || device >= max_pool_devices) { return; }
  std::atomic<bool>& done = kept[static_cast<std::size_t>(device)];
  if (done.load(std::memory_order_acquire)) { return; }
  cudaMemPool_t pool = nullptr;
  std::uint64_t threshold = UINT64_MAX;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // the pool keeps its default: slower, still correct
  }
  done.store(true, std::memory_order_release);
}

pool_memory_resource* device_pool(int device) {
  static std::array<std::atomic<pool_memory_resource*>, max_pool_devices> pools{};
  static std::mutex making;
  if (device < 0 || device >= max_pool_devices) { return nullptr; }
  std::atomic<pool_memory_resource*>& slot = pools[static_cast<std::size_t>(device)];
  if (pool_memory_resource* made = slot.load(std::memory_order_acquire)) { return made; }
  const std::lock_guard<std::mutex> lock(making);
  if (pool_memory_resource* made = slot.load(std::memory_order_acquire)) { return made; }
  static auto* segments = new cuda_memory_resource();  // NOLINT(cppcoreguidelines-owning-memory): outlives the pools
  pool_options options;
  options.name = "gpuguard's swap-in pool";
  auto* made = new pool_memory_resource(*segments, device, options);  // NOLINT(cppcoreguidelines-owning-memory): never destroyed
  slot.store(made, std::memory_order_release);
  return made;
}

// The resource swap-in allocations of `device` come from.
memory_resource& upstream_of(int device) {
  if (pooled()) {
    if (pool_memory_resource* pool = device_pool(device)) { return *pool; }
  }
  return stream_ordered();
}

// What the device's pool holds from the driver (live and free blocks), and the most it held;
// false if the pool cannot be asked.
bool pool_reserved(int device, std::uint64_t& current, std::uint64_t& high) noexcept {
  if (pooled()) {
    pool_memory_resource* own = nullptr;
    try {
      own = device_pool(device);
    } catch (...) {  // NOLINT(bugprone-empty-catch): no pool, no figure
    }
    if (own == nullptr) { return false; }
    const pool_statistics figures = own->statistics();
    current = figures.reserved_bytes;
    high = figures.peak_reserved_bytes;
    return true;
  }
  cudaMemPool_t pool = nullptr;
  std::uint64_t now = 0;  // the attributes are cuuint64_t
  std::uint64_t most = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &now) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &most) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  current = now;
  high = most;
  return true;
}

// Streams each block was recorded on (record_stream), beside the one it was allocated on.
struct recorded_streams {
  std::mutex mutex;
  std::unordered_map<void*, std::vector<cudaStream_t>> streams;
  // streams.size(), readable without the mutex: most programs never call record_stream, and their
  // frees then skip the lock and the lookup. A block's record_stream happens before its free (the
  // caching allocator's rule too), so a free that reads 0 has nothing recorded to wait for.
  std::atomic<std::size_t> count{0};
};
recorded_streams& recorded() {
  static auto* table = new recorded_streams();  // NOLINT(cppcoreguidelines-owning-memory): frees may come during exit
  return *table;
}

// Makes `stream` wait for the work queued so far on `other`, without blocking the host.
void order_after(cudaStream_t stream, cudaStream_t other) noexcept {
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    // Without an event, the safe fallback is to wait for `other` on the host.
    gpuguard::detail::report_teardown(cudaStreamSynchronize(other), "swap-in free (wait for a recorded stream)");
    return;
  }
  gpuguard::detail::report_teardown(cudaEventRecord(event, other), "swap-in free (cudaEventRecord)");
  gpuguard::detail::report_teardown(cudaStreamWaitEvent(stream, event, 0), "swap-in free (cudaStreamWaitEvent)");
  gpuguard::detail::report_teardown(cudaEventDestroy(event), "swap-in free (cudaEventDestroy)");
}

[[noreturn]] void unsupported(const char* call, const char* python, const char* instead) {
  C10_THROW_ERROR(NotImplementedError,
                  ::c10::str("gpuguard's swap-in allocator does not support ", call, " (", python, "): ", instead,
                             ". See docs/torch.md, or use gpuguard's observe mode, which keeps PyTorch's own allocator."));
}

// The pluggable allocator with PyTorch's statistics calls answered from gpuguard's ledger.
class gpuguard_allocator final : public pluggable::CUDAPluggableAllocator {
 public:
  gpuguard_allocator()
      : CUDAPluggableAllocator(
            [](std::size_t bytes, int device, cudaStream_t stream) { return detail::swap_allocate(bytes, device, stream); },
            [](void* ptr, std::size_t bytes, int device, cudaStream_t stream) {
              detail::swap_deallocate(ptr, bytes, device, stream);
            }) {
    set_record_stream_fn([](void* ptr, cudaStream_t stream) { detail::swap_record_stream(ptr, stream); });
    set_reset_fn([] { release_pools(); });
  }

  // torch.cuda.memory_allocated, max_memory_allocated, memory_stats: the ledger's exact figures.
  // memory_reserved: what the stream-ordered pool holds from the driver (the ledger's figure where
  // the pool cannot be asked), and its peak the most the pool held.
  ::c10::CachingDeviceAllocator::DeviceStats getDeviceStats(::c10::DeviceIndex device) override {
    const counters c = device_counters(device);
    ::c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr auto aggregate = static_cast<std::size_t>(::c10::CachingAllocator::StatType::AGGREGATE);
    for (auto* array : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      for (auto& stat : *array) { stat = {}; }
      auto& all = (*array)[aggregate];
      all.current = static_cast<std::int64_t>(c.current_bytes);
      all.peak = static_cast<std::int64_t>(c.phase_peak_bytes);
      all.allocated = static_cast<std::int64_t>(c.total_bytes);
      all.freed = static_cast<std::int64_t>(c.total_bytes - c.current_bytes);
    }
    std::uint64_t reserved = 0;
    std::uint64_t reserved_high = 0;
    if (pool_reserved(device, reserved, reserved_high)) {
      auto& all = stats.reserved_bytes[aggregate];
      all.current = static_cast<std::int64_t>(reserved);
      all.peak = static_cast<std::int64_t>(reserved_high);
      all.allocated = 0;  // the pool's own growth is not counted, only its level
      all.freed = 0;
    }
    auto& blocks = stats.allocation[static_cast<std::size_t>(::c10::CachingAllocator::StatType::AGGREGATE)];
    blocks.current = static_cast<std::int64_t>(c.live_count());
    blocks.allocated = static_cast<std::int64_t>(c.allocations);
    blocks.freed = static_cast<std::int64_t>(c.frees);
    stats.num_ooms = static_cast<std::int64_t>(cache(device).out_of_memory);
    return stats;
  }

  // torch.cuda.reset_peak_memory_stats: the ledger's phase peak, which is one for all devices, and
  // the pool's high-water mark of this device.
  void resetPeakStats(::c10::DeviceIndex device) override {
    reset_phase_peak();
    if (pooled()) {
      if (pool_memory_resource* own = device_pool(device)) { own->reset_peaks(); }
      return;
    }
    cudaMemPool_t pool = nullptr;
    std::uint64_t zero = 0;  // resets the mark to the pool's current reservation
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
    }
  }

  void resetAccumulatedStats(::c10::DeviceIndex /*device*/) override {
    unsupported("resetAccumulatedStats", "torch.cuda.reset_accumulated_memory_stats",
                "gpuguard's ledger keeps exact totals for the whole process and never resets them");
  }

  alloc::SnapshotInfo snapshot(::c10::cuda::MempoolId_t /*mempool*/, bool /*include_traces*/) override {
    unsupported("snapshot", "torch.cuda.memory_snapshot, torch.cuda.memory._dump_snapshot",
                "the live allocations are in gpuguard's ledger instead: its leak report, "
                "GPUGUARD_OPTIONS=leak_json=PATH and jsonl_log=PATH");
  }

  std::string name() override { return "gpuguard"; }

  // emptyCache: synchronise, then give every device's unused pool memory back to the driver.
  static void release_pools() noexcept {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return;
    }
    for (int device = 0; device < count; ++device) {
      if (pooled()) {
        pool_memory_resource* own = nullptr;
        try {
          own = device_pool(device);
        } catch (...) {  // NOLINT(bugprone-empty-catch): no pool, nothing to give back
        }
        if (own != nullptr) { static_cast<void>(own->empty()); }  // it synchronizes its device first
        continue;
      }
      const gpuguard::detail::teardown_device_guard on(device, "empty_cache (enter the device)");
      if (!on.entered()) { continue; }
      cudaMemPool_t pool = nullptr;
      if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        continue;
      }
      gpuguard::detail::report_teardown(cudaDeviceSynchronize(), "empty_cache (cudaDeviceSynchronize)");
      gpuguard::detail::report_teardown(cudaMemPoolTrimTo(pool, 0), "empty_cache (cudaMemPoolTrimTo)");
    }
  }
};

// Swap-in starts before CUDA does, so the exit report was registered before the CUDA runtime
// registered its teardown, and would run after it. Registering it again once CUDA is up (the first
// allocation) makes it run first; it runs once whichever registration fires (as the interposer does).
void after_first_allocation() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { static_cast<void>(std::atexit([] { run_exit_report(); })); });
}

std::shared_ptr<gpuguard_allocator>& installed() {
  static std::shared_ptr<gpuguard_allocator> allocator;
  return allocator;
}

}  // namespace

namespace detail {

void* swap_allocate(std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) { return nullptr; }
  const gpuguard::detail::teardown_device_guard on(device, "swap-in allocation (enter the device)");
  TORCH_CHECK(on.entered(), "gpuguard's swap-in allocator could not make device ", device, " current");
  if (!pooled()) { keep_freed_memory_in_pool(device); }
  tracking_resource tracked(upstream_of(device), device);
  try {
    void* ptr = tracked.allocate(bytes, stream_view{stream});
    after_first_allocation();
    return ptr;
  } catch (const out_of_memory& oom) {
    count_out_of_memory(device);
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) { static_cast<void>(cudaGetLastError()); }
    out_of_memory_info info;
    info.source = "gpuguard's swap-in allocator";
    info.device = device;
    info.requested = bytes;
    info.free_bytes = free_bytes;
    info.total_bytes = total;
    report_out_of_memory(info);
    C10_THROW_ERROR(OutOfMemoryError, oom.what());
  } catch (const cuda_error& failure) {
    C10_THROW_ERROR(Error, failure.what());
  }
}

void swap_deallocate(void* ptr, std::size_t bytes, int device, cudaStream_t stream) noexcept {
  if (ptr == nullptr) { return; }
  const gpuguard::detail::teardown_device_guard on(device, "swap-in free (enter the device)");
  std::vector<cudaStream_t> others;
  if (recorded_streams& table = recorded(); table.count.load(std::memory_order_acquire) != 0) {
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (const auto found = table.streams.find(ptr); found != table.streams.end()) {
      others.swap(found->second);
      table.streams.erase(found);
      table.count.store(table.streams.size(), std::memory_order_release);
    }
  }
  for (cudaStream_t other : others) {
    if (other != stream) { order_after(stream, other); }
  }
  tracking_resource tracked(upstream_of(device), device);  // the pool exists: it made the block
  tracked.deallocate(ptr, bytes, stream_view{stream});
}

void swap_record_stream(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) { return; }
  recorded_streams& table = recorded();
  const std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<cudaStream_t>& streams = table.streams[ptr];
  table.count.store(table.streams.size(), std::memory_order_release);
  for (cudaStream_t s : streams) {
    if (s == stream) { return; }
  }
  streams.push_back(stream);
}

}  // namespace detail

bool can_install_allocator() {
  alloc::CUDAAllocator* current = alloc::get();
  return current == nullptr || !current->initialized();
}

void install_allocator() {
  const std::lock_guard<std::mutex> lock(detail::setup_mutex());
  const state now = current_state();
  if (now == state::swapped_in) { return; }
  if (now == state::observing) {
    throw usage_error("gpuguard::torch::install_allocator(): observe mode is already attached to PyTorch's "
                      "native allocator in this process; choose one mode, before the first CUDA tensor. "
                      "Nothing was changed");
  }
  if (!can_install_allocator()) {
    throw usage_error("gpuguard::torch::install_allocator() was called too late: CUDA is already initialised "
                      "in this process (a CUDA tensor or a torch.cuda call came first), and PyTorch's allocator "
                      "can only be replaced before that. Nothing was changed: PyTorch's own allocator stays. "
                      "Call it at the start of main, or use observe mode (gpuguard::torch::observe())");
  }
  auto allocator = std::make_shared<gpuguard_allocator>();
  try {
    pluggable::changeCurrentAllocator(allocator);
  } catch (const ::c10::Error& refused) {
    throw usage_error(std::string("gpuguard::torch::install_allocator(): PyTorch refused the swap: ") +
                      refused.what_without_backtrace() + ". Nothing was changed");
  }
  installed() = std::move(allocator);
  enable_ledger_reporting(process_options());
  set_framework_probe(detail::probe, "torch");
  detail::prepare_reports();
  detail::adapter_state().store(state::swapped_in, std::memory_order_release);
}

}  // namespace gpuguard::torch
