// Operation scopes: deltas of the calling thread's ledger counters between entry and exit.
//
// Peaks nest through one per-thread watermark: entering a scope saves the watermark and lowers it
// to the thread's net bytes of now; the ledger raises it as memory is allocated; leaving reads it
// (the peak above the scope's start) and puts back the larger of it and the saved value, so the
// enclosing scope's peak still covers what happened inside.
#include <gpuguard/core/op_scope.hpp>

#include "util/kept_for_process.hpp"
#include "ledger/clock.hpp"
#include "ledger/ledger_internal.hpp"
#include "ledger/postmortem.hpp"
#include "outputs/outputs_internal.hpp"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <new>

namespace gpuguard {

namespace {

// Device-wide used bytes of the current device; false if CUDA cannot say.
bool device_used(int& device, std::size_t& used) noexcept {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  used = total - free_bytes;
  return true;
}

// What the device's current stream-ordered pool has reserved from the device and hands out now;
// false if CUDA cannot say (no pool support).
bool pool_figures(int device, std::uint64_t& reserved, std::uint64_t& used) noexcept {
  cudaMemPool_t pool = nullptr;
  // Both attributes are 64-bit unsigned values (cuuint64_t).
  if (cudaDeviceGetMemPool(&pool, device) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  return true;
}

struct probe_slot {
  framework_probe probe;
  const char* name;
};
// One pointer to an immutable slot, so a scope reads probe and name together. Slots are never
// freed: a scope that read the old one may still be using it.
std::atomic<const probe_slot*> installed_probe{nullptr};

int current_device_or_zero() noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return device;
}

}  // namespace

void set_framework_probe(framework_probe probe, const char* name) noexcept {
  const probe_slot* slot = nullptr;
  if (probe != nullptr) {
    slot = new (std::nothrow) probe_slot{probe, name != nullptr ? name : "framework"};  // NOLINT: kept for the process
    if (slot == nullptr) { return; }
    detail::kept_for_process(slot);  // replaced later, it is still never freed
  }
  installed_probe.store(slot, std::memory_order_release);
}

const op_result* current_op() noexcept {
  const auto* scope = static_cast<const op_scope*>(detail::this_thread_state().innermost_scope);
  return scope == nullptr ? nullptr : &scope->result();
}

op_scope::op_scope(std::string_view name) noexcept {
  const unsigned flags = detail::scope_flags();
  const std::size_t length = std::min(name.size(), op_result::max_name);
  std::memcpy(result_.name, name.data(), length);
  result_.name[length] = '\0';

  // The first scope of the process: a source that records later catches up before it starts.
  if (!detail::thread_context_used().load(std::memory_order_relaxed)) { detail::note_thread_context(); }
  detail::thread_state& thread = detail::this_thread_state();
  thread_ = &thread;
  detail::thread_memory& counts = thread.memory;
  allocated_at_start_ = counts.allocated_bytes;
  freed_at_start_ = counts.freed_bytes;
  allocs_at_start_ = counts.allocations;
  frees_at_start_ = counts.frees;
  net_at_start_ = counts.net;
  parent_peak_ = counts.peak;
  counts.peak = counts.net;

  parent_ = static_cast<op_scope*>(thread.innermost_scope);
  thread.innermost_scope = this;
  result_.depth = parent_ == nullptr ? 0 : static_cast<std::uint16_t>(parent_->result_.depth + 1);
  result_.thread = detail::thread_id(thread);
  detail::postmortem::scope_entered(result_.depth, result_.name, result_.thread);
  uncaught_at_start_ = std::uncaught_exceptions();
  if ((flags & detail::scope_device_query) != 0) {
    result_.device_queried = device_used(result_.device, result_.used_before);
    result_.pool_queried = result_.device_queried &&
                           pool_figures(result_.device, pool_reserved_at_start_, pool_used_at_start_);
  }
  if (const probe_slot* slot = installed_probe.load(std::memory_order_acquire); slot != nullptr) {
    const int device = result_.device_queried ? result_.device : current_device_or_zero();
    if (slot->probe(device, framework_at_start_)) {
      probe_ = slot->probe;
      result_.framework = slot->name;
      result_.device = device;
    }
  }
  if ((flags & detail::scope_nvtx) != 0) {
    nvtxRangePushA(result_.name);
    nvtx_ = true;
  }
  // Last: the setup above is not the operation's time. The raw reading is converted when the
  // start is first asked for (result(), current_op()) or at the end, not here, on the operation's
  // way in.
  start_ticks_ = detail::now_ticks();
}

const op_result& op_scope::result() const noexcept {
  if (!start_known_) {
    result_.start_ns = detail::ticks_to_ns(start_ticks_);
    start_known_ = true;
  }
  return result_;
}

op_scope::~op_scope() { static_cast<void>(end()); }

const op_result& op_scope::end() noexcept {
  if (ended_) { return result_; }
  ended_ = true;
  const std::int64_t end_ticks = detail::now_ticks();
  static_cast<void>(result());  // the start, if nothing asked for it yet
  // One scale for both ends: the writer refines it now and then, and the start converted with
  // the old scale would put the difference of the two scales over the clock's whole run into the
  // duration.
  result_.duration_ns = detail::ticks_to_duration_ns(end_ticks - start_ticks_);
  detail::thread_state& thread = *static_cast<detail::thread_state*>(thread_);
  detail::thread_memory& counts = thread.memory;
  result_.alloc_bytes = counts.allocated_bytes - allocated_at_start_;
  result_.free_bytes = counts.freed_bytes - freed_at_start_;
  result_.allocs = counts.allocations - allocs_at_start_;
  result_.frees = counts.frees - frees_at_start_;
  result_.net_bytes = counts.net - net_at_start_;
  result_.peak_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(counts.peak - net_at_start_, 0));
  counts.peak = std::max(parent_peak_, counts.peak);
  result_.exception = std::uncaught_exceptions() > uncaught_at_start_;
  if (result_.device_queried) {
    int device = result_.device;
    int current = device;
    // Query the device of the entry even if the operation switched devices.
    const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device &&
                          cudaSetDevice(device) == cudaSuccess;
    result_.device_queried = device_used(device, result_.used_after);
    std::uint64_t reserved = 0;
    std::uint64_t used = 0;
    result_.pool_queried = result_.pool_queried && result_.device_queried && pool_figures(device, reserved, used) &&
                           (reserved != 0 || pool_reserved_at_start_ != 0);  // a pool never used says nothing
    if (result_.pool_queried) {
      result_.pool_reserved_delta = static_cast<std::int64_t>(reserved - pool_reserved_at_start_);
      result_.pool_used_delta = static_cast<std::int64_t>(used - pool_used_at_start_);
    }
    if (switched) { static_cast<void>(cudaSetDevice(current)); }
  }
  if (probe_ != nullptr) {
    framework_memory now{};
    if (probe_(result_.device, now)) {
      result_.framework_allocated_delta = static_cast<std::int64_t>(now.allocated - framework_at_start_.allocated);
      result_.framework_reserved_delta = static_cast<std::int64_t>(now.reserved - framework_at_start_.reserved);
    } else {
      result_.framework = nullptr;
    }
  }
  if (nvtx_) { nvtxRangePop(); }
  if (thread.innermost_scope == this) { thread.innermost_scope = parent_; }
  detail::postmortem::scope_left(result_.depth);
  detail::submit(result_, thread);
  return result_;
}

}  // namespace gpuguard
