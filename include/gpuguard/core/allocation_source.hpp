/**
 * @file allocation_source.hpp
 * @brief What an allocation source calls: the ledger's record of an allocation and of a free. The
 *        tracking resource, the LibTorch adapter and the preload interposer are such sources; a
 *        custom allocator becomes one by calling these around its own allocation and free. Part
 *        of the compiled core (gpuguard::gpuguard).
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/memory_resource.hpp>

#include <cstddef>
#include <cstdint>

namespace gpuguard {

/// What a source hands the ledger for a new allocation.
struct allocation_event {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = host_device_id;
  cudaStream_t stream = nullptr;
  memory_kind kind = memory_kind::device;
};

/// What the ledger knew about a freed pointer, so the source can free it correctly.
struct free_result {
  bool known = false;           ///< the pointer was live; `bytes` and `device` are the recorded ones
  bool double_free = false;     ///< the pointer was freed recently and not reallocated since
  std::size_t bytes = 0;
  int device = host_device_id;
};

/// The device of a free whose source does not know or need the current device (the driver-level
/// interposer: the driver frees a pointer of any device): no wrong-device check.
inline constexpr int unknown_device = -2;
/// The size of a free whose size the source does not know (an interposed cudaFree): no size check.
inline constexpr std::size_t unknown_size = static_cast<std::size_t>(-1);

/**
 * Records an allocation (the hot path: no I/O, no global lock, no heap allocation in steady
 * state). The tag is the calling thread's current tag; a stack is captured per `stacks`.
 */
GPUGUARD_API void record_allocation(const allocation_event& event) noexcept;

/**
 * Records a free. `current_device` is the device current at the free (host_device_id for host
 * memory). Misuse (unknown pointer, double free, wrong size, wrong device) is counted and reported
 * on stderr with the stacks involved; with abort_on_error=1 the process aborts after the report.
 */
GPUGUARD_API free_result record_free(const void* ptr, std::size_t bytes, int current_device,
                                     cudaStream_t stream) noexcept;

/**
 * Records a free seen by an interposer (libgpuguard_preload.so), whose size it does not know. The
 * interposer passes every free on to CUDA whatever the ledger says. A pointer the ledger does not
 * know (memory from before tracking began, or from an API the interposer does not see) is counted
 * by `untracked_frees()`, not reported as misuse; a double free or a free on another device still is.
 */
GPUGUARD_API free_result record_interposed_free(const void* ptr, int current_device, cudaStream_t stream) noexcept;

/// Frees of pointers the ledger did not know, seen by an interposer.
GPUGUARD_API std::uint64_t untracked_frees() noexcept;

}  // namespace gpuguard
