// Observe mode: PyTorch's native caching allocator tells gpuguard what it does, through its trace
// tracker (called under the allocator's per-device lock, so it only counts and records) and its
// out-of-memory observer. Also the adapter's state, enable(), and PyTorch's own figures.
#include <gpuguard/torch.hpp>

#include <gpuguard/core/cleanup.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/tracking.hpp>

#include "adapter_internal.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <string>

namespace gpuguard::torch {

namespace {

namespace alloc = ::c10::cuda::CUDACachingAllocator;
using trace_entry = ::c10::CachingDeviceAllocator::TraceEntry;

constexpr int max_devices = 64;

struct device_cache {
  std::atomic<std::uint64_t> reserved{0};
  std::atomic<std::uint64_t> peak{0};
  std::atomic<std::uint64_t> segment_allocs{0};
  std::atomic<std::uint64_t> segment_frees{0};
  std::atomic<std::uint64_t> out_of_memory{0};
};
std::array<device_cache, max_devices> caches;

device_cache* cache_of(int device) noexcept {
  return device >= 0 && device < max_devices ? &caches[static_cast<std::size_t>(device)] : nullptr;
}

void segment_taken(int device, std::uint64_t bytes) noexcept {
  device_cache* c = cache_of(device);
  if (c == nullptr) { return; }
  c->segment_allocs.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t now = c->reserved.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::uint64_t peak = c->peak.load(std::memory_order_relaxed);
  while (now > peak && !c->peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

void segment_returned(int device, std::uint64_t bytes) noexcept {
  device_cache* c = cache_of(device);
  if (c == nullptr) { return; }
  c->segment_frees.fetch_add(1, std::memory_order_relaxed);
  c->reserved.fetch_sub(std::min(bytes, c->reserved.load(std::memory_order_relaxed)), std::memory_order_relaxed);
}

// Runs under the allocator's lock on the allocating thread: record and return, nothing else. The
// ledger's record is lock-free per shard and captures a stack only when the options ask.
void on_trace(const trace_entry& entry) {
  const int device = entry.device_;  // NOLINT(bugprone-signed-char-misuse): a device index, not a character
  switch (entry.action_) {
    case trace_entry::ALLOC:
      // size_ is the size the tensor asked for (PyTorch's requested_bytes), not its rounded block.
      record_allocation(allocation_event{reinterpret_cast<const void*>(entry.addr_), entry.size_, device,  // NOLINT(performance-no-int-to-ptr)
                                         static_cast<cudaStream_t>(entry.stream_), memory_kind::device});
      break;
    case trace_entry::FREE_REQUESTED:
      // PyTorch's allocated bytes drop here (a free delayed by record_stream completes later, as
      // FREE_COMPLETED): counting here keeps the ledger equal to torch's allocated bytes.
      // Interposed-style: a tensor from before the attach is counted as untracked, not misuse.
      static_cast<void>(record_interposed_free(reinterpret_cast<const void*>(entry.addr_), device,  // NOLINT(performance-no-int-to-ptr)
                                               static_cast<cudaStream_t>(entry.stream_)));
      break;
    case trace_entry::SEGMENT_ALLOC:
    case trace_entry::SEGMENT_MAP: segment_taken(device, entry.size_); break;
    case trace_entry::SEGMENT_FREE:
    case trace_entry::SEGMENT_UNMAP: segment_returned(device, entry.size_); break;
    case trace_entry::OOM:
      if (device_cache* c = cache_of(device)) { c->out_of_memory.fetch_add(1, std::memory_order_relaxed); }
      break;
    default: break;
  }
}

// Called by PyTorch when an allocation fails for lack of memory, before it throws
// torch.OutOfMemoryError; outside the allocator's lock.
void on_out_of_memory(std::int64_t device, std::size_t requested, std::size_t total, std::size_t free_bytes) {
  out_of_memory_info info;
  info.source = "PyTorch's caching allocator";
  info.device = static_cast<int>(device);
  info.requested = requested;
  info.free_bytes = free_bytes;
  info.total_bytes = total;
  report_out_of_memory(info);
}

// The tensors that existed before the attach, from an allocator snapshot: each allocated block of
// each segment, at the segment's address plus the sizes of the blocks before it, recorded with the
// size its tensor asked for (as the trace tracker's ALLOC entries are).
void enter_existing_tensors() {
  const alloc::SnapshotInfo snap = alloc::snapshot({0, 0}, /*include_traces=*/false);
  const scoped_tag before("torch: before gpuguard attached");
  for (const auto& segment : snap.segments) {
    segment_taken(segment.device, segment.total_size);
    std::size_t offset = 0;
    for (const auto& block : segment.blocks) {
      if (block.allocated) {
        record_allocation(allocation_event{reinterpret_cast<const void*>(segment.address + offset), block.requested_size,  // NOLINT(performance-no-int-to-ptr)
                                           segment.device, static_cast<cudaStream_t>(segment.stream),
                                           memory_kind::device});
      }
      offset += block.size;
    }
  }
}

}  // namespace

namespace detail {

std::mutex& setup_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::atomic<state>& adapter_state() noexcept {
  static std::atomic<state> current{state::off};
  return current;
}

void prepare_reports() {
  static const bool registered = [] {
    // PyTorch keeps a cuBLAS workspace per handle and stream for the life of the process, allocated
    // through its CUDA allocator: without this, every program's leak report would list them.
    register_cleanup("torch: release cuBLAS workspaces", [] { ::at::cuda::clearCublasWorkspaces(); }).keep();
    // From a tensor operation to the allocator lie thirty frames or so of PyTorch's dispatcher,
    // operators and caching allocator, then gpuguard's: without this, stack_depth would be spent
    // on them and the site would never reach the user's line.
    for (const char* library : {"libc10", "libtorch", "libgpuguard"}) { skip_frames_in_modules(library); }
    return true;
  }();
  static_cast<void>(registered);
}

bool probe(int device, framework_memory& out) noexcept {
  torch_memory m;
  if (!memory(device, m)) { return false; }
  out.allocated = m.allocated;
  out.reserved = m.reserved;
  return true;
}

void count_out_of_memory(int device) noexcept {
  if (device_cache* c = cache_of(device)) { c->out_of_memory.fetch_add(1, std::memory_order_relaxed); }
}

}  // namespace detail

const char* to_string(state s) noexcept {
  switch (s) {
    case state::off: return "off";
    case state::observing: return "observing";
    case state::swapped_in: return "swapped_in";
  }
  return "unknown";
}

state current_state() noexcept { return detail::adapter_state().load(std::memory_order_acquire); }

void observe() {
  const std::lock_guard<std::mutex> lock(detail::setup_mutex());
  const state now = current_state();
  if (now == state::observing) { return; }
  if (now == state::swapped_in) {
    throw usage_error("gpuguard::torch::observe(): gpuguard's allocator is already PyTorch's CUDA allocator "
                      "(install_allocator), and it records every allocation itself; observe mode attaches to "
                      "PyTorch's native allocator only");
  }
  alloc::CUDAAllocator* current = alloc::get();
  const std::string name = current != nullptr ? current->name() : std::string("none");
  if (name != "native") {
    throw usage_error("gpuguard::torch::observe(): PyTorch's CUDA allocator is \"" + name +
                      "\", not its native caching allocator, so there is nothing to attach to (is "
                      "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync set, or a pluggable allocator installed?); "
                      "nothing was attached");
  }
  if (::c10::cuda::device_count() == 0) {
    throw usage_error("gpuguard::torch::observe(): CUDA has no device in this process, so PyTorch's CUDA "
                      "allocator cannot be observed; nothing was attached");
  }
  // A tracker attached before the lazy initialisation would be dropped: the per-device allocators
  // it is attached to do not exist yet.
  ::at::globalContext().lazyInitDevice(::c10::DeviceType::CUDA);
  enable_ledger_reporting(process_options());
  enter_existing_tensors();
  alloc::attachAllocatorTraceTracker(on_trace);
  alloc::attachOutOfMemoryObserver(on_out_of_memory);
  set_framework_probe(detail::probe, "torch");
  detail::prepare_reports();
  detail::adapter_state().store(state::observing, std::memory_order_release);
}

void enable(const options& opts) {
  enable_ledger_reporting(opts);
  switch (opts.torch) {
    case torch_mode::observe:
      if (current_state() == state::off) { observe(); }
      break;
    case torch_mode::swap_in:
      if (current_state() == state::off) { install_allocator(); }
      break;
    case torch_mode::off: break;
  }
}

cache_counters cache(int device) noexcept {
  cache_counters out;
  const device_cache* c = cache_of(device);
  if (c == nullptr) { return out; }
  out.reserved_bytes = c->reserved.load(std::memory_order_relaxed);
  out.peak_reserved_bytes = c->peak.load(std::memory_order_relaxed);
  out.segment_allocs = c->segment_allocs.load(std::memory_order_relaxed);
  out.segment_frees = c->segment_frees.load(std::memory_order_relaxed);
  out.out_of_memory = c->out_of_memory.load(std::memory_order_relaxed);
  return out;
}

bool memory(int device, torch_memory& out) noexcept {
  try {
    alloc::CUDAAllocator* current = alloc::get();
    if (current == nullptr || !current->initialized() || device < 0 || device >= ::c10::cuda::device_count()) {
      return false;
    }
    const auto stats = current->getDeviceStats(static_cast<::c10::DeviceIndex>(device));
    constexpr auto all = static_cast<std::size_t>(::c10::CachingAllocator::StatType::AGGREGATE);
    out.requested = static_cast<std::uint64_t>(stats.requested_bytes[all].current);
    out.allocated = static_cast<std::uint64_t>(stats.allocated_bytes[all].current);
    out.reserved = static_cast<std::uint64_t>(stats.reserved_bytes[all].current);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace gpuguard::torch
