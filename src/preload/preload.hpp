// What the two halves of libgpuguard_preload.so share: driver_hooks.cpp finds and wraps the CUDA
// driver's memory entry points; preload.cpp records what they did in the ledger and reports at exit.
#pragma once
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/memory_resource.hpp>
#include <gpuguard/core/options.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace gpuguard::preload {

/// On the functions of the stream-ordered pair's common path: GCC places them together (.text.hot),
/// so that after a driver call, which displaces them from the caches, the path is one short stretch
/// of code to fetch again rather than pieces spread over the library.
#define GPUGUARD_HOT_PATH __attribute__((hot))

// ---- what every wrapped call reads ------------------------------------------------------------

/// The state a wrapped call reads, on one cache line of its own: after the driver call a wrapper
/// makes, one line of it to fetch again, not one per file. Each field belongs to the file named.
struct alignas(64) hot_state {
  // deferred.cpp: the ring's producer side (written by its owner only) and the deferring mode.
  std::atomic<std::uint64_t> ring_tail{0};
  std::uint64_t ring_seen_head = 0;  // the owner's last look at the consumer's head
  std::atomic<int> defer_mode{0};
  // driver_hooks.cpp: bit d, device d's default pool served a stream-ordered allocation (read at
  // exit); whether the process has one device (-1: not asked yet).
  std::atomic<std::uint64_t> async_devices{0};
  std::atomic<std::int8_t> one_device{-1};
  // preload.cpp: this process recorded an allocation; whether PyTorch's CUDA library is loaded,
  // and whether to look for it again.
  std::atomic<bool> recorded{false};
  std::atomic<bool> torch_loaded{false};
  std::atomic<bool> recheck_frameworks{true};
  // deferred.cpp: whether the CPU has PREFETCHW (set before deferring starts).
  std::atomic<bool> write_prefetch{false};
  // deferred.cpp: whether the ring's owner may write a stream-ordered allocation straight to the
  // ring (refresh_common, below, says when and keeps it).
  std::atomic<bool> common{false};
};
static_assert(sizeof(hot_state) == 64, "one cache line");
extern hot_state hot;

/// Sets hot.common to whether a stream-ordered allocation on device 0 can skip record()'s questions
/// and go to the ring: the process has one device (so every allocation is device 0's), device 0's
/// default pool is already noted as used, no framework is loaded whose holders an allocation's tag
/// is looked up for (nor is one to be looked for again), and a thread owns the ring. Called after
/// each change of any of those; the wrappers read the one flag.
void refresh_common() noexcept;

// ---- preload.cpp: recording -----------------------------------------------------------------

/// A successful allocation of `bytes` at `ptr` (for cuMemCreate: the handle's value); `caller` is
/// the return address of the driver entry point's call, from which the asking code is found.
void record(const void* ptr, std::size_t bytes, int device, cudaStream_t stream, memory_kind kind,
            const void* caller) noexcept;
/// A free of `ptr`, recorded before it is passed on (the address may be reused at once after).
void forget(const void* ptr, int device, cudaStream_t stream) noexcept;
/// The driver's entry points were handed out wrapped at least once (a lookup went through us).
void note_wrapped_lookup() noexcept;

// ---- deferred.cpp: recording off the calling thread ---------------------------------------------

/// A wrapped call, as recorded later.
struct call_record {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;
  int device = 0;
  tag_id tag = untagged;
  memory_kind kind = memory_kind::device;
  bool is_free = false;
};
/// Turns deferring on, unless `opts` asks for stacks or the timeline (jsonl_log, trace_file), or
/// GPUGUARD_TRACK_DEFER=0 is set (once per process).
void start_deferring(const options& opts) noexcept;
/// Hands `call` to the drainer and returns true while the calling thread may defer; else returns
/// false once everything held back is in the ledger, and the caller records `call` itself.
bool defer(const call_record& call) noexcept;
/// "deferred" while one thread's calls are recorded later, else "at_once" (the exit record says it).
[[nodiscard]] const char* recording_mode() noexcept;
#if defined(GPUGUARD_DEFER_TESTING)
/// Tests only: while held, the drainer thread leaves the ring alone (readers still catch up).
void hold_drainer(bool hold) noexcept;
#endif

// ---- driver_hooks.cpp: questions for the driver, through its real entry points ----------------

/// The device of the calling thread's current context (0 when there is none).
[[nodiscard]] int context_device() noexcept;
/// Whether the real driver's entry points were found (the process loaded libcuda).
[[nodiscard]] bool driver_bound() noexcept;
/// Number of lookups answered with a wrapper, and of memory entry points asked for by name whose
/// real address matched no entry point gpuguard knows (so they were handed out unwrapped).
[[nodiscard]] std::uint64_t wrapped_lookups() noexcept;
[[nodiscard]] std::uint64_t unidentified_lookups() noexcept;

/// A device's stream-ordered pools (its default pool, and pools allocated from explicitly).
struct pool_figures {
  std::size_t reserved = 0;
  std::size_t used = 0;
  bool known = false;
};
[[nodiscard]] pool_figures pools_of(int device) noexcept;

/// Memory mapped from other processes (IPC handles, imported shareable handles): not owned here.
struct import_figures {
  std::size_t bytes = 0;        ///< of IPC mappings open now (their size is known)
  std::uint64_t mappings = 0;   ///< IPC mappings open now
  std::uint64_t handles = 0;    ///< imported physical-allocation handles not yet released
};
[[nodiscard]] import_figures imports() noexcept;

/// Physical allocations (cuMemCreate) and how much of them is mapped into the address space now.
struct vmm_figures {
  std::uint64_t handles = 0;
  std::size_t created_bytes = 0;
  std::size_t mapped_bytes = 0;
};
[[nodiscard]] vmm_figures vmm() noexcept;

/// The PCI bus id ("0000:xx:yy.z") of a CUDA device, for matching NVML's devices; false if unknown.
bool device_bus_id(int device, char* out, int size) noexcept;
/// The number of CUDA devices (0 when the driver is not there).
[[nodiscard]] int device_count() noexcept;

}  // namespace gpuguard::preload
