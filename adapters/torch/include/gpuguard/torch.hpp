/**
 * @file torch.hpp
 * @brief The LibTorch adapter (`gpuguard::torch`, docs/torch.md): PyTorch's CUDA memory in
 *        gpuguard's ledger, either by observing PyTorch's own caching allocator or by putting
 *        gpuguard's tracking allocator in its place.
 *
 * Observe mode (the default) leaves PyTorch's allocator, its statistics and its snapshots as they
 * are and records every tensor allocation and free it makes; the segments its cache takes from and
 * returns to the device are counted beside them (`cache_counters`). Swap-in mode makes gpuguard
 * own every byte: allocations go to cudaMallocAsync on the caller's stream through gpuguard's
 * tracking, and PyTorch's memory statistics are answered from gpuguard's ledger.
 *
 * Either way, operation scopes (GPUGUARD_OP) also report PyTorch's allocated and reserved deltas,
 * and the leak report at exit lists the tensors still alive, by site (stacks=all or sampled).
 */
#pragma once

#include <gpuguard/core/options.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpuguard::torch {

/// The adapter was used in a way it cannot honour; `what()` says what and why. Nothing was changed.
class usage_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// What the adapter is doing now.
enum class state {
  off,        ///< neither observe() nor install_allocator() has run
  observing,  ///< attached to PyTorch's native caching allocator
  swapped_in, ///< gpuguard's allocator is PyTorch's CUDA allocator
};
[[nodiscard]] const char* to_string(state s) noexcept;
[[nodiscard]] state current_state() noexcept;

/**
 * Does what `opts.torch` says (the `torch` key of GPUGUARD_OPTIONS): observe(), install_allocator()
 * or nothing, after `enable_ledger_reporting(opts)`. Call it at the start of `main`, before any
 * CUDA tensor exists (swap-in requires that; observe does not). Calling it again changes nothing.
 * @throws usage_error as observe() or install_allocator() do.
 */
void enable(const options& opts = process_options());

/**
 * Attaches to PyTorch's native CUDA caching allocator: a trace tracker (every tensor allocation
 * and free into the ledger, every cache segment into `cache_counters`) and an out-of-memory
 * observer (a report of what is live, naming the operation scope that was running). Initialises
 * CUDA through PyTorch's lazy initialisation if it has not happened (a tracker attached earlier
 * would be dropped); tensors that already exist are entered into the ledger from an allocator
 * snapshot, under the site "before gpuguard attached". Calling it again changes nothing.
 * @throws usage_error if gpuguard's allocator is swapped in, if PyTorch's allocator is another one
 *         (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, a pluggable allocator), or if CUDA
 *         has no device. Nothing is attached then.
 */
void observe();

/**
 * Makes gpuguard's tracking allocator PyTorch's CUDA allocator. It must run before CUDA
 * initialises in this process (before the first CUDA tensor, `torch::cuda::device_count()` is
 * fine); later, it throws usage_error saying so and changes nothing. Calling it again changes
 * nothing. The calls PyTorch cannot make on this allocator throw errors that name the call
 * (docs/torch.md lists them).
 */
void install_allocator();

/// True when install_allocator() would still be accepted: PyTorch's CUDA allocator has not been
/// initialised (CUDA's lazy initialisation has not run).
[[nodiscard]] bool can_install_allocator();

/// The segments PyTorch's cache holds on one device, as observe mode saw them.
struct cache_counters {
  std::uint64_t reserved_bytes = 0;       ///< now
  std::uint64_t peak_reserved_bytes = 0;  ///< most ever
  std::uint64_t segment_allocs = 0;       ///< segments taken from the device (cudaMalloc or mapping)
  std::uint64_t segment_frees = 0;        ///< segments given back (empty_cache, or to retry an allocation)
  std::uint64_t out_of_memory = 0;        ///< PyTorch out-of-memory errors on this device
};
/// Observe mode's figures for `device` (all zero before observe(), or for a device never seen).
[[nodiscard]] cache_counters cache(int device) noexcept;

/// PyTorch's own figures for `device`, from its allocator's statistics. False when the allocator
/// cannot say (CUDA not initialised).
///
/// `requested` is what the live tensors asked for (`torch.cuda.memory_stats()
/// ["requested_bytes.all.current"]`); it is the figure observe mode's ledger equals, byte for byte,
/// because the ledger records the sizes programs ask for. `allocated` is what PyTorch's blocks hold
/// for them (`torch.cuda.memory_allocated()`): each request rounded up to 512 bytes, and more where
/// the cache hands out a block it did not split, so it is at least `requested`.
struct torch_memory {
  std::uint64_t requested = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
};
[[nodiscard]] bool memory(int device, torch_memory& out) noexcept;

}  // namespace gpuguard::torch
